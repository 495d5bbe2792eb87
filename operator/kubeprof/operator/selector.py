"""Kubernetes label selectors (metav1.LabelSelector): validated as the API server does, then
written as the `labelSelector=` query the API understands.

The checks are those of apimachinery's `ValidateLabelSelector` (keys are qualified names,
values label values, operators In/NotIn/Exists/DoesNotExist with values exactly for In and
NotIn), with the API server's wording. Only a selector that passed them is turned into a
query string, so no key or value can carry a separator (`,`, `=`, `!`, `(`, space) into
the query and change its meaning: a key " " is refused here instead of becoming the
query " " (which the API server reads as "everything").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
LABEL_VALUE_MAX = 63
NAME_MAX = 63
PREFIX_MAX = 253

_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_FORMAT = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc')"
)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem of a selector, at a field path such as `spec.target.podSelector.matchLabels`."""

    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def key_problem(key: str) -> str | None:
    """Why `key` is not a label key (a qualified name: `[prefix/]name`), or None."""
    parts = key.split("/")
    if len(parts) > 2:
        return (
            "a label key is a name with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName'); it has more than one '/'"
        )
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > PREFIX_MAX:
            return f"prefix part must be no more than {PREFIX_MAX} characters"
        if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return (
                "prefix part must be a lowercase DNS subdomain (e.g. 'example.com': "
                "lowercase alphanumerics, '-' and '.')"
            )
    if not name:
        return "name part must be non-empty"
    if len(name) > NAME_MAX:
        return f"name part must be no more than {NAME_MAX} characters"
    if not _QUALIFIED_NAME.fullmatch(name):
        return f"name part {_NAME_FORMAT}"
    return None


def value_problem(value: str) -> str | None:
    """Why `value` is not a label value (empty, or a name of at most 63 characters), or None."""
    if len(value) > LABEL_VALUE_MAX:
        return f"must be no more than {LABEL_VALUE_MAX} characters"
    if value and not _QUALIFIED_NAME.fullmatch(value):
        return f"a label value must be empty or {_NAME_FORMAT.removeprefix('must ')}"
    return None


def _invalid(path: str, value: Any, problem: str) -> FieldError:
    return FieldError(path, f"Invalid value: {value!r}: {problem}")


def _value_invalid(path: str, value: Any, not_text: str) -> list[FieldError]:
    """The problem of one label value at `path` ([] when it is a valid one)."""
    if not isinstance(value, str):
        return [_invalid(path, value, not_text)]
    problem = value_problem(value)
    return [_invalid(path, value, problem)] if problem else []


def validate_labels(labels: Any, path: str) -> list[FieldError]:
    """Problems of a label map (matchLabels, nodeSelector): keys and string values."""
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        return [
            FieldError(path, f"must be a map of label keys to values, got {type(labels).__name__}")
        ]
    out = []
    for key, value in labels.items():
        problem = key_problem(key) if isinstance(key, str) else "label keys are strings"
        if problem:
            out.append(_invalid(path, key, problem))
            continue
        out += _value_invalid(f"{path}.{key}", value, "label values are strings (quote it in YAML)")
    return out


def _validate_requirement(req: Any, path: str) -> list[FieldError]:
    if not isinstance(req, Mapping):
        return [FieldError(path, "must be an object with key, operator and values")]
    out = []
    key, op, values = req.get("key"), req.get("operator"), req.get("values")
    if not isinstance(key, str):
        out.append(FieldError(f"{path}.key", "Required value: the label key to test"))
    elif p := key_problem(key):
        out.append(_invalid(f"{path}.key", key, p))
    if op not in OPERATORS:
        out.append(
            FieldError(
                f"{path}.operator",
                f"Unsupported value: {op!r}: supported values: {', '.join(OPERATORS)}",
            )
        )
        return out
    if values is not None and not isinstance(values, list):
        return [*out, FieldError(f"{path}.values", "must be a list of strings")]
    if op in ("In", "NotIn") and not values:
        out.append(
            FieldError(
                f"{path}.values",
                "Required value: must be specified when `operator` is 'In' or 'NotIn'",
            )
        )
    if op in ("Exists", "DoesNotExist") and values:
        out.append(
            FieldError(
                f"{path}.values",
                "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )
        )
    for i, v in enumerate(values or []):
        out += _value_invalid(f"{path}.values[{i}]", v, "label values are strings")
    return out


def validate(selector: Any, path: str) -> list[FieldError]:
    """Every problem of a metav1.LabelSelector, each naming its field under `path`."""
    if not isinstance(selector, Mapping):
        return [FieldError(path, "must be an object with matchLabels and/or matchExpressions")]
    out = validate_labels(selector.get("matchLabels"), f"{path}.matchLabels")
    exprs = selector.get("matchExpressions")
    if exprs is not None and not isinstance(exprs, list):
        return [*out, FieldError(f"{path}.matchExpressions", "must be a list")]
    for i, req in enumerate(exprs or []):
        out.extend(_validate_requirement(req, f"{path}.matchExpressions[{i}]"))
    return out


def to_query(selector: Mapping[str, Any]) -> str:
    """The `labelSelector=` query of a selector that `validate` passed (ValueError otherwise).

    matchLabels k: v is the requirement `k=v` (apimachinery turns it into `k in (v)`, the
    same set); terms are ANDed, so their order does not matter; values are sorted to make
    the string stable.
    """
    problems = validate(selector, "selector")
    if problems:
        raise ValueError(str(problems[0]))
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], sorted(set(e.get("values") or []))
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        else:
            parts.append(f"!{key}")
    return ",".join(parts)
