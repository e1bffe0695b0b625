"""The type stub ``ucp/_ucx_async.pyi`` matches the extension it describes: the same classes,
functions and constants; on each class the same methods and properties (of the same kind);
and, wherever the extension reports a signature, the same parameters, with defaults where
the extension has them (and the same default where both sides spell out a literal)."""
import ast
import inspect
import pathlib
import sys
import types

import pytest

import ucp  # loads UCX before the extension
from ucp import _ucx_async as ext

STUB_PATH = pathlib.Path(ucp.__file__).with_name("_ucx_async.pyi")
STUB = ast.parse(STUB_PATH.read_text(), filename=str(STUB_PATH))

# What every class has in ``vars`` without the stub having to say so. The constructor is
# checked on its own (``__init__`` in the stub against the class's text signature), and
# ``__release_buffer__`` (3.12+) comes with ``__buffer__``.
IMPLICIT = {
    "__new__",
    "__init__",
    "__doc__",
    "__module__",
    "__dict__",
    "__weakref__",
    "__qualname__",
    "__text_signature__",
    "__release_buffer__",
}
# Python before 3.12 does not expose the buffer protocol as a ``__buffer__`` attribute; the stub
# declares it for type checkers all the same.
NOT_EXPOSED_HERE = {"__buffer__"} if sys.version_info < (3, 12) else set()


def public(name):
    return not name.startswith("_")


# ---- the stub's side ---------------------------------------------------------------------


def stub_top_level():
    """``{name: node}`` for the stub's classes, functions and constants (annotations without a
    value, e.g. ``FULL_MASK: int``); plain assignments are stub-only type aliases."""
    classes, functions, constants = {}, {}, {}
    for node in STUB.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = node
        elif isinstance(node, ast.AnnAssign) and node.value is None and isinstance(node.target, ast.Name):
            constants[node.target.id] = node
    return classes, functions, constants


STUB_CLASSES, STUB_FUNCTIONS, STUB_CONSTANTS = stub_top_level()


def stub_kind(fn):
    names = {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}
    for kind in ("property", "staticmethod", "classmethod"):
        if kind in names:
            return kind
    return "method"


def stub_members(cls_node):
    """``{name: FunctionDef}`` for the methods and properties a stub class defines."""
    return {n.name: n for n in cls_node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def stub_params(fn):
    """``[(name, default node or None)]`` in order, as ``inspect`` would list them."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = [(p.arg, d) for p, d in zip(positional, defaults)]
    if a.vararg:
        params.append(("*" + a.vararg.arg, None))
    params += [(p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        params.append(("**" + a.kwarg.arg, None))
    return params


# ---- the extension's side ----------------------------------------------------------------


def live_top_level():
    classes, functions, constants = {}, {}, {}
    for name, value in vars(ext).items():
        if not public(name) or isinstance(value, types.ModuleType):
            continue
        if isinstance(value, type):
            classes[name] = value
        elif callable(value):
            functions[name] = value
        else:
            constants[name] = value
    return classes, functions, constants


LIVE_CLASSES, LIVE_FUNCTIONS, LIVE_CONSTANTS = live_top_level()


def live_kind(attr):
    if isinstance(attr, (property, types.GetSetDescriptorType, types.MemberDescriptorType)):
        return "property"
    if isinstance(attr, staticmethod):
        return "staticmethod"
    if isinstance(attr, (classmethod, types.ClassMethodDescriptorType)):
        return "classmethod"
    return "method"


def live_members(cls):
    """``{name: attribute}`` for what the class itself defines, less the implicit dunders."""
    return {n: a for n, a in vars(cls).items() if n not in IMPLICIT}


def live_params(obj):
    """``[(name, default or inspect.Parameter.empty)]``, or None without a text signature."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    try:
        sig = inspect.signature(obj)
    except (ValueError, TypeError):
        return None
    prefix = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [(prefix.get(p.kind, "") + p.name, p.default) for p in sig.parameters.values()]


# ---- comparisons -------------------------------------------------------------------------


def missing(what, live, stub):
    """Messages for names on one side only."""
    out = [f"{what} {n} is in the extension but not in the stub" for n in sorted(set(live) - set(stub))]
    out += [f"{what} {n} is in the stub but not in the extension" for n in sorted(set(stub) - set(live))]
    return out


def compare_params(where, live, stub):
    """Messages for parameter lists that differ in names, in which have defaults, or in a
    default both sides spell out (pyo3 shows a default it cannot print as ``...``)."""
    live_names = [n for n, _ in live]
    stub_names = [n for n, _ in stub]
    if live_names != stub_names:
        live_list, stub_list = ", ".join(live_names), ", ".join(stub_names)
        return [f"{where}: the extension's parameters are ({live_list}), the stub's ({stub_list})"]
    out = []
    for (name, live_default), (_, stub_default) in zip(live, stub):
        live_has, stub_has = live_default is not inspect.Parameter.empty, stub_default is not None
        if live_has and not stub_has:
            out.append(
                f"{where}: parameter {name} has a default in the extension ({live_default!r}) but not in the stub"
            )
        elif stub_has and not live_has:
            out.append(f"{where}: parameter {name} has a default in the stub but not in the extension")
        elif live_has and isinstance(stub_default, ast.Constant) and stub_default.value is not ...:
            if live_default is not ... and live_default != stub_default.value:
                out.append(
                    f"{where}: parameter {name} defaults to {live_default!r} in the extension, "
                    f"{stub_default.value!r} in the stub"
                )
    return out


def test_top_level_names_match():
    problems = missing("class", LIVE_CLASSES, {n for n in STUB_CLASSES if public(n)})
    problems += missing("function", LIVE_FUNCTIONS, {n for n in STUB_FUNCTIONS if public(n)})
    problems += missing("constant", LIVE_CONSTANTS, {n for n in STUB_CONSTANTS if public(n)})
    assert not problems, "\n".join(problems)


COMMON_CLASSES = sorted(set(LIVE_CLASSES) & set(STUB_CLASSES))


def test_there_are_classes_to_compare():
    """The parametrized tests below are not vacuous (e.g. a stub that failed to parse)."""
    assert {"Context", "Worker", "Endpoint"} <= set(COMMON_CLASSES), COMMON_CLASSES


@pytest.mark.parametrize("name", COMMON_CLASSES)
def test_class_members_match(name):
    cls, stub = LIVE_CLASSES[name], stub_members(STUB_CLASSES[name])
    live = live_members(cls)
    stub_names = {n for n in stub if n != "__init__" and n not in NOT_EXPOSED_HERE}
    problems = missing("method or property", {f"{name}.{n}" for n in live}, {f"{name}.{n}" for n in stub_names})
    for member in sorted(set(live) & stub_names):
        live_k, stub_k = live_kind(live[member]), stub_kind(stub[member])
        if live_k != stub_k:
            problems.append(f"{name}.{member} is a {live_k} in the extension but a {stub_k} in the stub")
    # pyo3 gives a class a text signature exactly when it has a constructor (``#[new]``).
    constructible = cls.__text_signature__ is not None
    if constructible and "__init__" not in stub:
        problems.append(f"constructor {name}(...) is in the extension but the stub has no {name}.__init__")
    if not constructible and "__init__" in stub:
        problems.append(f"{name}.__init__ is in the stub but the extension's {name} has no constructor")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", COMMON_CLASSES)
def test_method_parameters_match(name):
    cls, stub = LIVE_CLASSES[name], stub_members(STUB_CLASSES[name])
    live = live_members(cls)
    problems = []
    for member in sorted(set(live) & set(stub)):
        if stub_kind(stub[member]) == "property":
            continue
        params = live_params(live[member])
        if params is not None:
            problems += compare_params(f"{name}.{member}", params, stub_params(stub[member]))
    if "__init__" in stub and cls.__text_signature__ is not None:
        # The class's signature is the constructor's, without ``self``.
        problems += compare_params(f"{name}.__init__", live_params(cls), stub_params(stub["__init__"])[1:])
    assert not problems, "\n".join(problems)


def test_function_parameters_match():
    problems = []
    for name in sorted(set(LIVE_FUNCTIONS) & set(STUB_FUNCTIONS)):
        params = live_params(LIVE_FUNCTIONS[name])
        if params is not None:
            problems += compare_params(name, params, stub_params(STUB_FUNCTIONS[name]))
    assert not problems, "\n".join(problems)


def test_signatures_are_compared():
    """The extension reports the signatures the comparisons above rely on."""
    assert live_params(ext.Endpoint.put) is not None
    assert live_params(vars(ext.MemoryHandle)["alloc"]) is not None
    assert live_params(ext.Context) is not None
