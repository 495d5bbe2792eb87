"""In-process CUDA tracer on cupti-python: GPU activity records plus the Python stack per launch.

CUPTI's activity API delivers kernel, memcpy, memset, synchronization and NVTX records in
buffers, asynchronously; its callback API calls us synchronously at each launch, on the
launching thread, which is the only moment the Python stack is available. Both are joined by
CUPTI's correlation id, in the receiver.

Launches come through the runtime (``cudaLaunchKernel``...) and, for libraries such as cuBLAS
that bypass it, directly through the driver (``cuLaunchKernel``...). A runtime launch also
fires a nested driver callback with a different correlation id; the kernel record carries the
runtime one, so nested driver callbacks are skipped (a per-thread "inside a runtime call" flag
set on runtime enter, cleared on runtime exit).

The callback itself is C when ``_launchhook`` is built (``scripts/build_launchhook.sh``, run
by ``make setup``): exits and nested driver calls then cost no Python at all, and a launch
one GIL acquisition and a call-site lookup. Without it, ``on_api`` below does the same in
Python (``KUBEPROF_GPU_HOOK=auto``, the default, picks C when importable).

Every failure here is reported as one line and turns tracing off; the workload runs on.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import sys
import threading
import time
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from kubeprof.agent.gpu.autograd import NONE, AutogradSeq
from kubeprof.agent.gpu.pm_sampling import PmSampler
from kubeprof.agent.gpu.stacks import StackTable, main_thread_frame
from kubeprof.agent.gpu.wire import Sender

# Which API calls get a Python stack: name prefixes of CUPTI callback ids.
_RUNTIME_PREFIXES = (
    "cudaLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
    "cudaMemcpy",
    "cudaMemset",
    "__cudaLaunchKernel",
    # host waits: a sync record's stack says which line blocked (.item(), .cpu(), ...)
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaThreadSynchronize",
    # waits for its events; on the H200 its event-sync records carry ids of calls nested in
    # it (no callback of their own): the receiver joins them to this call's stack
    "cudaEventElapsedTime",
)
_DRIVER_PREFIXES = (
    "cuLaunchKernel",
    "cuLaunchCooperativeKernel",
    "cuGraphLaunch",
    "cuMemcpy",
    "cuMemset",
    "cuLaunchGrid",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "cuEventElapsedTime",
)
_DRIVER_EXACT = ("cuLaunch",)
# Driver calls nested in a runtime call whose id may be the one on the activity record (sync
# records are documented as carrying "the API's" id, without saying which layer's): these
# also get a launch record, with the runtime call's stack, under their own correlation id.
_DRIVER_ALIAS_PREFIXES = (
    "cuMemcpy",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "cuEventElapsedTime",
)

ACTIVITY_KINDS = ("kernel", "memcpy", "memset", "sync", "nvtx")
HOOK_MODES = ("auto", "c", "python")
FOREIGN_MARKER = "[launched by a native thread; main thread shown]"


class TracerError(RuntimeError):
    """Tracing cannot start; the message is one line meant for the user."""


@dataclass(frozen=True)
class TracerConfig:
    """What to trace; every field can be set through a KUBEPROF_GPU_* variable."""

    stacks: str = "callsite"  # callsite (default), full (walk every launch), off
    key_depth: int = 8  # frames in a call-site key (see stacks.py)
    revalidate_every: int = 64  # re-walk a call site every N hits
    kinds: tuple[str, ...] = ("kernel", "memcpy", "memset", "sync", "nvtx")
    flush_ms: int = 500  # CUPTI delivers buffers at least this often
    foreign: str = "main"  # launches from threads with no Python frames: main | none
    max_queued: int = 1_000_000  # records per kind held in the target before dropping
    callbacks: bool = True  # False: activity records only, no launch stacks (the cost floor)
    backward: bool = True  # PyTorch: send autograd sequence numbers (backward -> forward op)
    hook: str = "auto"  # launch callback: auto (C if built), c (required), python

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
        )


def _hook_mode(value: str) -> str:
    if value not in HOOK_MODES:
        raise TracerError(f"unknown KUBEPROF_GPU_HOOK {value!r} (known: {', '.join(HOOK_MODES)})")
    return value


def load_hook(mode: str) -> Any:
    """The C launch hook module, or None for the Python callback (``mode`` from the config)."""
    if mode == "python":
        return None
    try:
        from kubeprof.agent.gpu import _launchhook  # type: ignore[attr-defined]
    except ImportError as exc:
        if mode == "c":
            raise TracerError(
                f"KUBEPROF_GPU_HOOK=c but the C launch hook is not built ({_one_line(exc)}): "
                "run scripts/build_launchhook.sh, or set KUBEPROF_GPU_HOOK=auto"
            ) from None
        return None
    return _launchhook


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
            raise TracerError(f"libcupti cannot be loaded: {_one_line(exc)}") from None
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
        cupti = self._cupti
        callback = self._make_callback()
        other = ""
        try:
            try:
                # subscribe_v2 names us, and tells us who holds CUPTI when it is taken; it
                # refused (ERROR_INVALID_PARAMETER) on the H200 image, so fall back
                params = cupti.SubscriberParams()
                params.struct_size = cupti.SUBSCRIBER_PARAMS_SIZE
                params.subscriber_name = "kubeprof"
                self._subscriber = cupti.subscribe_v2(callback, None, params.ptr)
                return
            except cupti.cuptiError as exc:
                if exc.status == cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
                    with contextlib.suppress(Exception):
                        other = params.old_subscriber_name or ""
                    raise
            except AttributeError:
                pass
            self._subscriber = cupti.subscribe(callback, None)
        except cupti.cuptiError as exc:
            if exc.status == cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
                by = f" ({other})" if other else ""
                raise TracerError(
                    f"CUPTI is already in use by another profiler{by} "
                    "(Nsight Systems, torch.profiler, ...)"
                ) from None
            raise TracerError(f"CUPTI subscribe failed: {_cupti_error(cupti, exc)}") from None

    def _subscribe_c(self, hook: Any) -> None:
        """Let the C hook own the subscriber; same records as ``_make_callback``'s."""
        cupti = self._cupti
        if not self._cbids:
            self._cbids = _callback_ids(cupti)
        alias = [
            int(member)
            for name, member in cupti.DriverApiTraceCbid.__members__.items()
            if name.startswith(_DRIVER_ALIAS_PREFIXES)
        ]
        seqs = self.autograd
        try:
            rc = hook.install(
                libcupti=self.info.get("libcupti") or _loaded_libcupti(),
                cbids=self._cbids,
                alias=alias,
                walk=self.stacks.walk,
                slow=self._make_slow_launch(),
                intern=self.sender.intern,
                resolve_peek=seqs.peek_address if seqs is not None else None,
                max_queued=self.sender.max_queued,
            )
        except (OSError, RuntimeError, TypeError) as exc:
            raise TracerError(f"C launch hook cannot start: {_one_line(exc)}") from None
        if rc == int(cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED):
            raise TracerError(
                "CUPTI is already in use by another profiler (Nsight Systems, torch.profiler, ...)"
            )
        if rc != 0:
            raise TracerError(f"CUPTI subscribe failed: {_cupti_error(cupti, _Status(rc))}")
        self._hook = hook
        self._subscriber = True
        self.sender.packed = hook  # launch, autograd and activity rows, packed in C

    def _make_slow_launch(self) -> Any:
        """The C hook's path for threads with no Python frames (-> (stack, api, seq))."""
        get_ident = threading.get_ident
        capture = self.stacks.capture
        queue = self.sender.queues["launch"]
        aqueue = self.sender.queues["autograd"]
        max_queued = self.sender.max_queued
        counters = self.sender.counters
        intern = self.sender.intern
        bwd_seq = self.autograd.backward if self.autograd is not None else None
        foreign_main = self.config.foreign == "main"

        def slow(_domain: int, cbid: int, corr: int, fname: str) -> tuple[int, int, int]:
            tid = get_ident()
            seq = NONE
            if bwd_seq is not None and (seq := bwd_seq()) != NONE:
                sid = 0  # the receiver gives it the stack of the forward op (autograd.py)
                aqueue.append((corr, seq, tid, 1))
            elif foreign_main:
                sid = capture(main_thread_frame(), marker=FOREIGN_MARKER)
            else:
                sid = 0
            api = intern(fname or str(cbid))
            if len(queue) >= max_queued:
                counters["dropped"] += 1
            else:
                queue.append((corr, sid, api, tid))
            return sid, api, seq

        return slow

    def _enable_callbacks(self, on: bool) -> None:
        cupti = self._cupti
        if not self.config.callbacks:
            return
        if not self._cbids:
            self._cbids = _callback_ids(cupti)
        failed = []
        if self._hook is not None:
            failed = [tuple(f) for f in self._hook.enable(on)]
        else:
            for domain, cbid in self._cbids:
                try:
                    cupti.enable_callback(1 if on else 0, self._subscriber, domain, cbid)
                except cupti.cuptiError:  # an id this libcupti does not know: skip it
                    failed.append((domain, cbid))
        if failed:
            self._cbids = [c for c in self._cbids if c not in failed]
            self.sender.hello["skipped_cbids"] = len(failed)
        if on and not self._cbids:
            raise TracerError("CUPTI accepted none of the launch callbacks")

    def _enable_activities(self, on: bool) -> None:
        cupti = self._cupti
        ak = cupti.ActivityKind
        wanted = {
            "kernel": [ak.CONCURRENT_KERNEL],  # KERNEL would serialise kernels
            "memcpy": [ak.MEMCPY],
            "memset": [ak.MEMSET],
            "sync": [ak.SYNCHRONIZATION],
            "nvtx": [ak.MARKER],
        }
        if on:
            if not self._activity_kinds:
                if self._hook is not None:  # records -> packed rows in C, no Python objects
                    try:
                        rc = self._hook.activity()
                    except (OSError, RuntimeError) as exc:
                        raise TracerError(f"C activity buffers: {_one_line(exc)}") from None
                    if rc:
                        raise TracerError(
                            f"CUPTI activity callbacks refused: {_cupti_error(cupti, _Status(rc))}"
                        )
                else:
                    cupti.activity_register_callbacks(_buffer_requested, self._buffer_completed)
            self._activity_kinds = []
            for kind in self.config.kinds:
                for k in wanted[kind]:
                    try:
                        cupti.activity_enable(k)
                        self._activity_kinds.append(k)
                    except cupti.cuptiError as exc:
                        if kind == "kernel":
                            raise TracerError(
                                f"CUPTI kernel activity unavailable: {_cupti_error(cupti, exc)}"
                            ) from None
                        _warn(f"CUPTI {kind} activity unavailable: {_cupti_error(cupti, exc)}")
        else:
            for k in self._activity_kinds:
                with contextlib.suppress(Exception):
                    cupti.activity_disable(k)

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

    # ---- callbacks (hot paths) ----
    def _make_callback(self) -> Any:
        cupti = self._cupti
        runtime = int(cupti.CallbackDomain.RUNTIME_API)
        enter = int(cupti.ApiCallbackSite.API_ENTER)
        getframe = sys._getframe
        get_ident = threading.get_ident
        capture = self.stacks.capture
        queue = self.sender.queues["launch"]
        max_queued = self.sender.max_queued
        counters = self.sender.counters
        intern = self.sender.intern
        api_ids: dict[tuple[int, int], int] = {}
        # thread -> (stack id, api id, backward seq) of the runtime call it is inside, None
        # outside one
        in_runtime: dict[int, tuple[int, int, int] | None] = {}
        alias = {
            int(member)
            for name, member in cupti.DriverApiTraceCbid.__members__.items()
            if name.startswith(_DRIVER_ALIAS_PREFIXES)
        }
        foreign_main = self.config.foreign == "main"
        seqs = self.autograd
        fwd_seq = seqs.forward if seqs is not None else None
        bwd_seq = seqs.backward if seqs is not None else None
        aqueue = self.sender.queues["autograd"]
        last_peek: dict[int, int] = {}  # thread -> forward seq last sent

        def on_api(_userdata: Any, domain: int, cbid: int, cbdata: Any) -> None:
            site = cbdata.callback_site
            tid = get_ident()
            if domain == runtime:
                if site != enter:
                    in_runtime[tid] = None
                    return
            elif site != enter:
                return
            else:
                outer = in_runtime.get(tid)
                if outer is not None:  # nested in a runtime call: its stack, maybe an alias
                    if cbid in alias and len(queue) < max_queued:
                        if outer[2] != NONE:
                            aqueue.append((cbdata.correlation_id, outer[2], tid, 1))
                        queue.append((cbdata.correlation_id, outer[0], outer[1], tid))
                    return
            corr = cbdata.correlation_id
            seq = NONE
            try:
                frame = getframe(1)
            except ValueError:  # a native thread: no Python frames at all
                frame = None
            if frame is not None:
                sid = capture(frame)
                if fwd_seq is not None:
                    peek = fwd_seq()
                    if peek != NONE and last_peek.get(tid) != peek:
                        last_peek[tid] = peek
                        aqueue.append((corr, peek, tid, 0))
            elif bwd_seq is not None and (seq := bwd_seq()) != NONE:
                sid = 0  # the receiver gives it the stack of the forward op (autograd.py)
                aqueue.append((corr, seq, tid, 1))
            elif foreign_main:
                sid = capture(main_thread_frame(), marker=FOREIGN_MARKER)
            else:
                sid = 0
            api = api_ids.get((domain, cbid))
            if api is None:
                api = api_ids[(domain, cbid)] = intern(cbdata.function_name or str(cbid))
            if domain == runtime:
                in_runtime[tid] = (sid, api, seq)
            if len(queue) >= max_queued:
                counters["dropped"] += 1
                return
            queue.append((corr, sid, api, tid))

        return on_api

    def _buffer_completed(self, activities: list) -> None:
        try:
            self._convert(activities)
        except Exception as exc:  # noqa: BLE001 - a bad record must not kill CUPTI's thread
            self.sender.counters["convert_errors"] = (
                self.sender.counters.get("convert_errors", 0) + 1
            )
            _warn(f"record conversion failed: {exc!r}")

    def _convert(self, activities: list) -> None:
        """CUPTI records -> wire tuples; runs on CUPTI's thread, holding the GIL, so it is lean.

        Fields are read with one ``attrgetter`` call per record (C, not bytecode) and
        timestamps stay in CUPTI's clock: the receiver adds the frame's clock offset.
        """
        ak = self._cupti.ActivityKind
        kern = (int(ak.CONCURRENT_KERNEL), int(ak.KERNEL))
        memcpy, memset = int(ak.MEMCPY), int(ak.MEMSET)
        sync, marker = int(ak.SYNCHRONIZATION), int(ak.MARKER)
        intern = self.sender.intern
        kernels: list[tuple[int, ...]] = []
        copies: list[tuple[int, ...]] = []
        sets: list[tuple[int, ...]] = []
        syncs: list[tuple[int, ...]] = []
        markers: list[tuple[int, ...]] = []
        get_k, get_c, get_m, get_s = _KERNEL_FIELDS, _MEMCPY_FIELDS, _MEMSET_FIELDS, _SYNC_FIELDS
        for a in activities:
            k = a.kind
            if k in kern:
                kernels.append((*get_k(a), intern(a.name)))
            elif k == memcpy:
                copies.append(get_c(a))
            elif k == memset:
                sets.append(get_m(a))
            elif k == sync:
                syncs.append(get_s(a))
            elif k == marker:
                tid = 0
                with contextlib.suppress(Exception):
                    tid = a.object_id.pt.thread_id
                markers.append((a.timestamp, a.id, a.flags_, intern(a.name) if a.name else 0, tid))
        put = self.sender.put_many
        for kind, rows in (
            ("kernel", kernels),
            ("memcpy", copies),
            ("memset", sets),
            ("sync", syncs),
            ("marker", markers),
        ):
            if rows:
                put(kind, rows)


# One C-level call reads a record's fields in wire order (see wire.SCHEMAS).
_KERNEL_FIELDS = attrgetter(
    "start",
    "end",
    "device_id",
    "correlation_id",
    "stream_id",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers_per_thread",
    "static_shared_memory",
    "dynamic_shared_memory",
    "graph_id",
    "context_id",
)
_MEMCPY_FIELDS = attrgetter(
    "start",
    "end",
    "device_id",
    "correlation_id",
    "stream_id",
    "bytes",
    "copy_kind",
    "src_kind",
    "dst_kind",
)
_MEMSET_FIELDS = attrgetter("start", "end", "device_id", "correlation_id", "stream_id", "bytes")
_SYNC_FIELDS = attrgetter("start", "end", "context_id", "correlation_id", "stream_id", "type")


def _callback_ids(cupti: Any) -> list[tuple[int, int]]:
    """(domain, cbid) of every API call that gets a Python stack (the prefixes above)."""
    ids = []
    rt, drv = cupti.CallbackDomain.RUNTIME_API, cupti.CallbackDomain.DRIVER_API
    for name, member in cupti.RuntimeApiTraceCbid.__members__.items():
        bare = name.split("__", 1)[-1] if name.startswith("_RuntimeApiTraceCbid") else name
        if bare.startswith(_RUNTIME_PREFIXES):
            ids.append((int(rt), int(member)))
    for name, member in cupti.DriverApiTraceCbid.__members__.items():
        if name.startswith(_DRIVER_PREFIXES) or name in _DRIVER_EXACT:
            ids.append((int(drv), int(member)))
    return sorted(set(ids))


class _Status(Exception):
    """A CUptiResult from the C hook, shaped like cupti-python's error for _cupti_error."""

    def __init__(self, status: int) -> None:
        super().__init__(f"CUptiResult {status}")
        self.status = status


def _buffer_requested() -> tuple[int, int]:
    return 8 << 20, 0


def _cupti_error(cupti: Any, exc: Exception) -> str:
    status = getattr(exc, "status", None)
    try:
        return cupti.Result(status).name
    except Exception:  # noqa: BLE001 - must never break the workload
        return _one_line(exc)


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
            f"({_one_line(exc)}); pip install {dist}"
        )
    if missing == "cupti" or not missing:
        return f"cupti-python is not importable ({_one_line(exc)}); pip install cupti-python"
    return f"cupti-python cannot be imported: {_one_line(exc)}"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _warn(text: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"kubeprof-gpu: {text}\n")
        sys.stderr.flush()
