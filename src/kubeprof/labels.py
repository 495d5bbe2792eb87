"""`--label KEY=VALUE`: tags a recorded run (its batch size, its model) in the session's meta.

Apart from `kubeprof.compare` (which reads the store) so that `kubeprof record` parses its
flags without importing SQLAlchemy before the command starts.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence

LABEL_PREFIX = "label:"  # labels live in the session's meta as "label:KEY"
LABEL_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,62}")
MAX_LABEL_VALUE = 256


class LabelError(argparse.ArgumentTypeError, ValueError):
    """A malformed --label; usable as an argparse ``type=`` error and as a ValueError."""


def parse_label(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` -> (KEY, VALUE); LabelError saying what is wrong."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep:
        raise LabelError(f"--label {text!r}: expected KEY=VALUE, e.g. --label batch_size=64")
    if not LABEL_KEY.fullmatch(key):
        raise LabelError(
            f"--label {text!r}: KEY must start with a letter or _ and hold only "
            "letters, digits, _ . - (at most 63)"
        )
    if not value or len(value) > MAX_LABEL_VALUE:
        raise LabelError(f"--label {text!r}: VALUE must be 1 to {MAX_LABEL_VALUE} characters")
    return key, value


def labels_meta(values: Sequence[str]) -> dict[str, str]:
    """Session meta entries for repeated ``--label KEY=VALUE`` flags (a key given twice is an
    error, not a silent overwrite)."""
    out: dict[str, str] = {}
    for text in values:
        key, value = parse_label(text)
        if LABEL_PREFIX + key in out:
            raise LabelError(f"--label {key} given twice")
        out[LABEL_PREFIX + key] = value
    return out


def session_labels(meta: Mapping[str, str]) -> dict[str, str]:
    """A session's labels (meta entries ``label:KEY``), keyed by KEY."""
    return {k.removeprefix(LABEL_PREFIX): v for k, v in meta.items() if k.startswith(LABEL_PREFIX)}
