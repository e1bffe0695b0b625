//! Where a finished operation's outcome goes: an asyncio future, or a plain callback (the
//! low-level `ucx_api` convention). Futures are resolved in place when the thread that
//! progressed the worker runs the future's loop, and through `call_soon_threadsafe` otherwise,
//! so several threads and event loops can share one worker. A received value whose future was
//! cancelled before the value reached it goes to the caller's `Undelivered` handler, so no
//! message vanishes silently.
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyCFunction, PyTuple};

use crate::outcome::Outcome;
use crate::sync::lock;

static GET_RUNNING_LOOP: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
static PEEK_RUNNING_LOOP: GILOnceCell<Py<PyAny>> = GILOnceCell::new();

/// What to do with a value whose future was cancelled before the value reached it (a received
/// message nobody will see): put it back, or close the endpoint it came on.
pub(crate) type Undelivered = Box<dyn FnOnce(Python<'_>, Py<PyAny>) + Send>;

pub(crate) enum Target {
    /// An asyncio future of `event_loop`, and the done-callback that cancels its operation if
    /// the future is cancelled (taken off before a result is set: it has nothing to do then,
    /// and asyncio would otherwise queue a call to it on the loop for every operation).
    Future { fut: Py<PyAny>, event_loop: Py<PyAny>, on_cancel: Option<Py<PyAny>> },
    /// Called as `callback(value, exception)` (one of them `None`).
    Callback(Py<PyAny>),
}

impl Target {
    /// A target for `on_done` (a callable), or a new future of the running event loop. Returns
    /// the target and what the submitting call gives back to Python for it (the future, or
    /// `None` for a callback).
    pub(crate) fn new(py: Python<'_>, on_done: Option<&Bound<'_, PyAny>>) -> PyResult<(Target, Option<Py<PyAny>>)> {
        if let Some(cb) = on_done {
            return Ok((Target::Callback(cb.clone().unbind()), None));
        }
        let get = GET_RUNNING_LOOP.get_or_try_init(py, || {
            py.import("asyncio").and_then(|m| m.getattr("get_running_loop")).map(Bound::unbind)
        })?;
        let event_loop = get.bind(py).call0()?;
        let fut = event_loop.call_method0(pyo3::intern!(py, "create_future"))?.unbind();
        Ok((Target::Future { fut: fut.clone_ref(py), event_loop: event_loop.unbind(), on_cancel: None }, Some(fut)))
    }

    /// Records `callback`, added to the future to act on its cancellation, so that resolving
    /// the future takes it off first.
    pub(crate) fn watch_cancel(&mut self, callback: Py<PyAny>) {
        if let Target::Future { on_cancel, .. } = self {
            *on_cancel = Some(callback);
        }
    }

    /// A future of the running loop that is already resolved with `outcome`.
    pub(crate) fn ready(py: Python<'_>, outcome: Outcome) -> PyResult<Py<PyAny>> {
        let (target, fut) = Target::new(py, None)?;
        target.resolve(py, outcome);
        Ok(fut.unwrap_or_else(|| py.None()))
    }

    /// Whether nobody waits for the outcome any more: a future already done (cancelled).
    pub(crate) fn is_abandoned(&self, py: Python<'_>) -> bool {
        match self {
            Target::Future { fut, .. } => {
                fut.bind(py).call_method0(pyo3::intern!(py, "done")).and_then(|d| d.is_truthy()).unwrap_or(false)
            }
            Target::Callback(_) => false,
        }
    }

    /// Delivers `outcome`. Errors raised by the receiver (a closed loop, a callback that
    /// raises) are reported as unraisable: nobody is waiting to catch them here.
    pub(crate) fn resolve(self, py: Python<'_>, outcome: Outcome) {
        self.resolve_or(py, outcome, || None);
    }

    /// [`Target::resolve`], handing a value to the handler `undelivered()` makes if its
    /// future turns out to be cancelled when the value arrives. From another thread that is
    /// known only once the future's loop runs the hand-over, after this returns. The handler
    /// is made only when it may be needed (no allocation on the common path).
    pub(crate) fn resolve_or(
        self,
        py: Python<'_>,
        outcome: Outcome,
        undelivered: impl FnOnce() -> Option<Undelivered>,
    ) {
        let res = match self {
            Target::Callback(cb) => {
                let (value, exc) = split(py, outcome);
                cb.bind(py).call1((value, exc)).map(drop)
            }
            Target::Future { fut, event_loop, on_cancel } => {
                resolve_future(py, fut, event_loop, on_cancel, outcome, undelivered)
            }
        };
        if let Err(e) = res {
            e.write_unraisable(py, None);
        }
    }
}

fn split(py: Python<'_>, outcome: Outcome) -> (Py<PyAny>, Py<PyAny>) {
    match outcome {
        Ok(v) => (v, py.None()),
        Err(e) => (py.None(), e.into_value(py).into_any()),
    }
}

fn resolve_future(
    py: Python<'_>,
    fut: Py<PyAny>,
    event_loop: Py<PyAny>,
    on_cancel: Option<Py<PyAny>>,
    outcome: Outcome,
    undelivered: impl FnOnce() -> Option<Undelivered>,
) -> PyResult<()> {
    let peek = PEEK_RUNNING_LOOP
        .get_or_try_init(py, || py.import("asyncio").and_then(|m| m.getattr("_get_running_loop")).map(Bound::unbind))?;
    let running = peek.bind(py).call0()?;
    let (value, exc) = split(py, outcome);
    if running.is(event_loop.bind(py)) {
        set_or(fut.bind(py), value.bind(py), exc.bind(py), on_cancel, undelivered)
    } else {
        // Another thread's loop: hand the result over; ignore a loop that has closed. The
        // caller may cancel the future before its loop runs the hand-over.
        let undelivered = Arc::new(Mutex::new(undelivered()));
        let for_setter = undelivered.clone();
        let setter = PyCFunction::new_closure(py, None, None, move |args: &Bound<'_, PyTuple>, _| -> PyResult<()> {
            let undelivered = lock(&for_setter).take();
            set_or(&args.get_item(0)?, &args.get_item(1)?, &args.get_item(2)?, None, || undelivered)
        })?;
        let (value_, exc_) = (value.clone_ref(py), exc.clone_ref(py));
        match event_loop.bind(py).call_method1("call_soon_threadsafe", (setter, fut, value, exc)) {
            Ok(_) => Ok(()),
            // The loop has closed: nobody will take the value.
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyRuntimeError>(py) => {
                if let Some(undelivered) = lock(&undelivered).take().filter(|_| exc_.is_none(py)) {
                    undelivered(py, value_);
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// Sets a future's result or exception unless it is already done (cancelled); a value that
/// finds it done goes to `undelivered`. `on_cancel`, the future's cancel-watching callback, is
/// taken off first.
fn set_or(
    fut: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
    exc: &Bound<'_, PyAny>,
    on_cancel: Option<Py<PyAny>>,
    undelivered: impl FnOnce() -> Option<Undelivered>,
) -> PyResult<()> {
    let py = fut.py();
    if fut.call_method0(pyo3::intern!(py, "done"))?.is_truthy()? {
        if let Some(undelivered) = if exc.is_none() { undelivered() } else { None } {
            undelivered(py, value.clone().unbind());
        }
        return Ok(());
    }
    if let Some(cb) = on_cancel {
        // Should taking it off fail, the callback merely runs and finds nothing to cancel:
        // the result must be set either way.
        let _ = fut.call_method1(pyo3::intern!(py, "remove_done_callback"), (cb,));
    }
    if exc.is_none() {
        fut.call_method1(pyo3::intern!(py, "set_result"), (value,))?;
    } else {
        fut.call_method1(pyo3::intern!(py, "set_exception"), (exc,))?;
    }
    Ok(())
}
