"""Buffer helpers the communicator and the shared-memory window share: the bytearrays a
collective receives into are resized and filled in place, call after call."""


def copy_own(out, parts, me):
    """This rank's own part into ``out[me]``: it never leaves the process."""
    resize(out[me], len(parts[me]))
    copy_into(out[me], parts[me])


def copy_into(buf, data):
    """Copies ``data`` (any buffer of ``len(buf)`` bytes) into the bytearray ``buf`` in one
    pass. (``buf[:] = data`` first copies a non-bytearray ``data`` into a new bytearray: for a
    16 MiB part, a second copy and 16 MiB of fresh pages.)"""
    memoryview(buf)[:] = memoryview(data).cast("B")


def resize(buf, n):
    """Makes the bytearray ``buf`` ``n`` bytes long: shrinking keeps the allocation, growing
    reuses it where it can (the new bytes are zero until a receive writes them)."""
    if len(buf) != n:
        buf[n:] = b""
        buf.extend(bytes(n - len(buf)))
