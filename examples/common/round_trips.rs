//! Shared by the ping-pong examples: how many round trips each size gets, and the table of
//! one-way latencies and bandwidth they print.
use std::time::Duration;

/// Round trips before timing starts, per size.
pub const WARMUP: usize = 100;

/// Timed round trips for `size`: fewer for large messages, to keep the run short.
pub fn iters_for(size: usize, iters: usize) -> usize {
    if size >= 65_536 {
        (iters / 10).max(100)
    } else {
        iters
    }
}

/// The table's header line.
pub fn print_header() {
    println!("{:>9} {:>7} {:>14} {:>14} {:>14}", "bytes", "iters", "one-way p50", "one-way p99", "bandwidth");
}

/// One row: median and 99th-percentile one-way latency (half the round trip) and the
/// bandwidth of all `rtts` (two messages of `size` each).
pub fn print_row(size: usize, mut rtts: Vec<Duration>) {
    rtts.sort();
    let n = rtts.len();
    let us = |d: Duration| d.as_secs_f64() * 1e6 / 2.0;
    let (p50, p99) = (us(rtts[n / 2]), us(rtts[n * 99 / 100]));
    let total: Duration = rtts.iter().sum();
    let mb_s = (2 * n * size) as f64 / total.as_secs_f64() / 1e6;
    println!("{size:>9} {n:>7} {p50:>11.2} µs {p99:>11.2} µs {mb_s:>9.1} MB/s");
}
