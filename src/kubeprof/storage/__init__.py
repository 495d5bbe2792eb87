"""Storage: SQLAlchemy 2 models, Alembic migrations, interning and bulk writes.

The same models serve the embedded SQLite store of `kubeprof record` and the operator's
PostgreSQL database.
"""

from kubeprof.storage.store import Store, StoreError, default_url

__all__ = ["Store", "StoreError", "default_url"]
