//! `alltoallv` throughput over ucx-async's `Communicator`, per-pair sizes from 1 KiB to
//! 64 MiB, as `scripts/bench_alltoall.sh` compares it with MPI's `Alltoallv`.
//!
//! Run: `cargo run --release -p ucx-async --example alltoall -- --ranks 4` (starts the ranks
//! itself), or under a launcher that sets `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`.
//! Rank 0 prints one `RESULT` line per size: the median time of one `alltoallv` (the slowest
//! rank's, each iteration) and the bytes all ranks sent to other ranks per second.
#[path = "common/launch.rs"]
mod launch;
#[path = "common/plot.rs"]
mod plot;
#[path = "common/progress_mode.rs"]
mod progress_mode;
#[path = "common/usage.rs"]
mod usage;

use std::process::ExitCode;
use std::time::Instant;

use ucx_async::collective::{Bounce, DataPath};
use ucx_async::{Communicator, ProgressMode, Worker};

const USAGE: &str = "usage: alltoall [--ranks N] [--min-size BYTES] [--max-size BYTES] [--iters N]
                [--mode event|polling|adaptive]
                [--path auto|direct|buffered] [--batch BYTES] [--net-devices auto] [--bare] [--window | --window-only]
                [--small-pages]

alltoallv throughput on N ranks (default 2), per-pair sizes from --min-size (default 1 KiB)
up to --max-size (default 64 MiB) by powers of 4, --iters timed iterations per size (default 20; fewer above
4 MiB), progress --mode event (sleep on the wakeup fd, the default), polling (as MPI does) or
adaptive. --path: how parts travel (default auto: direct here, as there is no RDMA network);
buffered sends batches of --batch bytes (default 1 MiB) through the bounce pool.
Without RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT it starts the ranks on 127.0.0.1.
UCXA_ERROR_HANDLING=none: the ranks' endpoints have no peer error handling, as MPI's (UCX may
then use shared memory with CMA's single copy; a rank's death ends the job).
--net-devices auto: each rank uses the network devices nearest its local rank's GPU (else its
CPUs), unless UCX_NET_DEVICES is set.
--bare: every other timed call is instead a bare exchange of the same parts (each sent with
Communicator::send and received into a buffer of its known size, all posted before any waits;
no announcements), reported on a second RESULT line (impl=bare): the communicator's protocol
against UCX's tag transfers alone, in the same process and minutes.
--window: calls are also taken in turn by SharedWindow::alltoallv, the all-to-all through
shared-memory windows (each part copied into the receiver's window, mapped through UCX's
remote key, then a note; parts read where they landed), with slots of the part size,
reported as impl=window; --window-only times only those (no other traffic between them).
--small-pages: the parts live in a plain Vec (4 KiB pages, as most of a program's memory)
rather than on huge pages; same-host single-copy sends then copy them onto huge pages first
(UCXA_SINGLE_COPY_STAGING).

alltoall --plot-from FILE --plot OUT.svg: no run; plots FILE's lines `SIZE GBPS NAME...`
(scripts/bench_alltoall.sh writes them, for ours and MPI) as throughput against size.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    usage::exit_if_help(&args, USAGE);
    if let Some(i) = args.iter().position(|a| a == "--plot-from") {
        return plot_from(args.get(i + 1), args.iter().position(|a| a == "--plot").and_then(|i| args.get(i + 1)));
    }
    let opt = |name| launch::number_option(&args, name, USAGE);
    let (ranks, max, iters) =
        (opt("--ranks").unwrap_or(2), opt("--max-size").unwrap_or(64 << 20), opt("--iters").unwrap_or(20));
    let min = opt("--min-size").unwrap_or(1 << 10).max(1);
    let mode_name = args.iter().position(|a| a == "--mode").map(|i| args.get(i + 1).map_or("", String::as_str));
    let mode = progress_mode::progress_mode("alltoall", mode_name.unwrap_or("event"));
    let path = match args.iter().position(|a| a == "--path").map(|i| args.get(i + 1).map_or("", String::as_str)) {
        None | Some("auto") => DataPath::Auto,
        Some("direct") => DataPath::Direct,
        Some("buffered") => DataPath::Buffered,
        Some(other) => {
            eprintln!("alltoall: --path {other:?} is not auto, direct or buffered\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let bounce = Bounce { batch: opt("--batch").unwrap_or(Bounce::default().batch), ..Bounce::default() };
    let flag = |name| args.iter().any(|a| a == name);
    let window_only = flag("--window-only");
    let kinds = Kinds { communicator: !window_only, bare: flag("--bare"), window: window_only || flag("--window") };
    if std::env::var_os("RANK").is_none() {
        return launch::run_ranks("alltoall", ranks, &args);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    match rt.block_on(rank_main(min..=max, iters, mode, path, bounce, kinds, &args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("alltoall rank {}: {e}", std::env::var("RANK").unwrap_or_default());
            ExitCode::FAILURE
        }
    }
}

async fn rank_main(
    sizes: std::ops::RangeInclusive<usize>,
    iters: usize,
    mode: ProgressMode,
    path: DataPath,
    bounce: Bounce,
    kinds: Kinds,
    args: &[String],
) -> ucx_async::Result<()> {
    let ctx = launch::rank_context(args, USAGE)?;
    let worker = Worker::new(&ctx, mode)?;
    let mut comm = Communicator::from_env(&worker).await?;
    comm.set_data_path(path);
    comm.set_bounce(bounce)?;
    let (rank, ranks) = (comm.rank(), comm.size());
    let small_pages = args.iter().any(|a| a == "--small-pages");
    let mut size = *sizes.start();
    while size <= *sizes.end() {
        // One buffer holding every rank's part, on huge pages where the kernel allows: the
        // layout and memory of MPI's side (one NumPy array with displacements; NumPy advises
        // huge pages from 4 MiB, which 4 ranks' 1 MiB parts reach together). --small-pages:
        // a plain Vec.
        let mut send =
            if small_pages { vec![0u8; size * ranks] } else { ucx_async::core::huge_pages::zeroed(size * ranks) };
        for (r, p) in send.chunks_mut(size.max(1)).enumerate() {
            p.fill((rank * ranks + r) as u8);
        }
        let refs: Vec<&[u8]> = (0..ranks).map(|r| &send[r * size..(r + 1) * size]).collect();
        let n = if size > 4 << 20 { iters.div_ceil(4).max(3) } else { iters };
        let mut got = Vec::new();
        // Warm-up (connections, registration, buffers, caches): more calls for small sizes,
        // whose first hundreds ran up to twice as slow; alltoallv_mpi.py does the same.
        // (The bare exchange receives into the buffers these calls size.)
        for _ in 0..if kinds.communicator || kinds.bare { ((4 << 20) / size).clamp(3, 1000) } else { 0 } {
            comm.alltoallv_into(&refs, &mut got).await?;
        }
        let mut windows = None;
        if kinds.window {
            let mut w = comm.shared_window(size).await?;
            for _ in 0..((4 << 20) / size).clamp(3, 1000) {
                w.alltoallv(&refs).await?;
            }
            windows = Some(w);
        }
        // The kinds of call taken in turn: the communicator's, and those the flags add.
        let taken: Vec<Kind> = [
            kinds.communicator.then_some(Kind::Communicator),
            kinds.bare.then_some(Kind::Bare),
            windows.as_ref().map(|_| Kind::SharedWindow),
        ]
        .into_iter()
        .flatten()
        .collect();
        let mut times = [Vec::with_capacity(n), Vec::new(), Vec::new()];
        for call in 0..taken.len() * n {
            let which = taken[call % taken.len()];
            let tag = (call % (1 << 30)) as u32;
            comm.barrier().await?;
            let t = Instant::now();
            match (which, windows.as_mut()) {
                (Kind::Communicator, _) => comm.alltoallv_into(&refs, &mut got).await?,
                (Kind::Bare, _) => bare_exchange(&comm, &refs, &mut got, tag).await?,
                (Kind::SharedWindow, Some(w)) => w.alltoallv(&refs).await?,
                (Kind::SharedWindow, None) => unreachable!("taken only with windows"),
            }
            let mine = (t.elapsed().as_nanos() as u64).to_le_bytes();
            if let (Kind::SharedWindow, Some(w)) = (which, windows.as_ref()) {
                // What a caller would read: every part where it landed, checked.
                if (0..ranks).any(|s| w.part(s).len() != size || w.part(s)[0] != (s * ranks + rank) as u8) {
                    let detail = format!("rank {rank}: a part in the window is not what was sent");
                    return Err(ucx_async::Error::Protocol { op: "alltoall --window", detail });
                }
            }
            debug_assert!(got.iter().enumerate().all(|(s, b)| b.len() == size && b[0] == (s * ranks + rank) as u8));
            let mut all = vec![0u8; 8 * ranks];
            comm.allgather(&mine, &mut all).await?;
            let slowest = all.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).max();
            times[which as usize].push(slowest.unwrap_or(0));
        }
        for (times, name) in times.iter_mut().zip(["ucx-async", "bare", "window"]).filter(|(t, _)| !t.is_empty()) {
            times.sort_unstable();
            let median_ns = times[times.len() / 2].max(1);
            if rank == 0 {
                let moved = (ranks * (ranks - 1) * size) as f64;
                println!(
                    "RESULT impl={name} mode={mode:?} ranks={ranks} size={size} median_us={:.1} gbps={:.3}",
                    median_ns as f64 / 1e3,
                    moved / median_ns as f64
                );
            }
        }
        size *= 4;
    }
    comm.close().await
}

/// Which kinds of call are timed: the communicator's (unless `--window-only`), and those
/// `--bare` and `--window` add.
#[derive(Clone, Copy)]
struct Kinds {
    communicator: bool,
    bare: bool,
    window: bool,
}

/// A kind of timed call; its value indexes the times.
#[derive(Clone, Copy)]
enum Kind {
    Communicator,
    Bare,
    SharedWindow,
}

/// `--bare`'s exchange: `refs[r]` to rank `r` with [`Communicator::send`], and into `got[r]`
/// (already as long as what rank `r` sends: the sizes are known, as MPI's `Alltoallv` is told
/// them) what rank `r` sent, with [`Communicator::recv`]; every operation posted before any
/// waits, this rank's own part copied last, as `alltoallv_into` orders them. No announcements.
async fn bare_exchange(comm: &Communicator, refs: &[&[u8]], got: &mut [Vec<u8>], tag: u32) -> ucx_async::Result<()> {
    let me = comm.rank();
    let mut order: Vec<_> = got.iter_mut().zip(refs).enumerate().collect();
    let own = order.remove(me);
    order.push(own);
    let transfers = order.into_iter().map(|(r, (buf, part))| async move {
        if r == me {
            buf.clear();
            buf.extend_from_slice(part);
            return Ok(());
        }
        let want = buf.len();
        let (_, n) = tokio::try_join!(comm.send(r, *part, tag), comm.recv(r, &mut buf[..], tag))?;
        if n != want {
            let detail = format!("rank {r} sent {n} bytes where {want} were expected");
            return Err(ucx_async::Error::Protocol { op: "alltoall --bare", detail });
        }
        Ok(())
    });
    ucx_async::try_join_posted(transfers).await.map(drop)
}

/// `--plot-from FILE --plot OUT.svg`: GB/s against size, a line per name in FILE.
fn plot_from(input: Option<&String>, output: Option<&String>) -> ExitCode {
    let (Some(input), Some(output)) = (input, output) else {
        eprintln!("alltoall: --plot-from needs a file, and --plot the SVG to write\n\n{USAGE}");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(input) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("alltoall: cannot read {input}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut series: Vec<plot::Series> = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let mut fields = line.splitn(3, ' ');
        let (size, gbps, name) = (fields.next(), fields.next(), fields.next());
        let parsed = size.and_then(|s| s.parse::<usize>().ok()).zip(gbps.and_then(|g| g.parse::<f64>().ok()));
        let (Some((size, gbps)), Some(name)) = (parsed, name) else {
            eprintln!("alltoall: {input}:{}: expected `SIZE GBPS NAME`, got {line:?}", n + 1);
            return ExitCode::FAILURE;
        };
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((size, Some(gbps))),
            None => series.push(plot::Series { name: name.to_string(), points: vec![(size, Some(gbps))] }),
        }
    }
    let chart = plot::Chart { y_label: "alltoallv throughput (GB/s, log scale)".into(), log_y: true, series };
    match std::fs::write(output, plot::svg("alltoallv on one host: ucx-async and Open MPI", &[chart])) {
        Ok(()) => {
            println!("# plot written to {output}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("alltoall: cannot write {output}: {e}");
            ExitCode::FAILURE
        }
    }
}
