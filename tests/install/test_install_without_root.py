"""The README's way in for users without root, end to end as such a user.

A throwaway user (no sudo, no capabilities) makes a virtual environment from Debian's
python3, `pip install`s a copy of this checkout (the real install: dependencies from PyPI,
the wheel built by hatch_build.py), then records a Python program and reads the report:
the CPU side falls back to py-spy by itself and the report names the sampler; the store
lands under the user's XDG data folder; the GPU tracer's C launch hook is in the install
(where a C compiler and the Python headers exist, as here) so the tracer does not fall
back to its slower Python callback; a store the user may not reach is one line.

No xdist group: the user's name is unique to the run and nothing else is shared (one
network install, ~30 s).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
PROGRAM = """\
import time


def spin(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


t = time.time()
while time.time() - t < 2:
    spin(100000)
"""
# What the user's shell would not have: this run's venv, test settings, the repo on the path.
_DROPPED = ("HOME", "USER", "LOGNAME", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "MAIL")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0
    or not shutil.which("useradd")
    or not shutil.which("runuser")
    or not shutil.which("git")
    or subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys, venv; sys.exit(sys.version_info < (3, 11))"],
        capture_output=True,
        check=False,
    ).returncode,
    reason="needs root (to make the user), useradd, runuser, git and /usr/bin/python3 >= 3.11",
)


@dataclass
class User:
    name: str
    home: Path
    base: Path  # a folder the user can read: the source copy and the program lie here

    def run(self, command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """`command` by /bin/sh as the user, in its home, with a login's environment."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in _DROPPED and not k.startswith(("KUBEPROF_", "XDG_", "PYTEST_"))
        }
        env |= {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name}
        env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
        return subprocess.run(
            [shutil.which("runuser") or "runuser", "-u", self.name, "--", "/bin/sh", "-c", command],
            cwd=self.home,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture(scope="module")
def user() -> Iterator[User]:
    """A new unprivileged user with a home of its own, removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="kubeprof-nonroot-"))
    base.chmod(0o755)
    name = f"kp{uuid.uuid4().hex[:10]}"
    home = base / "home"
    subprocess.run(
        ["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh", name],
        check=True,
    )
    try:
        yield User(name, home, base)
    finally:
        subprocess.run(["userdel", "--force", name], check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def installed(user: User) -> User:
    """The user's venv with kubeprof pip-installed from a copy of this checkout's files
    (tracked and untracked, not the ignored: no .venv, no launch hook built in the tree)."""
    src = user.base / "src"
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for rel in filter(None, (f.decode() for f in files)):
        origin = ROOT / rel
        if origin.is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, src / rel)
    subprocess.run(["chmod", "-R", "a+rX", str(src)], check=True)
    (user.base / "spin.py").write_text(PROGRAM)
    (user.base / "spin.py").chmod(0o644)
    done = user.run(f"{SYSTEM_PYTHON} -m venv venv && venv/bin/pip install -q {src}", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return user


def test_a_user_without_root_records_with_py_spy_and_the_report_names_it(installed: User):
    rec = installed.run(f"venv/bin/kubeprof record -- venv/bin/python {installed.base}/spin.py")
    assert rec.returncode == 0, rec.stderr
    assert "sampling with py-spy instead" in rec.stderr
    assert "no permission to load BPF programs" in rec.stderr
    assert "Traceback" not in rec.stderr
    store = installed.home / ".local" / "share" / "kubeprof" / "kubeprof.db"
    assert store.is_file()
    assert pwd.getpwuid(store.stat().st_uid).pw_name == installed.name
    rep = installed.run("venv/bin/kubeprof report")
    assert rep.returncode == 0, rep.stderr
    assert "CPU: py-spy (fallback: BPF is not allowed here)" in rep.stdout
    assert "spin (spin.py)" in rep.stdout


def test_the_pip_install_carries_the_c_launch_hook(installed: User):
    """Built by hatch_build.py during the wheel build (cc and python3-dev exist here): the
    GPU tracer's default (auto) picks it, not the Python callback."""
    probe = (
        "from kubeprof.agent.gpu.tracer import load_hook; "
        "hook = load_hook('auto'); print(hook.__file__ if hook else 'python callback')"
    )
    out = installed.run(f'venv/bin/python -c "{probe}"')
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("kubeprof/agent/gpu/_launchhook.abi3.so"), out.stdout


def test_a_store_the_user_cannot_reach_is_one_line(installed: User):
    out = installed.run("venv/bin/kubeprof record --store sqlite:////root/kubeprof.db -- true")
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines() == [
        "kubeprof: error: cannot read the store /root/kubeprof.db: Permission denied; pass "
        "--store sqlite:////a/writable/path.db or set KUBEPROF_STORE"
    ]
