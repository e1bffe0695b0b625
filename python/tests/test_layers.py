"""The native extension's modules form layers: no module imports one that imports it back
(crates/ucx-py-bindings/src/lib.rs lists them bottom up), and the engine knows no endpoint,
listener or active-message type. The same holds for the Python package's modules (``ucp.core``
and the modules it was split into). Read from the sources, so a new circle fails here."""

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


def _python_imports():
    graph = {}
    for path in sorted(PY.glob("*.py")):
        text = path.read_text()
        deps = set(re.findall(r"^\s*from \.(\w+)", text, re.M))
        for names in re.findall(r"^\s*from \. import ([\w, ]+)", text, re.M):
            deps |= {n.strip().split(" ")[0] for n in names.split(",")}
        graph[path.stem] = deps - {path.stem}
    return graph


def test_the_python_package_has_no_import_circle():
    graph = _python_imports()
    assert {"core", "endpoint", "application", "handshake"} <= set(graph)
    assert "endpoint" in graph["application"], "the parser found the imports"
    cycle = _find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    # A checker that cannot fail is no check.
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None
