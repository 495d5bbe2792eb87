"""An agent default is spelled once, in kubeprof.protocol.settings, and referenced elsewhere.

The scan is precise on purpose: a known default value counts only where the names around
it say it is that setting (the parameter, field, keyword, dict key, variable or flag it
belongs to), so a 60 that is a minute or a 99 that is a percentile never fires.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeprof.protocol import settings

ROOT = Path(__file__).resolve().parents[3]
SOURCE_ROOTS = ("src", "agent", "operator")
SETTINGS = ROOT / "src" / "kubeprof" / "protocol" / "settings.py"

# (a fragment of the setting's names, its default): a number here fires only next to a name
# holding the fragment.
NUMBERS = (
    ("hz", settings.DEFAULT_CPU_HZ),
    ("drain", settings.DEFAULT_DRAIN_TIMEOUT_S),
    ("spool_max", settings.DEFAULT_SPOOL_MAX_MB),
    ("rescan", settings.DEFAULT_RESCAN_INTERVAL_S),
    ("offcpu_min", settings.DEFAULT_OFFCPU_MIN_US),
)
# Strings that are defaults wherever they appear whole.
PATHS = (
    str(settings.DEFAULT_SPOOL_DIR),
    str(settings.DEFAULT_TOKEN_FILE),
    settings.DEFAULT_GPU_CTL_DIR,
)
# The operator's own copies, left to issue 30's operator part (OperatorConfig holds the
# operator's defaults); each entry is (file under operator/, literal).
OPERATOR_PENDING = {
    ("kubeprof/operator/main.py", "/var/lib/kubeprof/spool"),
    ("kubeprof/operator/config.py", "/var/lib/kubeprof/spool"),
}


def _number(value: object) -> float | None:
    """The number a constant spells (a flag's string default included), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _names(node: ast.AST) -> Iterator[str]:
    """The names a node gives what it holds: targets, keywords, parameters, dict keys and a
    call's first string argument (a flag or an environment variable)."""
    if isinstance(node, ast.keyword) and node.arg:
        yield node.arg
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        yield ast.unparse(node.target)
    elif isinstance(node, ast.Assign):
        yield from (ast.unparse(t) for t in node.targets)
    elif isinstance(node, ast.Call):
        # the called name only: `X(a=1).to_env` unparsed would carry X's keywords along
        func = node.func
        yield func.attr if isinstance(func, ast.Attribute) else ast.unparse(func)
        if node.args and isinstance(node.args[0], ast.Constant):
            yield str(node.args[0].value)
    elif isinstance(node, ast.Dict):
        yield from (ast.unparse(k) for k in node.keys if k is not None)


def literals(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for each agent default spelled in `source`."""
    tree = ast.parse(source)
    parent: dict[ast.AST, ast.AST] = {}
    param: dict[ast.AST, str] = {}  # a default value -> its parameter's name
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parent[child] = node
        if isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            for a, d in zip(
                positional[len(positional) - len(node.defaults) :], node.defaults, strict=True
            ):
                param[d] = a.arg
            for a, kd in zip(node.kwonlyargs, node.kw_defaults, strict=True):
                if kd is not None:
                    param[kd] = a.arg
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant):
            continue
        if isinstance(node.value, str) and node.value in PATHS:
            yield node.lineno, node.value
            continue
        number = _number(node.value)
        if number is None or not any(number == v for _, v in NUMBERS):
            continue
        names, up = [], node
        while up in parent and not isinstance(up, ast.FunctionDef | ast.ClassDef | ast.Module):
            if up in param:
                names.append(param[up])
            up = parent[up]
            names.extend(_names(up))
            if isinstance(up, ast.stmt):
                break
        context = " ".join(names).lower().replace("-", "_")
        for fragment, value in NUMBERS:
            if number == value and fragment in context:
                yield node.lineno, f"{node.value!r} as {fragment}"


def _sources() -> Iterator[Path]:
    for root in SOURCE_ROOTS:
        for path in sorted((ROOT / root).rglob("*.py")):
            if path != SETTINGS and "migrations" not in path.parts:
                yield path


def test_no_agent_default_is_spelled_outside_the_settings_module():
    found = []
    for path in _sources():
        rel = path.relative_to(ROOT)
        for line, what in literals(path.read_text()):
            if rel.parts[0] == "operator" and (rel.relative_to("operator").as_posix(), what) in (
                OPERATOR_PENDING
            ):
                continue
            found.append(f"{rel}:{line}: {what}")
    assert not found, "use the DEFAULT_* names of kubeprof.protocol.settings:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "def f(hz: int = 99): ...",
        "class C:\n    cpu_hz: int = 99",
        "hz = mapped_column(Integer, default=99)",
        "x = int(data.get('cpu_hz', 99))",
        "p.add_argument('--drain-timeout', type=float, default=60.0)",
        "t = float(env('KUBEPROF_DRAIN_TIMEOUT_S', '60'))",
        "Spool(Path('/var/lib/kubeprof/spool'))",
        "def f(*, spool_max_mb=1024): ...",
    ],
)
def test_the_scan_finds_a_default_spelled_again(source):
    assert list(literals(source))


@pytest.mark.parametrize(
    "source",
    [
        "width = 60",
        "f'{s / 60:.0f} min'",
        "p.add_argument('--window', default=float(env('KUBEPROF_LIGHT_WINDOW_S', '60')))",
        "TIE = 0.99",
        "def f(hz: int = DEFAULT_CPU_HZ, pct: int = 99): ...",
        "x = {'p99': 99}",
        "'/var/lib/kubeprof/spool is where batches wait'",
    ],
)
def test_the_scan_ignores_the_same_numbers_elsewhere(source):
    assert not list(literals(source))
