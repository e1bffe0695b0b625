"""What a native transfer gives back, and waiting on it: ``None`` when UCX finished the
operation inline (nothing to wait for), else an asyncio future of the running loop. This
module is that convention's one home; ``ucp.comm`` and ``ucp.core`` build on it."""
import asyncio
import functools
import traceback

from .utils import get_event_loop

__all__ = ["wait", "as_future", "post_all", "gather_posted", "frees_on_failure"]


async def wait(pending, timeout=None):
    """The operation's result: ``True`` if it finished inline, else what its future gives
    (within ``timeout`` seconds, if given)."""
    if pending is None:
        return True
    # A failed future's traceback holds the frames that awaited it, so a frame that keeps the
    # future makes a cycle (future, failure, traceback, frame) that holds the endpoint until
    # Python's cycle collector runs: hence `pending = None` once done. `wait_for`'s own frame
    # keeps it too, so its failure is raised again from here, without that traceback.
    # (`asyncio.timeout` would avoid the frame, but it wakes the caller a loop iteration
    # sooner, and an endpoint's close then outran the peer's: UCX-Py's test_cancel saw a
    # connection reset instead of its receive's cancel.)
    try:
        if timeout is None:
            return await pending
        try:
            return await asyncio.wait_for(pending, timeout=timeout)
        except BaseException as e:
            raise e.with_traceback(None)  # the same exception, a shorter traceback
    finally:
        pending = None


def as_future(pending, event_loop=None):
    """A future in every case: ``pending`` itself, or one already resolved with ``True``."""
    if pending is not None:
        return pending
    done = (event_loop or get_event_loop()).create_future()
    done.set_result(True)
    return done


def post_all(posts):
    """Posts operations one by one (each gives its future, or ``None`` if finished at once);
    returns one future of them all, or ``None``. If posting one fails, those already posted
    are left to finish, their outcome consumed."""
    pending = []
    try:
        for fut in posts:
            if fut is not None:
                pending.append(fut)
    except BaseException:
        for fut in pending:
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise
    return asyncio.gather(*pending) if pending else None


async def gather_posted(posts):
    """Posts operations as ``post_all`` does and waits for them."""
    done = post_all(posts)
    if done is not None:
        try:
            await done
        finally:
            done = None  # see wait


def frees_on_failure(call):
    """Wraps the coroutine function ``call`` (a public operation made of many transfers, such as
    a collective call) so that its failure takes no reference cycle out with it: the frames of
    its traceback below the wrapper (``call``'s own and those of the helpers it awaited, all
    finished) let go of their locals (``traceback.clear_frames``). Those frames hold the
    operations' futures, which hold the failure, which holds the frames: without this, every
    buffer of a failed call stays until Python's cycle collector runs. The traceback keeps its
    lines; only a debugger's view of those frames' variables is lost."""

    @functools.wraps(call)
    async def freeing(*args, **kwargs):
        try:
            return await call(*args, **kwargs)
        except BaseException as e:
            traceback.clear_frames(e.__traceback__)
            raise

    return freeing
