"""The operations of one collective call, posted before anything waits and settled together
(``Posted``), and the inline spin that lets a call finish without a pass through the event
loop (``spin_until_done``)."""
import asyncio
import time

from .. import _ucx_async as _native
from .._libs.exceptions import UCXCanceled, UCXCloseError, UCXError, UCXMsgTruncated
from ..continuous_ucx_progress import inline_spin_us


class Posted:
    """The operations of one collective call, posted as native futures before anything waits
    (a task per message and its passes through the event loop cost more than a small part's
    whole exchange), plus tasks for what takes several steps. ``settle`` waits for all of them,
    even when some fail, then raises the first failure: a failed peer costs the others nothing,
    and nothing of the call runs on after it."""

    def __init__(self):
        self.ops = []  # (endpoint, future, whether a receive, or DISCARD) of what UCX has not finished
        self.nbytes = 0  # what those operations move, for the spin's budget
        self.device = False  # whether any of them moves device memory (also for the budget)
        self.tasks = []
        self.failures = []

    def recv(self, ep, buffer, tag):
        """Posts a receive of exactly ``len(buffer)`` bytes on ``tag``."""
        try:
            fut = ep._post_recv(buffer, tag, 0)
        except Exception as e:
            self.failures.append(e)
            return
        if fut is None:
            ep._recv_finished()
        else:
            self.ops.append((ep, fut, True))
            self.count(buffer)

    def adopt(self, ep, fut, is_recv):
        """Takes on an operation already posted (a native call left it in flight:
        ``Communicator._finish_native``): a receive if ``is_recv``, else a send."""
        self.ops.append((ep, fut, is_recv))

    def discard(self, ep, tag):
        """Posts a receive that takes the message on ``tag`` and drops it: with one byte of
        room UCX cuts the message short and its sender still completes (rendezvous included;
        a same-host single-copy sender too, answered as too large, as for any receive too
        small); only a failure of the endpoint counts against it."""
        try:
            fut = ep._post_recv(bytearray(1), tag, 0)
        except Exception as e:
            if not cut_short(e):
                self.failures.append(e)
                return
            fut = None
        if fut is None:
            ep._recv_finished()
        else:
            self.ops.append((ep, fut, DISCARD))

    def send(self, ep, buffer, tag, fast=False):
        """Posts a send on ``tag``; whether it was posted (False: it failed at once)."""
        try:
            fut = ep._post_send(buffer, tag, 0, fast)
        except Exception as e:
            self.failures.append(e)
            return False
        if fut is not None:
            self.ops.append((ep, fut, False))
            self.count(buffer)
        return True

    def count(self, buffer):
        """Adds what ``buffer`` moves to the spin's budget."""
        self.nbytes += nbytes_of(buffer)
        self.device = self.device or is_device(buffer)

    def task(self, coroutine):
        self.tasks.append(asyncio.ensure_future(coroutine))

    def cancel(self):
        for f in (*(f for _, f, _ in self.ops), *self.tasks):
            f.cancel()

    async def settle(self):
        futures = [f for _, f, _ in self.ops]
        if not self.tasks and (
            not futures or spin_until_done(self.ops[0][0]._worker, futures, self.nbytes, self.device)
        ):
            # All finished inline: their outcomes, with no pass through the event loop.
            settled = [outcome(f) for f in futures]
        else:
            try:
                settled = await asyncio.gather(*futures, *self.tasks, return_exceptions=True)
            except BaseException:
                self.cancel()  # cancelled: nothing of this call runs on
                raise
        for (ep, _, is_recv), result in zip(self.ops, settled):
            if is_recv is DISCARD and (not isinstance(result, BaseException) or cut_short(result)):
                ep._recv_finished()
                continue
            if not isinstance(result, BaseException):
                if is_recv:
                    ep._recv_finished()
            else:
                self.failures.append(result)
        self.failures += [t for t in settled[len(self.ops) :] if isinstance(t, BaseException)]
        # The failure raised here takes this frame (and the caller's) into its traceback: what
        # they hold must not reach the failed futures, which hold the failure (a cycle only
        # the cycle collector would free, with every buffer the call moved).
        failures, self.failures, self.ops, self.tasks = self.failures, [], [], []
        del futures, settled
        if failures:
            try:
                raise failures[0]
            finally:
                del failures


# The kind of a `Posted` operation that receives a message only to drop it.
DISCARD = "discard"


def cut_short(e):
    """Whether a receive's error says only that the message was longer than its room (UCX's
    truncation, or our length check), not that the endpoint failed or closed."""
    return isinstance(e, (UCXError, UCXMsgTruncated)) and not isinstance(e, (UCXCanceled, UCXCloseError))


def spin_until_done(worker, futures, nbytes=0, device=False):
    """Progresses ``worker`` inline until every future in ``futures`` (operations UCX runs,
    moving ``nbytes`` in all, of device memory if ``device``) is done, for up to
    ``UCXPY_SPIN_US`` (grown with what they move as ucx-async's inline spin grows:
    ``spin_budget_us``) and only when nothing else on the event
    loop is ready (``continuous_ucx_progress.inline_spin_us``, as ``Endpoint.send``/``recv``
    do). A small collective's messages arrive within microseconds over shared memory, a large
    part's copy takes about its size / 8 GB/s inside the spin's progress calls, and every pass
    through the event loop costs more than either. Returns whether all are done."""
    pending = [f for f in futures if not f.done()]
    if not pending:
        return True
    budget = inline_spin_us()
    if not budget:
        return False
    budget = _native.spin_budget_us(budget, nbytes, device)
    deadline = time.perf_counter() + budget * 1e-6
    while pending:
        left = deadline - time.perf_counter()
        if left <= 0:
            return False
        worker.spin(int(left * 1e6) + 1)
        pending = [f for f in pending if not f.done()]
    return True


def nbytes_of(buffer):
    """How many bytes ``buffer`` holds (host or device array, memoryview, bytes), for a spin's
    budget only: 0 where it does not say."""
    n = getattr(buffer, "nbytes", None)
    if isinstance(n, int):
        return n
    try:
        return len(buffer)
    except TypeError:
        return 0


def is_device(buffer):
    """Whether ``buffer``'s type says it is device memory (``__cuda_array_interface__``), for
    a spin's budget only: asked of the type, as the instance's property builds a dict."""
    return hasattr(type(buffer), "__cuda_array_interface__")


def outcome(future):
    """A done future's result, or its exception (as ``gather(return_exceptions=True)``)."""
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception() or future.result()
