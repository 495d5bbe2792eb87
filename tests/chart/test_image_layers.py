"""The images' layers: kubeprof's dependencies are installed from pyproject.toml's own list,
before any source is copied, and kubeprof itself last with --no-deps, so a source change
rebuilds only that thin layer (`make images`, BENCHMARKS.md "Images").
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPENDENCIES = ROOT / "docker" / "dependencies.py"


def test_the_dependency_lists_are_pyprojects(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(DEPENDENCIES), str(ROOT / "pyproject.toml"), str(tmp_path)],
        check=True,
    )
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    runtime = (tmp_path / "runtime.txt").read_text().splitlines()
    assert runtime == meta["project"]["dependencies"]
    assert (tmp_path / "build.txt").read_text().splitlines() == meta["build-system"]["requires"]


def test_a_pyproject_without_a_list_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[project]\nname = "x"\ndependencies = []\n')
    r = subprocess.run(
        [sys.executable, str(DEPENDENCIES), str(bad), str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0
    assert f"{bad}: no 'build-system' list" in r.stderr


@pytest.mark.parametrize("image", ["operator", "agent"])
def test_the_sources_come_after_the_dependencies(image: str) -> None:
    lines = (ROOT / "docker" / f"{image}.Dockerfile").read_text().splitlines()
    deps = [i for i, ln in enumerate(lines) if "-r /tmp/kubeprof-runtime.txt" in ln]
    roots = ("src", "agent", "operator")  # the source roots, copied whole
    sources = [i for i, ln in enumerate(lines) if ln.split()[:2] in [["COPY", r] for r in roots]]
    assert len(deps) == 1 and sources, (deps, sources)
    assert deps[0] < min(sources), f"{image}: a source change would reinstall the dependencies"
    install = lines[max(sources) + 1 :]
    assert any("/src/install_kubeprof.sh /stage" in ln for ln in install)
    assert lines[-1].startswith("ENTRYPOINT") and "COPY --from=app /stage/ /" in lines
    script = (ROOT / "docker" / "install_kubeprof.sh").read_text()
    assert "--no-deps" in script and "check" in script
