"""How the in-process tracer words a failure: one line for the user, never a traceback.

Every failure to start tracing becomes a ``TracerError`` whose message is shown as is (on the
process's stderr and in the receiver's messages); CUPTI's status codes are named, and a
failed ``import cupti`` names the module that is really missing.
"""

from __future__ import annotations

from typing import Any


class TracerError(RuntimeError):
    """Tracing cannot start; the message is one line meant for the user."""


class Status(Exception):
    """A CUptiResult from the C hook, shaped like cupti-python's error for ``cupti_error``."""

    def __init__(self, status: int) -> None:
        super().__init__(f"CUptiResult {status}")
        self.status = status


def cupti_error(cupti: Any, exc: Exception) -> str:
    """The CUptiResult name of a cupti-python error (or ``Status``), else its one line."""
    status = getattr(exc, "status", None)
    try:
        return cupti.Result(status).name
    except Exception:  # noqa: BLE001 - must never break the workload
        return one_line(exc)


# Modules cupti-python imports, by the distribution that provides them (pip names).
_DISTRIBUTIONS = {"elftools": "pyelftools", "cupti": "cupti-python"}


def import_failure(exc: ImportError) -> str:
    """Why ``from cupti import cupti`` failed, naming the module that is really missing.

    cupti-python may be installed while one of its own dependencies is not (on the H200:
    ``elftools``, from pyelftools); blaming cupti-python then sends people the wrong way.
    """
    missing = (getattr(exc, "name", None) or "").split(".")[0]
    if isinstance(exc, ModuleNotFoundError) and missing and missing != "cupti":
        dist = _DISTRIBUTIONS.get(missing, missing)
        return (
            f"cupti-python is installed but its dependency {missing!r} is missing "
            f"({one_line(exc)}); pip install {dist}"
        )
    if missing == "cupti" or not missing:
        return f"cupti-python is not importable ({one_line(exc)}); pip install cupti-python"
    return f"cupti-python cannot be imported: {one_line(exc)}"


def one_line(exc: BaseException) -> str:
    """An exception's text on one line (its type name when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__
