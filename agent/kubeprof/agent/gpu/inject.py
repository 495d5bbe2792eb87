"""Loading the GPU tracer into a Python process without changing its code.

The recorder starts the workload with ``tracer_env(socket)`` merged into its environment:
``PYTHONPATH`` gains a folder whose only file is a ``sitecustomize.py`` (Python imports it at
start-up) and the folders holding the ``kubeprof`` package; ``KUBEPROF_GPU_SOCKET`` names the
receiver's unix socket. ``sitecustomize`` calls ``bootstrap()``, which starts the tracer, or
prints one line saying why not and returns: the workload always runs.

A process started elsewhere (the cluster agent's case) needs only environment variables, set
in its pod spec or container image, plus kubeprof and cupti-python importable there::

    PYTHONPATH=<dir of kubeprof's _site>:<dirs holding kubeprof>[:$PYTHONPATH]
    KUBEPROF_GPU_SOCKET=/run/kubeprof/gpu.sock    # a unix socket the agent listens on
    # optional:
    KUBEPROF_GPU_STACKS=callsite|full|off         # stack capture (default callsite)
    KUBEPROF_GPU_KINDS=kernel,memcpy,memset,sync,nvtx
    KUBEPROF_GPU_FLUSH_MS=500                     # CUPTI buffer flush period
    KUBEPROF_GPU_KEY_DEPTH=8  KUBEPROF_GPU_REVALIDATE=64  KUBEPROF_GPU_FOREIGN=main|none
    KUBEPROF_GPU_QUIET=1                          # no stderr lines from the tracer
    KUBEPROF_GPU_DORMANT=1                        # wait for the node agent's "on" (control.py)
    KUBEPROF_GPU_CTL_DIR=/run/kubeprof/ctl        # the pod's folder for control sockets
    KUBEPROF_GPU_BUNDLE=/kubeprof                 # cupti-python per Python version (bundle.py)
    KUBEPROF_POD_UID=<pod uid>                    # without CTL_DIR: names <socket dir>/ctl/<uid>

``python -c 'from kubeprof.agent.gpu.inject import site_dir; print(site_dir())'`` prints the
first folder. An existing ``sitecustomize`` further down ``sys.path`` still runs (chained).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_SOCKET = "KUBEPROF_GPU_SOCKET"
ENV_DORMANT = "KUBEPROF_GPU_DORMANT"  # "1": an injected pod; wait for the agent's "on"
# Where traced JAX processes dump their optimised HLO modules: unset, a folder beside the
# socket removed after the recording; "0", no dump (XLA kernels keep the main thread's
# stack); a path, that folder, kept (e.g. to record a fixture).
ENV_XLA_DUMP = "KUBEPROF_GPU_XLA_DUMP"


@dataclass(frozen=True)
class XlaDump:
    path: str | None  # None: no dump
    ours: bool  # made for this recording: removed after it


def xla_dump_dir(socket_path: str, env: dict[str, str] | None = None) -> XlaDump:
    """The HLO dump folder for a recording whose receiver listens on `socket_path`."""
    value = (os.environ if env is None else env).get(ENV_XLA_DUMP, "")
    if value == "0":
        return XlaDump(None, False)
    if value:
        return XlaDump(value, False)
    return XlaDump(f"{socket_path}.xla", True)


_tracer: Any = None


def site_dir() -> str:
    """The folder holding kubeprof's sitecustomize.py."""
    return str(Path(__file__).resolve().parent / "_site")


def package_roots() -> list[str]:
    """Folders that must be on sys.path for ``import kubeprof.agent.gpu`` to work."""
    import kubeprof

    roots = [str(Path(p).resolve().parent) for p in kubeprof.__path__]
    return list(dict.fromkeys(roots))


def tracer_env(
    socket_path: str,
    *,
    base: dict[str, str] | None = None,
    xla_dump_dir: str | None = None,
    **options: str,
) -> dict[str, str]:
    """Environment variables that load the tracer into a Python child process.

    ``options`` are KUBEPROF_GPU_* settings without the prefix, e.g. ``stacks="full"``.
    """
    env = os.environ if base is None else base
    parts = [site_dir(), *package_roots()]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    out = {"PYTHONPATH": os.pathsep.join(parts), ENV_SOCKET: socket_path}
    if xla_dump_dir:
        # JAX/XLA dumps each optimised module (with its ops' Python stacks) when compiled;
        # the receiver reads them to charge XLA's kernels to their ops (xla_hlo).
        flags = f"--xla_dump_to={xla_dump_dir} --xla_dump_hlo_as_text"
        out["XLA_FLAGS"] = f"{env['XLA_FLAGS']} {flags}" if env.get("XLA_FLAGS") else flags
    for key, value in options.items():
        out[f"KUBEPROF_GPU_{key.upper()}"] = str(value)
    return out


def bootstrap() -> Any:
    """Start the tracer if KUBEPROF_GPU_SOCKET is set; never raises. Returns it or None."""
    global _tracer
    path = os.environ.get(ENV_SOCKET)
    if not path or _tracer is not None:
        return _tracer
    if os.environ.get(ENV_DORMANT) == "1":
        _tracer = _bootstrap_dormant(path)
        return _tracer
    try:
        from kubeprof.agent.gpu.tracer import CuptiTracer, TracerConfig, TracerError
        from kubeprof.agent.gpu.wire import Sender
    except Exception as exc:  # noqa: BLE001 - must never break the workload
        _say(f"GPU tracing off: cannot import the tracer ({exc})")
        return None
    sender = Sender(path)
    sender.hello.update({"argv": " ".join(sys.argv)[:4096], "ppid": os.getppid()})
    try:
        config = TracerConfig.from_env()
        sender.max_queued = config.max_queued
        tracer = CuptiTracer(sender, config)
        tracer.start()
    except TracerError as exc:
        _say(f"GPU tracing off: {exc}")
        _report_failure(sender, str(exc))
        return None
    except Exception as exc:  # noqa: BLE001 - must never break the workload
        _say(f"GPU tracing off: unexpected {type(exc).__name__}: {exc}")
        if os.environ.get("KUBEPROF_GPU_DEBUG") == "1":
            import traceback

            traceback.print_exc()
        _report_failure(sender, f"unexpected {type(exc).__name__}: {exc}")
        return None
    sender.start()
    _enable_nvtx(tracer)
    atexit.register(tracer.stop)
    _flush_on_sigterm(tracer)
    _tracer = tracer
    return tracer


def start_live(path: str) -> Any:
    """A started CuptiTracer streaming to ``path``; raises with a one-line reason."""
    from kubeprof.agent.gpu.tracer import CuptiTracer, TracerConfig
    from kubeprof.agent.gpu.wire import Sender

    sender = Sender(path)
    sender.hello.update({"argv": " ".join(sys.argv)[:4096], "ppid": os.getppid()})
    config = TracerConfig.from_env()
    sender.max_queued = config.max_queued
    tracer = CuptiTracer(sender, config)
    try:
        tracer.start()
    except Exception as exc:
        _report_failure(sender, str(exc))
        raise
    sender.start()
    _enable_nvtx(tracer)
    return tracer


def _bootstrap_dormant(path: str) -> Any:
    """An injected pod's process: a DormantTracer behind its control socket, or None.

    Nothing CUDA-related is imported here; the reason it cannot ever trace is printed once.
    """
    from kubeprof.agent.gpu import bundle, control

    dormant = control.DormantTracer(start_live, _say, path)
    # An injected pod: cupti-python for this interpreter from the copied bundle (or why not)
    why = control.python_unsupported() or bundle.activate()
    if why:
        dormant.unsupported = why
        _say(f"GPU tracing unavailable: {why}")
    sock = control.control_dir(path, os.environ.get(control.ENV_POD_UID, ""))
    server = control.ControlServer(sock / control.socket_name(), dormant)
    try:
        server.start()
    except OSError as exc:  # read-only or missing socket folder: stay untraced
        _say(
            f"GPU tracing unavailable: cannot create the control socket {server.path} "
            f"({exc.strerror or exc}); is the socket folder mounted writable?"
        )
        return None

    def at_exit() -> None:
        dormant.stop_all()
        server.close()

    atexit.register(at_exit)
    os.register_at_fork(after_in_child=lambda: _forget_dormant(dormant, server))
    return dormant


def _forget_dormant(dormant: Any, server: Any) -> None:
    """A forked child neither owns the parent's control socket nor its tracer."""
    global _tracer
    server._sock = None
    dormant.tracer = None
    dormant.holders.clear()
    dormant.unsupported = "forked child of a traced process"
    _tracer = None


def _report_failure(sender: Any, text: str) -> None:
    """Tell the receiver why there will be no data (it shows the user), then hang up."""
    with contextlib.suppress(Exception):
        sender.send_message("error", text)
        sender.close(1.0)


def _enable_nvtx(tracer: Any) -> None:
    """Point NVTX at libcupti so CUPTI sees ranges (read at the first NVTX call)."""
    lib = tracer.info.get("libcupti", "")
    if "nvtx" in tracer.config.kinds and lib:
        os.environ.setdefault("NVTX_INJECTION64_PATH", lib)


def _flush_on_sigterm(tracer: Any) -> None:
    """Kubernetes stops pods with SIGTERM: flush first, then die as the default would."""
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def on_term(signum: int, _frame: Any) -> None:
            tracer.stop(timeout_s=2.0)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread
        pass


def _say(text: str) -> None:
    if os.environ.get("KUBEPROF_GPU_QUIET") != "1":
        with contextlib.suppress(Exception):
            sys.stderr.write(f"kubeprof-gpu: {text}\n")
