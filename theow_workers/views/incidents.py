"""Incidents as the screens show them: derived from the ledger's recent runs on each read.

The ledger keeps runs, not incidents: an incident is what ``core.history.incidents``
derives from the runs of the last ``WINDOW_DAYS`` (at most ``RUN_LIMIT`` runs, the
newest), with each failed run's decided origin. ``RunReads`` is the port: the SQL
ledger answers it (``theow_workers.store``), ``views.memory.MemoryRunReads`` is
its in-memory twin. The CLI (``theow incidents``), the console page and
``GET /api/v1/incidents`` read these functions and nothing else.

>>> from theow_workers.views.memory import MemoryRunReads
>>> incident_list(MemoryRunReads([]), IncidentFilter(state="open"), now=0.0)
[]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from theow_client.jsontypes import JsonObject
from theow_workers.core.history.incident import Incident, Kind, Rules, State
from theow_workers.core.history.incidents import incidents
from theow_workers.core.history.model import Decision, Run

WINDOW_DAYS = 30
RUN_LIMIT = 50_000
SHOWN = 50
ID_PREFIX_MIN = 4  # `theow incidents show` takes a prefix this long or longer
KINDS = tuple(k.value for k in Kind)
STATES = tuple(s.value for s in State)


@dataclass(frozen=True)
class RecentRuns:
    """The runs finished since a time, oldest first, with what was decided of the failed ones."""

    runs: Sequence[Run]
    decisions: Mapping[str, Decision] = field(default_factory=dict)  # run id -> its origin now
    default_branches: Mapping[str, str] = field(default_factory=dict)  # repo -> its branch
    truncated: bool = False  # more runs finished since then than the limit: the oldest left out


class RunReads(Protocol):
    def recent(self, since: float, limit: int) -> RecentRuns:
        """Runs finished at ``since`` or later, the newest ``limit`` of them, oldest first."""
        ...


class BadIncidentQuery(ValueError):
    """A filter value or an id the screens cannot use: one line saying which and why."""


@dataclass(frozen=True)
class IncidentFilter:
    state: str = ""  # open, closed or "" for both
    kind: str = ""  # main, infra, flaky or "" for all

    def checked(self) -> IncidentFilter:
        if self.state and self.state not in STATES:
            raise BadIncidentQuery(f"state {self.state[:40]!r}: use {', '.join(STATES)}")
        if self.kind and self.kind not in KINDS:
            raise BadIncidentQuery(f"kind {self.kind[:40]!r}: use {', '.join(KINDS)}")
        return self

    def keeps(self, incident: Incident) -> bool:
        return (not self.state or incident.state.value == self.state) and (
            not self.kind or incident.kind.value == self.kind
        )


def derived(reads: RunReads, now: float, rules: Rules | None = None) -> list[Incident]:
    """Every incident of the window, newest news first."""
    recent = reads.recent(now - WINDOW_DAYS * 24 * 3600, RUN_LIMIT)
    rules = rules or Rules()
    if recent.default_branches:
        rules = Rules(
            default_branch=rules.default_branch,
            default_branches={**recent.default_branches, **rules.default_branches},
            infra_window=rules.infra_window,
            infra_repos=rules.infra_repos,
            flaky_recent=rules.flaky_recent,
            flaky_quiet_runs=rules.flaky_quiet_runs,
        )
    found = incidents(recent.runs, recent.decisions, rules, now=now)
    return sorted(found, key=lambda i: (i.closed_at or i.last_seen, i.id), reverse=True)


def incident_list(
    reads: RunReads,
    where: IncidentFilter,
    now: float,
    rules: Rules | None = None,
    limit: int = SHOWN,
) -> list[Incident]:
    """The incidents ``where`` keeps, newest news first, at most ``limit``."""
    where = where.checked()
    return [i for i in derived(reads, now, rules) if where.keeps(i)][: max(0, limit)]


def incident_detail(
    reads: RunReads, incident_id: str, now: float, rules: Rules | None = None
) -> Incident | None:
    """One incident by its id or a prefix of it (``ID_PREFIX_MIN`` characters or more)."""
    wanted = incident_id.strip().lower()
    if len(wanted) < ID_PREFIX_MIN or not wanted.isalnum():
        raise BadIncidentQuery(
            f"incident id {incident_id[:40]!r}: give the id or its first {ID_PREFIX_MIN}+ characters"
        )
    found = [i for i in derived(reads, now, rules) if i.id.startswith(wanted)]
    if len(found) > 1:
        raise BadIncidentQuery(f"incident id {incident_id!r} is the start of {len(found)} ids")
    return found[0] if found else None


def summary(incident: Incident) -> JsonObject:
    """One incident as a list shows it (the timeline left out)."""
    shown = incident.to_dict()
    return {k: v for k, v in shown.items() if k not in ("timeline", "omitted")}


def api_incidents(
    reads: RunReads, where: IncidentFilter, now: float, rules: Rules | None = None
) -> JsonObject:
    """``GET /api/v1/incidents``: the list with the filter it was read with."""
    found = incident_list(reads, where, now, rules)
    return {
        "incidents": [summary(i) for i in found],
        "state": where.state or None,
        "kind": where.kind or None,
        "window_days": WINDOW_DAYS,
    }
