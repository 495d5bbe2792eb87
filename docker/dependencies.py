"""The dependency lists an image installs, read from pyproject.toml, where they are kept.

The Dockerfiles install kubeprof's dependencies in a layer of their own, keyed on these lists
alone, so a change to the sources reinstalls kubeprof only (with --no-deps), not everything
it needs: ~75 s of the agent image per source change before. Run in the image build:

    python3 dependencies.py PYPROJECT OUTDIR

writes OUTDIR/runtime.txt (`[project] dependencies`) and OUTDIR/build.txt (`[build-system]
requires`: the wheel's build backend, installed beside pip outside the image), one
requirement a line.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def lists(pyproject: Path) -> dict[str, list[str]]:
    """The requirement lists by file name; a missing table is an error naming it."""
    data = tomllib.loads(pyproject.read_text())
    try:
        return {
            "runtime.txt": list(data["project"]["dependencies"]),
            "build.txt": list(data["build-system"]["requires"]),
        }
    except KeyError as exc:
        raise SystemExit(f"{pyproject}: no {exc} list to install the image from") from None


def main(argv: list[str]) -> None:
    """Write each list to OUTDIR, one requirement a line."""
    if len(argv) != 2:
        raise SystemExit("usage: dependencies.py PYPROJECT OUTDIR")
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, reqs in lists(Path(argv[0])).items():
        (out / name).write_text("".join(f"{r}\n" for r in reqs))


if __name__ == "__main__":
    main(sys.argv[1:])
