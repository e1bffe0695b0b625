"""UCX-Py's ``ucp._libs.topological_distance``: which network interfaces and InfiniBand/RoCE
devices are nearest a GPU, sorted by distance.

Built on the Rust crate ucx-topology (``ucp._ucx_async.Topology``) instead of UCX-Py's hwloc C
helper: it reads the machine through libhwloc when installed, else through sysfs, and needs
neither pynvml nor a GPU to map a CUDA index to its PCI device (CUDA's own answer when a CUDA
driver works, else NVIDIA GPUs in PCI bus id order after ``CUDA_VISIBLE_DEVICES``). The
distance is UCX-Py's: the PCI levels from the GPU up to the lowest common ancestor with the
device (crates/ucx-topology/src/lib.rs has the exact definition).

An hwloc XML file can stand in for the machine (another machine's ``lstopo --of xml``, or a
synthetic one): pass ``xml=``, or set ``UCXPY_TOPOLOGY_XML``.
"""
import os

from .. import _ucx_async

XML_ENV = "UCXPY_TOPOLOGY_XML"

# UCX-Py's two kinds, and other NVIDIA GPUs (named by PCI bus id).
DEVICE_TYPES = ("network", "openfabrics", "gpu")


def load_topology(xml=None):
    """A ``ucp._ucx_async.Topology``: from ``xml`` if given, else from ``$UCXPY_TOPOLOGY_XML``
    if set, else this machine's."""
    if xml is None:
        xml = os.environ.get(XML_ENV) or None
    return _ucx_async.Topology(None if xml is None else os.fspath(xml))


def _as_list(pairs):
    return [{"distance": d, "name": n} for d, n in pairs]


def _check_type(device_type):
    # UCX-Py also took "block", which UCX has no use for.
    if device_type not in DEVICE_TYPES:
        raise ValueError(
            f"unknown device_type {device_type!r}: expected one of {', '.join(map(repr, DEVICE_TYPES))}"
        )


class TopologicalDistance:
    def __init__(self, xml=None):
        """Find topological distance between devices.

        Each GPU should use the network devices physically closest to it (the shortest PCIe
        path), for the best communication performance.

        Parameters
        ----------
        xml: str or os.PathLike, optional
            An hwloc XML topology to read instead of this machine's (default:
            ``$UCXPY_TOPOLOGY_XML`` if set).
        """
        self._topology = load_topology(xml)

    @property
    def source(self):
        """Where the topology came from: ``"hwloc"``, ``"sysfs"`` or ``"xml"``."""
        return self._topology.source

    def get_cuda_distances_from_pci_info(self, domain, bus=None, device=None, device_type="openfabrics"):
        """Network or openfabrics devices by distance from the CUDA device at a PCI address.

        Parameters
        ----------
        domain, bus, device: int
            The CUDA device's PCI domain, bus and device numbers, as UCX-Py took them (function
            0). Or ``domain`` alone as a PCI bus id string (``"0000:3b:00.0"``), optionally
            followed by ``device_type`` in ``bus``'s place.
        device_type: str
            ``"network"`` (interfaces: ``ib0``, ``eth0``), ``"openfabrics"`` (``mlx5_0``), or
            ``"gpu"`` (the other NVIDIA GPUs, by PCI bus id).

        Returns
        -------
        ``[{'distance': int, 'name': str}, ...]``, closest first; equal distances in name
        order.
        """
        if isinstance(domain, str):
            if isinstance(bus, str) and device is None:
                device_type, bus = bus, None
            if bus is not None or device is not None:
                raise TypeError("a PCI bus id string takes no bus or device")
            bus_id = domain
        elif bus is None or device is None:
            raise TypeError("expected (domain, bus, device) or (pci_bus_id)")
        else:
            bus_id = f"{int(domain):04x}:{int(bus):02x}:{int(device):02x}.0"
        _check_type(device_type)
        return _as_list(self._topology.distances(device_type, pci=bus_id))

    def get_cuda_distances_from_device_index(self, cuda_device_index, device_type="openfabrics"):
        """Network or openfabrics devices by distance from CUDA device ``cuda_device_index``
        (as this process numbers its devices, i.e. after ``CUDA_VISIBLE_DEVICES``).

        Returns
        -------
        ``[{'distance': int, 'name': str}, ...]``, closest first; equal distances in name
        order.

        Example
        -------
        >>> TopologicalDistance().get_cuda_distances_from_device_index(0, "network")
        [{'distance': 2, 'name': 'ib0'}, {'distance': 4, 'name': 'enp11s0f0'}, ...]
        """
        _check_type(device_type)
        return _as_list(self._topology.distances(device_type, cuda=int(cuda_device_index)))

    def get_distances_from_cpus(self, cpus, device_type="openfabrics"):
        """Devices by distance from a set of CPUs (``"0-3,8"`` or an iterable of ints): 0 when
        all of them are local to the device, 1 when some are, 2 when none are."""
        _check_type(device_type)
        return _as_list(self._topology.distances(device_type, cpus=cpus))

    def get_ucx_net_devices(self, cuda_device_index=None, *, pci_bus_id=None, cpus=None):
        """The ``UCX_NET_DEVICES`` value for the devices nearest a CUDA device, a PCI device or
        a CPU set (``mlx5_0:1,ib0``; every equally near device is kept). RuntimeError when the
        machine has no network device at all."""
        cuda = None if cuda_device_index is None else int(cuda_device_index)
        return self._topology.net_devices(pci=pci_bus_id, cuda=cuda, cpus=cpus)


def auto_net_devices(cuda_device=0, host=None, xml=None):
    """``net-devices: auto`` (dask-cuda's ``--net-devices auto``), for the Dask comm and the
    collectives: the devices nearest CUDA device ``cuda_device`` of this process (index among
    the visible ones), else, with no GPU visible, nearest the CPUs the process may run on; plus
    ``host``'s own interface when given (a listener's address must stay reachable). ``xml``:
    an hwloc XML topology instead of this machine's (default ``UCXPY_TOPOLOGY_XML``). ``None``
    (leave UCX's default) when nothing fits, with a warning saying why."""
    import logging

    try:
        # The GPU-else-CPUs rule is ucx-topology's (`Topology::auto_net_devices`), shared with
        # the Rust examples' `--net-devices auto`.
        devices = TopologicalDistance(xml)._topology.auto_net_devices(int(cuda_device))
    except (OSError, RuntimeError, ValueError) as e:
        logging.getLogger("ucx").warning("net-devices=auto: no device chosen (%s); UCX picks its own", e)
        return None
    return with_own_interface(devices, host)


def with_own_interface(devices, host):
    """``devices`` (a ``UCX_NET_DEVICES`` value) plus the interface that owns the local address
    ``host``, if it has one and it is not there yet: an address this host owns (127.0.0.1 above
    all) is reached only through its own interface, so a listener or a connection there must
    keep it."""
    from ..utils import interface_of

    device = interface_of(host) if host else None
    if device is not None and device not in devices.split(","):
        devices += "," + device
    return devices