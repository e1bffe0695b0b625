//! Posting several operations before waiting on any of them.
//!
//! An operation's future submits it to UCX on its first poll and then progresses the worker
//! for a moment (the inline spin, see `reactor::Signals::spin_until`), which is what keeps a
//! ping-pong fast. Several such futures joined in one task are polled one after another, so
//! each spin holds back the next submission. A rendezvous send cannot finish before the peer
//! posts its receive, and the peer's receive may wait behind the peer's own spin on its send.
//! An exchange of 1 MiB both ways then took about 400 µs, and takes about 230 this way.
//! [`try_join_posted`] polls every future once with the spin off, so that every operation is in
//! UCX before any waits, then waits for all.
//!
//! Inside such a join, the spin for a large transfer also ends when another operation has
//! finished since the join's pass began that a task waits for (`ucx_core::wakes_here`), and
//! the join then polls its futures again at once: a rendezvous send waits on its peer, while
//! the future whose operation just finished may have the next step to post (in `alltoallv`, a
//! part's receive, once its announcement is in), which another peer's transfer waits for.
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

thread_local! {
    /// Set while futures on this thread must not spin: while [`try_join_posted`] gives each
    /// future its first poll, and while it checks the rest after one's spin ran out.
    static POSTING: Cell<bool> = const { Cell::new(false) };
    /// While a join passes over its futures after posting them, `ucx_core::wakes_here()` as
    /// the pass began (see [`news_since`]); else `None`.
    static JOINING: Cell<Option<u64>> = const { Cell::new(None) };
    /// Set by a spin that ended because another operation finished (see [`ended_on_news`]).
    static NEWS: Cell<bool> = const { Cell::new(false) };
}

/// The least an operation moves for its spin inside a join to end on news. Such a transfer
/// goes by rendezvous (UCX's eager range ends well below it), so it waits on its peer; 4 ranks
/// of 64 KiB and 256 KiB parts took 8–22 % less time with the rule (within-process alternating
/// calls, docs/performance.md). Below it, spinning on through other operations' completions
/// was 4–6 % faster (4 KiB parts, which ride inside their announcements).
pub(crate) const NEWS_MIN_BYTES: usize = 64 << 10;

/// Whether a spin for an operation moving `bytes` should also end once another operation
/// that a task waits for has finished, and since when: inside a join, for a large transfer,
/// `Some` of `ucx_core::wakes_here()` as the join's pass began. A completion earlier in the
/// pass counts, not only one during this spin: its future may come later in the pass and have
/// its next step still to post (an announcement in while another future's send spun), and a
/// spin that counted from its own start held that step back until its budget ran out. On 16
/// cores, 4 ranks' 1 MiB calls took 470–500 µs where they had taken 480–620, and 64–256 KiB
/// 5–22 % less (docs/performance.md).
pub(crate) fn news_since(bytes: usize) -> Option<u64> {
    if bytes < NEWS_MIN_BYTES {
        return None;
    }
    JOINING.with(Cell::get)
}

/// Tells the join polling this thread's futures that a spin ended on news: it polls them
/// again at once.
pub(crate) fn ended_on_news() {
    NEWS.with(|n| n.set(true));
}

/// While it lives, a thread-local cell holds a value; then it holds what it held before (a
/// guard taken inside another's leaves the outer one's in force), even if a poll panics.
/// [`POSTING`] while operations are posted ([`Posting`]), [`JOINING`] while a join passes over
/// its futures.
struct Held<T: Copy + 'static>(&'static std::thread::LocalKey<Cell<T>>, T);

impl<T: Copy + 'static> Held<T> {
    fn set(cell: &'static std::thread::LocalKey<Cell<T>>, value: T) -> Held<T> {
        Held(cell, cell.with(|c| c.replace(value)))
    }
}

impl<T: Copy + 'static> Drop for Held<T> {
    fn drop(&mut self) {
        let was = self.1;
        self.0.with(|c| c.set(was));
    }
}

/// Whether a future polled now may spin for its operation (false while operations are being
/// posted).
pub(crate) fn spin_allowed() -> bool {
    !POSTING.with(Cell::get)
}

/// While it lives, futures polled on this thread do not spin (their operation is only
/// posted); then the flag is as it was before (a join posted inside another's posting leaves
/// the outer one's in force), even if a poll panics.
pub(crate) struct Posting {
    _held: Held<bool>,
}

impl Posting {
    pub(crate) fn enter() -> Posting {
        Posting { _held: Held::set(&POSTING, true) }
    }
}

/// Runs `futures` (each usually a send or a receive, or an async block of them) together, as
/// `futures::future::try_join_all` does, but first polls each once without spinning, so that
/// all their operations are submitted before any is waited for. Returns their outputs in
/// order, or the first error (the others are then dropped, which cancels them).
///
/// Use it for operations that depend on the peer's: an exchange of large messages both ways,
/// or sends and receives to several peers at once. One operation at a time needs nothing.
///
/// # Cancel safety
///
/// Dropping the future drops every future it holds, each with its own drop behaviour (see the `#
/// Cancel safety` section of the operation it wraps).
pub async fn try_join_posted<F, T, E>(futures: impl IntoIterator<Item = F>) -> Result<Vec<T>, E>
where
    F: Future<Output = Result<T, E>>,
{
    let (mut outputs, stopped) = join_in_place(futures, |r: &Result<T, E>| r.is_err()).await;
    if let Some(Some(Err(e))) = stopped.map(|i| outputs[i].take()) {
        return Err(e);
    }
    outputs.into_iter().map(|out| out.expect("an output for every future")).collect()
}

/// [`try_join_posted`] without the short cut: waits for every future, whatever the others
/// returned (for receives that must all settle before their buffers can be given back).
pub(crate) async fn join_posted<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let (outputs, _) = join_in_place(futures, |_| false).await;
    outputs.into_iter().map(|out| out.expect("an output for every future")).collect()
}

/// Futures pinned together in one allocation (a `Vec` of them becomes it without another),
/// not one box each: a call over N peers would otherwise allocate N times.
type Pinned<F> = Pin<Box<[F]>>;

/// Each of `futures`, pinned.
fn each_pinned<F>(futures: &mut Pinned<F>) -> impl Iterator<Item = Pin<&mut F>> {
    // SAFETY: the slice is pinned and never moved out of; each element is handed out pinned
    // (a structural projection), and none is moved while pinned: the slice is only dropped
    // in place.
    unsafe { futures.as_mut().get_unchecked_mut() }.iter_mut().map(|f| unsafe { Pin::new_unchecked(f) })
}

/// Runs `futures` in place, as `join_all` would poll them but without its allocations, so
/// that whether a call allocates does not depend on whether its operations finished while
/// being posted (`tests/no_alloc_alltoallv.rs`). First one pass without spinning (posting),
/// then at once and each time this task wakes a pass over those still pending, until every
/// one has an output or one's output is one `stop` accepts (its index is returned; the rest
/// are dropped, which cancels them).
async fn join_in_place<F: Future>(
    futures: impl IntoIterator<Item = F>,
    stop: impl Fn(&F::Output) -> bool,
) -> (Vec<Option<F::Output>>, Option<usize>) {
    let mut futures: Pinned<F> = Box::into_pin(futures.into_iter().collect::<Vec<F>>().into_boxed_slice());
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    let mut posted = false;
    let stopped = std::future::poll_fn(|cx| {
        if !posted {
            posted = true;
            let _posting = Posting::enter();
            if let Poll::Ready(Some(i)) = pass(&mut futures, &mut outputs, &stop, cx) {
                return Poll::Ready(Some(i));
            }
        }
        loop {
            NEWS.with(|n| n.set(false));
            let r = {
                let _joining = Held::set(&JOINING, Some(ucx_core::wakes_here()));
                pass(&mut futures, &mut outputs, &stop, cx)
            };
            // A spin gave way to another operation's completion: its future may have more to
            // post now, so pass again here rather than after a trip through the scheduler.
            // Each such pass follows a completion, so this ends.
            if r.is_pending() && NEWS.with(|n| n.replace(false)) {
                continue;
            }
            return r;
        }
    })
    .await;
    (outputs, stopped)
}

/// One pass over the futures that have no output yet: `Ready(Some(i))` at an output `stop`
/// accepts, `Pending` while any is pending, else `Ready(None)`.
///
/// Futures spin in turn while each spin ends with its operation done; once one spin runs out
/// of budget, the rest of the pass only checks (a spin progresses the worker for all of them,
/// so spinning again for each would only multiply the wait before sleeping).
fn pass<F: Future>(
    futures: &mut Pinned<F>,
    outputs: &mut [Option<F::Output>],
    stop: &impl Fn(&F::Output) -> bool,
    cx: &mut std::task::Context<'_>,
) -> Poll<Option<usize>> {
    let mut quiet = None;
    for (i, (f, out)) in each_pinned(futures).zip(outputs.iter_mut()).enumerate() {
        if out.is_some() {
            continue;
        }
        match f.poll(cx) {
            Poll::Ready(r) => {
                let last = stop(&r);
                *out = Some(r);
                if last {
                    return Poll::Ready(Some(i));
                }
            }
            Poll::Pending => {
                quiet.get_or_insert_with(Posting::enter);
            }
        }
    }
    if quiet.is_some() {
        Poll::Pending
    } else {
        Poll::Ready(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A future that records whether it could spin at each poll, and is ready at its
    /// `ready_at`-th poll (1: the first).
    struct Probe<'a> {
        polls: usize,
        ready_at: usize,
        seen: &'a std::cell::RefCell<Vec<(usize, bool)>>,
        id: usize,
        out: Result<usize, usize>,
    }

    impl Future for Probe<'_> {
        type Output = Result<usize, usize>;

        fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
            self.polls += 1;
            self.seen.borrow_mut().push((self.id, spin_allowed()));
            if self.polls >= self.ready_at {
                return Poll::Ready(self.out);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn probes<'a>(
        seen: &'a std::cell::RefCell<Vec<(usize, bool)>>,
        plan: &[(usize, Result<usize, usize>)],
    ) -> Vec<Probe<'a>> {
        plan.iter().enumerate().map(|(id, &(ready_at, out))| Probe { polls: 0, ready_at, seen, id, out }).collect()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn every_future_is_polled_once_without_spinning_before_any_spins() {
        let seen = std::cell::RefCell::new(Vec::new());
        let out = try_join_posted(probes(&seen, &[(2, Ok(10)), (1, Ok(11)), (3, Ok(12))])).await;
        assert_eq!(out, Ok(vec![10, 11, 12]), "outputs in order");
        let seen = seen.into_inner();
        assert_eq!(&seen[..3], &[(0, false), (1, false), (2, false)], "the first polls, all without spinning");
        assert!(
            seen[3..].iter().all(|&(id, spin)| spin && id != 1),
            "later polls spin; a finished one is not polled: {seen:?}"
        );
        assert!(spin_allowed(), "the flag is cleared");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn once_a_spin_runs_out_the_rest_of_the_pass_is_only_checked() {
        let seen = std::cell::RefCell::new(Vec::new());
        let out = join_posted(probes(&seen, &[(3, Ok(1)), (3, Ok(2)), (1, Ok(3))])).await;
        assert_eq!(out, vec![Ok(1), Ok(2), Ok(3)]);
        // Posted without spinning; then future 0's spin runs out, so future 1 is only checked;
        // the next pass both spin, and both finish.
        assert_eq!(
            seen.into_inner(),
            vec![(0, false), (1, false), (2, false), (0, true), (1, false), (0, true), (1, true)]
        );
        assert!(spin_allowed(), "the flag is cleared");
    }

    /// A future whose spin "ends on news" at its `news_at`-th poll (as `Signals::spin_until`
    /// reports one), and is ready at its `ready_at`-th; it never wakes its task itself.
    struct NewsProbe {
        polls: usize,
        news_at: usize,
        ready_at: usize,
    }

    impl Future for NewsProbe {
        type Output = usize;

        fn poll(mut self: Pin<&mut Self>, _cx: &mut std::task::Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.polls >= self.ready_at {
                return Poll::Ready(self.polls);
            }
            if self.polls == self.news_at && spin_allowed() {
                ended_on_news();
            }
            Poll::Pending
        }
    }

    #[test]
    fn a_spin_that_ended_on_news_has_the_join_polled_again_at_once() {
        // Posting (first polls), then future 0's spin gives way to news while future 1
        // finishes: the join passes again in the same poll, and future 0 is ready there; no
        // waker is needed (the noop one would never poll it again).
        let probes = [NewsProbe { polls: 0, news_at: 2, ready_at: 3 }, NewsProbe { polls: 0, news_at: 0, ready_at: 2 }];
        let mut join = std::pin::pin!(join_posted(probes));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert_eq!(join.as_mut().poll(&mut cx), Poll::Ready(vec![3, 2]));
        // Without news the pass ends pending and the join waits for a wake-up.
        let probes = [NewsProbe { polls: 0, news_at: 0, ready_at: 3 }, NewsProbe { polls: 0, news_at: 0, ready_at: 2 }];
        let mut join = std::pin::pin!(join_posted(probes));
        assert!(join.as_mut().poll(&mut cx).is_pending());
        assert_eq!(join.as_mut().poll(&mut cx), Poll::Ready(vec![3, 2]));
    }

    #[test]
    fn only_a_large_transfer_inside_a_join_spins_until_news() {
        assert_eq!(news_since(NEWS_MIN_BYTES), None, "outside a join");
        let joining = Held::set(&JOINING, Some(7));
        assert_eq!(news_since(NEWS_MIN_BYTES), Some(7));
        assert_eq!(news_since(NEWS_MIN_BYTES - 1), None, "small: spins through others' completions");
        drop(Held::set(&JOINING, Some(9)));
        assert_eq!(news_since(NEWS_MIN_BYTES), Some(7), "a join inside another leaves the outer one's in force");
        drop(joining);
        assert_eq!(news_since(NEWS_MIN_BYTES), None, "the flag is cleared");
    }

    /// A future that, at its first poll after posting, finishes a real receive that a task
    /// waits for (so `ucx_core::wakes_here` counts it) and records what a spin starting then
    /// would count news from, with the count after the completion.
    struct Finisher<'a> {
        polls: usize,
        finish: &'a mut dyn FnMut(),
        seen: &'a std::cell::RefCell<Vec<(Option<u64>, u64)>>,
    }

    impl Future for Finisher<'_> {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, _cx: &mut std::task::Context<'_>) -> Poll<()> {
            self.polls += 1;
            if self.polls == 1 {
                return Poll::Pending; // the posting pass
            }
            (self.finish)();
            self.seen.borrow_mut().push((news_since(NEWS_MIN_BYTES), ucx_core::wakes_here()));
            Poll::Ready(())
        }
    }

    #[test]
    fn a_completion_earlier_in_the_pass_is_news_to_a_spin_that_starts_after_it() {
        use ucx_core::{Context, Endpoint, EndpointParams, Submitted, Worker};
        let ctx = Context::builder().option("NET_DEVICES", "lo").build().expect("a UCX context");
        let worker = Worker::new(&ctx).expect("a worker");
        let ep =
            Endpoint::connect_to_worker(&worker, &worker.address().expect("its address"), EndpointParams::default())
                .expect("an endpoint to itself");
        let mut buf = [0u8; 1];
        let Ok(Submitted::InFlight(recv)) = worker.tag_recv(&mut buf[..], 5, u64::MAX) else {
            panic!("nothing was sent yet")
        };
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(recv.poll_complete(&mut cx).is_pending(), "a task now waits for the receive");
        let mut finish = || {
            let send = ep.tag_send(&[1u8], 5).expect("a send");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !recv.is_complete() || matches!(&send, Submitted::InFlight(s) if !s.is_complete()) {
                worker.progress();
                assert!(std::time::Instant::now() < deadline, "the receive did not finish");
            }
        };
        let mut nothing = || {};
        let seen = std::cell::RefCell::new(Vec::new());
        let futures = [
            Finisher { polls: 0, finish: &mut finish, seen: &seen },
            Finisher { polls: 0, finish: &mut nothing, seen: &seen },
        ];
        let mut join = Box::pin(join_posted(futures));
        assert!(join.as_mut().poll(&mut cx).is_ready());
        drop(join);
        let seen = seen.into_inner();
        let (Some(since), after) = seen[0] else { panic!("no news base inside the join: {seen:?}") };
        assert!(since < after, "the receive finished in this pass, so a spin starting after it counts it: {seen:?}");
        assert_eq!(seen[1].0, Some(since), "every spin in one pass counts from the pass's start: {seen:?}");
    }

    #[test]
    fn a_posting_inside_another_leaves_the_outer_one_in_force() {
        let outer = Posting::enter();
        drop(Posting::enter());
        assert!(!spin_allowed(), "still posting the outer join");
        drop(outer);
        assert!(spin_allowed());
    }

    /// Futures that borrow their own locals across a pending poll (as the async blocks of
    /// `alltoallv` do) stay where their first poll found them (also checked under Miri:
    /// `cargo +nightly miri test -p ucx-async --lib posting`).
    #[tokio::test(flavor = "current_thread")]
    async fn futures_that_borrow_themselves_are_polled_in_place() {
        let seen = std::cell::RefCell::new(Vec::new());
        let waits = probes(&seen, &[(2, Ok(0)), (3, Ok(0)), (1, Ok(0))]);
        let futures = waits.into_iter().enumerate().map(|(k, wait)| async move {
            let local = [k; 4];
            let borrowed = &local[1..];
            wait.await?;
            // Its own number and what it borrowed: a future moved onto another's place would
            // read the other's locals (a wrong sum here; undefined behaviour under Miri).
            Ok::<usize, usize>(100 * k + borrowed.iter().sum::<usize>())
        });
        assert_eq!(try_join_posted(futures).await, Ok(vec![0, 103, 206]));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_first_error_is_returned_and_join_posted_waits_for_all() {
        let seen = std::cell::RefCell::new(Vec::new());
        assert_eq!(try_join_posted(probes(&seen, &[(3, Ok(1)), (1, Err(7)), (2, Ok(3))])).await, Err(7));
        assert_eq!(seen.borrow().len(), 2, "an error while posting stops there: {:?}", seen.borrow());
        seen.borrow_mut().clear();
        assert_eq!(try_join_posted(probes(&seen, &[(1, Ok(1)), (3, Err(8)), (2, Ok(3))])).await, Err(8));
        seen.borrow_mut().clear();
        let all = join_posted(probes(&seen, &[(3, Ok(1)), (1, Err(7)), (2, Ok(3))])).await;
        assert_eq!(all, vec![Ok(1), Err(7), Ok(3)], "every future settles");
    }
}
