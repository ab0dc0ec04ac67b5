"""The type stubs of the native module name exactly what it has."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import hermes_meter
from hermes_meter import _native

STUB = Path(hermes_meter.__file__).with_name("_native.pyi")

# Functions only a build with the cargo feature `test-hooks` has (the wheel
# tests/python runs against); the shipped wheel and its stub have none.
TEST_HOOKS = {"_spool_records"}


def _stub_names() -> dict[str, ast.AST]:
    tree = ast.parse(STUB.read_text())
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
    return out


def test_the_stub_and_py_typed_ship_with_the_package() -> None:
    assert STUB.is_file()
    assert STUB.with_name("py.typed").is_file()


def test_the_stub_names_every_public_function_and_class_and_nothing_else() -> None:
    module = {n for n in dir(_native) if not n.startswith("__")} - TEST_HOOKS
    assert set(_stub_names()) - {"__version__"} == module


def test_the_stub_names_no_test_hook() -> None:
    assert not TEST_HOOKS & set(_stub_names())


def test_stub_parameters_match_the_native_signatures() -> None:
    for name, node in _stub_names().items():
        if not isinstance(node, ast.FunctionDef):
            continue
        native = inspect.signature(getattr(_native, name))
        stub = [a.arg for a in node.args.args]
        assert stub == list(native.parameters), name
