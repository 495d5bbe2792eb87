"""A stand-in for cupti-python's ``cupti.cupti`` module, enough to drive the tracer on a CPU.

It mimics what the tracer uses: subscription, per-cbid callbacks (enter and exit), activity
buffers handed to the completion callback on flush. ``launch()`` plays a CUDA launch: the
runtime enter/exit callbacks around a nested driver enter/exit, then a kernel record.
"""

from __future__ import annotations

import _thread
import enum
import itertools
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class cuptiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"CUPTI error {status}")
        self.status = status


class Result(enum.IntEnum):
    SUCCESS = 0
    ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39
    ERROR_NOT_SUPPORTED = 27


class CallbackDomain(enum.IntEnum):
    DRIVER_API = 1
    RUNTIME_API = 2


class ApiCallbackSite(enum.IntEnum):
    API_ENTER = 0
    API_EXIT = 1


class RuntimeApiTraceCbid(enum.IntEnum):
    cudaMalloc_v3020 = 20
    cudaLaunchKernel_v7000 = 211
    cudaMemcpyAsync_v3020 = 41
    cudaStreamSynchronize_v3020 = 131
    cudaDeviceSynchronize_v3020 = 165
    cudaGraphLaunch_v10000 = 311


class DriverApiTraceCbid(enum.IntEnum):
    cuMemAlloc_v2 = 30
    cuMemcpyHtoDAsync_v2 = 278
    cuStreamSynchronize = 127
    cuCtxSynchronize = 17
    cuLaunchKernel = 307
    cuLaunchKernelEx = 652


class ActivityMemoryKind(enum.IntEnum):
    UNKNOWN = 0
    PAGEABLE = 1
    PINNED = 2
    DEVICE = 3


class ActivityKind(enum.IntEnum):
    MEMCPY = 1
    MEMSET = 2
    KERNEL = 3
    MARKER = 12
    CONCURRENT_KERNEL = 10
    SYNCHRONIZATION = 38


SUBSCRIBER_PARAMS_SIZE = 16
# callback function names the receiver reads (waiting APIs); others are "api<cbid>"
_REAL_NAMES = {131: "cudaStreamSynchronize", 127: "cuStreamSynchronize"}


class SubscriberParams:
    def __init__(self) -> None:
        self.struct_size = 0
        self.subscriber_name = ""
        self.old_subscriber_name = "nsys"
        self.ptr = 1


def _call_from_native_thread(fn: Any, args: tuple) -> None:
    """Run ``fn(*args)`` on a new thread with no Python frame under it, as a CUDA launch
    from PyTorch's autograd engine or XLA's executors calls the CUPTI callback, and wait.

    Everything between the thread's start and ``fn`` is C (deque.extend consuming starmap),
    so ``sys._getframe(1)`` in ``fn`` raises, as on a native thread."""
    done = _thread.allocate_lock()
    done.acquire()
    calls = itertools.chain(itertools.starmap(fn, [args]), itertools.starmap(done.release, [()]))
    _thread.start_new_thread(deque(maxlen=0).extend, (calls,))
    if not done.acquire(timeout=5):
        raise TimeoutError("the native-thread call did not finish")


@dataclass
class FakeCupti:
    """State of the fake library; ``module()`` exposes it with cupti's function names."""

    busy: bool = False  # another subscriber exists
    callback: Any = None
    enabled: set = field(default_factory=set)
    activities: set = field(default_factory=set)
    completed: Any = None
    pending: list = field(default_factory=list)
    next_corr: int = 1
    now: int = 1_000_000
    native_thread: bool = False  # call back from a thread with no Python frames

    def module(self) -> SimpleNamespace:
        m = SimpleNamespace(
            cuptiError=cuptiError,
            Result=Result,
            CallbackDomain=CallbackDomain,
            ApiCallbackSite=ApiCallbackSite,
            RuntimeApiTraceCbid=RuntimeApiTraceCbid,
            DriverApiTraceCbid=DriverApiTraceCbid,
            ActivityKind=ActivityKind,
            SUBSCRIBER_PARAMS_SIZE=SUBSCRIBER_PARAMS_SIZE,
            SubscriberParams=SubscriberParams,
        )
        m.get_timestamp = lambda: self.now
        m.subscribe_v2 = self._subscribe
        m.unsubscribe = lambda sub: setattr(self, "callback", None)
        m.enable_callback = self._enable_callback
        m.activity_register_callbacks = lambda req, done: setattr(self, "completed", done)
        m.activity_enable = lambda k: self.activities.add(int(k))
        m.activity_disable = lambda k: self.activities.discard(int(k))
        m.activity_flush_period = lambda ms: None
        m.activity_flush_all = lambda flag: self.flush()
        return m

    def _subscribe(self, callback: Any, userdata: Any, ptr: int) -> int:
        if self.busy:
            raise cuptiError(Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
        self.callback = callback
        return 7

    def _enable_callback(self, on: int, sub: int, domain: int, cbid: int) -> None:
        if cbid == RuntimeApiTraceCbid.cudaGraphLaunch_v10000:  # one id this "library" rejects
            raise cuptiError(1)
        (self.enabled.add if on else self.enabled.discard)((int(domain), int(cbid)))

    def _call(self, domain: CallbackDomain, cbid: int, site: ApiCallbackSite, corr: int) -> None:
        if self.callback and (int(domain), int(cbid)) in self.enabled:
            name = _REAL_NAMES.get(int(cbid), f"api{int(cbid)}")
            data = SimpleNamespace(callback_site=int(site), correlation_id=corr, function_name=name)
            if self.native_thread:
                _call_from_native_thread(self.callback, (None, int(domain), int(cbid), data))
            else:
                self.callback(None, int(domain), int(cbid), data)

    def launch(
        self, name: str = "_Z6kernelv", duration: int = 1000, driver_only: bool = False
    ) -> int:
        """One kernel launch as the real library reports it; returns its correlation id."""
        corr, nested = self.next_corr, self.next_corr + 1
        self.next_corr += 2
        rt, drv = CallbackDomain.RUNTIME_API, CallbackDomain.DRIVER_API
        enter, leave = ApiCallbackSite.API_ENTER, ApiCallbackSite.API_EXIT
        if driver_only:  # cuBLAS-style launch straight through the driver
            self._call(drv, DriverApiTraceCbid.cuLaunchKernel, enter, corr)
            self._call(drv, DriverApiTraceCbid.cuLaunchKernel, leave, corr)
        else:
            self._call(rt, RuntimeApiTraceCbid.cudaLaunchKernel_v7000, enter, corr)
            self._call(drv, DriverApiTraceCbid.cuLaunchKernel, enter, nested)
            self._call(drv, DriverApiTraceCbid.cuLaunchKernel, leave, nested)
            self._call(rt, RuntimeApiTraceCbid.cudaLaunchKernel_v7000, leave, corr)
        if int(ActivityKind.CONCURRENT_KERNEL) in self.activities:
            self.pending.append(
                SimpleNamespace(
                    kind=int(ActivityKind.CONCURRENT_KERNEL),
                    start=self.now,
                    end=self.now + duration,
                    device_id=0,
                    correlation_id=corr,
                    stream_id=7,
                    name=name,
                    grid_x=2,
                    grid_y=1,
                    grid_z=1,
                    block_x=128,
                    block_y=1,
                    block_z=1,
                    registers_per_thread=32,
                    static_shared_memory=0,
                    dynamic_shared_memory=256,
                    graph_id=0,
                    context_id=1,
                )
            )
        self.now += duration + 500
        return corr

    def _runtime_call(self, rt_cbid: int, drv_cbid: int) -> tuple[int, int]:
        """A runtime API call with its nested driver call; their two correlation ids."""
        corr, nested = self.next_corr, self.next_corr + 1
        self.next_corr += 2
        rt, drv = CallbackDomain.RUNTIME_API, CallbackDomain.DRIVER_API
        enter, leave = ApiCallbackSite.API_ENTER, ApiCallbackSite.API_EXIT
        self._call(rt, rt_cbid, enter, corr)
        self._call(drv, drv_cbid, enter, nested)
        self._call(drv, drv_cbid, leave, nested)
        self._call(rt, rt_cbid, leave, corr)
        return corr, nested

    def memcpy(self, nbytes: int = 1 << 20, src_kind: int = 1, dst_kind: int = 3) -> int:
        """cudaMemcpyAsync host->device (pageable source by default); its correlation id."""
        corr, _ = self._runtime_call(
            RuntimeApiTraceCbid.cudaMemcpyAsync_v3020, DriverApiTraceCbid.cuMemcpyHtoDAsync_v2
        )
        if int(ActivityKind.MEMCPY) in self.activities:
            self.pending.append(
                SimpleNamespace(
                    kind=int(ActivityKind.MEMCPY),
                    start=self.now,
                    end=self.now + 2000,
                    device_id=0,
                    correlation_id=corr,
                    stream_id=7,
                    bytes=nbytes,
                    copy_kind=1,
                    src_kind=src_kind,
                    dst_kind=dst_kind,
                )
            )
        self.now += 2500
        return corr

    def synchronize(self, duration: int = 5000, record_id: str = "runtime") -> int:
        """cudaStreamSynchronize; the sync record carries the runtime call's correlation id
        (``record_id="runtime"``), the nested driver call's (``"driver"``), or that of an
        inner call with no callback (``"inner"``: a further id, as cudaEventElapsedTime's
        waits on the H200)."""
        corr, nested = self._runtime_call(
            RuntimeApiTraceCbid.cudaStreamSynchronize_v3020, DriverApiTraceCbid.cuStreamSynchronize
        )
        if record_id == "inner":
            nested = self.next_corr
            self.next_corr += 1
        if int(ActivityKind.SYNCHRONIZATION) in self.activities:
            self.pending.append(
                SimpleNamespace(
                    kind=int(ActivityKind.SYNCHRONIZATION),
                    start=self.now,
                    end=self.now + duration,
                    context_id=1,
                    correlation_id=corr if record_id == "runtime" else nested,
                    stream_id=7,
                    type=3,
                )
            )
        self.now += duration + 100
        return corr

    def flush(self) -> None:
        if self.completed and self.pending:
            batch, self.pending = self.pending, []
            self.completed(batch)
