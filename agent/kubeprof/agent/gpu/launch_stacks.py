"""The launch callbacks: at each CUDA API call, the Python stack (an id) and the API, queued.

The callback runs synchronously on the launching thread, the only moment the Python stack is
available (and the call's time: host CLOCK_MONOTONIC, as CPU samples, with the thread's
kernel id); the kernel record comes later, in an activity buffer, and the receiver joins the
two by correlation id. A runtime launch also fires a nested driver callback with a different
correlation id; the kernel record carries the runtime one, so nested driver callbacks are
skipped (a per-thread "inside a runtime call" flag set on runtime enter, cleared on runtime
exit), except the aliases (``subscription.alias_ids``) that get the runtime call's stack.

``make_api_callback`` is the whole callback in Python; with the C hook, only launches from
threads with no Python frames come back to Python (``make_slow_launch``). Both are hot paths:
everything they use is bound to a local once.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from kubeprof.agent.gpu.autograd import NONE, AutogradSeq
from kubeprof.agent.gpu.stacks import StackTable, main_thread_frame
from kubeprof.agent.gpu.wire import Sender

FOREIGN_MARKER = "[launched by a native thread; main thread shown]"


def _frameless(
    stacks: StackTable, sender: Sender, autograd: AutogradSeq | None, foreign_main: bool
) -> Callable[[int, int], tuple[int, int]]:
    """``(corr, tid) -> (stack id, backward seq)`` of a launch from a thread with no Python
    frames: a PyTorch backward node's (its seq queued; the receiver gives it the stack of
    the forward op, see autograd.py), else the main thread's stack under a marker, or none."""
    capture = stacks.capture
    aqueue = sender.queues["autograd"]
    bwd_seq = autograd.backward if autograd is not None else None

    def frameless(corr: int, tid: int) -> tuple[int, int]:
        if bwd_seq is not None and (seq := bwd_seq()) != NONE:
            aqueue.append((corr, seq, tid, 1))
            return 0, seq
        if foreign_main:
            return capture(main_thread_frame(), marker=FOREIGN_MARKER), NONE
        return 0, NONE

    return frameless


def make_slow_launch(
    stacks: StackTable, sender: Sender, autograd: AutogradSeq | None, foreign_main: bool
) -> Callable[[int, int, int, str, int, int], tuple[int, int, int]]:
    """The C hook's path for threads with no Python frames (-> (stack, api, seq)); the hook
    stamped the call's time and kernel thread id before taking the GIL."""
    get_ident = threading.get_ident
    queue = sender.queues["launch"]
    max_queued = sender.max_queued
    counters = sender.counters
    intern = sender.intern
    frameless = _frameless(stacks, sender, autograd, foreign_main)

    def slow(
        _domain: int, cbid: int, corr: int, fname: str, t: int, os_tid: int
    ) -> tuple[int, int, int]:
        tid = get_ident()
        sid, seq = frameless(corr, tid)
        api = intern(fname or str(cbid))
        if len(queue) >= max_queued:
            counters["dropped"] += 1
        else:
            queue.append((corr, sid, api, tid, t, os_tid))
        return sid, api, seq

    return slow


def make_api_callback(
    cupti: Any,
    stacks: StackTable,
    sender: Sender,
    autograd: AutogradSeq | None,
    foreign_main: bool,
    alias: set[int],
) -> Callable[[Any, int, int, Any], None]:
    """CUPTI's callback (the Python path): queue (correlation id, stack id, api, thread,
    time, kernel thread id)."""
    runtime = int(cupti.CallbackDomain.RUNTIME_API)
    enter = int(cupti.ApiCallbackSite.API_ENTER)
    getframe = sys._getframe
    get_ident = threading.get_ident
    get_native_id = threading.get_native_id
    monotonic_ns = time.monotonic_ns
    capture = stacks.capture
    queue = sender.queues["launch"]
    max_queued = sender.max_queued
    counters = sender.counters
    intern = sender.intern
    api_ids: dict[tuple[int, int], int] = {}
    # thread -> (stack id, api id, backward seq) of the runtime call it is inside, None
    # outside one
    in_runtime: dict[int, tuple[int, int, int] | None] = {}
    fwd_seq = autograd.forward if autograd is not None else None
    frameless = _frameless(stacks, sender, autograd, foreign_main)
    aqueue = sender.queues["autograd"]
    last_peek: dict[int, int] = {}  # thread -> forward seq last sent

    def on_api(_userdata: Any, domain: int, cbid: int, cbdata: Any) -> None:
        t = monotonic_ns()
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
                    row = (cbdata.correlation_id, outer[0], outer[1], tid, t, get_native_id())
                    queue.append(row)
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
        else:
            sid, seq = frameless(corr, tid)
        api = api_ids.get((domain, cbid))
        if api is None:
            api = api_ids[(domain, cbid)] = intern(cbdata.function_name or str(cbid))
        if domain == runtime:
            in_runtime[tid] = (sid, api, seq)
        if len(queue) >= max_queued:
            counters["dropped"] += 1
            return
        queue.append((corr, sid, api, tid, t, get_native_id()))

    return on_api
