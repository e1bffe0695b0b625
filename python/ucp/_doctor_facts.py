"""The parts of ``python -m ucp.doctor``'s report that are not UCX's own: the ``UCX_*``
defaults ``ucp`` set or found set, the devices nearest this process (ucx-topology), the CUDA
driver, and the notes that turn the report's facts into advice (docs/doctor.md has the long
form).
"""
import ctypes
import os

import ucp
from ucp import _ucx_async as _native


def defaults():
    """``{"applied": ucp's defaults this import set, "user": the user's values of variables
    ucp has a default for, "other": every other UCX_* variable in the environment}``."""
    ours = set(ucp._defaults_applied) | set(ucp._user_set)
    other = {k: v for k, v in sorted(os.environ.items()) if k.startswith("UCX_") and k not in ours}
    return {"applied": dict(ucp._defaults_applied), "user": dict(ucp._user_set), "other": other}


def _cpu_list(cpus):
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    runs, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            runs.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(runs)


def topology():
    """The network devices nearest the CPUs this process may run on, and each NVIDIA GPU with
    the network devices nearest it (distances: ucx-topology's hops through the PCI tree)."""
    topo = _native.Topology()
    cpus = sorted(os.sched_getaffinity(0))
    out = {"source": topo.source, "cpus": _cpu_list(cpus), "gpus": []}
    out["nearest_network"] = [{"device": n, "distance": d} for d, n in topo.distances("network", cpus=cpus)[:4]]
    try:
        out["net_devices"] = topo.net_devices(cpus=cpus)
    except RuntimeError:  # no network device near them
        out["net_devices"] = None
    for bus_id in topo.nvidia_gpus():
        near = topo.distances("network", pci=bus_id)[:2]
        out["gpus"].append({"bus_id": bus_id, "nearest_network": [{"device": n, "distance": d} for d, n in near]})
    return out


def cuda_driver():
    """``{"loadable": bool, "version": "12.4" or None, "error": why not}``: libcuda opened here
    as UCX's CUDA transports open it (the driver's version needs no GPU and no cuInit)."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return {"loadable": False, "version": None, "error": str(e)}
    version = ctypes.c_int(0)
    status = libcuda.cuDriverGetVersion(ctypes.byref(version))
    if status != 0:
        return {"loadable": True, "version": None, "error": f"cuDriverGetVersion returned {status}"}
    return {"loadable": True, "version": f"{version.value // 1000}.{version.value % 1000 // 10}", "error": None}


def notes(report):
    """Advice from the report's facts: what looks slow or wrong here, and the way out."""
    out = []
    protocols = report.get("protocols", {})
    on = protocols.get("error_handling_on", {}).get("by_size", {})
    mib = on.get(str(1 << 20), {})
    copied = (report.get("selftest") or {}).get("single_copy_messages")
    if mib.get("transport", "").startswith("tcp/"):
        stall = (
            "but a peer killed mid-send can then stall the others "
            "(docs/doctor.md, docs/python.md \"Shared memory and dead peers\")"
        )
        if copied:
            out.append(
                "small host messages between processes on this host go over tcp with peer error "
                "handling (ucp's default), because UCX_MM_ERROR_HANDLING is off; large ones go by the "
                "same-host single-copy path (as the self-test's did). UCX_MM_ERROR_HANDLING=y gives "
                f"shared memory to the small ones too (faster), {stall}"
            )
        else:
            # No self-test, or one whose messages all went over tcp.
            why = (
                ", and the same-host single-copy path carried none of the self-test's messages "
                "(UCXA_SINGLE_COPY=0, or this process may not read its peer's memory: see the ptrace scope)"
                if copied == 0
                else ""
            )
            out.append(
                "host data between processes on this host goes over tcp with peer error handling "
                f"(ucp's default), because UCX_MM_ERROR_HANDLING is off{why}: UCX_MM_ERROR_HANDLING=y gives "
                f"shared memory (much faster), {stall}"
            )
    system = report.get("system", {})
    scope = system.get("ptrace_scope")
    if scope == 2:
        out.append(
            "ptrace scope 2: UCX's CMA (one copy between processes) needs CAP_SYS_PTRACE; without "
            "it large host messages between processes copy twice through shared memory"
        )
    elif scope is not None and scope >= 3:
        out.append("ptrace scope 3: UCX's CMA is unavailable; large host messages between processes copy twice")
    if system.get("huge_pages", {}).get("enabled") == "never":
        out.append("transparent huge pages are off (never): large buffers stay on 4 KiB pages, which CMA pins slower")
    cuda, transports = system.get("cuda_driver", {}), report.get("transports", {})
    if cuda.get("loadable") and "cuda" not in transports.get("memory_types", ["cuda"]):
        out.append(
            "libcuda loads but UCX has no CUDA transport: is UCX_TLS limiting them, or is this "
            "UCX built without CUDA (the libucx-cu12 wheel has it)?"
        )
    if report.get("ucx", {}).get("second_ucx"):
        out.append(
            "two copies of a UCX library are mapped in this process: UCX keeps global state per "
            "copy, and mixing them crashes or hangs; load one (ucp loads the libucx wheel's)"
        )
    return out
