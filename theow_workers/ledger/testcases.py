"""Each test's outcome in a run just recorded: written after the run, never at its expense.

A run's tests come with it from two doors: a client's ``theow.run`` record of a
passed run carries its report's counts and flaky tests (``RunReport.tests``); a
failed run's failure carries the ``tests`` fact (its failed and flaky tests). Both
are read again here as untrusted input (``core.testcases.fact``: validated,
bounded, masked) and kept by ``store.testcases``; a run that passes its job on a
commit where tests failed before (a retry) notes each of them passed after the
rerun, whichever door it came through (a forge's webhook job too).

A problem here (a malformed fact, the database briefly away) is logged and
dropped: the run is recorded, and the next run's tests are written all the same.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from theow_client.jsontypes import JsonObject
from theow_workers.core.testcases.fact import FACT, read_counts, read_tests
from theow_workers.store.runs import LedgerRun
from theow_workers.store.testcases import SqlTestcases

if TYPE_CHECKING:
    from theow_workers.runtime import Runtime

log = logging.getLogger("theow.ledger")


def record_tests(rt: Runtime, entry: LedgerRun, tests: JsonObject | None = None) -> int:
    """Keep the tests of a run just recorded: ``tests`` (a passed run's record), else its
    failure's ``tests`` fact; how many outcomes are new. Never raises."""
    try:
        if tests is None and entry.failure_id is not None:
            found = rt.runs.failure_facts(entry.failure_id).get(FACT)
            tests = found if isinstance(found, dict) else None
        facts: JsonObject = {FACT: tests} if tests is not None else {}
        store = SqlTestcases(rt.runs.engine)
        return store.record(entry.agent, entry.run, read_tests(facts), read_counts(facts))
    except Exception as exc:  # the run is recorded; its tests can wait for the next one
        log.warning("run %s: its tests are not recorded: %s", entry.run.id, str(exc)[:300])
        return 0
