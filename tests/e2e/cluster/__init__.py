"""A real Kubernetes control plane (built from Go modules) plus kwok nodes and PostgreSQL.

Used by the e2e pytest fixtures and by ``python -m tests.e2e.cluster up|down`` for humans.
Standard library only, so it runs before the project's virtualenv exists.
"""

from .controlplane import Cluster, ClusterError
from .postgres import Postgres

__all__ = ["Cluster", "ClusterError", "Postgres"]
