//! A distributed hash join over ucx-async's `Communicator`: each of N rank processes makes
//! two tables of (key, payload) rows, hash-partitions both by key, exchanges the partitions
//! with `alltoallv`, and joins its share locally. Rank 0 checks the global result (row count
//! and checksum) against a single-process join of the same data and prints the time of each
//! phase and the exchange's throughput.
//!
//! Run: `cargo run --release -p ucx-async --example hash_join -- --ranks 4` (starts the ranks
//! itself, as `torchrun` would). Under a launcher that sets `RANK`, `WORLD_SIZE`,
//! `MASTER_ADDR`, `MASTER_PORT` (torchrun, or mpirun with those two exported) it runs as that
//! rank. Options: `--ranks N` (default 2), `--rows R` per rank and table (default 1,000,000).
#[path = "common/launch.rs"]
mod launch;
#[path = "common/usage.rs"]
mod usage;

use std::process::ExitCode;
use std::time::Instant;

use ucx_async::{Communicator, ProgressMode, Worker};

const USAGE: &str = "usage: hash_join [--ranks N] [--rows R] [--net-devices auto]

A distributed hash join: N rank processes partition two tables of R rows each by key,
exchange the partitions with alltoallv and join locally; rank 0 checks the result against a
single-process join and prints the time per phase. Without RANK/WORLD_SIZE/MASTER_ADDR/
MASTER_PORT in the environment it starts the N ranks itself on 127.0.0.1. --net-devices auto:
each rank uses the network devices nearest its local rank's GPU (else its CPUs), unless
UCX_NET_DEVICES is set.";

const ROW: usize = 16; // key: u64, payload: u64, little-endian

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    usage::exit_if_help(&args, USAGE);
    let opt = |name| launch::number_option(&args, name, USAGE);
    let (ranks, rows) = (opt("--ranks").unwrap_or(2), opt("--rows").unwrap_or(1_000_000));
    if std::env::var_os("RANK").is_none() {
        return launch::run_ranks("hash_join", ranks, &args);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    match rt.block_on(rank_main(rows, &args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("hash_join rank {}: {e}", std::env::var("RANK").unwrap_or_default());
            ExitCode::FAILURE
        }
    }
}

/// A 64-bit mix (splitmix64's finalizer): the tables' contents and the partition function.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Row `i` of table `side` (0 or 1) on `rank`: keys drawn from a space twice the table's size,
/// so about a third of the rows find a partner.
fn row(side: u64, rank: usize, i: usize, rows: usize, ranks: usize) -> (u64, u64) {
    let global = (rank * rows + i) as u64;
    let key = mix(global ^ (side << 62)) % (2 * (rows * ranks) as u64).max(1);
    (key, global)
}

fn table(side: u64, rank: usize, rows: usize, ranks: usize) -> impl Iterator<Item = (u64, u64)> {
    (0..rows).map(move |i| row(side, rank, i, rows, ranks))
}

/// The join's result in a form every rank can add up: matching pairs and a checksum of them.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct Summary {
    pairs: u64,
    checksum: u64,
}

fn join(left: impl Iterator<Item = (u64, u64)>, right: impl Iterator<Item = (u64, u64)>) -> Summary {
    // A sort-merge join: both sides sorted by key (no per-key allocation, cache-friendly), then
    // one pass pairing every run of equal keys. The checksum is a wrapping sum, so the order
    // pairs are met in does not matter.
    let mut l: Vec<(u64, u64)> = left.collect();
    let mut r: Vec<(u64, u64)> = right.collect();
    l.sort_unstable_by_key(|x| x.0);
    r.sort_unstable_by_key(|x| x.0);
    let mut s = Summary::default();
    let (mut i, mut j) = (0, 0);
    while i < l.len() && j < r.len() {
        match l[i].0.cmp(&r[j].0) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                let key = l[i].0;
                let i_end = i + l[i..].iter().take_while(|x| x.0 == key).count();
                let j_end = j + r[j..].iter().take_while(|x| x.0 == key).count();
                for &(_, lp) in &l[i..i_end] {
                    for &(_, rp) in &r[j..j_end] {
                        s.pairs += 1;
                        s.checksum = s.checksum.wrapping_add(mix(lp.wrapping_mul(31) ^ rp));
                    }
                }
                (i, j) = (i_end, j_end);
            }
        }
    }
    s
}

/// Hash-partitions rows into one byte buffer per rank.
fn partition(rows: impl Iterator<Item = (u64, u64)>, ranks: usize) -> Vec<Vec<u8>> {
    let mut parts = vec![Vec::new(); ranks];
    for (k, p) in rows {
        let part = &mut parts[(mix(k ^ 0x5eed) % ranks as u64) as usize];
        part.extend_from_slice(&k.to_le_bytes());
        part.extend_from_slice(&p.to_le_bytes());
    }
    parts
}

fn rows_of(bytes: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    bytes.chunks_exact(ROW).map(|r| {
        let word = |at: usize| u64::from_le_bytes(r[at..at + 8].try_into().unwrap_or_default());
        (word(0), word(8))
    })
}

async fn rank_main(rows: usize, args: &[String]) -> ucx_async::Result<bool> {
    let ctx = launch::rank_context(args, USAGE)?;
    let worker = Worker::new(&ctx, ProgressMode::Event)?;
    let comm = Communicator::from_env(&worker).await?;
    let (rank, ranks) = (comm.rank(), comm.size());
    comm.barrier().await?;

    let t0 = Instant::now();
    let left = partition(table(0, rank, rows, ranks), ranks);
    let right = partition(table(1, rank, rows, ranks), ranks);
    let t1 = Instant::now();
    let left_in = comm.alltoallv(&left.iter().map(|p| &p[..]).collect::<Vec<_>>()).await?;
    let right_in = comm.alltoallv(&right.iter().map(|p| &p[..]).collect::<Vec<_>>()).await?;
    let t2 = Instant::now();
    let local = join(left_in.iter().flat_map(|b| rows_of(b)), right_in.iter().flat_map(|b| rows_of(b)));
    let t3 = Instant::now();
    // Bytes this rank sent to other ranks (its own part stays in the process, through UCX's loopback).
    let sent: usize =
        left.iter().chain(&right).enumerate().filter(|(i, _)| i % ranks != rank).map(|(_, p)| p.len()).sum();

    let mut mine = [0u8; 40];
    mine[..8].copy_from_slice(&local.pairs.to_le_bytes());
    mine[8..16].copy_from_slice(&local.checksum.to_le_bytes());
    mine[16..24].copy_from_slice(&(sent as u64).to_le_bytes());
    mine[24..32].copy_from_slice(&((t2 - t1).as_nanos() as u64).to_le_bytes());
    mine[32..].copy_from_slice(&((t3 - t0).as_nanos() as u64).to_le_bytes());
    let mut all = vec![0u8; 40 * ranks];
    comm.allgather(&mine, &mut all).await?;
    comm.close().await?;
    if rank != 0 {
        return Ok(true);
    }

    let word =
        |r: usize, at: usize| u64::from_le_bytes(all[r * 40 + at..r * 40 + at + 8].try_into().unwrap_or_default());
    let mut global = Summary::default();
    let (mut bytes, mut slowest, mut end_to_end) = (0u64, 0u64, 0u64);
    for r in 0..ranks {
        global.pairs += word(r, 0);
        global.checksum = global.checksum.wrapping_add(word(r, 8));
        bytes += word(r, 16);
        slowest = slowest.max(word(r, 24));
        end_to_end = end_to_end.max(word(r, 32));
    }
    let expected =
        join((0..ranks).flat_map(|r| table(0, r, rows, ranks)), (0..ranks).flat_map(|r| table(1, r, rows, ranks)));
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    println!(
        "hash_join: {ranks} ranks x {rows} rows per table: partition {:.1} ms, exchange {:.1} ms \
         ({:.2} GB/s across ranks, {} MB moved), local join {:.1} ms (rank 0's times; exchange: slowest rank); \
         end to end {:.1} ms (slowest rank)",
        ms(t1 - t0),
        slowest as f64 / 1e6,
        bytes as f64 / slowest.max(1) as f64,
        bytes / 1_000_000,
        ms(t3 - t2),
        end_to_end as f64 / 1e6,
    );
    let ok = global == expected;
    println!(
        "RESULT pairs={} checksum={:#018x} {}",
        global.pairs,
        global.checksum,
        if ok { "matches the single-process join" } else { "DIFFERS from the single-process join" }
    );
    if !ok {
        eprintln!("hash_join: expected {expected:?}, got {global:?}");
    }
    Ok(ok)
}
