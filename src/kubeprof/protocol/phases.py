"""The phases of a ProfilingSession, as both sides of the ingest API name them.

The operator moves a session through them (`kubeprof.operator.phases` holds the machine);
the ingest API reports the phase to agents, and agents stop collecting once it leaves
ACTIVE. The values are what `.status.phase` and the API's JSON carry.
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    """`.status.phase` of a ProfilingSession."""

    PENDING = "Pending"  # no target pod found yet; still looking
    RUNNING = "Running"  # agents are profiling target pods
    AGGREGATING = "Aggregating"  # end time passed: late batches drain, then results are computed
    COMPLETED = "Completed"  # results stored in .status and the database
    FAILED = "Failed"  # ended without results (reason in .status)


TERMINAL = frozenset({Phase.COMPLETED, Phase.FAILED})  # never change again
ACCEPTS_DATA = frozenset({Phase.PENDING, Phase.RUNNING, Phase.AGGREGATING})  # ingest stores
ACTIVE = frozenset({Phase.PENDING, Phase.RUNNING})  # agents keep collecting
