"""Command-line flags declared as table rows: type, default and variable come from one place.

Both agent entry points (`kubeprof agent`, `kubeprof agent --light`) take most flags from
`AgentSettings`; the light agent has a few of its own variables. Each row names the flag,
where its default lives and its help, so no flag repeats argparse's declaration by hand.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kubeprof.protocol.settings import AgentSettings

# A settings field's annotation -> argparse's `type` (text fields and the comma list stay str).
_TYPES: dict[str, Callable[[str], Any]] = {
    "int": int,
    "float": float,
    "float | None": float,
    "Path": Path,
}
_FIELD_TYPES = {f.name: str(f.type) for f in dataclasses.fields(AgentSettings)}


def add_setting_flags(
    parser: argparse._ActionsContainer,
    settings: AgentSettings,
    rows: Iterable[tuple[str, str, str]],
) -> None:
    """One flag per (flag, field, help) row: the field's value in `settings` is the default,
    its annotation the type, and ``{env}`` in the help its environment variable."""
    for flag, field, text in rows:
        value = getattr(settings, field)
        parser.add_argument(
            flag,
            default=",".join(value) if isinstance(value, tuple) else value,
            help=text.format(env=AgentSettings.env_name(field)),
            type=_TYPES.get(_FIELD_TYPES[field], str),
        )


def add_env_flags(
    parser: argparse._ActionsContainer,
    environ: Mapping[str, str],
    rows: Iterable[tuple[str, Callable[[str], Any], str, str, str]],
) -> None:
    """One flag per (flag, type, variable, default, help) row for variables that are not
    node-agent settings: the default is the variable's value in `environ`, else `default`
    (both parsed by the type); ``{env}`` in the help is the variable. A value that does not
    parse is a ValueError naming the variable."""
    for flag, kind, var, default, text in rows:
        raw = environ.get(var, default)
        try:
            value = kind(raw)
        except ValueError as exc:
            raise ValueError(f"{var}={raw!r}: {exc}") from exc
        parser.add_argument(flag, type=kind, default=value, help=text.format(env=var))
