"""Property: the decoder answers any input with a Batch or a CodecError, nothing else.

Arbitrary JSON documents, arbitrary bytes and gzip of either: a crash here would be a 500
from the ingest, which agents retry forever. (The e2e suite checks the other half against
PostgreSQL: what decodes can be stored.)
"""

import gzip
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from kubeprof.model import Batch
from kubeprof.protocol import codec
from kubeprof.protocol.limits import IngestLimits

LIMITS = IngestLimits(max_json_bytes=1 << 20, max_values=20_000, max_rows=1000)

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=40,
)

record_keys = st.sampled_from(
    [
        "v",
        "batch_id",
        "node",
        "samples",
        "processes",
        "gpu_activities",
        "gpu_metrics",
        "counters",
        "frames",
    ]
)
docs = st.dictionaries(record_keys, json_values, max_size=9).map(
    lambda d: {"v": 1, "batch_id": "b", "frames": [], **d}
)


def _decode(body: bytes) -> None:
    try:
        out = codec.decode(body, limits=LIMITS)
    except codec.CodecError as exc:
        assert exc.status in (400, 413, 422) and str(exc)
        return
    assert isinstance(out[2], Batch)


@settings(max_examples=300, deadline=None)
@given(doc=docs, zipped=st.booleans())
def test_any_json_document_gives_a_batch_or_a_codec_error(doc, zipped):
    raw = json.dumps(doc).encode()
    _decode(gzip.compress(raw) if zipped else raw)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=300), prefix=st.sampled_from([b"", b"\x1f\x8b", b"{"]))
def test_any_bytes_give_a_codec_error(body, prefix):
    _decode(prefix + body)
