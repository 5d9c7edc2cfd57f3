"""The one store: every SQL statement of Theow, behind the Store port.

``schema`` holds the tables, the engine and the migrations; ``results`` the
resolve path (failures, attempts, verdicts, rule stats); ``explore`` the
explorations and proposals; ``figures`` the counts that ``theow meow`` and
the Prometheus metrics both read; ``replay``, ``replay_chunk`` and
``replay_explore`` the replay's jobs and items, a chunk's writes and its
explorations; ``reads`` the read model the screens read (``SqlReads``, the
``views.ports.Reads`` Protocol: failures, proposals, figures, replays). Outside this package (and the Alembic migrations) nothing
imports SQLAlchemy: callers get dataclasses.
"""

from theow_workers.store.results import SqlStore
from theow_workers.store.schema import (
    AmbiguousId,
    StoreError,
    StoreUnavailable,
    make_engine,
    migrate,
    schema_state,
    sqlite_file,
)

__all__ = [
    "AmbiguousId",
    "SqlStore",
    "StoreError",
    "StoreUnavailable",
    "make_engine",
    "migrate",
    "schema_state",
    "sqlite_file",
]
