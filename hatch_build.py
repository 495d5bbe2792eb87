"""Wheel build hook: compile the GPU tracer's C launch hook into the wheel when it can.

`pip install kubeprof` (or a checkout) builds the wheel here. Without
``kubeprof/agent/gpu/_launchhook.abi3.so`` the tracer runs its slower Python launch callback
(and the report says so). So the hook is built by the one script that builds it for
`make setup` too (scripts/build_launchhook.sh); where there is no C compiler or no Python
headers the wheel stays pure Python and says why on the build's output. Editable installs
build it in the tree instead (`make setup`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

TARGET = "kubeprof/agent/gpu/_launchhook.abi3.so"


class LaunchHookBuild(BuildHookInterface):
    """Adds the stable-ABI launch hook (one build for every CPython >= 3.10) to a wheel."""

    PLUGIN_NAME = "custom"
    _out: Path | None = None

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Build the hook into a temporary folder and force-include it; tag the wheel."""
        if self.target_name != "wheel" or version == "editable":
            return
        out = self._out = Path(tempfile.mkdtemp(prefix="kubeprof-launchhook-"))
        script = Path(self.root) / "scripts" / "build_launchhook.sh"
        try:
            subprocess.run(["bash", str(script), sys.executable, str(out)], check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"[launchhook] not built ({exc}): the tracer will use its Python callback")
        so = out / "_launchhook.abi3.so"
        if not so.is_file():
            return
        build_data["force_include"][str(so)] = TARGET
        build_data["pure_python"] = False
        platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        build_data["tag"] = f"cp310-abi3-{platform}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """The wheel holds its copy now: remove the temporary build."""
        if self._out is not None:
            shutil.rmtree(self._out, ignore_errors=True)
