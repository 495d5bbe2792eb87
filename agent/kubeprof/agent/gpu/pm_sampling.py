"""Optional: one CUPTI PM-sampling metric (default DRAM throughput %) inside the traced process.

On libcupti 13.4 one metric at a time worked on the H200 (gpu-notes.md; two or more
returned no samples), sampled every ~20 µs; the samples fall inside kernel intervals, so the
analysis turns them into per-kernel means (kubeprof.analysis.pm_join). It is off by default
(``KUBEPROF_GPU_PM=1`` turns it on): it costs a few % and its decode holds the GIL.

It starts on the sender thread once the workload has launched something (so a CUDA context
exists) and is decoded on that thread every ``decode_every_s``.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

DEFAULT_METRIC = "dram__throughput.avg.pct_of_peak_sustained_elapsed"


@dataclass(eq=False)
class PmSampler:
    """Samples one metric on one device and queues ("pm") records into a Sender."""

    sender: Any
    device: int = 0
    metric: str = DEFAULT_METRIC
    interval_ns: int = 20_000
    buffer_bytes: int = 256 << 20
    decode_every_s: float = 1.0
    _collector: Any = field(default=None, init=False)
    _failed: bool = field(default=False, init=False)
    _next_decode: float = field(default=0.0, init=False)

    @classmethod
    def from_env(cls, sender: Any) -> PmSampler | None:
        if os.environ.get("KUBEPROF_GPU_PM") != "1":
            return None
        return cls(
            sender,
            device=int(os.environ.get("KUBEPROF_GPU_PM_DEVICE", "0")),
            metric=os.environ.get("KUBEPROF_GPU_PM_METRIC", DEFAULT_METRIC),
            interval_ns=int(os.environ.get("KUBEPROF_GPU_PM_INTERVAL_NS", "20000")),
        )

    def tick(self, launches_seen: bool) -> None:
        """Called on the sender thread: start once work exists, then decode periodically."""
        if self._failed:
            return
        if self._collector is None:
            if launches_seen:
                self._start()
            return
        if time.monotonic() >= self._next_decode:
            self._decode()

    def _start(self) -> None:
        try:
            from cupti import pm_sampling

            _make_context_current(self.device)
            collector = pm_sampling.Collector(device_index=self.device)
            collector.enable()
            try:
                collector.configure(
                    metrics=[self.metric],
                    hardware_buffer_size=self.buffer_bytes,
                    sampling_interval=self.interval_ns,
                    trigger_mode=pm_sampling.TriggerMode.GPU_TIME_INTERVAL,
                )
                collector.start()
            except Exception:
                collector.disable()
                raise
        except Exception as exc:  # noqa: BLE001 - must never break the workload
            self._fail(f"PM sampling off: {' '.join(str(exc).split()) or type(exc).__name__}")
            return
        self._collector = collector
        self._next_decode = time.monotonic() + self.decode_every_s

    def _decode(self) -> None:
        self._next_decode = time.monotonic() + self.decode_every_s
        try:
            data = self._collector.decode()
        except Exception as exc:  # noqa: BLE001 - must never break the workload
            self._fail(f"PM sampling decode failed: {exc}")
            return
        name = self.sender.intern(self.metric)
        rows = [
            (
                s.start_timestamp,
                s.end_timestamp,
                self.device,
                round(s.metric_values[0] * 1000),
                name,
            )
            for s in data
        ]
        self.sender.put_many("pm", rows)
        self.sender.counters["pm_samples"] = self.sender.counters.get("pm_samples", 0) + len(rows)

    def stop(self) -> None:
        if self._collector is None:
            return
        with contextlib.suppress(Exception):
            self._collector.stop()
        self._decode()
        with contextlib.suppress(Exception):
            self._collector.disable()
        self._collector = None

    def _fail(self, text: str) -> None:
        self._failed = True
        self.sender.counters["pm_errors"] = self.sender.counters.get("pm_errors", 0) + 1
        self.sender.pending_messages.append(("warning", text))


def _make_context_current(device: int) -> None:
    """PM sampling wants a current context; the sender thread has none: use the primary one."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return
    driver.cuInit(0)
    err, dev = driver.cuDeviceGet(device)
    if int(err) != 0:
        return
    err, ctx = driver.cuDevicePrimaryCtxRetain(dev)
    if int(err) == 0:
        driver.cuCtxSetCurrent(ctx)
