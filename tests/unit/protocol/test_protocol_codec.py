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
    ProcessInfo,
)
from kubeprof.protocol import codec

STACK = (Frame("main", FrameKind.PYTHON, "train.py", 3), Frame("memcpy", FrameKind.NATIVE,
                                                               "libc.so.6"))


def _batch() -> Batch:
    return Batch(
        samples=tuple(CpuSample(i, 10, 11, "python", 0, STACK) for i in range(50)),
        processes=(ProcessInfo(10, 1, "python", "python train.py", "abc", "uid-1"),),
        gpu_activities=(GpuActivity("kernel", "_Z3fooi", 1, 5, 0, 10, 7, 3, "foo(int)",
                                    (1, 2, 3), (32, 1, 1), 40, 128, 0, STACK),),
        gpu_metrics=(GpuMetricSample(5, 0, "gpu_util_pct", 42.5),),
        counters={"lost": 2},
    )


def test_round_trip_is_exact():
    body = codec.encode(_batch(), batch_id="n1-abc", node="n1")
    batch_id, node, batch = codec.decode(body)
    assert (batch_id, node, batch) == ("n1-abc", "n1", _batch())


def test_frames_are_listed_once():
    doc = codec.to_dict(_batch(), batch_id="x", node="n")
    assert len(doc["frames"]) == 2


def test_plain_json_accepted():
    raw = json.dumps(codec.to_dict(_batch(), batch_id="x", node="n")).encode()
    assert codec.decode(raw, gzipped=False)[2] == _batch()


@pytest.mark.parametrize("body", [b"not gzip", gzip.compress(b"[1,2]"),
                                  gzip.compress(b'{"v": 99}'),
                                  gzip.compress(b'{"v": 1, "batch_id": "x", "frames": [[1]]}')])
def test_malformed_bodies_raise_codec_error(body):
    with pytest.raises(codec.CodecError):
        codec.decode(body)


def test_gzip_bomb_refused():
    body = gzip.compress(b" " * (4 << 20))
    with pytest.raises(codec.CodecError, match="inflates past"):
        codec.decode(body, max_bytes=1 << 20)


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
    bad_version = json.dumps({"v": 2, "batch_id": "x", "frames": []}).encode()
    with pytest.raises(codec.CodecError, match="version 1"):
        codec.decode(bad_version, gzipped=False)
    doc = codec.to_dict(_batch(), batch_id="x", node="n")
    doc["frames"] = doc["frames"][:1]
    with pytest.raises(codec.CodecError, match="frame not listed"):
        codec.decode(json.dumps(doc).encode(), gzipped=False)
    doc = codec.to_dict(_batch(), batch_id="x", node="n")
    doc["samples"][0][1] = "ten"  # pid must be an int
    with pytest.raises(codec.CodecError, match="malformed batch"):
        codec.decode(json.dumps(doc).encode(), gzipped=False)


def test_rows_counts_every_record():
    assert codec.rows(_batch()) == 50 + 1 + 1 + 1
