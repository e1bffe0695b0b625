//! `--mode event|polling|adaptive` for the example binaries, read one way everywhere.
use std::time::Duration;

use ucx_async::ProgressMode;

/// The progress mode `name` stands for (`adaptive` spins 100 µs after the last event,
/// `adaptive=US` that many microseconds); exits with status 2 and a message naming `program`
/// if `name` is none of them.
pub fn progress_mode(program: &str, name: &str) -> ProgressMode {
    let adaptive_us = match name.split_once('=') {
        Some(("adaptive", us)) => us.parse::<u64>().ok(),
        _ if name == "adaptive" => Some(100),
        _ => None,
    };
    match (name, adaptive_us) {
        ("event", _) => ProgressMode::Event,
        ("polling", _) => ProgressMode::Polling,
        (_, Some(us)) => ProgressMode::Adaptive { spin: Duration::from_micros(us) },
        (other, None) => {
            eprintln!("{program}: --mode must be event, polling, adaptive or adaptive=US, got {other:?}");
            std::process::exit(2)
        }
    }
}
