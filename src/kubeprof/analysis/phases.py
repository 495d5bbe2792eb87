"""Start-up, warm-up, steady state and tail of a GPU workload, found from its own rhythm.

A training or inference loop repeats one step, and some kernel runs once per step at a
steady period; where the program marks its steps (an NVTX or ``record_function`` range
recurring regularly), the marks anchor the steps instead. The steady state is where that
*anchor* recurs regularly: from the first of ``MIN_RUN`` consecutive regular periods to the
last such period. It is measured in
whole steps (anchor start to anchor start), so its idle ratio is the loop's, without the
interpreter start-up, imports, allocation, cuDNN/XLA autotuning or compilation before it.

- start-up: session start to the first kernel;
- warm-up: first kernel to the steady state (first steps, compilation, autotuning);
- steady: whole steps of the main loop;
- tail: after the last whole steady step (the last partial step, evaluation, shutdown).

Kernels anchor first; where no kernel recurs regularly, any device work does (a loop whose
GPU work is one copy a step). Where nothing recurs, or the anchor recurs irregularly after its
longest regular run more often than within it (request-driven serving: a few requests in a
burst look like steps), there is no steady loop: the analysed window is the active window
after warm-up (``loop=False``) and ``method`` says so. ``too_short`` says when a window is too
short for any verdict.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from kubeprof.analysis.gpu_trace import GpuTrace
from kubeprof.model import GpuActivity

MIN_RUN = 5  # consecutive regular periods that make a steady state
REGULAR = (0.5, 1.5)  # a period is regular within these factors of the anchor's median
WORK_TOLERANCE = 0.25  # kernel time per period within this share of the median period's
MIN_OCCURRENCES = MIN_RUN + 1
TIE = 0.99  # scores this close are equal
MAX_CHECKED = 50  # candidates, best first, checked for a repeating kernel mix
DIVERSITY = 2.0  # distinct kernel names in the window, at most this many per kernel per step
GAP_CLASSES = (10_000, 1_000_000)  # queued back to back / launch gap / host gap (ns)
SETTLED = 0.01  # the steady state may hold at most this much more irregular time than its end
WARMUP_PAUSE_NS = 500_000_000  # without a loop, a pause this long in the first half ends warm-up
BURST_GAP_NS = 1_000_000  # without a loop, device work after a pause this long starts a burst
MARK_COVER = (0.5, 1.05)  # a step mark lasts this share of its period (median over marks)
MIN_VERDICT_NS = 200_000_000  # a window shorter than this gives no verdict ...
MIN_VERDICT_STEPS = 10  # ... nor one with fewer steps (or bursts)


# A plain record with one derived property: the spool's small records look alike in shape
# only.
@dataclass(frozen=True, slots=True)
class Window:
    """A half-open time window [start_ns, end_ns)."""

    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


@dataclass(frozen=True, slots=True)
class Phases:
    """The session cut into phases; windows are contiguous and cover the session."""

    session: Window
    startup: Window
    warmup: Window
    steady: Window
    tail: Window
    method: str  # how the steady state was found, in words
    anchor: str = ""  # the once-per-step kernel (raw name); "" when none was found
    steps: int = 0  # whole steps in the steady window; bursts of work without a loop
    step_ns: float = 0.0  # median step period (mean time per burst without a loop)
    loop: bool = True  # False: no steady loop, ``steady`` is the active window after warm-up


@dataclass(frozen=True, slots=True)
class _Candidate:
    name: str
    first: int  # kernel index of the steady window's first anchor occurrence
    last: int  # kernel index of its last
    steps: int
    score: float  # kernel time in the window's regular periods x their share of its time


def detect(trace: GpuTrace, session: Window) -> Phases:
    """Phases of a session from its kernels (an empty trace gives an empty steady window)."""
    s0 = session.start_ns
    if not trace.work:
        empty = Window(session.end_ns, session.end_ns)
        return Phases(session, session, empty, empty, empty, "no kernels")
    first = trace.work[0].start_ns
    last = max(iv[-1][1] for iv in trace.busy.values())
    s0 = min(s0, first)
    s1 = max(session.end_ns, last)
    marked = _marker_steps(trace, first, last)
    if marked is not None:
        a, b, steps, name = marked
        period = (b - a) / steps
        method = (
            f"{steps} whole steps of the main loop, marked by the program's step range "
            f"`{name}` (NVTX / record_function; median period {period / 1e6:.3g} ms)"
        )
        return _loop(Window(s0, s1), first, Window(a, b), method, name, steps)
    # Kernels first: a kernel rhythm is the loop's own; copies and memsets (evaluation,
    # logging, checkpoints) may recur at a coarser period. Without a kernel rhythm, any
    # device work (a loop whose GPU work is one copy a step) anchors the steady state.
    seq, starts = trace.kernels, trace.starts
    best = _anchor(seq, starts)
    if best is None and len(trace.work) > len(trace.kernels):
        seq, starts = trace.work, trace.work_starts
        best = _anchor(seq, starts)
    if best is not None:
        a, b = starts[best.first], starts[best.last]
        inside = sum(1 for w in seq[best.first : best.last] if w.name == best.name)
        later = sum(1 for w in seq[best.last + 1 :] if w.name == best.name)
        if later <= inside:
            steps = best.steps
            period = (b - a) / steps
            kind = "a kernel" if seq is trace.kernels else "device work"
            method = (
                f"{steps} whole steps of the main loop, anchored on {kind} launched once per "
                f"step (median period {period / 1e6:.3g} ms)"
            )
            return _loop(Window(s0, s1), first, Window(a, b), method, best.name, steps)
    return _no_loop(trace, Window(s0, s1), first, last, best is not None)


def _loop(
    session: Window, first: int, steady: Window, method: str, anchor: str, steps: int
) -> Phases:
    """Phases around a steady loop of ``steps`` whole steps in ``steady`` (first device
    work at ``first``)."""
    s0, s1 = session.start_ns, session.end_ns
    return Phases(
        session,
        Window(s0, first),
        Window(first, steady.start_ns),
        steady,
        Window(steady.end_ns, s1),
        method,
        anchor,
        steps,
        steady.duration_ns / steps,
    )


def _marker_steps(trace: GpuTrace, first: int, last: int) -> tuple[int, int, int, str] | None:
    """Whole steps marked by the program itself: an NVTX / ``record_function`` range that
    recurs at a regular period (REGULAR of its median) for MIN_RUN periods or more, lasts
    MARK_COVER of its period (a step, not a layer or a compiler pass), over device work.
    The marks are host-side, so the host running ahead makes single periods
    jitter: the steps run from the settled start (``_settled_start``, as for kernels) to the
    last mark. Among such ranges the one spanning the most time wins, then the longest
    period (a per-layer range spans as long, but recurs at a shorter one). (start, end,
    steps, name), or None without such a range."""
    by_name: dict[str, list[int]] = defaultdict(list)
    lengths: dict[str, list[int]] = defaultdict(list)
    for m in trace.markers:
        if first <= m.start_ns <= last:
            by_name[m.name].append(m.start_ns)
            lengths[m.name].append(m.end_ns - m.start_ns)
    best: tuple[int, int, int, int, str] | None = None  # span, period, start, steps, name
    for name, starts in by_name.items():
        if len(starts) < MIN_OCCURRENCES:
            continue
        periods = [b - a for a, b in itertools.pairwise(starts)]
        median = sorted(periods)[len(periods) // 2]
        length = sorted(lengths[name])[len(starts) // 2]
        if median <= 0 or not MARK_COVER[0] * median <= length <= MARK_COVER[1] * median:
            continue  # not a step: a short range inside one (a layer, a thunk) or overlapping
        ok = [REGULAR[0] * median <= p <= REGULAR[1] * median for p in periods]
        runs = []
        i = 0
        while i < len(ok):
            j = i
            while j < len(ok) and ok[j]:
                j += 1
            if j - i >= MIN_RUN:
                runs.append((i, j))
            i = max(j, i + 1)
        if not runs:
            continue
        p0 = _settled_start([(r0, len(periods)) for r0, _ in runs], periods, ok, median)
        cand = (starts[-1] - starts[p0], median, starts[p0], len(periods) - p0, name)
        if best is None or cand[:2] > best[:2]:
            best = cand
    if best is None:
        return None
    span, _, a, steps, name = best
    if trace.busy_ns(a, a + span) <= 0:
        return None  # marks over no device work
    return a, a + span, steps, name


def _no_loop(trace: GpuTrace, session: Window, first: int, last: int, short_run: bool) -> Phases:
    """Phases of a workload without a steady loop (request-driven serving, irregular work).

    The analysed window is the active one (first device work to last) after warm-up: warm-up
    ends with the longest pause between device work in the window's first half, when that
    pause lasts WARMUP_PAUSE_NS or more (model loading, then the first requests); else it is
    empty. Its "steps" are bursts of device work separated by BURST_GAP_NS or more.
    """
    ws = trace.work_starts
    mid = first + (last - first) // 2
    end_so_far = first
    best_gap, warm_end = 0, first
    for w in trace.work:
        if w.start_ns > mid:
            break
        if w.start_ns - end_so_far > best_gap:
            best_gap, warm_end = w.start_ns - end_so_far, w.start_ns
        end_so_far = max(end_so_far, w.end_ns)
    if best_gap < WARMUP_PAUSE_NS:
        warm_end = first
    bursts = 0
    end_so_far = 0
    for i in range(bisect_left(ws, warm_end), len(ws)):
        w = trace.work[i]
        if not bursts or w.start_ns - end_so_far >= BURST_GAP_NS:
            bursts += 1
        end_so_far = max(end_so_far, w.end_ns)
    why = (
        "the longest regular run of steps is followed by more irregular repeats of its "
        "anchor than it holds"
        if short_run
        else "no device work recurs at a steady period"
    )
    method = f"no steady loop ({why}): the active window after warm-up, {bursts} bursts of GPU work"
    return Phases(
        session,
        Window(session.start_ns, first),
        Window(first, warm_end),
        Window(warm_end, last),
        Window(last, session.end_ns),
        method,
        "",
        bursts,
        (last - warm_end) / bursts if bursts else 0.0,
        loop=False,
    )


def too_short(ph: Phases) -> str:
    """Why the analysed window is too short for a verdict ("" when it is long enough)."""
    w = ph.steady
    if w.duration_ns < MIN_VERDICT_NS or ph.steps < MIN_VERDICT_STEPS:
        unit = "steps" if ph.loop else "bursts of GPU work"
        return (
            f"no verdict: the analysed window ({w.duration_ns / 1e9:.2f} s, {ph.steps} {unit}) "
            f"is shorter than the minimum of {MIN_VERDICT_NS / 1e9:g} s and "
            f"{MIN_VERDICT_STEPS} {unit}; record longer"
        )
    return ""


def _anchor(work: Sequence[GpuActivity], starts: Sequence[int]) -> _Candidate | None:
    """The kernel that marks the step: the one whose regular periods hold the most kernel time
    and the most of its window's time.

    A period is regular when its length is within REGULAR of the median, the number of
    kernels in it and their summed duration are the usual ones (within 10 % and 25 %) and
    the kernels right after and before the anchor are the usual ones: the same step again.
    Autotuning loops (XLA, cuDNN) recur at a steady pace too, but with a different
    candidate kernel (or launch configuration) each time; a per-layer kernel recurs
    regularly within a step, but not across the step boundary, so it scores less. Among
    equal scores the shortest period wins (one step, not every other one). A candidate
    whose window does not run the same kernels each step is dropped.
    """
    by_key: dict[tuple[int, int], list[int]] = defaultdict(list)
    ids: dict[tuple[str, tuple[int, int, int], tuple[int, int, int]], int] = {}
    # Records share their grid and block tuples (storage loads one per shape): look the
    # identity up by the tuples' own identity first, hashing their values once each.
    by_ref: dict[tuple[str, int, int], int] = {}
    cum = [0]
    acc = 0
    last_end = 0
    low, high = GAP_CLASSES
    for i, k in enumerate(work):
        # The same kernel is the same name and launch configuration (autotuning tries one
        # name in many configurations). Keyed also by the class of gap before it: the first
        # kernel of a step that launches one kernel many times follows the host gap
        # (coarse classes, and powers of two for gaps within a class).
        ref = (k.name, id(k.grid), id(k.block))
        ident = by_ref.get(ref)
        if ident is None:
            ident = by_ref[ref] = ids.setdefault((k.name, k.grid, k.block), len(ids))
        gap = k.start_ns - last_end
        by_key[(ident, -1)].append(i)
        by_key[(ident, 0 if gap < low else 1 if gap < high else 2)].append(i)
        by_key[(ident, 3 + gap.bit_length() if gap > 0 else 3)].append(i)
        if k.end_ns > last_end:
            last_end = k.end_ns
        acc += k.end_ns - k.start_ns
        cum.append(acc)
    cands = []
    seen: set[tuple[int, int, int, int]] = set()
    names = {v: name for (name, _, _), v in ids.items()}
    kernel_names = [k.name for k in work]
    for (ident, _), idx in by_key.items():
        # the same occurrences under another key (every gap in one class): look once
        same = (ident, len(idx), idx[0], idx[-1])
        if len(idx) >= MIN_OCCURRENCES and same not in seen:
            seen.add(same)
            cand = _regular_span(names[ident], idx, kernel_names, starts, cum)
            if cand is not None:
                cands.append(cand)
    repeats: dict[tuple[int, int], bool] = {}
    cands.sort(key=lambda c: -c.score)
    kept = [c for c in cands[:MAX_CHECKED] if _repeats_itself(c, work, repeats)]
    if not kept:
        return None
    top = kept[0].score
    near = [c for c in kept if c.score >= TIE * top]
    return min(near, key=lambda c: ((c.last - c.first) / c.steps, -c.score))


def _regular_span(
    name: str, idx: list[int], kernels: Sequence[str], starts: Sequence[int], cum: list[int]
) -> _Candidate | None:
    """The candidate anchored on ``idx`` (its occurrences; ``kernels``: every record's name)."""
    pairs = list(itertools.pairwise(idx))
    periods = [starts[b] - starts[a] for a, b in pairs]
    counts = [b - a for a, b in pairs]
    work = [cum[b] - cum[a] for a, b in pairs]  # kernel time per period
    # The kernels right after and right before the anchor: the same step's neighbours.
    around = [(kernels[a + 1], kernels[b - 1]) for a, b in pairs]
    median = sorted(periods)[len(periods) // 2]
    usual = sorted(counts)[len(counts) // 2]
    usual_work = sorted(work)[len(work) // 2]
    neighbours = Counter(around).most_common(1)[0][0]
    if median <= 0:
        return None
    lo, hi = REGULAR[0] * median, REGULAR[1] * median
    ok = [
        lo <= p <= hi
        and abs(c - usual) <= 0.1 * usual
        and abs(w - usual_work) <= WORK_TOLERANCE * usual_work
        and n == neighbours
        for p, c, w, n in zip(periods, counts, work, around, strict=True)
    ]
    runs = []  # (first, end) period indexes of runs of >= MIN_RUN regular periods
    i = 0
    while i < len(ok):
        if ok[i]:
            j = i
            while j < len(ok) and ok[j]:
                j += 1
            if j - i >= MIN_RUN:
                runs.append((i, j))
            i = j
        else:
            i += 1
    if not runs:
        return None
    p1 = runs[-1][1]
    p0 = _settled_start(runs, periods, ok, median)
    first, last = idx[p0], idx[p1]
    regular_work = sum(w for w, good in zip(work[p0:p1], ok[p0:p1], strict=True) if good)
    regular_time = sum(p for p, good in zip(periods[p0:p1], ok[p0:p1], strict=True) if good)
    span = starts[last] - starts[first]
    return _Candidate(name, first, last, p1 - p0, regular_work * regular_time / span)


def _settled_start(
    runs: list[tuple[int, int]], periods: list[int], ok: list[bool], median: int
) -> int:
    """The earliest run start after which irregular time is no denser than in the end half.

    Slow first steps (allocation, cuBLAS/cuDNN set-up) separate early regular runs by long
    periods; hiccups inside the loop (GC, a checkpoint) do too, but no more often than in
    the loop's second half. The excess of irregular periods over the median, as a share of
    the time from a candidate start to the end, must stay within SETTLED of that reference.
    """
    p1 = runs[-1][1]
    excess = [0 if good else max(0, p - median) for p, good in zip(periods, ok, strict=True)]
    cum_x, cum_t = [0], [0]
    for x, p in zip(excess, periods, strict=True):
        cum_x.append(cum_x[-1] + x)
        cum_t.append(cum_t[-1] + p)

    def density(a: int) -> float:
        span = cum_t[p1] - cum_t[a]
        return (cum_x[p1] - cum_x[a]) / span if span else 0.0

    mid = (runs[0][0] + p1) // 2
    ref = density(mid)
    for start, _ in runs:
        if start >= mid or density(start) <= ref + SETTLED:
            return start
    return runs[-1][0]


def _repeats_itself(
    c: _Candidate, work: Sequence[GpuActivity], cache: dict[tuple[int, int], bool]
) -> bool:
    """True when the window runs the same kernels every step (not autotuning candidates).

    Autotuning recurs regularly too, but each period tries different kernels: the window
    holds many more distinct names than kernels per period.
    """
    key = (c.first, c.last)
    if key not in cache:
        per_step = (c.last - c.first) / c.steps
        names = {k.name for k in work[c.first : c.last]}
        cache[key] = len(names) <= DIVERSITY * per_step + 8
    return cache[key]
