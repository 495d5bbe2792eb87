"""The tracer bundle's layout (gpu/bundle.py) over a fake tree shaped like the agent image's:
the init container's real copy script copies every build, and a real interpreter started
the way an injected pod starts imports the cupti build of its own version, with the
workload's own packages still first.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kubeprof.agent.gpu import bundle
from kubeprof.operator.webhook import COPY_SCRIPT

ROOT = Path(__file__).resolve().parents[3]
HERE = (sys.version_info[0], sys.version_info[1])


def fake_image(root: Path, versions=bundle.VERSIONS) -> Path:
    """/opt/kubeprof/tracer as docker/agent.Dockerfile lays it out (marker files only)."""
    tracer = root / "opt" / "tracer"
    (tracer / "lib" / "kubeprof").mkdir(parents=True)
    (tracer / "lib" / "kubeprof" / "__init__.py").write_text("")
    lib = tracer / "deps" / "nvidia" / "cuda_cupti" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcupti.so.13").write_bytes(b"")
    for v in versions:
        for pkg in ("cupti", "numpy"):
            d = tracer / "py" / bundle.tag(v) / pkg
            d.mkdir(parents=True)
            (d / "__init__.py").write_text(f"BUILD = {bundle.tag(v)!r}\n")
    return tracer


def copy(tracer: Path, dest: Path) -> str:
    """The webhook's init container command, with the image's bundle at `tracer`."""
    r = subprocess.run(
        [sys.executable, "-c", COPY_SCRIPT, str(dest)],
        env={**os.environ, "KUBEPROF_TRACER_BUNDLE": str(tracer)},
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stdout


def test_init_container_copies_every_build_and_each_python_gets_its_own(tmp_path: Path) -> None:
    dest = tmp_path / "pod" / "kubeprof"
    assert "copied" in copy(fake_image(tmp_path), dest)
    assert bundle.builds(dest) == list(bundle.VERSIONS)
    for v in bundle.VERSIONS:
        dirs, why = bundle.pick(dest, v)
        assert why == "" and dirs == [dest / "deps", dest / "py" / bundle.tag(v)]
    path = ["/app", "/usr/lib/python3/site-packages"]
    assert bundle.activate(dest, (3, 12), path) == ""
    # appended after the workload's own site-packages: its packages win over ours
    assert path == [
        "/app",
        "/usr/lib/python3/site-packages",
        str(dest / "deps"),
        str(dest / "py" / "cp312"),
    ]
    assert bundle.activate(dest, (3, 12), path) == "" and len(path) == 4  # idempotent


@pytest.mark.parametrize("version", [(3, 9), (3, 14)])
def test_a_python_outside_the_builds_gets_the_reason(tmp_path: Path, version) -> None:
    dest = tmp_path / "k"
    copy(fake_image(tmp_path), dest)
    path: list[str] = []
    why = bundle.activate(dest, version, path)
    assert why == (
        f"no cupti-python build for Python {version[0]}.{version[1]} in the tracer "
        f"bundle {dest} (it has: 3.10, 3.11, 3.12, 3.13)"
    )
    assert path == []


def test_a_bundle_missing_one_build_says_which_it_has(tmp_path: Path) -> None:
    dest = tmp_path / "k"
    copy(fake_image(tmp_path, bundle.VERSIONS[:3]), dest)
    assert bundle.pick(dest, (3, 13))[1].endswith("(it has: 3.10, 3.11, 3.12)")
    assert bundle.activate("", (3, 9), []) == ""  # no bundle configured: nothing to say


def test_a_real_interpreter_imports_its_own_build_and_keeps_the_workloads_numpy(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "k"
    copy(fake_image(tmp_path), dest)
    site = tmp_path / "site" / "numpy"  # the workload's own numpy, on its own path
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("BUILD = 'workload'\n")
    code = (
        "from kubeprof.agent.gpu import bundle\n"
        "print(repr(bundle.activate()))\n"
        "import cupti, numpy\nprint(cupti.BUILD, numpy.BUILD)\n"
    )
    env = {
        **os.environ,
        bundle.ENV_BUNDLE: str(dest),
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), *sys.path[1:]]),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["''", bundle.tag(HERE), "workload"]


def test_the_agent_image_builds_exactly_the_bundles_versions() -> None:
    text = (ROOT / "docker" / "agent.Dockerfile").read_text()
    m = re.search(r"for t in ([\d ]+); do", text)
    assert m, "docker/agent.Dockerfile: the per-Python cupti-python loop"
    assert [f"cp{t}" for t in m.group(1).split()] == [bundle.tag(v) for v in bundle.VERSIONS]
    assert "/opt/kubeprof/tracer/py/cp$t" in text  # where COPY_SCRIPT looks by default
    # the C launch hook: one stable-ABI build from the hooks stage, beside the tracer
    assert "/b/scripts/build_launchhook.sh python3 /out" in text
    assert (
        "COPY --from=hooks /out/_launchhook.abi3.so /opt/kubeprof/tracer/lib/kubeprof/agent/gpu/"
        in text
    )
    assert "bundle.hooks(t)" in text  # the image build fails when one is missing


def test_hooks_lists_the_versions_with_a_built_launch_hook(tmp_path: Path) -> None:
    tracer = fake_image(tmp_path)
    assert bundle.hooks(tracer) == []
    gpu = tracer / "lib" / "kubeprof" / "agent" / "gpu"
    gpu.mkdir(parents=True)
    for t in ("310", "312"):
        (gpu / f"_launchhook.cpython-{t}-x86_64-linux-gnu.so").write_bytes(b"")
    (gpu / "_launchhook.c").write_text("")  # the source is not a build
    assert bundle.hooks(tracer) == [(3, 10), (3, 12)]
    dest = tmp_path / "pod"
    copy(tracer, dest)  # the init container carries them into the pod
    assert bundle.hooks(dest) == [(3, 10), (3, 12)]
    (gpu / "_launchhook.abi3.so").write_bytes(b"")  # the stable-ABI build serves them all
    assert bundle.hooks(tracer) == list(bundle.VERSIONS)
