"""The native extension's modules form layers: no module imports one that imports it back
(crates/ucx-py-bindings/src/lib.rs lists them bottom up), and the engine knows no endpoint,
listener or active-message type. The same holds for the Python package's modules, its
subpackages (``ucp.collective``, ``ucp._libs``, ...) included. Read from the sources, so a new circle fails here."""

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "crates" / "ucx-py-bindings" / "src"
PY = Path(__file__).resolve().parents[2] / "python" / "ucp"

# What the engine may use: below it in the map.
ENGINE_MAY_USE = {"buffer", "errors", "outcome", "sync", "target"}


def _imports():
    graph = {}
    for path in sorted(SRC.glob("*.rs")):
        code = "\n".join(
            line.split("//")[0] for line in path.read_text().splitlines()
        )
        used = set(re.findall(r"\bcrate::([a-z_]+)", code)) - {path.stem}
        graph[path.stem] = used
    return graph


def _find_cycle(graph):
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path + [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found[found.index(found[-1]) :]
    return None


def test_the_sources_are_where_this_test_looks():
    graph = _imports()
    assert {"engine", "endpoint", "worker", "am", "lib"} <= set(graph)
    assert "engine" in graph["submit"], "the parser found the imports"


def test_no_module_imports_one_that_imports_it_back():
    cycle = _find_cycle(_imports())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_engine_knows_no_endpoint_listener_or_am_type():
    extra = _imports()["engine"] - ENGINE_MAY_USE
    assert not extra, f"engine.rs uses {sorted(extra)}"


def _module_name(path):
    """``ucp.collective.communicator`` for python/ucp/collective/communicator.py; a package's
    ``__init__.py`` is the package itself."""
    parts = list(path.relative_to(PY.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(package, dots, name):
    """The absolute name of ``from <dots><name> import ...`` written in ``package``."""
    base = package.split(".")
    if len(dots) > 1:
        base = base[: len(base) - (len(dots) - 1)]
    return ".".join(base + ([name] if name else []))


def _python_imports():
    """Every module of the package, subpackages included, and the modules of the package it
    imports relatively (``from .x import``, ``from .. import x``, ``from ..x.y import``)."""
    modules = {}
    for path in sorted(PY.rglob("*.py")):
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        modules[name] = (path, package)
    graph = {}
    for name, (path, package) in modules.items():
        text = path.read_text()
        deps = set()
        for dots, mod, names in re.findall(r"^\s*from (\.+)([\w.]*) import \(?([\w, ]+)", text, re.M):
            target = _resolve(package, dots, mod)
            deps.add(target)
            for n in names.split(","):
                sub = f"{target}.{n.strip().split(' ')[0]}"
                if sub in modules:
                    deps.add(sub)
        # A package's module imports the package's __init__ only through its own name, which
        # Python has already started importing: that is no circle.
        graph[name] = {d for d in deps if d in modules and d != name and not name.startswith(d + ".")}
    return graph


def test_the_python_package_has_no_import_circle():
    graph = _python_imports()
    assert {"ucp.core", "ucp.endpoint", "ucp.application", "ucp.handshake"} <= set(graph)
    assert "ucp.endpoint" in graph["ucp.application"], "the parser found the imports"
    assert "ucp.collective.communicator" in graph, "the subpackages are read too"
    assert "ucp.collective.posted" in graph["ucp.collective.communicator"], "and their imports"
    assert "ucp._libs.utils" in graph["ucp"], "and imports from a subpackage"
    cycle = _find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_python_import_reader_sees_a_circle_through_a_subpackage(tmp_path, monkeypatch):
    # The circle this test exists for: a module of a subpackage that imports a sibling which
    # imports it back inside a function.
    pkg = tmp_path / "ucp" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "ucp" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")
    (pkg / "b.py").write_text("from .a import f\n")
    monkeypatch.setattr(__import__(__name__), "PY", tmp_path / "ucp")
    cycle = _find_cycle(_python_imports())
    assert cycle in (["ucp.sub.a", "ucp.sub.b", "ucp.sub.a"], ["ucp.sub.b", "ucp.sub.a", "ucp.sub.b"])


def test_the_cycle_finder_finds_a_cycle():
    # A checker that cannot fail is no check.
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None
