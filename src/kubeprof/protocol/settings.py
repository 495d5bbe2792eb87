"""The node agent's settings: one typed object, written by the operator, read by the agent.

The operator puts `AgentSettings(...).to_env()` into the session's DaemonSet; the agent's
`from_env(os.environ)` gives the same object back (its flags override single fields). The
defaults here are the only ones: the CLI, the agent, the operator and the CRD reader use
DEFAULT_CPU_HZ and friends instead of repeating the numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

DEFAULT_CPU_HZ = 99  # CPU samples per second per thread: off the kernel's 100 Hz tick
DEFAULT_NVML_INTERVAL_S = 1.0  # seconds between NVML readings
# Off-CPU probe: waits shorter than this get no stack (counted instead); bench/offcpu_overhead.py
DEFAULT_OFFCPU_MIN_US = 1000
DEFAULT_OFFCPU_EVERY = 1  # follow 1 in N switch-outs of target threads; 0 turns the probe off
DEFAULT_TOKEN_FILE = Path("/var/run/kubeprof/token")
DEFAULT_SPOOL_DIR = Path("/var/lib/kubeprof/spool")
DEFAULT_SPOOL_MAX_MB = 1024  # oldest spooled batches are dropped past this size
DEFAULT_PROC_ROOT = Path("/proc")
DEFAULT_POLL_INTERVAL_S = 1.0  # seconds between collector polls: the batch cadence
DEFAULT_RESCAN_INTERVAL_S = 5.0  # seconds between rescans of target pods and processes
DEFAULT_DRAIN_TIMEOUT_S = 60.0  # seconds to keep sending spooled batches at exit
DEFAULT_GPU_CTL_DIR = "/run/kubeprof/ctl"  # the tracers' control sockets, inside each pod
NODE_NAME_ENV = "NODE_NAME"  # set by the downward API from spec.nodeName


def _var(name: str, *, only_when_set: bool = False) -> dict[str, Any]:
    """Field metadata naming the environment variable the field is read from;
    `only_when_set`: to_env() writes it only when it differs from the default (a feature
    the operator switches on by adding its variable to the DaemonSet)."""
    return {"env": name, "only_when_set": only_when_set}


@dataclasses.dataclass(frozen=True, slots=True)
class AgentSettings:
    """Everything the node agent reads from its environment."""

    # This node's name; only target pods on it are profiled. In the DaemonSet it comes
    # from the downward API (spec.nodeName), so to_env() never writes a value for it.
    node_name: str = field(default="", metadata=_var(NODE_NAME_ENV))
    # Base URL of the operator's ingest API, e.g. http://kubeprof-operator.kubeprof:8080.
    ingest_url: str = field(default="", metadata=_var("KUBEPROF_INGEST_URL"))
    # Namespace and name of the ProfilingSession the agent works for.
    namespace: str = field(default="", metadata=_var("KUBEPROF_SESSION_NAMESPACE"))
    session: str = field(default="", metadata=_var("KUBEPROF_SESSION"))
    # The session's UID: its spool folder is keyed by it, so a session re-created under
    # the same name never receives the batches spooled for the old one.
    session_uid: str = field(default="", metadata=_var("KUBEPROF_SESSION_UID"))
    # File holding the session's ingest token (mounted from the session's Secret).
    token_file: Path = field(default=DEFAULT_TOKEN_FILE, metadata=_var("KUBEPROF_TOKEN_FILE"))
    # Where batches wait until the ingest stored them (a per-session sub-folder is used).
    spool_dir: Path = field(default=DEFAULT_SPOOL_DIR, metadata=_var("KUBEPROF_SPOOL_DIR"))
    # Oldest spooled batches are dropped (and counted) past this size, in MiB.
    spool_max_mb: int = field(default=DEFAULT_SPOOL_MAX_MB, metadata=_var("KUBEPROF_SPOOL_MAX_MB"))
    # The host's /proc (the agent pod runs with hostPID and mounts it elsewhere).
    proc_root: Path = field(default=DEFAULT_PROC_ROOT, metadata=_var("KUBEPROF_PROC_ROOT"))
    # Collectors to run: "cpu" (eBPF sampler + Python frames), "nvml" (GPU metrics).
    collectors: tuple[str, ...] = field(default=("cpu",), metadata=_var("KUBEPROF_COLLECTORS"))
    # CPU sampling frequency in Hz.
    cpu_hz: int = field(default=DEFAULT_CPU_HZ, metadata=_var("KUBEPROF_CPU_HZ"))
    # Off-CPU waits shorter than this many microseconds get no stack (counted instead).
    offcpu_min_us: int = field(
        default=DEFAULT_OFFCPU_MIN_US, metadata=_var("KUBEPROF_OFFCPU_MIN_US")
    )
    # Follow 1 in N switch-outs of target threads (each kept wait then counts N times); 0: off.
    offcpu_every: int = field(default=DEFAULT_OFFCPU_EVERY, metadata=_var("KUBEPROF_OFFCPU_EVERY"))
    # Seconds between NVML readings.
    nvml_interval_s: float = field(
        default=DEFAULT_NVML_INTERVAL_S, metadata=_var("KUBEPROF_NVML_INTERVAL_S")
    )
    # Seconds between collector polls, i.e. the batch cadence.
    poll_interval_s: float = field(
        default=DEFAULT_POLL_INTERVAL_S, metadata=_var("KUBEPROF_POLL_INTERVAL_S")
    )
    # Seconds between rescans of target pods and their processes.
    rescan_interval_s: float = field(
        default=DEFAULT_RESCAN_INTERVAL_S, metadata=_var("KUBEPROF_RESCAN_INTERVAL_S")
    )
    # Wall-clock end of the session (Unix seconds, millisecond precision); None: not
    # known yet (the API's answer tells). Written as 0 when None.
    end_time: float | None = field(default=None, metadata=_var("KUBEPROF_SESSION_END"))
    # Seconds to keep sending spooled batches at exit.
    drain_timeout_s: float = field(
        default=DEFAULT_DRAIN_TIMEOUT_S, metadata=_var("KUBEPROF_DRAIN_TIMEOUT_S")
    )
    # Receive CUDA kernels from the in-pod tracers on this socket ("": off).
    gpu_socket: str = field(
        default="", metadata=_var("KUBEPROF_AGENT_GPU_SOCKET", only_when_set=True)
    )
    # The target pods' folder of their tracers' control sockets (through /proc/<pid>/root).
    gpu_ctl_dir: str = field(
        default=DEFAULT_GPU_CTL_DIR, metadata=_var("KUBEPROF_AGENT_GPU_CTL_DIR", only_when_set=True)
    )
    # Log level: DEBUG, INFO, WARNING.
    log_level: str = field(default="INFO", metadata=_var("KUBEPROF_LOG_LEVEL"))

    def to_env(self) -> list[dict[str, Any]]:
        """The container's `env` entries (NODE_NAME from the downward API)."""
        out: list[dict[str, Any]] = []
        for f in dataclasses.fields(self):
            name, value = f.metadata["env"], getattr(self, f.name)
            if f.metadata["only_when_set"] and value == f.default:
                continue
            if name == NODE_NAME_ENV:
                out.append(
                    {"name": name, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
                )
            else:
                out.append({"name": name, "value": _FORMAT[str(f.type)](value)})
        return out

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> AgentSettings:
        """Settings from `environ`; unset variables keep the defaults. ValueError names a
        variable whose value does not parse."""
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            name = f.metadata["env"]
            raw = environ.get(name)
            if raw is None:
                continue
            try:
                kw[f.name] = _PARSE[str(f.type)](raw)
            except ValueError as exc:
                raise ValueError(f"{name}={raw!r}: {exc}") from exc
        return cls(**kw)

    def with_flags(
        self, flags: Mapping[str, Any], renamed: Mapping[str, str] | None = None
    ) -> AgentSettings:
        """These settings with the fields a command line gives (argparse's `vars(args)`):
        a flag whose destination, after `renamed`, is a field name replaces that field;
        other flags are not settings and are left out."""
        names, renamed = set(_ENV_NAMES), renamed or {}
        given = {renamed.get(k, k): v for k, v in flags.items()}
        return dataclasses.replace(self, **{k: v for k, v in given.items() if k in names})

    @staticmethod
    def env_name(field_name: str) -> str:
        """The environment variable of one field (for help texts)."""
        return str(_ENV_NAMES[field_name])


def _fmt_float(v: float) -> str:
    return repr(float(v)).removesuffix(".0")


def _fmt_end(v: float | None) -> str:
    return "0" if v is None else f"{v:.3f}"


def parse_collectors(raw: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in raw.split(",") if n.strip())


# Field annotation -> (format for the env, parse from the env).
_FORMAT: dict[str, Callable[[Any], str]] = {
    "str": str,
    "int": str,
    "Path": str,
    "float": _fmt_float,
    "float | None": _fmt_end,
    "tuple[str, ...]": ",".join,
}
_PARSE: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "Path": Path,
    "float": float,
    "float | None": lambda raw: float(raw or 0) or None,
    "tuple[str, ...]": parse_collectors,
}
_ENV_NAMES = {f.name: f.metadata["env"] for f in dataclasses.fields(AgentSettings)}
for _f in dataclasses.fields(AgentSettings):
    if str(_f.type) not in _PARSE or str(_f.type) not in _FORMAT:
        raise TypeError(f"AgentSettings.{_f.name}: no environment format for {_f.type}")


def spool_folder(namespace: str, session: str, uid: str = "") -> str:
    """A session's spool folder on the node, the same for the operator (which mounts it
    into the agent pod) and the agent (which writes there).

    Keyed by the session's UID where known, so a session deleted and created again under
    the same name never receives the batches spooled for the old one. At most 63 + 1 +
    150 + 1 + 36 = 251 bytes (the name is cut; the UID alone is unique), under the
    255-byte file-name limit; `<namespace>_<name>` without a UID (an agent started by hand).
    """
    return f"{namespace}_{session[:150]}_{uid}" if uid else f"{namespace}_{session}"
