"""The operator's --ingest-max-* flags: one per `IngestLimits` setting, each with its env."""

from __future__ import annotations

import argparse
import dataclasses
import os

from kubeprof.protocol.limits import IngestLimits

# setting -> (flag help); the flag is --ingest-max-..., the variable KUBEPROF_INGEST_MAX_...
_HELP = {
    "max_body_bytes": "largest request body on the wire (compressed), bytes",
    "max_json_bytes": "largest body after decompression, bytes, whatever Content-Encoding "
    "says (a gzip bomb is cut off here)",
    "max_values": "most JSON values in one body, counted before decoding",
    "max_rows": "most records (samples, processes, GPU activities, GPU metrics) per batch",
    "max_stack_depth": "most frames in one stack",
    "max_string_chars": "longest name, path or command line, in characters",
    "max_session_rows": "most records one session may store, all its batches together",
    "max_session_frames": "most frames one session may add to the shared frame table",
    "max_session_stacks": "most stacks one session may add to the shared stack table",
    "max_skew_s": "clock skew allowed between one node's records of a session, seconds: "
    "all must fit in the session's duration + drain + this",
}


def _names(setting: str) -> tuple[str, str]:
    tail = setting.removeprefix("max_")
    return f"--ingest-max-{tail.replace('_', '-')}", f"KUBEPROF_INGEST_MAX_{tail.upper()}"


def add(parser: argparse.ArgumentParser) -> None:
    """Add one flag per limit (default: the environment variable, then IngestLimits)."""
    defaults = IngestLimits()
    for f in dataclasses.fields(IngestLimits):
        flag, env = _names(f.name)
        parser.add_argument(
            flag,
            dest=f"ingest_{f.name}",
            type=int,
            default=int(os.environ.get(env, getattr(defaults, f.name))),
            help=f"{_HELP[f.name]} (env {env}, default %(default)s)",
        )


def limits(args: argparse.Namespace) -> IngestLimits:
    """The IngestLimits the parsed flags ask for; ValueError names a bad one."""
    values = {f.name: getattr(args, f"ingest_{f.name}") for f in dataclasses.fields(IngestLimits)}
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{_names(name)[0]} must be a positive number, got {value}")
    return IngestLimits(**values)
