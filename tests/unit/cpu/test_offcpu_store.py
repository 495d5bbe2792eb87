"""Off-CPU samples travel through the codec and the store unchanged, and read back as
waits weighted by their wall time (a thread that only waited included)."""

from __future__ import annotations

import json

from kubeprof.model import Batch, CpuSample, Frame, FrameKind, OffCpuSample, OffCpuSource
from kubeprof.protocol import codec
from kubeprof.storage import offcpu, queries
from kubeprof.storage.store import Store

PY = Frame("wait_here", FrameKind.PYTHON, "/app/main.py", 12)
LIBC = Frame("read", FrameKind.NATIVE, "/lib/libc.so.6")


def _wait(tid: int, blocked: int, reason: str = "read", stack=(PY, LIBC)) -> OffCpuSample:
    return OffCpuSample(
        ts_ns=1_000 + tid,
        pid=7,
        tid=tid,
        thread=f"t{tid}",
        blocked_ns=blocked,
        weight_ns=blocked * 2,
        reason=reason,
        source=OffCpuSource.BPF_SCHED.value,
        stack=stack,
    )


def test_codec_round_trip_keeps_every_field():
    batch = Batch(offcpu_samples=(_wait(8, 5_000_000), _wait(9, 7, "futex", ())))
    _, _, back = codec.decode(codec.encode(batch, batch_id="b1", node="n"))
    assert back.offcpu_samples == batch.offcpu_samples


def test_codec_refuses_a_negative_blocked_time_naming_the_field():
    doc = codec.to_dict(Batch(offcpu_samples=(_wait(8, 5),)), batch_id="b", node="")
    doc["offcpu_samples"][0][4] = -1
    try:
        codec.decode(json.dumps(doc).encode())
    except codec.CodecError as exc:
        assert "offcpu_samples[0].blocked_ns" in str(exc)
    else:
        raise AssertionError("a negative blocked_ns was accepted")


def test_store_reads_waits_back_weighted_and_per_thread(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'k.db'}")
    sid = store.create_session("s", hz=100)
    cpu = CpuSample(ts_ns=1, pid=7, tid=8, thread="t8", cpu=0, stack=(PY,))
    waits = (_wait(8, 3_000_000), _wait(8, 1_000_000), _wait(9, 2_000_000, "futex", ()))
    assert store.write_batch(sid, Batch(samples=(cpu,), offcpu_samples=waits)) == 4
    with store.engine.connect() as conn:
        assert offcpu.offcpu_samples(conn, sid) == sorted(waits, key=lambda w: w.ts_ns)
        session = queries.find_session(conn, "s")
        profile = queries.load_profile(conn, session)
    by_tid = {(w.tid, w.stack[-1].name): w for w in profile.offcpu}
    t8 = by_tid[(8, "[off-cpu] read")]
    assert (t8.samples, t8.value_ns, t8.stack[:-1]) == (2, 8_000_000, (PY, LIBC))
    t9 = by_tid[(9, "[off-cpu] futex")]  # only waited, and no stack: still reported
    assert (t9.samples, t9.value_ns, t9.stack) == (1, 4_000_000, (offcpu.wait_frame("futex"),))
    store.close()
