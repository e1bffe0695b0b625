//! What Python gets back for a submitted operation: `None` when UCX finished it at once (an
//! up-to receive's length instead, see `Expect::up_to`), an
//! asyncio future whose cancellation cancels the operation in UCX, or (given a callback) a
//! [`Request`]. With a spin, a call progresses the worker for a moment first, so a reply that
//! lands meanwhile completes it inline, with no future and no trip through the event loop.
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyInt, PyTuple};
use ucx_core::{MemoryType, Owned};

use crate::buffer;
use crate::engine::{Engine, OpOwner, Sink};
use crate::errors::{self, Kind};
use crate::outcome::Expect;
use crate::request::Request;
use crate::target::Target;

/// A submitted operation and how its outcome is judged.
pub(crate) struct Submission<B: Send + 'static> {
    pub(crate) submitted: ucx_core::Result<Owned<B>>,
    pub(crate) expect: Expect,
    /// The endpoint whose closing or failure ends the operation.
    pub(crate) owner: Option<Arc<dyn OpOwner>>,
}

/// Takes a submitted operation: finished inline, it is checked and `Ok(None)` returned (or its
/// error raised); in flight, it is tracked and the future (or a [`Request`], given `on_done`)
/// returned.
pub(crate) fn track<B: Send + 'static>(
    engine: &Arc<Engine>,
    py: Python<'_>,
    op: Submission<B>,
    on_done: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Py<PyAny>>> {
    let Submission { submitted, expect, owner } = op;
    // A submission UCX refused at once is named by the operation first, as UCX-Py's
    // `<name>: status`, so callers (and logs) see which send or receive it was.
    let mut owned = submitted.map_err(|e| errors::new(py, Kind::Error, format!("<{}>: {e}", expect.name.render())))?;
    let (id, finished) = engine.start(py, &mut owned, &expect);
    if let Some(out) = finished {
        drop(owned);
        buffer::release_deferred(py);
        // Finished at once: `None`, except for a receive whose value is its length.
        return out.map(|v| expect.up_to.then_some(v));
    }
    // Making the future runs Python, which may let another thread progress and drain
    // meanwhile: `Engine::keep` copes with a completion drained before it.
    let (mut target, ret) = Target::new(py, on_done)?;
    if let Some(fut) = &ret {
        target.watch_cancel(cancel_with(engine, py, id, fut.bind(py))?);
    }
    engine.keep(py, id, owned, Sink::Target(target), expect, owner);
    match ret {
        Some(fut) => Ok(Some(fut)),
        None => Ok(Some(Py::new(py, Request { id, engine: Arc::downgrade(engine) })?.into_any())),
    }
}

/// How long a call may progress the worker before it hands back a future: a number of
/// microseconds, or a Python callable that gives that number, called only for an operation that
/// did not finish at once. `Endpoint.send`/`recv` pass `inline_spin_us` itself: a small send
/// finishes at once, and the call otherwise ran between a reply's arrival and the next send
/// (with the receive's size check it replaced, 0.37 us of a 6.4 us one-way 8 B message;
/// docs/log.md, Python).
pub(crate) enum SpinUs {
    Fixed(u64),
    Ask(Py<PyAny>),
}

impl<'py> FromPyObject<'py> for SpinUs {
    fn extract_bound(ob: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(n) = ob.downcast::<PyInt>() {
            return Ok(SpinUs::Fixed(n.extract()?));
        }
        if ob.is_callable() {
            return Ok(SpinUs::Ask(ob.clone().unbind()));
        }
        Err(PyTypeError::new_err(format!(
            "spin_us must be a number of microseconds (int >= 0) or a callable giving one, not {}",
            ob.get_type().name()?
        )))
    }
}

/// A call's spin: its base ([`SpinUs`]) grown with the bytes the operation moves
/// ([`spin_budget_for`]), worked out only if the operation is still in flight.
pub(crate) struct SpinBudget {
    pub(crate) base: SpinUs,
    pub(crate) nbytes: usize,
    pub(crate) memory: MemoryType,
}

impl SpinBudget {
    /// The budget in microseconds. A callable that fails or gives no number is reported as
    /// unraisable and the call does not spin: the operation is already submitted, and its
    /// future still brings its outcome.
    fn us(self, py: Python<'_>) -> u64 {
        let base = match self.base {
            SpinUs::Fixed(n) => n,
            SpinUs::Ask(f) => match f.call0(py).and_then(|v| v.extract::<u64>(py)) {
                Ok(n) => n,
                Err(e) => {
                    e.write_unraisable(py, Some(f.bind(py)));
                    0
                }
            },
        };
        spin_budget_for(base, self.nbytes, self.memory)
    }
}

/// The spin budget, in microseconds, of a wait of `spin_us` on an operation that moves
/// `nbytes` of `memory` ([`ucx_core::spin_budget`]; `worker::spin_budget_us` gives it to
/// Python). 0 stays 0: the caller asked for no spin (other tasks are ready to run).
pub(crate) fn spin_budget_for(spin_us: u64, nbytes: usize, memory: MemoryType) -> u64 {
    grown_us(spin_us, |base| ucx_core::spin_budget(base, nbytes, memory))
}

/// The spin budget, in microseconds, of a collective call's wait of `spin_us` on operations
/// moving `nbytes` of host memory: grown with the bytes even where the core is shared
/// ([`ucx_core::spin_budget_even_if_shared`]). The rank's peers need that core for their
/// copies, but a call that runs out of budget finishes through a pass of the event loop,
/// which costs them more (4 ranks on 2 cores, alternate calls: 256 KiB 11–15 % and 1 MiB
/// 12–13 % less time per call; docs/spin.md). 0 stays 0, as in [`spin_budget_for`].
pub(crate) fn collective_budget_for(spin_us: u64, nbytes: usize) -> u64 {
    grown_us(spin_us, |base| ucx_core::spin_budget_even_if_shared(base, nbytes, MemoryType::Host))
}

/// `spin_us` grown by `rule`, in whole microseconds; 0 stays 0 (no spin was asked for).
fn grown_us(spin_us: u64, rule: impl FnOnce(std::time::Duration) -> std::time::Duration) -> u64 {
    if spin_us == 0 {
        return 0;
    }
    u64::try_from(rule(std::time::Duration::from_micros(spin_us)).as_micros()).unwrap_or(u64::MAX)
}

/// [`track`], first progressing the worker (GIL released) for up to `spin`'s budget if the
/// operation is in flight. Only after tracking it does it deliver what else the spin
/// completed: an endpoint failure the spin saw must find the operation tracked, to cancel it
/// (UCX does not end a tag receive when an endpoint fails), and an event the spin consumed
/// would otherwise wait for a pass that the sleeping loop never runs.
pub(crate) fn track_spinning<B: Send + 'static>(
    engine: &Arc<Engine>,
    py: Python<'_>,
    op: Submission<B>,
    on_done: Option<&Bound<'_, PyAny>>,
    spin: SpinBudget,
) -> PyResult<Option<Py<PyAny>>> {
    let (op, spun) = match op.submitted {
        Ok(owned) if !owned.is_complete() => match spin.us(py) {
            0 => (Submission { submitted: Ok(owned), ..op }, None),
            spin_us => {
                let (owned, spin) = py.allow_threads(move || {
                    let spin = engine.spin_until(spin_us, || owned.is_complete());
                    (owned, spin)
                });
                (Submission { submitted: Ok(owned), ..op }, Some(spin))
            }
        },
        submitted => (Submission { submitted, ..op }, None),
    };
    let tracked = track(engine, py, op, on_done);
    if let Some(spin) = spun {
        engine.drain(py);
        // The spin armed the worker and UCX answered busy: the blocking driver, asleep on the
        // fd, would not hear of what is pending, so it gets a pass.
        if spin.disarmed {
            engine.needs_progress(py);
        }
    }
    tracked
}

/// Makes cancelling `fut` (a task cancel, a `wait_for` timeout) cancel operation `id` in UCX.
/// The callback is added before any task awaits the future, so it runs before the cancelled
/// task resumes: when the caller sees the cancellation, UCX has let go. Returns the callback,
/// for the target to take off when it resolves the future.
fn cancel_with(engine: &Arc<Engine>, py: Python<'_>, id: u64, fut: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let engine = Arc::downgrade(engine);
    let on_done = PyCFunction::new_closure(py, None, None, move |args: &Bound<'_, PyTuple>, _| -> PyResult<()> {
        let fut = args.get_item(0)?;
        if fut.call_method0(pyo3::intern!(args.py(), "cancelled"))?.is_truthy()? {
            if let Some(engine) = engine.upgrade() {
                engine.canceled_by_caller(args.py(), id);
            }
        }
        Ok(())
    })?;
    fut.call_method1(pyo3::intern!(py, "add_done_callback"), (&on_done,))?;
    Ok(on_done.into_any().unbind())
}
