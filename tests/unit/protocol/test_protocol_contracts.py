"""The import-linter contract for the core lists every core module."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _contract(cid: str) -> dict:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return next(c for c in conf["contracts"] if c["id"] == cid)


def test_core_contract_covers_every_core_module():
    core = ROOT / "src" / "kubeprof"
    modules = {
        f"kubeprof.{p.stem}"
        for p in core.iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.stem != "__init__"
    }
    listed = set(_contract("core-independent")["source_modules"])
    assert listed == modules - {"kubeprof.cli"}, "add new core modules to the contract"


def _layered(cid: str) -> set[str]:
    c = _contract(cid)
    (container,) = c["containers"]
    names = {n.strip() for layer in c["layers"] for n in layer.split("|")}
    return {f"{container}.{n}" for n in names}


def _top_modules(folder: Path, package: str) -> set[str]:
    return {
        f"{package}.{p.stem}"
        for p in folder.iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.stem != "__init__"
    }


def test_layers_contracts_place_every_core_and_agent_module():
    """A module left out of a layers contract is free of it: each must have its layer."""
    assert _layered("core-layers") == _top_modules(ROOT / "src" / "kubeprof", "kubeprof")
    agent = ROOT / "agent" / "kubeprof" / "agent"
    assert _layered("agent-layers") == _top_modules(agent, "kubeprof.agent")


def test_agent_and_operator_are_forbidden_to_the_core():
    c = _contract("core-independent")
    assert set(c["forbidden_modules"]) == {"kubeprof.agent", "kubeprof.operator"}
    assert _contract("operator-not-agent")["forbidden_modules"] == ["kubeprof.agent"]


def test_every_package_is_visible_to_import_linter():
    """A folder of modules without __init__.py is left out of import-linter's graph (as
    agent/cluster once was), so no contract would see its imports."""
    skip = {
        "src/kubeprof",
        "agent/kubeprof",
        "operator/kubeprof",  # namespace roots
        "src/kubeprof/storage/migrations",
        "src/kubeprof/storage/migrations/versions",
        "agent/kubeprof/agent/gpu/_site",
    }  # loaded by path (alembic, sitecustomize)
    missing = [
        str(d.relative_to(ROOT))
        for root in ("src", "agent", "operator")
        for d in (ROOT / root).rglob("*")
        if d.is_dir()
        and "__pycache__" not in d.parts
        and any(d.glob("*.py"))
        and not (d / "__init__.py").exists()
        and str(d.relative_to(ROOT)) not in skip
    ]
    assert missing == []
