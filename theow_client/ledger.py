"""Report every passed run to the ledger: one small record, no log, never the build's problem.

Whose a failure is (this change, a broken default branch, a flaky test) is
read from the runs around it, so a passed run counts as much as a failed one.
A failed run's record travels with its failure (the ``run`` fact); a passed
run's is sent here, every time (unlike the sampled passing run that teaches
a job's normal): task ``theow.run`` on the ``passing`` queue, signed as the
agent, or ``POST /api/v1/runs`` with ``THEOW_INTAKE_URL``. An unreachable
broker or intake sends nothing and says so in one line: the build passed.

With ``run --junit``, the record carries what the run's reports say of its
tests, cheaply: the counts and the flaky tests (those that failed, then passed
on a rerun within the run), at most ``MAX_FLAKY_SENT`` of them, each name and
message bounded and masked as the report reader keeps them (:func:`passed_tests`).

>>> report_run(client, where, job="github:o/r/CI/test", started_at=t0, finished_at=t1)  # doctest: +SKIP
'run of github:o/r/CI/test recorded as passed'
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from theow_client import names
from theow_client.ci_run import CiRun
from theow_client.jsontypes import JsonObject
from theow_client.messages import RunReport

if TYPE_CHECKING:
    from theow_client.client import TheowClient

log = logging.getLogger("theow.client")

MAX_FLAKY_SENT = 50  # flaky tests a passed run's record names; the rest are counted
FLAKY_MESSAGE_CHARS = 200
TEST_FIELDS = ("classname", "name", "file", "line", "outcome", "kind")


def passed_tests(fact: JsonObject | None) -> JsonObject | None:
    """What a passed run's record says of its tests: the report's counts and its flaky
    tests (``fact``: what ``junit.tests_fact`` read, the shape of a failure's ``tests``).

    >>> passed_tests({"tests": [
    ...     {"classname": "c", "name": "t1", "outcome": "flaky", "message": "x" * 500},
    ...     {"classname": "c", "name": "t2", "outcome": "failed", "message": "boom"}],
    ...     "summary": {"tests": 9, "failed": 1, "errors": 0, "skipped": 0, "flaky": 1}})
    ... # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
    {'tests': [{'classname': 'c', 'name': 't1', 'outcome': 'flaky', 'message': 'xxx...'}],
     'summary': {'tests': 9, 'failed': 1, 'errors': 0, 'skipped': 0, 'flaky': 1}}
    """
    if not fact:
        return None
    listed = fact.get("tests")
    summary = fact.get("summary")
    flaky: list[JsonObject] = []
    for test in listed if isinstance(listed, list) else []:
        if isinstance(test, dict) and test.get("outcome") == "flaky":
            kept: JsonObject = {k: test[k] for k in TEST_FIELDS if k in test}
            message = test.get("message")
            if isinstance(message, str):
                kept["message"] = message[:FLAKY_MESSAGE_CHARS]
            flaky.append(kept)
    counts: JsonObject = dict(summary) if isinstance(summary, dict) else {}
    if len(flaky) > MAX_FLAKY_SENT:
        unlisted = counts.get("unlisted")
        more = unlisted if isinstance(unlisted, int) else 0
        counts["unlisted"] = more + len(flaky) - MAX_FLAKY_SENT
    return {"tests": flaky[:MAX_FLAKY_SENT], "summary": counts}


def run_payload(
    where: CiRun,
    *,
    job: str,
    started_at: float | None,
    finished_at: float,
    tests: JsonObject | None = None,
) -> JsonObject:
    """The argument of ``theow.run`` for a passed run of ``job`` (``tests``: its reports,
    as ``junit.tests_fact`` read them)."""
    report = RunReport(
        job=job,
        outcome="passed",
        run=where.fact(started_at, finished_at),
        tests=passed_tests(tests),
    )
    return report.to_wire()


def report_run(
    client: TheowClient,
    where: CiRun,
    *,
    job: str,
    started_at: float | None,
    finished_at: float,
    tests: JsonObject | None = None,
) -> str:
    """Send the passed run's record; what happened, in a few words. Never raises for Theow's
    problems (a broker or intake that cannot be reached)."""
    from theow_client.client import UNREACHABLE, one_line
    from theow_client.intake import IntakeRefused, IntakeUnavailable

    payload = run_payload(
        where, job=job, started_at=started_at, finished_at=finished_at, tests=tests
    )
    if client.intake_url:
        try:
            intake = client.intake
            assert intake is not None
            intake.report_run(payload)
        except (IntakeUnavailable, IntakeRefused, ValueError) as exc:  # a bad URL too
            return f"run of {job} not recorded: {one_line(exc)}"
        return f"run of {job} recorded as passed"
    try:
        client.app.send_task(
            names.TASK_RUN,
            args=[client.signed(names.TASK_RUN, payload)],
            queue=names.QUEUE_PASSING,
            retry=False,
            ignore_result=True,
            argsrepr=f"[run of {job!r}]",
            kwargsrepr="{}",
        )
    except UNREACHABLE as exc:
        client.close()
        return f"run of {job} not recorded: {one_line(exc)}"
    return f"run of {job} recorded as passed"
