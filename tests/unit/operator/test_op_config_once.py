"""Every operator default lives in OperatorConfig (config.py): a parameter, field or flag
default elsewhere in operator/ that repeats one, next to a name of the same setting, fails
here (use the config.py constant or the field instead)."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubeprof.operator.config import OperatorConfig

ROOT = Path(__file__).resolve().parents[3] / "operator"
CONFIG = ROOT / "kubeprof" / "operator" / "config.py"


def _defaults() -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(OperatorConfig):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


DEFAULTS = {k: v for k, v in _defaults().items() if v not in ("", None, 0, ()) and v is not False}


def _named_defaults(tree: ast.AST) -> Iterator[tuple[str, ast.expr]]:
    """(name, default) of parameter defaults, annotated fields and `default=` keywords
    (the keyword's name: the call's first string argument, a flag, else "default")."""
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            a = n.args
            pos = a.posonlyargs + a.args
            yield from (
                (arg.arg, d)
                for arg, d in zip(pos[len(pos) - len(a.defaults) :], a.defaults, strict=True)
            )
            yield from (
                (arg.arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d
            )
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value:
            yield n.target.id, n.value
        elif isinstance(n, ast.Call):
            first = n.args[0] if n.args else None
            name = first.value if isinstance(first, ast.Constant) else "default"
            for kw in n.keywords:
                if kw.arg == "default":
                    flag = str(name).strip("-").replace("-", "_")
                    yield flag, kw.value
                    if isinstance(kw.value, ast.Call):  # default=env("VAR", "fallback")
                        yield from ((flag, arg) for arg in kw.value.args[1:])


def repeats(source: str) -> Iterator[str]:
    """What in `source` spells an OperatorConfig default again."""
    for name, node in _named_defaults(ast.parse(source)):
        if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
            continue
        for field, value in DEFAULTS.items():
            if isinstance(value, bool) or node.value != value:
                continue
            if isinstance(value, str) or name in field or field in name:
                yield f"{name}={node.value!r} repeats OperatorConfig.{field}"


def test_no_operator_default_is_spelled_outside_config_py():
    found = [
        f"{path.relative_to(ROOT)}:{what}"
        for path in sorted(ROOT.rglob("*.py"))
        if path != CONFIG
        for what in repeats(path.read_text())
    ]
    assert not found, "use config.py's constant or the OperatorConfig field:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "def f(*, drain_s: float = 15.0): ...",
        "class C:\n    stale_s: float = 20.0",
        "def f(access: str = 'port-forward'): ...",
        "p.add_argument('--agent-cpu', default='500m')",
        "p.add_argument('--ingest-writers', type=int, default=2)",
        "p.add_argument('--agent-memory', default=_env('KUBEPROF_AGENT_MEMORY', '512Mi'))",
    ],
)
def test_the_scan_finds_a_default_spelled_again(source):
    assert list(repeats(source))


@pytest.mark.parametrize(
    "source",
    [
        "def f(width: int = 15): ...",
        "if access != 'port-forward': pass",
        "limits = {'cpu': '500m'}",
        "def f(*, drain_s: float = DEFAULT_DRAIN_S): ...",
    ],
)
def test_the_scan_ignores_the_same_values_elsewhere(source):
    assert not list(repeats(source))
