"""GPU time per Python stack: flame-graph stacks ending in the kernel that ran.

Each kernel (and memcpy/memset) becomes ``launch stack + GPU frame``; the launch stack is
Python frames then the CUDA API call, as the tracer captured it. Work whose launch stack is
unknown is kept (under an "[unattributed]" frame) so GPU time always adds up.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kubeprof.analysis.kernel_names import short_name
from kubeprof.model import Frame, FrameKind, GpuActivity, Stack, WeightedStack

GPU_WORK = frozenset({"kernel", "memcpy", "memset"})
UNATTRIBUTED = Frame("[unattributed: no launch stack]", FrameKind.NATIVE)
# The tracer's marker for launches from threads with no Python frames (autograd's engine,
# XLA's executors): the stack above it is the main thread's at that moment.
FOREIGN_PREFIX = "[launched by a native thread"
# The receiver's frame for a PyTorch backward kernel charged to the forward op that made its
# autograd node: ``backward of Linear.forward (linear.py:134)``, under that op's stack.
BACKWARD_PREFIX = "backward of "
# The receiver's frame for a JAX/XLA kernel charged to the HLO op it computes, under the
# Python stack that traced the op (from the optimised module XLA dumped):
# ``[XLA jit_train_step: jit(train_step)/jvp()/dot_general]``.
XLA_PREFIX = "[XLA "
# The receiver's frame for a backward kernel whose autograd node was made by an op that
# launched no kernel (a view: ``unbind``'s backward is a ``cat``): no forward launch carries
# its line, so it keeps no Python frame. Counted apart so the report can say what the
# unattributed time is rather than leave it unexplained.
NO_FORWARD_PREFIX = "[backward of an autograd node whose forward launch"


@dataclass(frozen=True, slots=True)
class Attribution:
    """How much GPU time has a Python launch stack."""

    total_ns: int
    attributed_ns: int
    count: int
    attributed_count: int
    via_main_ns: int = 0  # of attributed_ns: launched by a native thread, main thread's stack
    via_backward_ns: int = 0  # of attributed_ns: backward kernels, their forward op's stack
    via_xla_ns: int = 0  # of attributed_ns: XLA kernels, their HLO op's tracing stack
    no_forward_ns: int = 0  # not attributed: backward kernels of nodes whose op launched nothing

    # One share per figure below, each with its own meaning in its docstring (alike in shape).
    def _of_total(self, ns: int, empty: float) -> float:
        return ns / self.total_ns if self.total_ns else empty

    @property
    def share(self) -> float:
        return self._of_total(self.attributed_ns, 1.0)

    @property
    def via_main_share(self) -> float:
        """Share of GPU time shown under the main thread's stack (the approximate fallback)."""
        return self._of_total(self.via_main_ns, 0.0)

    @property
    def via_backward_share(self) -> float:
        """Share of GPU time of backward kernels charged to their forward op's line."""
        return self._of_total(self.via_backward_ns, 0.0)

    @property
    def via_xla_share(self) -> float:
        """Share of GPU time of XLA kernels charged to the Python line of their HLO op."""
        return self._of_total(self.via_xla_ns, 0.0)

    @property
    def own_line_share(self) -> float:
        """Share charged to the line that launched it or, for backward, its forward op:
        attributed and not through the main-thread fallback."""
        return self._of_total(self.attributed_ns - self.via_main_ns, 1.0)


def has_python_stack(stack: Stack) -> bool:
    """True when the launch stack holds at least one Python frame."""
    return any(f.kind is FrameKind.PYTHON for f in stack)


def attribution(
    activities: Iterable[GpuActivity], kinds: frozenset[str] = frozenset({"kernel"})
) -> Attribution:
    """Share of GPU time (of ``kinds``) whose launch had a Python stack."""
    tot = att = n = na = via = bwd = xla = nofwd = 0
    # Launch stacks are shared tuples (one per distinct stack): classify each tuple once.
    seen: dict[int, int] = {}  # id(stack) -> _how's answer
    for a in activities:
        if a.kind in kinds:
            d = a.end_ns - a.start_ns
            tot += d
            n += 1
            how = seen.get(id(a.stack))
            if how is None:
                how = seen[id(a.stack)] = _how(a.stack)
            if how == 5:
                nofwd += d
            elif how:
                att += d
                na += 1
                if how == 2:
                    via += d
                elif how == 3:
                    bwd += d
                elif how == 4:
                    xla += d
    return Attribution(tot, att, n, na, via, bwd, xla, nofwd)


def _how(stack: Stack) -> int:
    """How a launch stack attributes its kernel: 0 not at all (no Python frame), 1 to its
    own line, 2 through the main-thread fallback, 3 backward, 4 XLA, 5 not at all: a
    backward kernel whose forward op launched nothing (``attribution``)."""
    if not has_python_stack(stack):
        return 5 if _marker(stack).startswith(NO_FORWARD_PREFIX) else 0
    marker = _marker(stack)
    for how, prefix in ((2, FOREIGN_PREFIX), (3, BACKWARD_PREFIX), (4, XLA_PREFIX)):
        if marker.startswith(prefix):
            return how
    return 1


def _marker(stack: Stack) -> str:
    """The native frame the tracer/receiver put between the Python frames and the API call."""
    if len(stack) >= 2 and stack[-2].kind is FrameKind.NATIVE:
        return stack[-2].name
    return ""


def gpu_frame(a: GpuActivity) -> Frame:
    """The leaf frame: short kernel label, the raw (mangled) name kept in ``file``."""
    if a.kind == "kernel":
        return Frame(short_name(a.demangled or a.name), FrameKind.GPU, a.name)
    return Frame(a.name, FrameKind.GPU)


def gpu_stacks(
    activities: Iterable[GpuActivity],
    process_names: Mapping[int, str] | None = None,
    kinds: frozenset[str] = GPU_WORK,
) -> tuple[WeightedStack, ...]:
    """WeightedStacks for Profile.gpu: one per (process, device, stack); value = GPU ns."""
    names = process_names or {}
    # Grouped by the launch stack's identity first (activities share one tuple per distinct
    # stack; hashing a stack hashes every frame), then by value in first-seen order.
    by_ref: dict[tuple[int, int, int, int], list[int]] = {}
    launches: dict[int, Stack] = {}
    leaves: dict[int, Frame] = {}
    leaf_cache: dict[tuple[str, str, str], Frame] = {}
    for a in activities:
        if a.kind not in kinds:
            continue
        key = (a.kind, a.name, a.demangled)
        leaf = leaf_cache.get(key)
        if leaf is None:
            leaf = leaf_cache[key] = gpu_frame(a)
            leaves[id(leaf)] = leaf
        ref = (a.pid, a.device, id(a.stack), id(leaf))
        slot = by_ref.get(ref)
        if slot is None:
            launches.setdefault(id(a.stack), a.stack)
            slot = by_ref[ref] = [0, 0]
        slot[0] += 1
        slot[1] += a.end_ns - a.start_ns
    acc: dict[tuple[int, int, Stack], list[int]] = defaultdict(lambda: [0, 0])
    for (pid, device, stack_ref, leaf_ref), (n, ns) in by_ref.items():
        st = launches[stack_ref]
        launch = st if has_python_stack(st) else (UNATTRIBUTED, *st)
        slot = acc[(pid, device, (*launch, leaves[leaf_ref]))]
        slot[0] += n
        slot[1] += ns
    out = [
        WeightedStack(
            stack=stack,
            pid=pid,
            tid=device,
            thread=f"cuda:{device}",
            process=names.get(pid, str(pid)),
            samples=n,
            value_ns=ns,
        )
        for (pid, device, stack), (n, ns) in acc.items()
    ]
    out.sort(key=lambda w: (-w.value_ns, w.pid, w.tid))
    return tuple(out)
