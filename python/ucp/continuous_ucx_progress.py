"""How UCX progress is driven from an asyncio event loop.

``BlockingMode`` (the default) sleeps on the worker's wakeup fd with ``loop.add_reader``: each
pass progresses the worker, resolves what finished, and re-arms the fd (progressing again while
UCX reports more work), so an idle process uses no CPU and no wake-up is lost. Operations that
need progress the loop would not otherwise give (submitted after the last arm) ask for a pass
through a hook the native worker calls. ``NonBlockingMode`` progresses on every loop iteration.

Both hold the worker weakly, so a dropped context is not kept alive by its progress driver.
"""
import asyncio
import os
import threading
import weakref

_get_ident = threading.get_ident

# How long (microseconds) a blocking-mode pass keeps progressing for an awaited operation
# before sleeping on the fd, because waking from the fd costs more than a reply over shared
# memory takes (docs/spin.md has the figures). 0 disables it.
SPIN_US = int(os.environ.get("UCXPY_SPIN_US", "100"))


def spin_us():
    """The current spin limit in microseconds (``UCXPY_SPIN_US``, or ``set_spin_us``)."""
    return SPIN_US


def set_spin_us(us):
    """Sets the spin limit for this process: the blocking driver's and ``Endpoint.recv``'s and
    ``send``'s inline spin (0 turns both off)."""
    global SPIN_US
    SPIN_US = int(us)


class ProgressTask:
    """A progress driver for one event loop; equal to another for the same loop."""

    def __init__(self, worker, event_loop):
        self.worker = weakref.ref(worker)
        self.event_loop = event_loop
        self.asyncio_task = None

    def __hash__(self):
        return hash(self.event_loop)

    def __eq__(self, other):
        return isinstance(other, ProgressTask) and self.event_loop is other.event_loop

    def stop(self):
        """Stops driving progress on this loop."""
        if getattr(self, "asyncio_task", None) is not None and not self.event_loop.is_closed():
            self.asyncio_task.cancel()
            self.asyncio_task = None

    def __del__(self):
        try:
            self.stop()
        except Exception:  # the loop may already be closed at interpreter exit
            pass


# The asyncio tasks of non-blocking drivers (their steps are always ready to run).
_driver_tasks = weakref.WeakSet()


def _is_driver(owner):
    return isinstance(owner, ProgressTask) or (isinstance(owner, asyncio.Task) and owner in _driver_tasks)


def others_ready(loop):
    """Whether anything but a progress driver's own callbacks (a scheduled pass, the fd
    callback: while the worker is unarmed the fd stays readable; a non-blocking driver's next
    step) is ready to run on ``loop``; a spin would only delay it."""
    ready = getattr(loop, "_ready", None)
    if not ready:
        return False
    # A plain loop: a generator cost the usual case (one scheduled driver pass) 0.3 us, on
    # every small collective call and inline send or receive. A blocking driver's pass is
    # known by the function it calls; others by whose method they call.
    for h in ready:
        cb = getattr(h, "_callback", None)
        if getattr(cb, "__func__", None) not in _DRIVER_PASSES and not _is_driver(getattr(cb, "__self__", None)):
            return True
    return False


# The handle of the pass a blocking driver queued last (``call_soon``), until it runs or its
# driver stops: lets ``inline_spin_us`` know the usual queue, that pass alone, by identity. With
# drivers on several loops it names one of them; the others' passes take ``others_ready``.
_queued_pass = None

# The running loop ``inline_spin_us`` last saw (weakly), forgotten in a forked child.
_loop_seen = None


def _forget_loop_seen():
    global _loop_seen
    _loop_seen = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_loop_seen)


def _running_loop():
    """``asyncio.get_running_loop()``, without its cost on every send, receive and collective:
    on Python 3.11 each call makes a ``getpid`` system call (0.18 us a call here; this 0.11).
    A loop whose ``run_forever`` runs in this thread (its ``_thread_id``) is this thread's
    running loop; a fork forgets it, as asyncio's own check is for."""
    global _loop_seen
    ref = _loop_seen
    loop = ref() if ref is not None else None
    if loop is not None and getattr(loop, "_thread_id", None) == _get_ident():
        return loop
    loop = asyncio.get_running_loop()
    _loop_seen = weakref.ref(loop)
    return loop


def inline_spin_us():
    """How long ``Endpoint.send``/``recv`` may progress the worker before they hand back a
    future: ``spin_us()``, only when nothing else on the running loop is ready to run, which a
    spin would only delay."""
    # ``_running_loop``'s fast case and ``others_ready``'s empty one inline: this runs on
    # every send, receive and collective call, and each Python call costs about 0.05 us.
    ref = _loop_seen
    loop = ref() if ref is not None else None
    if loop is None or getattr(loop, "_thread_id", None) != _get_ident():
        loop = _running_loop()
    ready = getattr(loop, "_ready", None)
    # The usual case beside an empty queue: only the pass a blocking driver last queued
    # (one identity check, where ``others_ready`` costs 0.15-0.25 us a call here).
    if not ready or (len(ready) == 1 and ready[0] is _queued_pass):
        return SPIN_US
    return 0 if others_ready(loop) else SPIN_US


class NonBlockingMode(ProgressTask):
    """Progresses the worker on every event-loop iteration (lowest latency, one busy core)."""

    def __init__(self, worker, event_loop):
        super().__init__(worker, event_loop)
        self.asyncio_task = event_loop.create_task(self._progress_task())
        _driver_tasks.add(self.asyncio_task)

    async def _progress_task(self):
        while True:
            worker = self.worker()
            if worker is None:
                return
            worker.progress()
            del worker
            await asyncio.sleep(0)


# Per native worker, its blocking-mode drivers by event loop. An operation that needs progress
# asks the driver of the loop it was submitted from; from a thread without a driven loop it
# asks them all. (One driver for every loop would strand a loop whose driver's thread ended.)
_drivers = weakref.WeakKeyDictionary()


def _dispatcher(drivers):
    """The worker's progress hook over ``drivers`` (it holds no reference to the worker)."""

    def hook():
        driver = drivers.get(asyncio._get_running_loop())
        for d in [driver] if driver is not None else list(drivers.values()):
            d._schedule()

    return hook


class BlockingMode(ProgressTask):
    """Sleeps on the worker's wakeup fd; progresses and re-arms when it fires or when an
    operation asks for it."""

    def __init__(self, worker, event_loop, epoll_fd):
        super().__init__(worker, event_loop)
        self._fd = epoll_fd
        self._scheduled = False
        event_loop.add_reader(epoll_fd, self._on_fd)
        drivers = _drivers.get(worker)
        if drivers is None:
            drivers = _drivers[worker] = {}
            worker.set_progress_hook(_dispatcher(drivers))
        drivers[event_loop] = self
        self._schedule()

    def _schedule(self):
        """Asks for a progress pass before the loop next sleeps (thread-safe)."""
        if self._scheduled:
            return
        self._scheduled = True
        loop = self.event_loop
        global _queued_pass
        try:
            if asyncio._get_running_loop() is loop:
                _queued_pass = loop.call_soon(self._run)
            else:
                _queued_pass = loop.call_soon_threadsafe(self._run)
        except RuntimeError:  # loop closed
            self._scheduled = False

    def _on_fd(self):
        # A pass already scheduled will see whatever the fd signals.
        if not self._scheduled:
            self._run()

    def _run(self):
        global _queued_pass
        _queued_pass = None
        self._scheduled = False
        if self._fd is None:  # stopped: a pass queued before the stop has nothing to drive
            return
        worker = self.worker()
        if worker is None:
            self.stop()
            return
        # Spin briefly for an awaited reply only when nothing else is ready to run (our own
        # fd callback does not count: while the worker is unarmed the fd stays readable).
        if worker.progress_and_arm(0 if others_ready(self.event_loop) else SPIN_US):
            # Busy: the worker is not armed, so come back after what was just woken runs.
            self._schedule()

    def stop(self):
        global _queued_pass
        _queued_pass = None
        loop = self.event_loop
        fd = getattr(self, "_fd", None)
        if fd is not None and not loop.is_closed():
            loop.remove_reader(fd)
        self._fd = None
        worker = self.worker()
        drivers = _drivers.get(worker) if worker is not None else None
        if drivers is not None and drivers.get(loop) is self:
            del drivers[loop]


# The functions behind a blocking driver's queued passes: ``others_ready`` knows such a handle
# by its callback's ``__func__`` in one set lookup, as a loop that runs collectives back to
# back without sleeping has one queued at every call (``inline_spin_us`` runs on every send,
# receive and collective). A 1-rank barrier with two passes queued: 11983 -> 11280
# instructions on the calling thread (callgrind, ``--separate-threads=yes``).
_DRIVER_PASSES = frozenset((BlockingMode._run, BlockingMode._on_fd))
