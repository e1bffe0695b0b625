//! Shared by the ucx-async server processes: accept one client, or exit if none comes (its
//! parent was killed), so no server is left waiting forever.
use std::time::Duration;

use ucx_async::Result;
use ucx_async::{Endpoint, Listener};

/// How long a server process waits for its client.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);

/// The first client's endpoint; exits the process after [`ACCEPT_TIMEOUT`] without one.
pub async fn accept_or_exit(listener: &Listener) -> Result<Endpoint> {
    match tokio::time::timeout(ACCEPT_TIMEOUT, listener.accept()).await {
        Ok(ep) => ep,
        Err(_) => {
            eprintln!("no client within {ACCEPT_TIMEOUT:?}");
            std::process::exit(1);
        }
    }
}
