//! `--mode event|polling|adaptive` for the example binaries, read one way everywhere.
use std::time::Duration;

use ucx_async::ProgressMode;

/// The progress mode `name` stands for (adaptive spins 100 µs after the last event); exits
/// with status 2 and a message naming `program` if `name` is none of them.
pub fn progress_mode(program: &str, name: &str) -> ProgressMode {
    match name {
        "event" => ProgressMode::Event,
        "polling" => ProgressMode::Polling,
        "adaptive" => ProgressMode::Adaptive { spin: Duration::from_micros(100) },
        other => {
            eprintln!("{program}: --mode must be event, polling or adaptive, got {other:?}");
            std::process::exit(2)
        }
    }
}
