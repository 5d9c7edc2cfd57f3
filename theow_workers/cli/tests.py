"""``theow tests``: each test's history from the JUnit reports the client sent, and the flaky
ones, the costliest first."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from theow_client.terminal import printable
from theow_workers.cli.output import JsonFlag, fail, load_settings, out, print_json

if TYPE_CHECKING:
    from theow_workers.core.testcases.flakiness import TestHistory
    from theow_workers.views.tests import OutcomeReads

tests_app = typer.Typer(
    no_args_is_help=True,
    help="Tests: each test's history in its jobs, and the flaky ones (docs/junit.md).",
)
NAME_SHOWN = 80


def _reads() -> OutcomeReads:
    """The tests' outcomes in the ledger on the configured database (migrated)."""
    from theow_workers.store import migrate
    from theow_workers.store.results import SqlStore
    from theow_workers.store.testcases import SqlTestcases

    settings = load_settings()
    migrate(settings.store_url)
    return SqlTestcases(SqlStore(settings.store_url).engine)


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M")


def _flip(found: TestHistory) -> str:
    return f"{found.flip_rate:.0%}" if found.flip_rate is not None else "-"


@tests_app.command("flaky")
def tests_flaky(
    repo: Annotated[str | None, typer.Option(help="Only tests of this repository.")] = None,
    job: Annotated[str | None, typer.Option(help="Only tests of this job.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many (up to 1,000).")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """The flaky tests of the last 30 days, the costliest first (runs failed, then minutes)."""
    from theow_workers.views.tests import BadTestQuery, flaky_list

    try:
        found = flaky_list(_reads(), time.time(), repo=repo, job=job, limit=limit)
    except BadTestQuery as bad:
        raise fail(f"--{bad}", 2) from None
    if as_json:
        print_json({"tests": [h.to_dict() for h in found]})
        return
    columns = ("test", "repo", "job", "failed", "flaky", "flip", "minutes", "last seen", "why")
    table = Table(*columns, title=f"{len(found)} flaky test(s)")
    # Names, repositories and jobs come from build agents' reports: plain text only.
    for h in found:
        table.add_row(
            printable(h.test[:NAME_SHOWN]),
            printable(h.repo),
            printable(h.job),
            str(h.failed),
            str(h.flaky_runs),
            _flip(h),
            f"{h.minutes_lost:.0f}",
            _when(h.last_seen),
            printable(h.reason),
        )
    out.print(table)


@tests_app.command("show")
def tests_show(
    name: Annotated[str, typer.Argument(help="classname::name, or the name after its ::")],
    as_json: JsonFlag = False,
) -> None:
    """One test in each job it failed in: flaky or not and why, its flip rate, first and last
    seen, and its recent outcomes."""
    from theow_workers.views.tests import BadTestQuery, histories_of

    try:
        found = histories_of(_reads(), name, time.time())
    except BadTestQuery as bad:
        raise fail(str(bad), 2) from None
    if not found:
        raise fail(f"no test {name[:100]!r} failed in the last 30 days (see `theow tests flaky`)")
    if as_json:
        print_json({"tests": [h.to_dict(recent=True) for h in found]})
        return
    lines: list[str] = []
    for h in found:
        lines += [
            f"test {h.test}",
            f"where: {h.repo} {h.job}",
            f"flaky: {'yes' if h.flaky else 'no'} ({h.reason})",
            f"failed {h.failed} run(s), flaky in {h.flaky_runs}, passed {h.passed}; "
            f"flip rate {_flip(h)}; minutes lost {h.minutes_lost:.0f}",
            f"first seen {_when(h.first_seen)}, last seen {_when(h.last_seen)}",
            "recent:",
        ]
        for m in h.recent:
            where = f"#{m.pr}" if m.pr else m.branch
            said = f"  {m.message[:120]}" if m.message else ""
            lines.append(
                f"  {_when(m.at)}  {m.outcome:<18} {where} {m.sha[:12]}  (run {m.run}){said}"
            )
        lines.append("")
    for line in lines[:-1]:
        out.print(printable(line), highlight=False, markup=False)
