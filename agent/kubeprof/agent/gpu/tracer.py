"""In-process CUDA tracer on cupti-python: GPU activity records plus the Python stack per launch.

``CuptiTracer`` owns the tracer's life (start, pause/resume, flush, stop, fork) and its clock;
the rest is in three modules along CUPTI's own seams: ``subscription`` (which API calls call
us back, subscribing), ``launch_stacks`` (the callback at each launch: its Python stack and
API, queued) and ``activity`` (the asynchronous record buffers -> wire rows). The receiver
joins launches and records by CUPTI's correlation id.

The callback itself is C when ``_launchhook`` is built (``scripts/build_launchhook.sh``, run
by ``make setup``): exits and nested driver calls then cost no Python at all, and a launch
one GIL acquisition and a call-site lookup. Without it, ``launch_stacks.make_api_callback``
does the same in Python (``KUBEPROF_GPU_HOOK=auto``, the default, picks C when importable).

Every failure here is reported as one line and turns tracing off; the workload runs on.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import time
from dataclasses import dataclass
from typing import Any

from kubeprof.agent.gpu import activity, frame_keys, subscription
from kubeprof.agent.gpu.activity import ACTIVITY_KINDS
from kubeprof.agent.gpu.autograd import AutogradSeq
from kubeprof.agent.gpu.cupti_errors import TracerError, import_failure, one_line
from kubeprof.agent.gpu.launch_stacks import make_api_callback, make_slow_launch
from kubeprof.agent.gpu.pm_sampling import PmSampler
from kubeprof.agent.gpu.stacks import StackTable
from kubeprof.agent.gpu.wire import WIRE_VERSION, Sender

HOOK_MODES = ("auto", "c", "python")


@dataclass(frozen=True)
class TracerConfig:
    """What to trace; every field can be set through a KUBEPROF_GPU_* variable."""

    stacks: str = "callsite"  # callsite (default), full (walk every launch), off
    key_depth: int = 8  # frames in a call-site key (see stacks.py)
    revalidate_every: int = 64  # re-walk a call site every N hits
    kinds: tuple[str, ...] = ACTIVITY_KINDS
    flush_ms: int = 500  # CUPTI delivers buffers at least this often
    foreign: str = "main"  # launches from threads with no Python frames: main | none
    max_queued: int = 1_000_000  # records per kind held in the target before dropping
    callbacks: bool = True  # False: activity records only, no launch stacks (the cost floor)
    backward: bool = True  # PyTorch: send autograd sequence numbers (backward -> forward op)
    hook: str = "auto"  # launch callback: auto (C if built), c (required), python
    frames: str = "auto"  # C hook's keys: auto (interpreter frames in place), api

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> TracerConfig:
        e = os.environ if env is None else env
        d = cls()
        kinds = tuple(k for k in e.get("KUBEPROF_GPU_KINDS", ",".join(d.kinds)).split(",") if k)
        bad = [k for k in kinds if k not in ACTIVITY_KINDS]
        if bad:
            raise TracerError(f"unknown KUBEPROF_GPU_KINDS {bad} (known: {ACTIVITY_KINDS})")
        return cls(
            stacks=e.get("KUBEPROF_GPU_STACKS", d.stacks),
            key_depth=int(e.get("KUBEPROF_GPU_KEY_DEPTH", d.key_depth)),
            revalidate_every=int(e.get("KUBEPROF_GPU_REVALIDATE", d.revalidate_every)),
            kinds=kinds,
            flush_ms=int(e.get("KUBEPROF_GPU_FLUSH_MS", d.flush_ms)),
            foreign=e.get("KUBEPROF_GPU_FOREIGN", d.foreign),
            max_queued=int(e.get("KUBEPROF_GPU_MAX_QUEUED", d.max_queued)),
            callbacks=e.get("KUBEPROF_GPU_CALLBACKS", "1") != "0",
            backward=e.get("KUBEPROF_GPU_BACKWARD", "1") != "0",
            hook=_hook_mode(e.get("KUBEPROF_GPU_HOOK", d.hook)),
            frames=_frames_mode(e.get("KUBEPROF_GPU_FRAMES", d.frames)),
        )


def _hook_mode(value: str) -> str:
    if value not in HOOK_MODES:
        raise TracerError(f"unknown KUBEPROF_GPU_HOOK {value!r} (known: {', '.join(HOOK_MODES)})")
    return value


def _frames_mode(value: str) -> str:
    if value not in frame_keys.FRAME_MODES:
        raise TracerError(f"unknown KUBEPROF_GPU_FRAMES {value!r} (auto or api)")
    return value


def load_hook(mode: str) -> Any:
    """The C launch hook module, or None for the Python callback (``mode`` from the config)."""
    if mode == "python":
        return None
    try:
        from kubeprof.agent.gpu import _launchhook  # type: ignore[attr-defined]
    except ImportError as exc:
        why = f"is not built ({one_line(exc)})"
    else:
        # a build left from an older source packs rows the receiver would misread
        built = getattr(_launchhook, "WIRE_VERSION", 1)
        if built == WIRE_VERSION:
            return _launchhook
        why = f"was built from an older source (wire version {built}, not {WIRE_VERSION})"
    if mode == "c":
        raise TracerError(
            f"KUBEPROF_GPU_HOOK=c but the C launch hook {why}: "
            "run scripts/build_launchhook.sh, or set KUBEPROF_GPU_HOOK=auto"
        )
    return None


def preflight() -> None:
    """Fork-safe checks before touching CUPTI (nothing here initialises CUDA)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise TracerError("no NVIDIA driver: libcuda.so.1 cannot be loaded") from None
    if not glob.glob("/dev/nvidia[0-9]*"):
        raise TracerError("no GPU: no /dev/nvidia<N> device in this process's view")


def _loaded_libcupti() -> str:
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            if "libcupti.so" in line:
                return line.split()[-1]
    return ""


def _version_check(cupti_mod: Any) -> dict[str, str]:
    """Refuse a libcupti whose CUDA major differs from cupti-python's; report versions."""
    from importlib import metadata

    info = {"libcupti": _loaded_libcupti()}
    for dist in ("cupti-python", "nvidia-cuda-cupti"):
        try:
            info[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            info[dist] = ""
    lib = os.path.basename(info["libcupti"])
    want = info["cupti-python"].split(".")[0]
    if lib.startswith("libcupti.so.") and want:
        have = lib[len("libcupti.so.") :].split(".")[0]
        if have.isdigit() and have != want:
            raise TracerError(
                f"wrong libcupti: {info['libcupti']} is CUDA {have}, cupti-python "
                f"{info['cupti-python']} needs CUDA {want}"
            )
    return info


class CuptiTracer:
    """Owns the CUPTI subscription; records flow into a ``Sender``."""

    def __init__(self, sender: Sender, config: TracerConfig | None = None) -> None:
        self.sender = sender
        self.config = config or TracerConfig()
        self.stacks = StackTable(
            sender.intern,
            sender.define_stack,
            mode=self.config.stacks,
            key_depth=self.config.key_depth,
            revalidate_every=self.config.revalidate_every,
        )
        self._cupti: Any = None
        self._subscriber: Any = None
        self._hook: Any = None  # the C launch hook module when it owns the subscriber
        self._hook_stats: dict[str, int] = {}
        self._cbids: list[tuple[int, int]] = []
        self._activity_kinds: list[int] = []
        self._offset = 0  # host CLOCK_MONOTONIC minus CUPTI timestamp, ns
        self._active = False
        self._stopped = False
        self.info: dict[str, str] = {}
        self.pm: PmSampler | None = None
        self.autograd = AutogradSeq() if self.config.backward else None
        self._autograd_warned = False

    # ---- lifecycle ----
    def start(self) -> None:
        """Subscribe and enable; raises TracerError with a one-line reason."""
        preflight()
        try:
            from cupti import cupti
        except ImportError as exc:
            raise TracerError(import_failure(exc)) from None
        self._cupti = cupti
        try:
            cupti.get_timestamp()  # first call loads libcupti
        except Exception as exc:  # noqa: BLE001 - must never break the workload
            raise TracerError(f"libcupti cannot be loaded: {one_line(exc)}") from None
        self.info = _version_check(cupti)
        hook = load_hook(self.config.hook)
        if hook is not None:
            self._subscribe_c(hook)
        else:
            self._subscribe()
        try:
            self._measure_offset()
            self._enable_callbacks(True)
            self._enable_activities(True)
            cupti.activity_flush_period(self.config.flush_ms)
        except Exception:
            self._teardown()
            raise
        self.sender.clock_offset_ns = self._offset
        self.pm = PmSampler.from_env(self.sender)
        self.sender.tick_hooks.append(self._tick)
        self.sender.hello.update(
            {
                "versions": self.info,
                "config": self.config.__dict__,
                "clock_offset_ns": self._offset,
                "hook": "c" if self._hook is not None else "python",
            }
        )
        os.register_at_fork(after_in_child=self._after_fork)
        self._active = True

    def _subscribe(self) -> None:
        self._subscriber = subscription.subscribe(
            self._cupti,
            make_api_callback(
                self._cupti,
                self.stacks,
                self.sender,
                self.autograd,
                self.config.foreign == "main",
                set(subscription.alias_ids(self._cupti)),
            ),
        )

    def _subscribe_c(self, hook: Any) -> None:
        """Let the C hook own the subscriber; same records as ``make_api_callback``'s."""
        cupti = self._cupti
        if not self._cbids:
            self._cbids = subscription.callback_ids(cupti)
        seqs = self.autograd
        subscription.install_hook(
            cupti,
            hook,
            libcupti=self.info.get("libcupti") or _loaded_libcupti(),
            cbids=self._cbids,
            alias=subscription.alias_ids(cupti),
            walk=self.stacks.walk,
            slow=make_slow_launch(
                self.stacks, self.sender, self.autograd, self.config.foreign == "main"
            ),
            intern=self.sender.intern,
            resolve_peek=seqs.peek_address if seqs is not None else None,
            max_queued=self.sender.max_queued,
        )
        self._hook = hook
        self._subscriber = True
        self.sender.hello["frames"] = frame_keys.use(hook, self.config.frames)
        self.sender.packed = hook  # launch, autograd and activity rows, packed in C

    def _enable_callbacks(self, on: bool) -> None:
        cupti = self._cupti
        if not self.config.callbacks:
            return
        if not self._cbids:
            self._cbids = subscription.callback_ids(cupti)
        failed = subscription.enable_callbacks(cupti, self._hook, self._subscriber, self._cbids, on)
        if failed:
            self._cbids = [c for c in self._cbids if c not in failed]
            self.sender.hello["skipped_cbids"] = len(failed)
        if on and not self._cbids:
            raise TracerError("CUPTI accepted none of the launch callbacks")

    def _enable_activities(self, on: bool) -> None:
        if on:
            register = not self._activity_kinds
            self._activity_kinds = []
            activity.enable(
                self._cupti,
                self._hook,
                self.config.kinds,
                self._buffer_completed,
                register=register,
                enabled=self._activity_kinds,
            )
        else:
            activity.disable(self._cupti, self._activity_kinds)

    def pause(self) -> None:
        """Stop tracing without tearing down (used by benchmarks to interleave)."""
        if self._active:
            self._enable_callbacks(False)
            self._enable_activities(False)
            self._active = False

    def resume(self) -> None:
        if not self._active and not self._stopped and self._subscriber is not None:
            self._enable_callbacks(True)
            self._enable_activities(True)
            self._active = True

    def flush(self) -> None:
        """Force CUPTI to hand over every completed record now."""
        if self._cupti is not None and not self._stopped:
            with contextlib.suppress(Exception):
                self._cupti.activity_flush_all(1)

    def flush_completed(self) -> None:
        """Hand over the buffers whose records are all complete, full or not (flag 0; the
        dormant tracer's Flusher calls this periodically while switched on)."""
        if self._cupti is not None and not self._stopped:
            with contextlib.suppress(Exception):
                self._cupti.activity_flush_all(0)

    def stop(self, timeout_s: float = 3.0) -> None:
        """Flush, unsubscribe and send the rest; idempotent, never raises."""
        if self._stopped:
            return
        self.flush()
        if self.pm is not None:
            with contextlib.suppress(Exception):
                self.pm.stop()
        self._teardown()
        self._stopped = True
        self._active = False
        with contextlib.suppress(Exception):
            self.sender.close(timeout_s)

    def _teardown(self) -> None:
        cupti = self._cupti
        if cupti is None:
            return
        self._enable_activities(False)
        if self._hook is not None:
            with contextlib.suppress(Exception):
                self._hook_stats = self._hook.stats()
                self._hook.uninstall()
            self._hook = None
            self._subscriber = None
        elif self._subscriber is not None:
            with contextlib.suppress(Exception):
                cupti.unsubscribe(self._subscriber)
            self._subscriber = None

    def _after_fork(self) -> None:
        """A forked child (DataLoader worker) must not share our socket or state."""
        self._stopped = True
        self._active = False
        if self._hook is not None:
            self._hook.quiet()
        self.sender.path = ""
        self.sender._sock = None
        for q in self.sender.queues.values():
            q.clear()

    # ---- clock ----
    def _measure_offset(self) -> None:
        best = None
        for _ in range(5):
            t0 = time.monotonic_ns()
            c = self._cupti.get_timestamp()
            t1 = time.monotonic_ns()
            if best is None or t1 - t0 < best[0]:
                best = (t1 - t0, (t0 + t1) // 2 - c)
        self._offset = best[1] if best else 0

    def _tick(self) -> None:
        """Runs on the sender thread before each drain."""
        if self._cupti is not None and not self._stopped:
            self._measure_offset()
            self.sender.clock_offset_ns = self._offset
            if self.pm is not None:
                self.pm.tick(launches_seen=self.stacks.stats["walks"] > 0)
            if self.autograd is not None and self.autograd.error and not self._autograd_warned:
                self._autograd_warned = True
                self.sender.pending_messages.append(("warning", self.autograd.error))
        stats = dict(self.stacks.stats)
        if self._hook is not None:
            hs = self._hook.stats()
            # the C table's hits; its walks are StackTable's (counted there). Its keys are
            # whole stacks: no revalidation, no ambiguous site
            stats["hits"] = stats.get("hits", 0) + hs["hits"]
            dropped = hs["dropped"] - self._hook_stats.get("dropped", 0)
            dropped += hs["cupti_dropped"] - self._hook_stats.get("cupti_dropped", 0)
            self.sender.counters["dropped"] += dropped
            self.sender.counters["hook_errors"] = hs["errors"]
            self._hook_stats = hs
        self.sender.counters.update({f"stack_{k}": v for k, v in stats.items()})

    # ---- activity buffers ----
    def _buffer_completed(self, activities: list) -> None:
        activity.completed(self._cupti, self.sender, activities)

    def _convert(self, activities: list) -> None:
        activity.convert(self._cupti, self.sender, activities)
