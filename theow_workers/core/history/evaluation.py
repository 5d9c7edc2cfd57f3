"""``theow history eval``'s core: history rows to runs, every failure's origin, and the score.

A history row is one job run: ``{"id", "repo", "job", "branch", "sha",
"base_sha" (pull requests), "pr" (pull requests), "attempt", "outcome":
"failed"|"passed", "finished_at", "log" (failed runs)}``, with ``"rule"`` and
``"category"`` when a rule matched it. Each failed run gets its origin as it
stands at the end of the history and as it stood when it finished
(``origin_then``: the history up to its ``finished_at``). With truth rows
(``{"id", "origin", "culprit"}``) the summary adds the accuracy, each origin's
precision and recall, and how often the culprit was right.

>>> rows = [{"id": "1", "repo": "o/r", "job": "t", "branch": "main", "sha": "a",
...          "outcome": "passed", "finished_at": 1},
...         {"id": "2", "repo": "o/r", "job": "t", "branch": "pr-7", "pr": 7, "sha": "b",
...          "base_sha": "a", "outcome": "failed", "finished_at": 2, "log": "E assert 1 == 2"}]
>>> [(r.id, r.origin.value, r.origin_then.value) for r in evaluate(run_from_row(r) for r in rows)]
[('2', 'change', 'change')]
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from theow_client.jsontypes import JsonObject
from theow_workers.core.history.cause import cause_of
from theow_workers.core.history.classify import DEFAULT_SETTINGS, Settings, decide
from theow_workers.core.history.memory import MemoryHistory
from theow_workers.core.history.model import Decision, Origin, Outcome, Run

MAX_FIELD_CHARS = 512  # an id, a repository, a job, a branch, a sha


class RowError(ValueError):
    """A history or truth row that cannot be read; the message names the field and why."""


@dataclass(frozen=True)
class Result:
    """One failed run's origin as it stands, and as it stood at its verdict."""

    id: str
    final: Decision
    then: Decision

    @property
    def origin(self) -> Origin:
        return self.final.origin

    @property
    def origin_then(self) -> Origin:
        return self.then.origin

    def row(self) -> JsonObject:
        return {
            "id": self.id,
            "origin": self.final.origin.value,
            "culprit": self.final.culprit,
            "origin_then": self.then.origin.value,
            "culprit_then": self.then.culprit,
            "fixed_by": self.final.fixed_by,
            "flip_rate": self.final.flip_rate,
            "reason": self.final.reason,
            "reason_then": self.then.reason,
        }


def run_from_row(row: JsonObject) -> Run:
    """A history row as a :class:`Run`, its cause read from its log; ``RowError`` when invalid."""
    outcome = row.get("outcome")
    if outcome not in ("failed", "passed"):
        raise RowError(f'\'outcome\' must be "failed" or "passed", got {outcome!r}')
    attempt = row.get("attempt", 1)
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise RowError(f"'attempt' must be a whole number from 1, got {attempt!r}")
    log = row.get("log")
    if log is not None and not isinstance(log, str):
        raise RowError(f"'log' must be text, got {type(log).__name__}")
    rule, category = _text(row, "rule", required=False), _text(row, "category", required=False)
    cause = None
    if outcome == "failed" and (log or rule):
        found = cause_of(log or "", rule=rule, category=category)
        cause, category = found.key, found.category
    return Run(
        id=_text(row, "id") or "",
        repo=_text(row, "repo") or "",
        job=_text(row, "job") or "",
        branch=_text(row, "branch") or "",
        sha=_text(row, "sha") or "",
        outcome=Outcome(outcome),
        finished_at=_time(row, "finished_at"),
        cause=cause,
        category=category,
        pr=_text(row, "pr", required=False),
        base_sha=_text(row, "base_sha", required=False),
        attempt=attempt,
    )


def evaluate(
    runs: Iterable[Run],
    *,
    default_branch: str = "main",
    settings: Settings = DEFAULT_SETTINGS,
    progress: Callable[[], None] | None = None,
) -> list[Result]:
    """Every failed run's origin, in the order the runs finished (see the module's note).

    ``default_branch`` is every repository's but one's with no run on it: that one
    takes the branch its changes are based on (``master``, ``trunk``), see
    :func:`default_branches`.
    """
    ordered = sorted(runs, key=lambda r: r.finished_at)
    history = MemoryHistory(ordered)
    branches = default_branches(ordered, default_branch)
    results = []
    for run in (r for r in ordered if r.failed):
        branch = branches.get(run.repo, default_branch)
        then = decide(
            run,
            history,
            default_branch=branch,
            settings=settings,
            until=run.finished_at,
            branches=branches,
        )
        final = decide(run, history, default_branch=branch, settings=settings, branches=branches)
        results.append(Result(run.id, final, then))
        if progress is not None:
            progress()
    return results


def default_branches(runs: Iterable[Run], default_branch: str = "main") -> dict[str, str]:
    """Each repository's default branch, as a history file shows it.

    ``default_branch`` where the repository has a run on it (not a pull request's); else
    the branch whose commits its pull requests (or merge queues) are based on, the one
    with most runs of them; else its branch with most runs outside pull requests.

    >>> runs = [Run("1", "o/r", "t", "master", "a", Outcome.PASSED, 1.0),
    ...         Run("2", "o/r", "t", "fix", "b", Outcome.PASSED, 2.0, pr="3", base_sha="a")]
    >>> default_branches(runs)
    {'o/r': 'master'}
    """
    bases: dict[str, set[str]] = defaultdict(set)
    based: dict[str, Counter[str]] = defaultdict(Counter)  # repo -> branch -> runs of bases
    other: dict[str, Counter[str]] = defaultdict(Counter)  # repo -> branch -> runs
    kept = list(runs)
    for run in kept:
        if run.base_sha is not None:
            bases[run.repo].add(run.base_sha)
    found: dict[str, str] = {}
    for run in kept:
        if run.pr is not None:
            continue
        if run.branch == default_branch:
            found[run.repo] = default_branch
        other[run.repo][run.branch] += 1
        if run.sha in bases[run.repo]:
            based[run.repo][run.branch] += 1
    for repo, counted in other.items():
        found.setdefault(repo, (based.get(repo) or counted).most_common(1)[0][0])
    return found


def truth_from_row(row: JsonObject) -> tuple[str, Origin, str | None]:
    """A truth row: (id, origin, culprit); ``RowError`` when invalid."""
    origin = row.get("origin")
    if origin not in {o.value for o in Origin}:
        choices = ", ".join(o.value for o in Origin)
        raise RowError(f"'origin' must be one of {choices}, got {origin!r}")
    return _text(row, "id") or "", Origin(str(origin)), _text(row, "culprit", required=False)


def summary(
    results: list[Result], truth: Mapping[str, tuple[Origin, str | None]] | None = None
) -> JsonObject:
    """Counts per origin and, with ``truth``, accuracy, precision/recall and culprit accuracy."""
    report: JsonObject = {
        "failed": len(results),
        "origins": _counts(r.origin for r in results),
        "origins_then": _counts(r.origin_then for r in results),
    }
    if truth is None:
        return report
    judged = [(r, truth[r.id]) for r in results if r.id in truth]
    per_origin: JsonObject = {}
    for origin in Origin:
        said = sum(1 for r, _ in judged if r.origin is origin)
        real = sum(1 for _, (o, _) in judged if o is origin)
        right = sum(1 for r, (o, _) in judged if r.origin is origin and o is origin)
        per_origin[origin.value] = {
            "support": real,
            "said": said,
            "precision": _ratio(right, said),
            "recall": _ratio(right, real),
        }
    culprits = [(r, c) for r, (o, c) in judged if o is Origin.MAIN and c is not None]
    report["truth"] = {
        "judged": len(judged),
        "without_truth": len(results) - len(judged),
        "accuracy": _ratio(sum(1 for r, (o, _) in judged if r.origin is o), len(judged)),
        "accuracy_then": _ratio(sum(1 for r, (o, _) in judged if r.origin_then is o), len(judged)),
        "per_origin": per_origin,
        "culprits": len(culprits),
        "culprit_accuracy": _ratio(
            sum(1 for r, c in culprits if r.origin is Origin.MAIN and r.final.culprit == c),
            len(culprits),
        ),
    }
    return report


def _counts(origins: Iterable[Origin]) -> JsonObject:
    counted = Counter(origins)
    return {origin.value: counted.get(origin, 0) for origin in Origin}


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _text(row: JsonObject, name: str, *, required: bool = True) -> str | None:
    value = row.get(name)
    if value is None or value == "":
        if required:
            raise RowError(f"'{name}' is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise RowError(f"'{name}' must be text, got {type(value).__name__}")
    text = str(value)
    if len(text) > MAX_FIELD_CHARS:
        raise RowError(f"'{name}' is longer than {MAX_FIELD_CHARS} characters")
    return text


def _time(row: JsonObject, name: str) -> float:
    """Seconds since the epoch, or an ISO 8601 time ("2026-01-05T10:00:00Z")."""
    value = row.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
            return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
        except ValueError:
            pass
    raise RowError(f"'{name}' must be seconds since the epoch or an ISO 8601 time, got {value!r}")
