"""``python -m ucp.doctor``: which UCX this process gets and how UCX would move data here, for
when UCX is slow or silent. docs/doctor.md says what each section means and what to do.

Sections: ``ucx`` (the library loaded, its version, a second UCX mapped), ``transports`` (per
memory type), ``protocols`` (the protocol and transport of a tag send between two processes
of this host per message size, with peer error handling on and off), ``defaults`` (the
``UCX_*`` values ``ucp`` set and those it found set), ``topology`` (the devices nearest this
process), ``system`` (the CUDA driver, huge pages, the ptrace scope, the TCP congestion
control), ``selftest`` (1 MiB messages to a child process over 127.0.0.1, beside a copy here,
and how many went by the same-host single-copy path), then ``notes`` (advice) and
``problems`` (what is broken).

Options: ``--json`` (the report as one JSON object), ``--no-selftest``. Exit status 0, or 1
when something is broken: UCX cannot make a context or probe an endpoint, two UCX are mapped,
or the self-test fails. Where UCX cannot be loaded at all, ``import ucp`` fails before this
module runs, with its own message, and Python exits with 1.
"""
import argparse
import json
import platform
import sys

import ucp
from ucp import _doctor_facts, _doctor_selftest
from ucp import _ucx_async as _native

SECTIONS = ("ucx", "transports", "protocols", "defaults", "topology", "system", "selftest")


def _ucx():
    info = _native.doctor_ucx()
    info["version"] = "%d.%d.%d" % tuple(info["version"])
    return info


def _transports():
    by_type = dict(_native.doctor_transports())
    return {"memory_types": list(by_type), "by_memory_type": by_type}


def _protocols():
    out = {"operation": _native.DOCTOR_TAG_SEND_HOST, "sizes": list(_native.DOCTOR_SIZES)}
    for key, error_handling in (("error_handling_on", True), ("error_handling_off", False)):
        config, _operation, rows = _native.doctor_protocols(error_handling)
        by_size = {}
        for size in out["sizes"]:
            for first, last, _range, protocol, transport in rows:
                if first <= size and (last is None or size <= last):
                    by_size[str(size)] = {"protocol": protocol, "transport": transport}
        out[key] = {
            "config": config,
            "rows": [{"range": r, "protocol": p, "transport": t} for _f, _l, r, p, t in rows],
            "by_size": by_size,
        }
    return out


def _system():
    settings = _native.doctor_system()
    return {
        "cuda_driver": _doctor_facts.cuda_driver(),
        "huge_pages": {"enabled": settings["thp_enabled"], "shmem_enabled": settings["thp_shmem_enabled"]},
        "ptrace_scope": settings["ptrace_scope"],
        "tcp_congestion_control": settings["tcp_congestion_control"],
    }


# Each section's source; a failure of one marked True is a problem (exit status 1).
_GATHER = {
    "ucx": (_ucx, True),
    "transports": (_transports, True),
    "protocols": (_protocols, True),
    "defaults": (_doctor_facts.defaults, False),
    "topology": (_doctor_facts.topology, False),
    "system": (_system, False),
    "selftest": (_doctor_selftest.run, True),
}


def gather(selftest=True):
    """The report as a dict: one key per section (a failed section is ``{"error": why}``),
    ``notes`` and ``problems``."""
    report = {"ucp": ucp.__version__, "python": platform.python_version(), "problems": []}
    for name in SECTIONS:
        if name == "selftest" and not selftest:
            report[name] = None
            continue
        source, essential = _GATHER[name]
        try:
            report[name] = source()
        except Exception as e:
            report[name] = {"error": f"{type(e).__name__}: {e}"}
            if essential:
                report["problems"].append(f"{name}: {type(e).__name__}: {e}")
    if report["ucx"].get("second_ucx"):
        report["problems"].append("ucx: a second UCX library is mapped in this process")
    test = report["selftest"]
    if test and "error" not in test and not test["bandwidth"] > 0:
        report["problems"].append("selftest: no bandwidth measured")
    report["notes"] = _doctor_facts.notes(report)
    return report


def _size(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def _rate(bytes_per_s):
    return f"{bytes_per_s / 1e6:,.0f} MB/s"


def render(report):
    """The report as text, a heading per section."""
    lines = [f"ucp {report['ucp']} doctor (Python {report['python']})"]

    def section(title, name, body):
        lines.append(f"\n== {title} ==")
        value = report.get(name)
        if value is None:
            lines.append("  (skipped)")
        elif "error" in value:
            lines.append(f"  error: {value['error']}")
        else:
            lines.extend("  " + line for line in body(value))

    def ucx(v):
        yield f"version      {v['version']}"
        yield f"opened       {v['path']}  (found: {v['found_by']})"
        for name, paths in v["libraries"].items():
            yield f"{name:<12} {', '.join(paths) or '(not mapped)'}"
        yield f"second UCX   {'YES: ' + str(v['libraries']) if v['second_ucx'] else 'no'}"

    def transports(v):
        for mt in ["host", "cuda"] + [t for t in v["memory_types"] if t not in ("host", "cuda")]:
            tls = v["by_memory_type"].get(mt)
            yield f"{mt:<12} {' '.join(tls) if tls else '(none: UCX reaches no ' + mt + ' memory here)'}"

    def protocols(v):
        def cell(key, size):
            row = v[key]["by_size"].get(str(size))
            return f"{row['protocol']} [{row['transport']}]" if row else "(no row)"

        on_title = "peer error handling on (ucp's default)"
        width = max(len(on_title), *(len(cell("error_handling_on", s)) for s in v["sizes"]))
        yield f"{v['operation']}, two processes of this host:"
        yield f"{'size':<8}  {on_title:<{width}}  error handling off"
        for size in v["sizes"]:
            yield f"{_size(size):<8}  {cell('error_handling_on', size):<{width}}  {cell('error_handling_off', size)}"

    def defaults(v):
        for k, val in v["applied"].items():
            yield f"{k}={val}  (ucp's default)"
        for k, val in v["user"].items():
            yield f"{k}={val}  (yours; ucp's default not applied)"
        for k, val in v["other"].items():
            yield f"{k}={val}  (yours)"

    def topology(v):
        near = ", ".join(f"{d['device']} ({d['distance']})" for d in v["nearest_network"]) or "none"
        yield f"source {v['source']}; CPUs {v['cpus']}; nearest network devices: {near}"
        yield f"UCX_NET_DEVICES for them: {v['net_devices'] or '(none)'}"
        for g in v["gpus"]:
            gnear = ", ".join(f"{d['device']} ({d['distance']})" for d in g["nearest_network"]) or "none"
            yield f"GPU {g['bus_id']}: nearest network devices {gnear}"
        if not v["gpus"]:
            yield "GPUs: none (no NVIDIA GPU on the PCI bus)"

    def system(v):
        cuda = v["cuda_driver"]
        yield "CUDA driver  " + (f"{cuda['version']}" if cuda["version"] else f"not loadable: {cuda['error']}")
        hp = v["huge_pages"]
        yield f"huge pages   enabled={hp['enabled']} shmem_enabled={hp['shmem_enabled']}"
        scope = v["ptrace_scope"]
        yield "ptrace scope " + ("absent (not enforced: CMA works)" if scope is None else str(scope))
        yield f"TCP congestion control {v['tcp_congestion_control'] or '(absent)'}"

    def selftest(v):
        yield (
            f"{_size(v['size'])} messages to another process over 127.0.0.1 for {v['seconds']:.2f} s: "
            f"{_rate(v['bandwidth'])} (a copy here: {_rate(v['memcpy'])})"
        )
        size, copied = _size(v["size"]), v.get("single_copy_messages", 0)
        went = f"{size} went as"
        if copied:
            yield (
                f"{copied} of {v['messages']} messages went by the same-host single-copy path (the receiver "
                f"read them from this process with process_vm_readv)"
            )
            went = f"UCX's protocol for {size} (the rest):"
        yield f"transports {' '.join(v['transports'])}; {went} {v['protocol']} [{v['transport']}]"

    section("UCX", "ucx", ucx)
    section("Transports by memory type", "transports", transports)
    section("Protocols per message size", "protocols", protocols)
    section("UCX_* settings", "defaults", defaults)
    section("Topology", "topology", topology)
    section("System", "system", system)
    section("Self-test", "selftest", selftest)
    lines.append("\n== Notes ==")
    lines.extend(f"  - {n}" for n in report["notes"]) if report["notes"] else lines.append("  (none)")
    if report["problems"]:
        lines.append("\n== PROBLEMS ==")
        lines.extend(f"  - {p}" for p in report["problems"])
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ucp.doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--no-selftest", action="store_true", help="skip the loopback self-test")
    args = parser.parse_args(argv)
    report = gather(selftest=not args.no_selftest)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
