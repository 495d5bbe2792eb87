"""The agent->ingest wire format round-trips and refuses malformed bodies."""

import dataclasses
import gzip
import json

import pytest

from kubeprof.model import (
    Batch,
    CpuSample,
    Frame,
    FrameKind,
    GpuActivity,
    GpuMetricSample,
    GpuTracerState,
    ProcessInfo,
)
from kubeprof.protocol import codec
from kubeprof.protocol.limits import IngestLimits

STACK = (
    Frame("main", FrameKind.PYTHON, "train.py", 3),
    Frame("memcpy", FrameKind.NATIVE, "libc.so.6"),
)


def _batch() -> Batch:
    return Batch(
        samples=tuple(CpuSample(i, 10, 11, "python", 0, STACK) for i in range(50)),
        processes=(ProcessInfo(10, 1, "python", "python train.py", "abc", "uid-1"),),
        gpu_activities=(
            GpuActivity(
                "kernel",
                "_Z3fooi",
                1,
                5,
                0,
                10,
                7,
                3,
                "foo(int)",
                (1, 2, 3),
                (32, 1, 1),
                40,
                128,
                0,
                STACK,
                launch_ns=1_000_000_000_000,  # the launch's call: a host time, a thread
                launch_tid=12,
            ),
        ),
        gpu_metrics=(GpuMetricSample(5, 0, "gpu_util_pct", 42.5),),
        counters={"lost": 2},
        gpu_tracers=(
            GpuTracerState(
                "uid-1", 10, "7-0a1b2c3d.sock", "refused", "Python 3.9 is not supported"
            ),
        ),
    )


def test_round_trip_is_exact():
    body = codec.encode(_batch(), batch_id="n1-abc", node="n1")
    batch_id, node, batch = codec.decode(body)
    assert (batch_id, node, batch) == ("n1-abc", "n1", _batch())


def test_an_older_agents_batch_decodes_without_launch_times():
    """Version 1 (agents before launch times): GPU rows lack launch_ns/launch_tid and
    decode with 0s; a version the ingest does not read is refused by name."""
    doc = codec.to_dict(_batch(), batch_id="x", node="n")
    doc["v"] = 1
    doc["gpu_activities"] = [row[:-2] for row in doc["gpu_activities"]]
    _, _, batch = codec.decode(json.dumps(doc).encode(), gzipped=False)
    want = dataclasses.replace(_batch().gpu_activities[0], launch_ns=0, launch_tid=0)
    assert batch.gpu_activities == (want,) and batch.samples == _batch().samples
    doc["v"] = 3
    with pytest.raises(codec.CodecError, match="not a kubeprof batch of version 1 or 2"):
        codec.decode(json.dumps(doc).encode(), gzipped=False)


def test_frames_are_listed_once():
    doc = codec.to_dict(_batch(), batch_id="x", node="n")
    assert len(doc["frames"]) == 2


def test_plain_json_accepted():
    raw = json.dumps(codec.to_dict(_batch(), batch_id="x", node="n")).encode()
    assert codec.decode(raw, gzipped=False)[2] == _batch()


# mtime=0: the ids hold the bytes, and every xdist worker must collect the same ids.
@pytest.mark.parametrize(
    "body",
    [
        b"not gzip",
        gzip.compress(b"[1,2]", mtime=0),
        gzip.compress(b'{"v": 99}', mtime=0),
        gzip.compress(b'{"v": 1, "batch_id": "x", "frames": [[1]]}', mtime=0),
    ],
)
def test_malformed_bodies_raise_codec_error(body):
    with pytest.raises(codec.CodecError):
        codec.decode(body)


def test_gzip_bomb_refused():
    body = gzip.compress(b" " * (4 << 20))
    with pytest.raises(codec.CodecError, match="inflates past") as err:
        codec.decode(body, limits=IngestLimits(max_json_bytes=1 << 20))
    assert err.value.too_large


def test_rows_follow_the_model_fields():
    """Each record travels as its dataclass fields in order: the model is the one spelling."""
    doc = codec.to_dict(_batch(), batch_id="x", node="n")
    act = _batch().gpu_activities[0]
    row = doc["gpu_activities"][0]
    names = [f.name for f in dataclasses.fields(GpuActivity)]
    assert len(row) == len(names)
    for name, value in zip(names, row, strict=True):
        if name == "stack":
            assert [doc["frames"][i][0] for i in value] == [f.name for f in act.stack]
        else:
            assert value == getattr(act, name)


def test_wrong_version_and_dangling_frame_index_are_named():
    bad_version = json.dumps({"v": 99, "batch_id": "x", "frames": []}).encode()
    with pytest.raises(codec.CodecError, match="version 1 or 2"):
        codec.decode(bad_version, gzipped=False)
    doc = codec.to_dict(_batch(), batch_id="x", node="n")
    doc["frames"] = doc["frames"][:1]
    with pytest.raises(codec.CodecError, match="frame not listed"):
        codec.decode(json.dumps(doc).encode(), gzipped=False)
    doc = codec.to_dict(_batch(), batch_id="x", node="n")
    doc["samples"][0][1] = "ten"  # pid must be an int
    with pytest.raises(codec.CodecError, match=r"samples\[0\]\.pid: Expected `int`"):
        codec.decode(json.dumps(doc).encode(), gzipped=False)


def test_rows_counts_every_record():
    assert codec.rows(_batch()) == 50 + 1 + 1 + 1 + 1


def _doc() -> dict:
    return json.loads(json.dumps(codec.to_dict(_batch(), batch_id="x", node="n")))


def _refused(doc: dict, match: str, **kw) -> codec.CodecError:
    with pytest.raises(codec.CodecError, match=match) as err:
        codec.decode(json.dumps(doc).encode(), gzipped=False, **kw)
    return err.value


@pytest.mark.parametrize(
    ("where", "value", "field"),
    [
        (("samples", 0, 1), 2**31, r"samples\[0\]\.pid: Expected `int` <= 4194304"),
        (("samples", 0, 1), -1, r"samples\[0\]\.pid: Expected `int` >= 0"),
        (("samples", 0, 3), "a\x00b", r"samples\[0\]\.thread: Expected `str` matching"),
        (("samples", 0, 0), 1.5, r"samples\[0\]\.ts_ns: Expected `int`, got `float`"),
        (("samples", 0, 0), True, r"samples\[0\]\.ts_ns: Expected `int`, got `bool`"),
        (("gpu_metrics", 0, 3), -1e308, r"gpu_metrics\[0\]\.value: Expected `float` >= -1e\+18"),
        (("gpu_metrics", 0, 2), "m" * 65, r"gpu_metrics\[0\]\.metric: Expected `str` of length"),
        (("processes", 0, 5), "u" * 300, r"processes\[0\]\.pod_uid: Expected `str` of length"),
        (("gpu_activities", 0, 9), [1, 2, 2**31], r"gpu_activities\[0\]\.grid\[2\]"),
        (("frames", 0, 1), "bogus", r"frames\[0\]\.kind: Invalid enum value"),
        (("gpu_tracers", 0, 3), "s" * 17, r"gpu_tracers\[0\]\.state: Expected `str` of length"),
        (("gpu_tracers", 0, 4), "r" * 1001, r"gpu_tracers\[0\]\.reason: Expected `str` of length"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_field(where, value, field):
    doc = _doc()
    key, row, col = where
    doc[key][row][col] = value
    _refused(doc, field)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("batch_id", None, "batch_id: Expected `str`, got `null`"),
        ("batch_id", {"a": 1}, "batch_id: Expected `str`, got `object`"),
        ("batch_id", "", "batch_id: Expected `str` of length >= 1"),
        ("batch_id", "a b", "batch_id: Expected `str` matching"),
        ("node", "n" * 254, "node: Expected `str` of length <= 253"),
        ("counters", {"lost": -1}, r"counters\[...\]: Expected `int` >= 0"),
    ],
)
def test_bad_header_fields_are_refused_naming_them(key, value, match):
    doc = _doc()
    doc[key] = value
    _refused(doc, match)


def test_non_finite_metric_values_are_refused():
    doc = _doc()
    raw = json.dumps(doc).replace("42.5", "1e999").encode()
    with pytest.raises(codec.CodecError, match=r"gpu_metrics\[0\]\.value"):
        codec.decode(raw, gzipped=False)


def test_span_ending_before_start_is_refused():
    doc = _doc()
    doc["gpu_activities"][0][3] = 0  # end_ns < start_ns (1)
    _refused(doc, r"gpu_activities\[0\]\.end_ns: 0 is before start_ns")


def test_size_limits_are_refused_before_decoding():
    doc = _doc()
    assert _refused(doc, "50 JSON values|at most 50", limits=IngestLimits(max_values=50)).too_large
    assert _refused(
        doc, "samples: Expected `array` of length <= 10", limits=IngestLimits(max_rows=10)
    ).too_large
    assert _refused(doc, "54 records; at most 53", limits=IngestLimits(max_rows=53)).too_large
    doc["frames"][0][0] = "f" * 100
    _refused(
        doc,
        r"frames\[0\]\.name: Expected `str` of length <= 50",
        limits=IngestLimits(max_string_chars=50),
    )
    deep = _doc()
    deep["samples"][0][5] = [0] * 9
    _refused(
        deep,
        r"samples\[0\]\.stack: Expected `array` of length <= 8",
        limits=IngestLimits(max_stack_depth=8),
    )


def test_gzip_without_header_and_trailing_data_are_handled():
    body = codec.encode(_batch(), batch_id="x", node="n")
    assert codec.decode(body)[2] == _batch()  # detected from the magic bytes
    with pytest.raises(codec.CodecError, match="after the end"):
        codec.decode(body + gzip.compress(b"{}"))
    with pytest.raises(codec.CodecError, match="truncated"):
        codec.decode(body[:-12])


def test_encoder_clips_long_names_so_the_batch_is_accepted():
    long = Frame("x" * 40_000, FrameKind.NATIVE, "lib.so")
    batch = Batch(
        samples=(CpuSample(1, 2, 2, "t", 0, (long,)),),
        processes=(ProcessInfo(2, 1, "p", "c" * 40_000),),
    )
    _bid, _node, got = codec.decode(codec.encode(batch, batch_id="x", node="n"))
    assert got.samples[0].stack[0].name == "x" * 16384
    assert len(got.processes[0].cmdline) == 16384
