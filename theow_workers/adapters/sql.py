"""Moved to ``theow_workers.store``; kept for the replay modules until their SQL moves there too."""

from theow_workers.store.results import SqlStore
from theow_workers.store.schema import (
    MIGRATIONS,
    AmbiguousId,
    AttemptRow,
    Base,
    FailureRow,
    RuleStatsRow,
    VerdictRow,
    expand_id,
    make_engine,
    migrate,
)

__all__ = [
    "MIGRATIONS",
    "AmbiguousId",
    "AttemptRow",
    "Base",
    "FailureRow",
    "RuleStatsRow",
    "SqlStore",
    "VerdictRow",
    "expand_id",
    "make_engine",
    "migrate",
]
