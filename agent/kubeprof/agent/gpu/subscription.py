"""The CUPTI subscription: which API calls call us back, and subscribing (Python or C hook).

CUPTI's callback API calls the subscriber synchronously at each launch, on the launching
thread, the only moment the Python stack is available. Launches come through the runtime
(``cudaLaunchKernel``...) and, for libraries such as cuBLAS that bypass it, directly
through the driver (``cuLaunchKernel``...). One process has one subscriber: another profiler
holding CUPTI is reported as one line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from kubeprof.agent.gpu.cupti_errors import Status, TracerError, cupti_error, one_line

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

_IN_USE = "CUPTI is already in use by another profiler"


def callback_ids(cupti: Any) -> list[tuple[int, int]]:
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


def alias_ids(cupti: Any) -> list[int]:
    """Driver cbids whose nested calls also get a launch record (``_DRIVER_ALIAS_PREFIXES``)."""
    return [
        int(member)
        for name, member in cupti.DriverApiTraceCbid.__members__.items()
        if name.startswith(_DRIVER_ALIAS_PREFIXES)
    ]


def subscribe(cupti: Any, callback: Callable[..., None]) -> Any:
    """Subscribe ``callback`` (the Python path); the subscriber handle."""
    other = ""
    try:
        try:
            # subscribe_v2 names us, and tells us who holds CUPTI when it is taken; it
            # refused (ERROR_INVALID_PARAMETER) on the H200 image, so fall back
            params = cupti.SubscriberParams()
            params.struct_size = cupti.SUBSCRIBER_PARAMS_SIZE
            params.subscriber_name = "kubeprof"
            return cupti.subscribe_v2(callback, None, params.ptr)
        except cupti.cuptiError as exc:
            if exc.status == cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
                with contextlib.suppress(Exception):
                    other = params.old_subscriber_name or ""
                raise
        except AttributeError:
            pass
        return cupti.subscribe(callback, None)
    except cupti.cuptiError as exc:
        if exc.status == cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
            by = f" ({other})" if other else ""
            raise TracerError(f"{_IN_USE}{by} (Nsight Systems, torch.profiler, ...)") from None
        raise TracerError(f"CUPTI subscribe failed: {cupti_error(cupti, exc)}") from None


def install_hook(cupti: Any, hook: Any, **install: Any) -> None:
    """Let the C hook own the subscriber (``install``: its ``install()`` arguments)."""
    try:
        rc = hook.install(**install)
    except (OSError, RuntimeError, TypeError) as exc:
        raise TracerError(f"C launch hook cannot start: {one_line(exc)}") from None
    if rc == int(cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED):
        raise TracerError(f"{_IN_USE} (Nsight Systems, torch.profiler, ...)")
    if rc != 0:
        raise TracerError(f"CUPTI subscribe failed: {cupti_error(cupti, Status(rc))}")


def enable_callbacks(
    cupti: Any, hook: Any, subscriber: Any, cbids: list[tuple[int, int]], on: bool
) -> list[tuple[int, int]]:
    """Switch the callbacks of ``cbids`` on or off; the ids this libcupti refused."""
    if hook is not None:
        return [tuple(f) for f in hook.enable(on)]
    failed = []
    for domain, cbid in cbids:
        try:
            cupti.enable_callback(1 if on else 0, subscriber, domain, cbid)
        except cupti.cuptiError:  # an id this libcupti does not know: skip it
            failed.append((domain, cbid))
    return failed
