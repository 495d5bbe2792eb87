"""The Trace Event Format's JSON schema for the events kubeprof writes, shared by the
`report -f perfetto` tests and the web UI's timeline route tests."""

from __future__ import annotations

_NUM = {"type": "number", "minimum": 0}
_ID = {"type": "integer", "minimum": 0, "maximum": 2**32 - 1}
# The Trace Event Format (JSON object form) for the event types kubeprof writes; anything
# else, a missing field, a wrong type or an unknown key fails.
SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {
            "type": "array",
            "items": {
                "oneOf": [
                    {  # complete event
                        "type": "object",
                        "required": ["ph", "name", "cat", "ts", "dur", "pid", "tid"],
                        "properties": {
                            "ph": {"const": "X"},
                            "name": {"type": "string", "minLength": 1},
                            "cat": {
                                "enum": [
                                    "cpu",
                                    "kernel",
                                    "memcpy",
                                    "memset",
                                    "launch",
                                    "phase",
                                    "off-cpu",
                                ]
                            },
                            "ts": _NUM,
                            "dur": _NUM,
                            "pid": _ID,
                            "tid": _ID,
                            "args": {"type": "object"},
                            "bind_id": {"type": "string", "pattern": "^0x[0-9a-f]+$"},
                            "flow_in": {"const": True},
                            "flow_out": {"const": True},
                        },
                        "additionalProperties": False,
                        "dependentRequired": {"flow_in": ["bind_id"], "flow_out": ["bind_id"]},
                    },
                    {  # begin / end of a nested (CPU) slice
                        "type": "object",
                        "required": ["ph", "name", "cat", "ts", "pid", "tid"],
                        "properties": {
                            "ph": {"enum": ["B", "E"]},
                            "name": {"type": "string", "minLength": 1},
                            "cat": {"const": "cpu"},
                            "ts": _NUM,
                            "pid": _ID,
                            "tid": _ID,
                        },
                        "additionalProperties": False,
                    },
                    {  # async begin / end
                        "type": "object",
                        "required": ["ph", "name", "cat", "ts", "pid", "tid", "id"],
                        "properties": {
                            "ph": {"enum": ["b", "e"]},
                            "name": {"type": "string", "minLength": 1},
                            "cat": {"enum": ["nvtx", "sync"]},
                            "ts": _NUM,
                            "pid": _ID,
                            "tid": _ID,
                            "id": _ID,
                            "args": {"type": "object"},
                        },
                        "additionalProperties": False,
                    },
                    {  # metadata
                        "type": "object",
                        "required": ["ph", "name", "pid", "args"],
                        "properties": {
                            "ph": {"const": "M"},
                            "name": {"enum": ["process_name", "thread_name", "process_sort_index"]},
                            "pid": _ID,
                            "tid": _ID,
                            "args": {"type": "object", "minProperties": 1, "maxProperties": 1},
                        },
                        "additionalProperties": False,
                    },
                ]
            },
        },
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
    "additionalProperties": False,
}
