"""What the classification asks of a history: two indexed questions, answered by the ledger or a file.

The SQL ledger (``theow_workers.store``) answers them at verdict time; an in-memory
history answers them for ``theow history eval``. Both answer the same way
(``tests/contract``). Times are seconds since the epoch; ``until`` is inclusive,
so the runs visible at a verdict are those with ``finished_at <= until``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from theow_workers.core.history.model import Run


class History(Protocol):
    def job_runs(self, repo: str, job: str, *, since: float, until: float) -> Sequence[Run]:
        """Every run, passed or failed, of ``job`` in ``repo`` finished in [since, until], oldest first."""
        ...

    def cause_failures(self, cause: str, *, since: float, until: float) -> Sequence[Run]:
        """Every failed run of ``cause``, in any repository and job, finished in [since, until], oldest first."""
        ...
