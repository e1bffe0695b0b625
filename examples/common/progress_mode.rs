//! `--mode event|polling|adaptive` for the example binaries, read one way everywhere.
use std::time::Duration;

use ucx_async::ProgressMode;

/// The progress mode `name` stands for (`adaptive` spins 100 µs after the last event,
/// `adaptive=US` that many microseconds); exits with status 2 and a message naming `program`
/// if `name` is none of them.
pub fn progress_mode(program: &str, name: &str) -> ProgressMode {
    let adaptive = |us| ProgressMode::Adaptive { spin: Duration::from_micros(us) };
    match name {
        "event" => ProgressMode::Event,
        "polling" => ProgressMode::Polling,
        "adaptive" => adaptive(100),
        other => match other.strip_prefix("adaptive=").and_then(|us| us.parse().ok()) {
            Some(us) => adaptive(us),
            None => {
                eprintln!("{program}: --mode must be event, polling, adaptive or adaptive=US, got {other:?}");
                std::process::exit(2)
            }
        },
    }
}
