//! `SharedWindow`, the all-to-all through shared-memory windows, over real UCX: every rank a task of
//! this process with a worker of its own, so every window is mapped (as on one host). Random
//! sizes (zero included) on either side of the slot, with and without peer error handling; a
//! slow reader whose parts the next call must not overwrite; a rank that fails mid-call; bad
//! arguments.
mod leave;

use std::future::Future;
use std::time::Duration;

use ucx_async::collective::{Launch, Root};
use ucx_async::core::Context;
use ucx_async::{Communicator, ProgressMode, Worker};

/// Runs `body(comm)` on `n` ranks (meeting at a rendezvous file), with or without peer error
/// handling, and returns their results by rank.
async fn world<T, F, Fut>(n: usize, error_handling: bool, body: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(Communicator) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    let ctx = Context::builder().option("NET_DEVICES", "lo").build().unwrap();
    let path = std::env::temp_dir().join(format!(
        "ucxa-shared-window-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_file(&path);
    let mut tasks = Vec::new();
    for rank in 0..n {
        let (w, body) = (Worker::new(&ctx, ProgressMode::Event).unwrap(), body.clone());
        let root = Root::File { path: path.clone(), bind: "127.0.0.1:0".parse().unwrap() };
        let launch = Launch { rank, size: n, root, error_handling };
        tasks.push(tokio::spawn(async move {
            let comm = Communicator::join(&w, &launch).await.unwrap();
            body(comm).await
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(tokio::time::timeout(Duration::from_secs(60), t).await.expect("no rank hangs").unwrap());
    }
    out
}

/// The bytes rank `src` sends rank `dst` in round `round`: random lengths (zero included) on
/// both sides of a `slot`, contents that name them.
fn part(src: usize, dst: usize, round: u64, slot: usize) -> Vec<u8> {
    let mut x = (src as u64 * 131 + dst as u64 * 7 + round * 1_000_003).wrapping_mul(6_364_136_223_846_793_005) ^ 77;
    x ^= x >> 29;
    let len = match x % 4 {
        0 => 0,
        1 => (x >> 8) as usize % 100,
        2 => (x >> 8) as usize % slot + 1,
        _ => slot + (x >> 8) as usize % (1 << 20),
    };
    (0..len).map(|i| (i as u64 ^ x ^ (src as u64) << 3 ^ dst as u64) as u8).collect()
}

/// `rounds` calls of `part`s through a window of `slot`-byte slots, every byte checked; returns
/// how many windows this rank mapped, and how many of them on huge pages.
async fn checked_rounds(c: &Communicator, rounds: u64, slot: usize) -> (usize, usize) {
    let mut w = c.shared_window(slot).await.unwrap();
    for round in 0..rounds {
        let mine: Vec<Vec<u8>> = (0..c.size()).map(|d| part(c.rank(), d, round, slot)).collect();
        let refs: Vec<&[u8]> = mine.iter().map(|p| &p[..]).collect();
        w.alltoallv(&refs).await.unwrap();
        for (src, bytes) in w.parts().enumerate() {
            assert_eq!(bytes, &part(src, c.rank(), round, slot)[..], "round {round}: rank {src} -> {}", c.rank());
        }
    }
    (w.mapped(), w.on_huge_pages())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_of_random_sizes_arrive_whole_on_one_two_and_four_ranks_with_and_without_error_handling() {
    const SMALL: usize = 64 << 10;
    const LARGE: usize = 1 << 20;
    let cases = [(1, true, SMALL), (2, true, SMALL), (4, true, SMALL), (2, false, SMALL), (4, false, SMALL)];
    for (n, error_handling, slot) in cases.into_iter().chain([(2, false, LARGE), (4, true, LARGE)]) {
        let mapped = world(n, error_handling, move |c| async move {
            let mapped = checked_rounds(&c, 6, slot).await;
            c.close().await.unwrap();
            mapped
        })
        .await;
        // Ranks of one process share memory whatever the endpoints' error handling; windows
        // of 2 MiB and more (UCX's System V segments) are reached on huge pages.
        let huge = if 2 * n * slot >= 2 << 20 { n } else { 0 };
        assert_eq!(mapped, vec![(n, huge); n], "{n} ranks, error handling {error_handling}, slot {slot}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_readers_parts_stay_while_the_others_start_the_next_call() {
    // Rank 0 reads its parts only after the others have had time to start the next call and
    // write their parts of it into rank 0's window: the other half, so rank 0's stay. (With one
    // half, the next call's parts overwrote them: checked.)
    world(3, true, |c| async move {
        let mut w = c.shared_window(4096).await.unwrap();
        for round in 0..4u8 {
            let mine: Vec<Vec<u8>> = (0..3).map(|d| vec![round * 16 + (c.rank() * 3 + d) as u8; 3000]).collect();
            let refs: Vec<&[u8]> = mine.iter().map(|p| &p[..]).collect();
            w.alltoallv(&refs).await.unwrap();
            if c.rank() == 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            for (src, bytes) in w.parts().enumerate() {
                assert_eq!(bytes, &[round * 16 + (src * 3 + c.rank()) as u8; 3000][..], "round {round}, from {src}");
            }
        }
        drop(w);
        c.close().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rank_fails_the_others_call_and_nothing_hangs() {
    let results = world(3, true, |c| async move {
        let mut w = c.shared_window(1 << 16).await.unwrap();
        c.barrier().await.unwrap();
        if leave::others_past_the_barrier(&c, 2).await {
            drop(w);
            drop(c); // its endpoints go without a word: the others see it fail
            return None;
        }
        let parts = [vec![7u8; 1000], vec![8u8; 1 << 17], vec![9u8; 1000]];
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        let r = tokio::time::timeout(Duration::from_secs(30), w.alltoallv(&refs)).await;
        let other = 1 - c.rank();
        Some((r.map(|r| r.map_err(|e| e.is_disconnect())), w.part(other).len(), w.part(2).len()))
    })
    .await;
    for (rank, r) in results.into_iter().take(2).enumerate() {
        let (r, from_other, from_dead) = r.unwrap();
        assert_eq!(r, Ok(Err(true)), "rank {rank}: fails, as a disconnect, and does not hang");
        // The other live rank's part arrived whole; the dead rank's reads as nothing.
        assert_eq!(from_other, if rank == 0 { 1000 } else { 1 << 17 });
        assert_eq!(from_dead, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_errors_that_name_them() {
    world(2, true, |c| async move {
        let e = c.shared_window(usize::MAX / 2).await.unwrap_err().to_string();
        assert!(e.contains(&format!("a slot of {} bytes for 2 ranks", usize::MAX / 2)), "{e}");
        let mut w = c.shared_window(16).await.unwrap();
        let e = w.alltoallv(&[&b"one"[..]]).await.unwrap_err().to_string();
        assert!(e.contains("1 parts for 2 ranks"), "{e}");
        assert!(w.part(0).is_empty() && w.part(5).is_empty(), "nothing before a call, nor beyond the world");
        drop(w);
        c.close().await.unwrap();
    })
    .await;
}
