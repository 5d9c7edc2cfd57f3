"""``theow runs``: the ledger of job runs (passed and failed, with where they ran and, for a
failed one, whose failure it is), listed and purged."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from theow_workers.cli.output import JsonFlag, fail, load_settings, out, print_json

if TYPE_CHECKING:
    from theow_workers.config import Settings
    from theow_workers.store.runs import SqlRuns

runs_app = typer.Typer(no_args_is_help=True, help=__doc__)


@contextmanager
def _ledger() -> Iterator[tuple[Settings, SqlRuns]]:
    """The settings and the ledger on the configured database (migrated first)."""
    from theow_workers.store import migrate
    from theow_workers.store.results import SqlStore
    from theow_workers.store.runs import SqlRuns

    settings = load_settings()
    migrate(settings.store_url)
    store = SqlStore(settings.store_url)
    try:
        yield settings, SqlRuns(store.engine)
    finally:
        store.dispose()


@runs_app.command("list")
def runs_list(
    repo: Annotated[str | None, typer.Option(help="Only runs of this repository.")] = None,
    job: Annotated[str | None, typer.Option(help="Only runs of this job.")] = None,
    outcome: Annotated[str | None, typer.Option(help="Only passed or only failed runs.")] = None,
    origin: Annotated[
        str | None,
        typer.Option(help="Only failed runs of this origin: change, main, flaky, infra, unknown."),
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many (up to 1,000).")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """The newest runs first: where each ran, its outcome and, failed, whose it is."""
    from theow_workers.core.history.model import Origin, Outcome
    from theow_workers.store.runs import MAX_LIST

    if outcome is not None and outcome not in {o.value for o in Outcome}:
        raise fail(f"--outcome {outcome!r}: use passed or failed", 2)
    if origin is not None and origin not in {o.value for o in Origin}:
        raise fail(f"--origin {origin!r}: use {', '.join(o.value for o in Origin)}", 2)
    if not 1 <= limit <= MAX_LIST:
        raise fail(f"--limit {limit}: use a number from 1 to {MAX_LIST:,}", 2)
    with _ledger() as (_, ledger):
        found = ledger.listed(
            repo=repo,
            job=job,
            outcome=Outcome(outcome) if outcome else None,
            origin=origin,
            limit=limit,
        )
    if as_json:
        print_json([entry.to_dict() for entry in found])
        return
    columns = [
        "finished",
        "repo",
        "job",
        "where",
        "sha",
        "try",
        "outcome",
        "origin",
        "then",
        "culprit",
        "failure",
    ]
    table = Table(*columns, title=f"{len(found)} run(s)")
    for entry in found:
        run = entry.run
        table.add_row(
            datetime.fromtimestamp(run.finished_at, UTC).isoformat()[:19],
            run.repo,
            run.job,
            f"#{run.pr}" if run.pr else run.branch,
            run.sha[:12],
            str(run.attempt),
            run.outcome.value,
            entry.origin or "-",
            entry.origin_then or "-",
            (entry.culprit or "")[:12],
            (entry.failure_id or "")[:12],
        )
    out.print(table)


@runs_app.command("purge")
def runs_purge(
    older_than_days: Annotated[
        float | None,
        typer.Option(
            help="Delete runs finished longer ago than this many days "
            "(default THEOW_RUN_RETENTION_DAYS, 90)."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Delete the runs past the retention, and their tests' outcomes (run it daily, e.g.
    from cron)."""
    with _ledger() as (settings, ledger):
        days = settings.run_retention_days if older_than_days is None else older_than_days
        if days <= 0:
            raise fail(f"--older-than-days {days:g}: use a positive number of days", 2)
        deleted = ledger.purge(days)
    if as_json:
        print_json({"deleted": deleted, "older_than_days": days})
        return
    out.print(f"{deleted:,} run(s) finished more than {days:g} days ago deleted")
