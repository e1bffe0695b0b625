"""Helpers of UCX-Py's `ucp._libs.utils`: network-address lookup, NVTX annotation, and the
byte/time formatting and table printing the benchmarks use.
"""
import fcntl
import functools
import os
import socket
import struct

try:
    from nvtx import annotate as nvtx_annotate
except ImportError:
    from contextlib import contextmanager

    # Without nvtx, annotations do nothing (usable as a decorator or a `with` block alike).
    @contextmanager
    def nvtx_annotate(message=None, color=None, domain=None):
        yield


_SIOCGIFADDR = 0x8915
# Interface-name prefixes tried, best first, when no interface is named: InfiniBand, then
# Ethernet; loopback is never picked automatically.
_IFNAME_PREFIXES = ("ib", "eth", "en", "docker")


def _interface_address(ifname):
    """IPv4 address of `ifname`; OSError if the interface does not exist or has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        # struct ifreq: 16-byte name, then a sockaddr_in whose address sits at bytes 20..24.
        ifreq = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15]))
    return socket.inet_ntoa(ifreq[20:24])


def get_address(ifname=None):
    """The IPv4 address of a network interface.

    Parameters
    ----------
    ifname : str, optional
        Interface name. Default: the environment variable `UCXPY_IFNAME`; if that is unset too,
        the first interface (names sorted) with an address among those starting with
        "ib", then "eth", "en", "docker".

    Raises
    ------
    OSError
        If the named interface does not exist or has no IPv4 address.
    RuntimeError
        If no interface was named and none of the candidates has an address.

    Examples
    --------
    >>> get_address(ifname="lo")
    '127.0.0.1'
    """
    if ifname is None:
        ifname = os.environ.get("UCXPY_IFNAME")
    if ifname is not None:
        return _interface_address(ifname)

    try:
        names = sorted(os.listdir("/sys/class/net"))
    except OSError:
        names = []
    for prefix in _IFNAME_PREFIXES:
        for name in names:
            if name.startswith(prefix):
                try:
                    return _interface_address(name)
                except OSError:
                    pass
    raise RuntimeError(
        "A network address could not be determined, set an interface that has a valid IP address "
        "with the environment variable `UCXPY_IFNAME`."
    )


@functools.lru_cache(maxsize=None)
def _dask_utils():
    # UCX-Py formats with dask's helpers when dask is installed; imported on first use
    # because importing dask is slow and `import ucp` reaches this module.
    try:
        import dask.utils
    except ImportError:
        return None
    return dask.utils


def format_time(x):
    """Format a duration in seconds, e.g. "12.345 us"."""
    if _dask_utils() is not None:
        return _dask_utils().format_time(x)
    if x < 1e-6:
        return f"{x * 1e9:.3f} ns"
    if x < 1e-3:
        return f"{x * 1e6:.3f} us"
    if x < 1:
        return f"{x * 1e3:.3f} ms"
    return f"{x:.3f} s"


def format_bytes(x):
    """Format a byte count in B, KiB, MiB, GiB or TiB, e.g. "9.54 MiB"."""
    if _dask_utils() is not None:
        return _dask_utils().format_bytes(x)
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if x >= size:
            return f"{x / size:.2f} {unit}"
    return f"{x} B"


_BYTE_UNITS = {
    "": 1,
    "b": 1,
    **{p: 1000**i for i, p in enumerate("kmgtp", 1)},
    **{p + "b": 1000**i for i, p in enumerate("kmgtp", 1)},
    **{p + "i": 1024**i for i, p in enumerate("kmgtp", 1)},
    **{p + "ib": 1024**i for i, p in enumerate("kmgtp", 1)},
}


def parse_bytes(s):
    """Parse a byte count such as "10 Mb" (10_000_000), "1MiB" (1_048_576), "5kB", "100" or 100.

    Decimal units (k, M, G, T, P, optionally followed by B/b) are powers of 1000, binary units
    (Ki, Mi, ...) powers of 1024; case is ignored, as in dask's `parse_bytes`, which is used
    when installed.
    """
    if isinstance(s, (int, float)):
        return int(s)
    if _dask_utils() is not None:
        return _dask_utils().parse_bytes(s)
    text = s.replace(" ", "")
    # The unit is the trailing run of letters, so "1e3" is a number and "MiB" alone means 1 MiB.
    split = len(text)
    while split and text[split - 1].isalpha():
        split -= 1
    number, unit = text[:split] or "1", text[split:]
    try:
        n = float(number)
    except ValueError:
        raise ValueError(f"Could not interpret '{number}' as a number") from None
    try:
        return int(n * _BYTE_UNITS[unit.lower()])
    except KeyError:
        raise ValueError(f"Could not interpret '{unit}' as a byte unit") from None


def print_separator(separator="-", length=80):
    """Print a line of `length` `separator` characters."""
    print(separator * length)


def print_key_value(key, value, key_length=25):
    """Print "key | value" with the key left-aligned in a `key_length`-wide field."""
    print(f"{key: <{key_length}} | {value}")


def print_multi(values, key_length=25):
    """Print several columns separated by " | ", all but the last `key_length` wide."""
    assert isinstance(values, (tuple, list))
    assert len(values) > 1
    print("".join(f"{v: <{key_length}} | " for v in values[:-1]) + values[-1])
