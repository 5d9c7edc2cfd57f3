"""Report every passed run to the ledger: one small record, no log, never the build's problem.

Whose a failure is (this change, a broken default branch, a flaky test) is
read from the runs around it, so a passed run counts as much as a failed one.
A failed run's record travels with its failure (the ``run`` fact); a passed
run's is sent here, every time (unlike the sampled passing run that teaches
a job's normal): task ``theow.run`` on the ``passing`` queue, signed as the
agent, or ``POST /api/v1/runs`` with ``THEOW_INTAKE_URL``. An unreachable
broker or intake sends nothing and says so in one line: the build passed.

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


def run_payload(
    where: CiRun, *, job: str, started_at: float | None, finished_at: float
) -> JsonObject:
    """The argument of ``theow.run`` for a passed run of ``job``."""
    report = RunReport(job=job, outcome="passed", run=where.fact(started_at, finished_at))
    return report.to_wire()


def report_run(
    client: TheowClient,
    where: CiRun,
    *,
    job: str,
    started_at: float | None,
    finished_at: float,
) -> str:
    """Send the passed run's record; what happened, in a few words. Never raises for Theow's
    problems (a broker or intake that cannot be reached)."""
    from theow_client.client import UNREACHABLE, one_line
    from theow_client.intake import IntakeRefused, IntakeUnavailable

    payload = run_payload(where, job=job, started_at=started_at, finished_at=finished_at)
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
