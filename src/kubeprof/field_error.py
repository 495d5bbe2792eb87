"""The error for bad input that names its field: one shape for every such error.

A spec, a carbon setting or a record's timestamp that kubeprof cannot use is refused with
"<field>: <problem and fix>", and the field is kept so a caller can point at it.
"""

from __future__ import annotations


class FieldError(ValueError):
    """Bad input; the message is "<field>: <problem>" and `field` names what to fix."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
