//! The communicator over real UCX on 127.0.0.1, all ranks in this process (one worker each):
//! bootstrap, messages by rank, barrier, allgather, alltoallv with random sizes, the limits,
//! and a rank that fails mid-collective.
mod common;
mod leave;

use std::future::Future;
use std::time::Duration;

use ucx_async::collective::{Bounce, DataPath};
use ucx_async::core::Context;
use ucx_async::{Communicator, Error, Listener, ProgressMode, Worker};

/// Runs `body(comm)` on `n` ranks at once and returns their results by rank.
async fn world<T, F, Fut>(n: usize, body: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(Communicator) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    world_on_workers(n, move |_, c| body(c)).await
}

/// [`world`], with each rank's worker handed to `body` too.
async fn world_on_workers<T, F, Fut>(n: usize, body: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(Worker, Communicator) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    let ctx = Context::builder().option("NET_DEVICES", "lo").build().unwrap();
    let workers: Vec<Worker> = (0..n).map(|_| Worker::new(&ctx, ProgressMode::Event).unwrap()).collect();
    let mut listener = Some(Listener::bind(&workers[0], "127.0.0.1:0".parse().unwrap()).unwrap());
    let root = listener.as_ref().unwrap().local_addr();
    let mut tasks = Vec::new();
    for (rank, w) in workers.into_iter().enumerate() {
        let body = body.clone();
        let listener = listener.take();
        tasks.push(tokio::spawn(async move {
            let comm = match listener {
                Some(l) => Communicator::serve(&w, &l, n).await,
                None => Communicator::bootstrap(&w, rank, n, root).await,
            };
            body(w, comm.unwrap()).await
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(tokio::time::timeout(Duration::from_secs(60), t).await.expect("no rank hangs").unwrap());
    }
    out
}

/// The bytes rank `src` sends rank `dst` in round `round`: their length is random (zero
/// included) and their content names them.
fn part(src: usize, dst: usize, round: u64) -> Vec<u8> {
    let mut x =
        (src as u64 * 131 + dst as u64 * 7 + round * 1_000_003).wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    x ^= x >> 29;
    let len = match x % 5 {
        0 => 0,
        1 => (x >> 8) as usize % 64,
        2 => (x >> 8) as usize % 70_000,
        _ => (x >> 8) as usize % (3 << 20),
    };
    (0..len).map(|i| (i as u64 ^ x ^ (src as u64) << 3 ^ dst as u64) as u8).collect()
}

async fn alltoallv_rounds(n: usize) {
    alltoallv_rounds_with(n, |_| DataPath::Auto).await;
}

/// Four alltoallv rounds on `n` ranks, rank r sending its parts as `path(r)` says (through
/// bounce pools of 3 batches of 4099 bytes, so parts take many batches and a last short one).
async fn alltoallv_rounds_with(n: usize, path: fn(usize) -> DataPath) {
    alltoallv_rounds_shaped(n, path, |_| Bounce { batch: 4099, depth: 3 }).await;
}

async fn alltoallv_rounds_shaped(n: usize, path: fn(usize) -> DataPath, bounce: fn(usize) -> Bounce) {
    let sizes = world(n, move |mut c| async move {
        c.set_data_path(path(c.rank()));
        c.set_bounce(bounce(c.rank())).unwrap();
        let seen = checked_rounds(&c, 4).await;
        c.close().await.unwrap();
        seen
    })
    .await;
    assert_eq!(sizes.len(), n);
}

/// `rounds` alltoallv calls of `part`s, every byte checked; returns the bytes received.
async fn checked_rounds(c: &Communicator, rounds: u64) -> usize {
    let mut seen = 0usize;
    for round in 0..rounds {
        let mine: Vec<Vec<u8>> = (0..c.size()).map(|d| part(c.rank(), d, round)).collect();
        let refs: Vec<&[u8]> = mine.iter().map(|p| &p[..]).collect();
        let got = c.alltoallv(&refs).await.unwrap();
        for (src, bytes) in got.iter().enumerate() {
            assert_eq!(bytes, &part(src, c.rank(), round), "round {round}: rank {src} -> {}", c.rank());
            seen += bytes.len();
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alltoallv_one_rank() {
    alltoallv_rounds(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alltoallv_two_ranks() {
    alltoallv_rounds(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alltoallv_four_ranks() {
    alltoallv_rounds(4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alltoallv_buffered_on_one_two_three_and_four_ranks() {
    for n in 1..=4 {
        alltoallv_rounds_with(n, |_| DataPath::Buffered).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alltoallv_receivers_follow_each_senders_path() {
    // Even ranks send in batches, odd ranks in one message: every receive follows its sender.
    alltoallv_rounds_with(3, |r| if r % 2 == 0 { DataPath::Buffered } else { DataPath::Direct }).await;
    alltoallv_rounds_with(4, |r| if r % 2 == 0 { DataPath::Direct } else { DataPath::Buffered }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_larger_than_the_receivers_buffers_are_received_in_place() {
    // Rank r's batches are 4099 + 5000 r bytes: a receiver with smaller buffers than its
    // sender's batches takes them straight into the result, one with larger ones through them.
    alltoallv_rounds_shaped(3, |_| DataPath::Buffered, |r| Bounce { batch: 4099 + 5000 * r, depth: 2 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_with_more_batches_than_the_tag_holds_is_refused_before_anything_is_sent() {
    world(2, |mut c| async move {
        c.set_data_path(DataPath::Buffered);
        c.set_bounce(Bounce { batch: 1, depth: 2 }).unwrap();
        let big = vec![7u8; 70_000];
        let e = c.alltoallv(&[&big[..], &big[..]]).await.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        let other = 1 - c.rank();
        assert!(e.to_string().contains(&format!("the part for rank {other} (70000 bytes in batches of 1)")), "{e}");
        // Nothing was sent, so both ranks go on in step.
        c.set_bounce(Bounce { batch: 8192, depth: 2 }).unwrap();
        let got = c.alltoallv(&[&big[..], &big[..]]).await.unwrap();
        assert_eq!(got[other], big);
        assert!(c.set_bounce(Bounce { batch: 0, depth: 1 }).is_err());
        c.close().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alltoallv_with_every_part_empty() {
    world(3, |c| async move {
        let got = c.alltoallv(&[&[][..]; 3]).await.unwrap();
        assert!(got.iter().all(Vec::is_empty));
        c.close().await.unwrap();
    })
    .await;
}

/// Parts at the edge of what travels inside the announcement (empty, exactly the inline
/// maximum, one byte more), on both paths: every byte arrives, and no message is left
/// unreceived (an empty part once sent an empty message nobody received).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_at_the_inline_edge_arrive_and_leave_nothing_unreceived() {
    for path in [DataPath::Direct, DataPath::Buffered] {
        world_on_workers(3, move |w, mut c| async move {
            c.set_data_path(path);
            c.set_bounce(Bounce { batch: 4099, depth: 2 }).unwrap();
            let max = ucx_async::core::wire::alltoallv::inline_max(3);
            let len = |src: usize, dst: usize| [0, max, max + 1][(src + dst) % 3];
            let bytes = |src: usize, dst: usize| -> Vec<u8> {
                (0..len(src, dst)).map(|i| (i * 7 + src * 3 + dst) as u8).collect()
            };
            let mine: Vec<Vec<u8>> = (0..3).map(|d| bytes(c.rank(), d)).collect();
            let refs: Vec<&[u8]> = mine.iter().map(|p| &p[..]).collect();
            // The communicator's operations are numbered from 0 (the bootstrap's barrier), so
            // this alltoallv is number 1.
            let got = c.alltoallv(&refs).await.unwrap();
            for (src, part) in got.iter().enumerate() {
                assert_eq!(part, &bytes(src, c.rank()), "{path:?}: rank {src} -> {}", c.rank());
            }
            c.barrier().await.unwrap();
            let op1 = ucx_async::core::wire::collective_tag::own(1, 0, 0).unwrap();
            let seq_mask = 0xFFFF_FFFF_0000_0000;
            assert!(!w.tag_probe(op1 & seq_mask, seq_mask), "{path:?}: a message of the alltoallv was never received");
            c.close().await.unwrap();
        })
        .await;
    }
}

/// Ranks that meet at a rendezvous file: rank 0 starts last, after an earlier job's file
/// (an address nobody listens on) sat there; every rank joins, and the file is gone after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_meet_at_a_rendezvous_file_even_over_one_an_earlier_job_left() {
    let dir = std::env::temp_dir().join(format!("ucxa-rendezvous-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("job.addr");
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // closed at once
    std::fs::write(&path, ucx_async::core::wire::bootstrap::rendezvous_text(dead)).unwrap();
    let ctx = Context::builder().option("NET_DEVICES", "lo").build().unwrap();
    let mut ranks = Vec::new();
    for rank in [1usize, 2, 0] {
        if rank == 0 {
            tokio::time::sleep(Duration::from_millis(300)).await; // the others found the old file
        }
        let (w, path) = (Worker::new(&ctx, ProgressMode::Event).unwrap(), path.clone());
        ranks.push(tokio::spawn(async move {
            let any = "127.0.0.1:0".parse().unwrap();
            let c = Communicator::bootstrap_file(&w, rank, 3, &path, any).await.unwrap();
            let mut all = [0u8; 3];
            c.allgather(&[c.rank() as u8], &mut all).await.unwrap();
            assert_eq!(all, [0, 1, 2]);
            c.close().await.unwrap();
        }));
    }
    for r in ranks {
        tokio::time::timeout(Duration::from_secs(60), r).await.expect("no rank hangs").unwrap();
    }
    assert!(!path.exists(), "rank 0 removes the file once every rank has joined");
    // A file that is not a rendezvous file is an error that names it, not a wait.
    std::fs::write(&path, "hello").unwrap();
    let w = Worker::new(&ctx, ProgressMode::Event).unwrap();
    let e = Communicator::bootstrap_file(&w, 1, 2, &path, "127.0.0.1:0".parse().unwrap()).await.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("job.addr"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allgather_and_messages_by_rank() {
    world(4, |c| async move {
        let mine = [c.rank() as u8; 5];
        let mut all = vec![0u8; 20];
        c.allgather(&mine, &mut all).await.unwrap();
        for r in 0..4 {
            assert_eq!(&all[r * 5..r * 5 + 5], &[r as u8; 5]);
        }
        // Rank r sends two tagged messages to rank r+1, second tag first: the receiver
        // matches by source and tag, not by arrival.
        let (next, prev) = ((c.rank() + 1) % 4, (c.rank() + 3) % 4);
        c.send(next, &[c.rank() as u8, 2][..], 2).await.unwrap();
        c.send(next, &[c.rank() as u8, 1][..], 1).await.unwrap();
        let mut b = [0u8; 2];
        assert_eq!(c.recv(prev, &mut b[..], 1).await.unwrap(), 2);
        assert_eq!(b, [prev as u8, 1]);
        c.recv(prev, &mut b[..], 2).await.unwrap();
        assert_eq!(b, [prev as u8, 2]);
        c.close().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_errors_that_name_the_value() {
    world(2, |c| async move {
        let e = c.send(1, &[1u8][..], 1 << 31).await.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("0x80000000"), "{e}");
        let e = c.send(2, &[1u8][..], 1).await.unwrap_err();
        assert!(e.to_string().contains("rank 2 is not below the world size 2"), "{e}");
        let e = c.alltoallv(&[&[1u8][..]]).await.unwrap_err();
        assert!(e.to_string().contains("1 parts for 2 ranks"), "{e}");
        let e = c.allgather(&[1, 2], &mut [0u8; 3]).await.unwrap_err();
        assert!(e.to_string().contains("out holds 3 bytes"), "{e}");
        c.close().await.unwrap();
    })
    .await;
    let ctx = Context::builder().option("NET_DEVICES", "lo").build().unwrap();
    let w = Worker::new(&ctx, ProgressMode::Event).unwrap();
    let root = "127.0.0.1:1".parse().unwrap();
    let e = Communicator::bootstrap(&w, 2, 2, root).await.unwrap_err();
    assert!(e.to_string().contains("rank 2 is not below the world size 2"), "{e}");
    let e = Communicator::bootstrap(&w, 0, 70_000, root).await.unwrap_err();
    assert!(e.to_string().contains("1 to 65536 ranks"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rank_fails_the_others_collective_and_nothing_hangs() {
    let results = world(3, |c| async move {
        c.barrier().await.unwrap();
        if leave::others_past_the_barrier(&c, 2).await {
            drop(c); // its endpoints go without a word: the others see it fail
            return None;
        }
        let parts = vec![vec![7u8; 1 << 16]; 3];
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        Some(tokio::time::timeout(Duration::from_secs(30), c.alltoallv(&refs)).await)
    })
    .await;
    for (rank, r) in results.into_iter().enumerate().take(2) {
        let r = r.unwrap().expect("the collective fails, not hangs");
        let e = r.expect_err("rank 2 is gone");
        assert!(e.is_disconnect(), "rank {rank}: {e}");
    }
}

/// Rank 1 announces a part of 2^50 bytes to rank 0 and sends 1 MiB (a rendezvous): rank 0
/// cannot allocate the part, receives the message only to drop it and fails its call naming
/// the size; rank 1's send completes (without the drop it waited for a receive while rank 0
/// lived, and failed once rank 0 let go), and rank 2's call with the others completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_too_large_to_allocate_fails_its_receiver_and_frees_its_sender() {
    use ucx_async::core::wire::alltoallv::{inline_max, Announce};
    use ucx_async::core::wire::collective_tag::own;
    let results = world(3, |c| async move {
        let (me, seq) = (c.rank(), 1); // the bootstrap's barrier was operation 0
        if me == 1 {
            // By hand: an honest empty part for rank 2, the lie for rank 0.
            let mut to2 = Vec::new();
            Announce::new(0, 0).unwrap().encode_message(&[], inline_max(3), &mut to2);
            // Too large to be inline, so the announcement is its 12 bytes alone.
            let to0 = Announce::new(1 << 50, 0).unwrap().encode();
            let big = vec![9u8; 1 << 20];
            let (ep0, ep2) = (c.endpoint(0).unwrap(), c.endpoint(2).unwrap());
            let sent = tokio::time::timeout(Duration::from_secs(30), async {
                ep2.send_tag(&to2[..], own(seq, 1, 0).unwrap()).await?;
                ep0.send_tag(&to0[..], own(seq, 1, 0).unwrap()).await?;
                ep0.send_tag(&big[..], own(seq, 1, 1).unwrap()).await?;
                // The others' (empty) announcements to this rank: taken before it leaves, so
                // their sends to it do not meet a closed endpoint.
                let mut room = vec![0u8; 12 + inline_max(3)];
                for (ep, r) in [(ep0, 0), (ep2, 2)] {
                    ep.recv_tag(&mut room[..], own(seq, r, 0).unwrap(), ucx_async::core::FULL_MASK).await?;
                }
                Ok::<_, ucx_async::Error>(())
            })
            .await;
            return Some(sent.map(|r| r.map_err(|e| e.to_string())).map_err(|_| "rank 1's sends hung".to_string()));
        }
        // Ranks 0 and 2 send rank 1 nothing (an empty, inline part), so it needs no receives.
        let parts: Vec<Vec<u8>> = (0..3).map(|d| if d == 1 { Vec::new() } else { vec![me as u8; 70_000] }).collect();
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        let r = tokio::time::timeout(Duration::from_secs(30), c.alltoallv(&refs)).await;
        Some(match r {
            Err(_) => Err(format!("rank {me}'s alltoallv hung")),
            Ok(Ok(got)) if me == 2 => {
                assert_eq!((got[0].clone(), got[1].len()), (vec![0u8; 70_000], 0));
                Ok(Ok(()))
            }
            Ok(r) => Ok(r.map(drop).map_err(|e| e.to_string())),
        })
    })
    .await;
    let results: Vec<_> = results.into_iter().map(|r| r.unwrap().unwrap()).collect();
    let e = results[0].as_ref().expect_err("rank 0 cannot hold 2^50 bytes");
    assert!(e.contains("rank 1 announced a part of 1125899906842624 bytes, which cannot be allocated"), "{e}");
    assert!(results[1].is_ok(), "rank 1's sends: {:?}", results[1]);
    assert!(results[2].is_ok(), "rank 2: {:?}", results[2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alltoallv_into_reuses_buffers_across_calls_of_changing_sizes() {
    world(3, |c| async move {
        let mut out = Vec::new();
        for round in 10..16 {
            let mine: Vec<Vec<u8>> = (0..3).map(|d| part(c.rank(), d, round)).collect();
            let refs: Vec<&[u8]> = mine.iter().map(|p| &p[..]).collect();
            c.alltoallv_into(&refs, &mut out).await.unwrap();
            for (src, bytes) in out.iter().enumerate() {
                assert_eq!(bytes, &part(src, c.rank(), round), "round {round}: rank {src} -> {}", c.rank());
            }
        }
        c.close().await.unwrap();
    })
    .await;
}

/// Runs `body(comm)` on `n` ranks that meet at a rendezvous file, each joining with
/// `error_handling` as given for it by rank; returns each rank's result.
async fn world_joined<T, F, Fut>(n: usize, error_handling: fn(usize) -> bool, body: F) -> Vec<ucx_async::Result<T>>
where
    T: Send + 'static,
    F: Fn(Communicator) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    use ucx_async::collective::{Launch, Root};
    let ctx = Context::builder().option("NET_DEVICES", "lo").build().unwrap();
    let path =
        std::env::temp_dir().join(format!("ucxa-joined-{}-{:?}", std::process::id(), std::thread::current().id()));
    let _ = std::fs::remove_file(&path);
    let mut tasks = Vec::new();
    for rank in 0..n {
        let (w, body) = (Worker::new(&ctx, ProgressMode::Event).unwrap(), body.clone());
        let root = Root::File { path: path.clone(), bind: "127.0.0.1:0".parse().unwrap() };
        let launch = Launch { rank, size: n, root, error_handling: error_handling(rank) };
        tasks.push(tokio::spawn(async move {
            let comm = Communicator::join(&w, &launch).await?;
            Ok(body(comm).await)
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(tokio::time::timeout(Duration::from_secs(60), t).await.expect("no rank hangs").unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_without_error_handling_move_the_same_bytes_over_shared_memory() {
    for path in [DataPath::Direct, DataPath::Buffered] {
        let results = world_joined(
            3,
            |_| false,
            move |mut c| async move {
                c.set_data_path(path);
                c.set_bounce(Bounce { batch: 4099, depth: 3 }).unwrap();
                let peer = c.endpoint((c.rank() + 1) % 3).unwrap().core();
                let (eh, transports) = (peer.error_handling(), peer.transports());
                checked_rounds(&c, 3).await;
                c.close().await.unwrap();
                (eh, transports)
            },
        )
        .await;
        for r in results {
            let (eh, transports) = r.unwrap();
            assert!(!eh, "the endpoints have no error handling");
            // Without error handling UCX may pick shared memory and CMA, which it keeps off
            // for endpoints that must detect a peer's death (the reason to offer this mode).
            assert!(transports.iter().any(|t| t == "cma"), "{path:?}: {transports:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_with_error_handling_move_large_parts_by_single_copy() {
    for path in [DataPath::Direct, DataPath::Buffered] {
        let results = world_joined(
            3,
            |_| true,
            move |mut c| async move {
                c.set_data_path(path);
                // Buffered: batches of 1 MiB go by single copy, the 4099-byte ones would not.
                c.set_bounce(Bounce { batch: 1 << 20, depth: 2 }).unwrap();
                let others: Vec<usize> = (0..c.size()).filter(|&r| r != c.rank()).collect();
                // The hellos are exchanged in the background; wait until every link is on.
                let t0 = std::time::Instant::now();
                while !others.iter().all(|&r| {
                    let n = c.endpoint(r).unwrap().single_copy();
                    n.sending && n.receiving
                }) {
                    assert!(t0.elapsed() < Duration::from_secs(10), "the single-copy links come up");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                checked_rounds(&c, 4).await;
                // A part of exactly the threshold and one larger, every byte checked.
                for len in [64 << 10, 5 << 20] {
                    let mine: Vec<Vec<u8>> = (0..c.size()).map(|d| vec![(c.rank() * 16 + d) as u8; len]).collect();
                    let refs: Vec<&[u8]> = mine.iter().map(|p| &p[..]).collect();
                    let got = c.alltoallv(&refs).await.unwrap();
                    for (src, bytes) in got.iter().enumerate() {
                        assert!(bytes.len() == len && bytes.iter().all(|&b| b == (src * 16 + c.rank()) as u8));
                    }
                }
                let counts: Vec<_> = others.iter().map(|&r| c.endpoint(r).unwrap().single_copy()).collect();
                c.close().await.unwrap();
                counts
            },
        )
        .await;
        for r in results {
            for n in r.unwrap() {
                // Each pair exchanged at least the two large rounds that way, each way.
                assert!(n.sent >= 2 && n.received >= 2, "{path:?}: {n:?}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_whose_error_handling_differs_from_rank_0s_is_refused_by_name() {
    let results = world_joined(2, |rank| rank == 0, |c| async move { c.rank() }).await;
    let e = results[0].as_ref().unwrap_err();
    assert!(matches!(e, Error::Protocol { .. }), "{e}");
    assert!(e.to_string().contains("rank 1 was started with UCXA_ERROR_HANDLING=none, rank 0 with peer"), "{e}");
    // Rank 1 hears why at once instead of waiting for a table until the bootstrap times out.
    let e = results[1].as_ref().unwrap_err().to_string();
    assert!(e.contains("rank 0 refused this rank: rank 1 was started with UCXA_ERROR_HANDLING=none"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_parts_are_received_into_memory_advised_onto_huge_pages() {
    use ucx_async::core::huge_pages::{is_advised, HUGE_MIN};
    world(2, |c| async move {
        // A large part to the other rank, a small one to itself.
        let (me, other) = (c.rank(), 1 - c.rank());
        let mut parts = [vec![2u8; 1 << 20], vec![2u8; 1 << 20]];
        parts[other] = vec![1u8; HUGE_MIN + 1];
        let got = c.alltoallv(&[&parts[0][..], &parts[1][..]]).await.unwrap();
        let (big, small) = (&got[other], &got[me]);
        assert_eq!((big.len(), small.len()), (HUGE_MIN + 1, 1 << 20));
        let advised = is_advised(big[HUGE_MIN / 2..].as_ptr()).filter(|_| ucx_async::core::huge_pages::available());
        if let Some(advised) = advised {
            assert!(advised, "a received part of {} bytes", big.len());
            assert_eq!(is_advised(small[1 << 19..].as_ptr()), Some(false));
        }
        c.close().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rank_does_not_cost_the_others_each_others_parts() {
    // Rank 2 goes away; ranks 0 and 1 get an error for it, but only once their own exchange
    // has settled: each has the other's part whole (1 MiB: a rendezvous, which UCX could not
    // withdraw half way), and nothing hangs.
    let results = world(3, |c| async move {
        c.barrier().await.unwrap();
        if leave::others_past_the_barrier(&c, 2).await {
            drop(c);
            return None;
        }
        let parts: Vec<Vec<u8>> = (0..3).map(|d| vec![(c.rank() * 16 + d) as u8; 1 << 20]).collect();
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        let mut out = Vec::new();
        let r = tokio::time::timeout(Duration::from_secs(30), c.alltoallv_into(&refs, &mut out)).await;
        Some((c.rank(), r.map(|r| r.map_err(|e| e.is_disconnect())), out))
    })
    .await;
    for (rank, r, out) in results.into_iter().take(2).map(Option::unwrap) {
        assert_eq!(r, Ok(Err(true)), "rank {rank}: fails, as a disconnect, and does not hang");
        let other = 1 - rank;
        assert_eq!(out[other], vec![(other * 16 + rank) as u8; 1 << 20], "rank {rank} has rank {other}'s part");
    }
}

/// `alltoallv_device_into` on 3 ranks (feature `cuda`): two rounds of random sizes, zero
/// included, from device buffers into device buffers, every byte checked on the host, the
/// second round into the first's buffers. Without a CUDA device it prints "skipped: no CUDA
/// device" and passes. The ranks are tasks on this thread, where the context is current.
#[cfg(feature = "cuda")]
#[tokio::test(flavor = "current_thread")]
async fn alltoallv_between_device_buffers() {
    use cust::memory::{CopyDestination, DeviceBuffer};
    let Some(_cuda) = common::cuda() else { return };
    let n = 3;
    world(n, move |c| async move {
        let me = c.rank();
        let mut out = Vec::new();
        for round in 0..2 {
            let host: Vec<Vec<u8>> = (0..n).map(|dst| part(me, dst, round)).collect();
            let parts: Vec<DeviceBuffer<u8>> = host.iter().map(|p| DeviceBuffer::from_slice(p).unwrap()).collect();
            let refs: Vec<&DeviceBuffer<u8>> = parts.iter().collect();
            c.alltoallv_device_into(&refs, &mut out).await.unwrap();
            for (src, got) in out.iter().enumerate() {
                let mut back = vec![0u8; got.len()];
                if !back.is_empty() {
                    got.copy_to(&mut back[..]).unwrap();
                }
                assert!(back == part(src, me, round), "rank {me} round {round}: the part from rank {src}");
            }
        }
        c.close().await.unwrap();
    })
    .await;
}
