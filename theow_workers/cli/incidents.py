"""``theow incidents``: what is broken now, in one job or fleet-wide, and since which commit."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from theow_client.terminal import printable
from theow_workers.cli.output import JsonFlag, fail, load_settings, out, print_json
from theow_workers.core.history.incident import TIMELINE_HEAD

if TYPE_CHECKING:
    from theow_workers.core.history.incident import Incident
    from theow_workers.views.incidents import RunReads

incidents_app = typer.Typer(
    no_args_is_help=True,
    help="Incidents: a broken default branch, an infrastructure cause, a flaky cause.",
)
CAUSE_SHOWN = 80


def _run_reads() -> RunReads:
    """The ledger's runs on the configured database (migrated)."""
    from theow_workers.store import migrate
    from theow_workers.store.results import SqlStore
    from theow_workers.store.run_reads import SqlRunReads
    from theow_workers.store.runs import configured_branches

    settings = load_settings()
    try:
        configured = configured_branches(settings.default_branches)
    except ValueError as bad:
        raise fail(str(bad), 2) from None
    migrate(settings.store_url)
    return SqlRunReads(SqlStore(settings.store_url).engine, configured)


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M")


def _where(incident: Incident) -> str:
    if incident.repo:
        return f"{incident.repo} {incident.job}"
    return f"{len(incident.repos)} repositories"


@incidents_app.command("list")
def incidents_list(
    state: Annotated[str | None, typer.Option(help="open or closed.")] = None,
    kind: Annotated[str | None, typer.Option(help="main, infra or flaky.")] = None,
    limit: int = 50,
    as_json: JsonFlag = False,
) -> None:
    """Incidents of the last 30 days, newest news first."""
    from theow_workers.views.incidents import (
        BadIncidentQuery,
        IncidentFilter,
        incident_list,
        summary,
    )

    where = IncidentFilter(state=state or "", kind=kind or "")
    try:
        where.checked()
    except BadIncidentQuery as bad:
        raise fail(str(bad), 2) from None
    found = incident_list(_run_reads(), where, time.time(), limit=limit)
    if as_json:
        print_json({"incidents": [summary(i) for i in found]})
        return
    table = Table(
        "id", "kind", "state", "where", "first seen", "last seen", "runs", "culprit", "cause",
        title=f"{len(found)} incident(s)",
    )  # fmt: skip
    for i in found:
        culprit = i.culprit or (f"flip {i.flip_rate:.0%}" if i.flip_rate is not None else "")
        table.add_row(
            i.id,
            i.kind.value,
            i.state.value,
            printable(_where(i)),
            _when(i.first_seen),
            _when(i.last_seen),
            str(i.runs_affected),
            printable(culprit[:12]),
            printable(i.cause[:CAUSE_SHOWN]),
        )
    out.print(table)


@incidents_app.command("show")
def incidents_show(incident_id: str, as_json: JsonFlag = False) -> None:
    """One incident: where, since when, its culprit or flip rate, and its timeline."""
    from theow_workers.views.incidents import BadIncidentQuery, incident_detail

    try:
        incident = incident_detail(_run_reads(), incident_id, time.time())
    except BadIncidentQuery as bad:
        raise fail(str(bad), 2) from None
    if incident is None:
        raise fail(f"no incident {incident_id!r} in the last 30 days (see `theow incidents list`)")
    if as_json:
        print_json(incident.to_dict())
        return
    # Causes, repositories and jobs come from build logs and webhooks: plain text only.
    lines = [
        f"incident {incident.id}: {incident.kind.value}, {incident.state.value}",
        f"where: {_where(incident)}"
        + (f" ({', '.join(incident.repos)})" if not incident.repo else ""),
        f"cause: {incident.cause}",
        f"first seen {_when(incident.first_seen)}, last seen {_when(incident.last_seen)}"
        + (f", closed {_when(incident.closed_at)}" if incident.closed_at is not None else ""),
        f"runs affected: {incident.runs_affected}, minutes lost: {incident.minutes_lost:.0f}",
    ]
    if incident.culprit:
        lines.append(f"culprit: {incident.culprit}" + (f", fixed by {incident.fixed_by}"
                                                        if incident.fixed_by else ""))  # fmt: skip
    if incident.flip_rate is not None:
        lines.append(f"flip rate: {incident.flip_rate:.0%} over the job's recent runs")
    lines.append("timeline:")
    for n, moment in enumerate(incident.timeline):
        if incident.omitted and n == TIMELINE_HEAD:
            lines.append(f"  … {incident.omitted} more")
        lines.append(
            f"  {_when(moment.at)}  {moment.what:<9} {moment.repo} {moment.branch} {moment.sha[:12]}"
            f"  (run {moment.run})"
        )
    for line in lines:
        out.print(printable(line), highlight=False, markup=False)
