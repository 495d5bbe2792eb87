"""The operator's flags, made from `OperatorConfig`'s fields, and the config made from them.

Each flag's default is its environment variable, else the field's default; the help
names both. No default is spelled here: config.py holds them all.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

from kubeprof.operator import ingest_flags
from kubeprof.operator.config import UI_ACCESS, Flag, OperatorConfig

_ON = ("", "0")  # a switch's environment values that leave it off


def _flagged() -> Iterator[tuple[dataclasses.Field[Any], Flag]]:
    for f in dataclasses.fields(OperatorConfig):
        if "flag" in f.metadata:
            yield f, f.metadata["flag"]


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return ""  # a required setting: empty until given


def _dest(flag: Flag) -> str:
    return flag.name.removeprefix("--").replace("-", "_")


def add(parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> None:
    """One flag per flagged setting, in the fields' order; the --ingest-max-* flags
    (`ingest_limits`) where that field stands."""
    env = os.environ if environ is None else environ
    for f in dataclasses.fields(OperatorConfig):
        if f.name == "ingest_limits":
            ingest_flags.add(parser)
            continue
        if "flag" not in f.metadata:
            continue
        flag: Flag = f.metadata["flag"]
        kw: dict[str, Any] = {"help": flag.help.replace("{env}", flag.env)}
        given, default = env.get(flag.env), _default(f)
        if flag.choices:
            kw["choices"] = flag.choices
        if f.type == "bool":
            kw.update(action="store_true", default=(given or "") not in _ON)
        elif flag.form == "repeat":
            kw.update(action="append", default=[n for n in (given or "").split(",") if n])
        elif flag.form:  # JSON or a comma-separated list: the text, parsed in `config`
            kw["default"] = given or ""
        elif f.type in ("int", "float"):
            kind = int if f.type == "int" else float
            kw.update(type=kind, default=kind(given) if given is not None else default)
        else:
            kw["default"] = given if given is not None else default
        parser.add_argument(flag.name, **kw)


def _json_arg(text: str, kind: type, flag: str) -> Any:
    """A JSON flag value of the expected type, None when empty; ValueError names the flag."""
    if not text.strip():
        return None
    want = "list of objects" if kind is list else "object"
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{flag} is not valid JSON ({exc.msg} at character {exc.pos}); pass a JSON {want}"
        ) from None
    if not isinstance(value, kind) or (
        isinstance(value, list) and not all(isinstance(v, dict) for v in value)
    ):
        raise ValueError(f"{flag} must be a JSON {want}, got {text[:80]!r}")
    return value


def _value(flag: Flag, raw: Any) -> Any:
    if flag.form == "json-list":
        value = _json_arg(raw, list, flag.name)
        return None if value is None else tuple(value)
    if flag.form == "json-object":
        return _json_arg(raw, dict, flag.name)
    if flag.form == "repeat":
        return tuple(raw)
    if flag.form == "comma":
        return tuple(u.strip() for u in raw.split(",") if u.strip())
    return raw


def config(args: argparse.Namespace) -> OperatorConfig:
    """The operator's settings from parsed flags; ValueError names a bad flag."""
    _, _, port = args.listen.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"--listen wants HOST:PORT, got {args.listen!r}")
    if args.agent_shard_nodes < 1:
        raise ValueError(f"--agent-shard-nodes must be at least 1, got {args.agent_shard_nodes}")
    values = {f.name: _value(flag, getattr(args, _dest(flag))) for f, flag in _flagged()}
    limits = ingest_flags.limits(args)
    if args.ui_access not in UI_ACCESS:  # from KUBEPROF_UI_ACCESS: argparse checks flags only
        raise ValueError(f"--ui-access {args.ui_access!r}: expected port-forward, any or off")
    light_problem = _light_problem(args)
    if light_problem:
        raise ValueError(light_problem)
    return OperatorConfig(
        **values,
        ingest_limits=limits,
        # Agents meet the injected tracers in the webhook's folder, only when it is served.
        agent_gpu_socket_host_path=args.webhook_socket_host_path if args.webhook_tls_cert else "",
    )


def _light_problem(args: argparse.Namespace) -> str:
    """Why the light agents' flags do not fit --agent-auth ("" when they do): the shared
    token only under session-token, their DaemonSet only under serviceaccount."""
    sa = args.agent_auth == "serviceaccount"
    if sa and args.light_token_file:
        return (
            "--light-token-file is for --agent-auth session-token; under serviceaccount "
            "light agents send their own pod's token: set --light-daemonset NAMESPACE/NAME"
        )
    if args.light_daemonset and (not sa or args.light_daemonset.count("/") != 1):
        return (
            f"--light-daemonset {args.light_daemonset!r}: expected NAMESPACE/NAME, and "
            "--agent-auth serviceaccount (under session-token use --light-token-file)"
        )
    return ""
