"""A replayed history in the ledger: its runs recorded as they are read, their origins decided
from the history once it is all in.

``theow replay`` reads rows of ``theow history eval``'s shape (``{"id", "repo",
"job", "branch", "sha", "base_sha", "pr", "attempt", "outcome", "finished_at",
"log"}``). Its runs are kept under the replay's sender (``@replay``) and their
repository, beside the live runs of the same repositories:

* a passed row is one run, no log, no failure (:func:`history_run`, written by
  the command as it reads the file);
* a failed row is a failure whose ``run`` fact says where it ran
  (:func:`run_fact`); once resolved, the worker writes its run with its failure,
  cause and category (:func:`record_failed`), without an origin yet;
* :func:`settle` then decides every replayed failure's origin twice, as ``theow
  history eval`` does: as it stood when the run finished (the ledger's runs up
  to its ``finished_at``: ``origin_then``) and as it stands now (``origin``).
  However the rows were ordered in the file and whichever worker took them, the
  history is read in the order its runs finished.

Replayed runs revise no live failure's origin (bulk history rewrites no pull
request's comment); live failures decided later read them as history.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from theow_client.ci_run import RunValueError
from theow_client.jsontypes import JsonObject
from theow_workers.core.history.classify import DEFAULT_SETTINGS, decide
from theow_workers.core.history.evaluation import default_branches
from theow_workers.core.history.model import Decision
from theow_workers.ledger.record import failure_cause, from_failure, from_history, ledger_repo
from theow_workers.store.runs import DEFAULT_BRANCH, REPLAY_AGENT, LedgerRun, SqlRuns

log = logging.getLogger("theow.ledger")

OUTCOMES = ("passed", "failed")
# A run row's fields that travel in its failure's ``run`` fact, not as facts of their own.
RUN_FIELDS = frozenset(
    {"id", "branch", "sha", "pr", "base_sha", "attempt", "outcome", "started_at", "finished_at"}
)


def is_run_row(facts: JsonObject) -> bool:
    """Whether a history line is a run (``"outcome": "passed"|"failed"``), not bare facts."""
    return facts.get("outcome") in OUTCOMES


def history_run(facts: JsonObject, now: float) -> LedgerRun:
    """The run a history row is (``record.from_history``); RunValueError says what is wrong."""
    return from_history(facts, now)


def run_fact(facts: JsonObject, entry: LedgerRun) -> JsonObject:
    """A failed row's facts as a failure's: its log and job, where it ran as its ``run`` fact."""
    kept = {name: value for name, value in facts.items() if name not in RUN_FIELDS}
    run = entry.run
    where: JsonObject = {
        "id": run.id,
        "repo": run.repo,
        "branch": run.branch,
        "sha": run.sha,
        "attempt": run.attempt,
        "pr": run.pr,
        "base_sha": run.base_sha,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }
    kept["job"] = run.job
    kept["run"] = {name: value for name, value in where.items() if value is not None}
    return kept


def record_failed(
    runs: SqlRuns, failure_id: str, facts: JsonObject, rule: str | None, tags: Iterable[str]
) -> bool:
    """Write a replayed failure's run (no origin yet); whether the ledger changed.

    The same history replayed again keeps one run per row, linked to the newest
    replay's failure of it (its rule, so its cause, may have changed).
    """
    cause = failure_cause(facts, rule, tags)
    try:
        entry = from_failure(
            facts.get("run"), facts.get("job"), REPLAY_AGENT, "replay", failure_id,
            cause.key, cause.category, now=None,
        )  # fmt: skip
    except RunValueError as exc:  # checked when the line was read; a stored fact may differ
        log.warning("replayed failure %s: its run is not recorded: %s", failure_id, exc)
        return False
    if entry is None:
        return False
    entry = replace(
        entry, run=replace(entry.run, repo=ledger_repo(REPLAY_AGENT, entry.run.repo, ""))
    )
    return runs.record(entry) != "duplicate"


def settle(
    runs: SqlRuns,
    failure_ids: Iterable[str],
    branch_of: Callable[[str], str],
    progress: Callable[[int, int], None] | None = None,
) -> Counter[str]:
    """Decide the origins of the replayed failures' runs, in the order they finished; how many
    of each origin.

    ``branch_of``: a repository's default branch (:func:`branches`).
    """
    entries = sorted(runs.of_failures(list(failure_ids)), key=lambda e: e.run.finished_at)
    # Every repository's, as `theow history eval` passes them (a cause failing several).
    others = {repo: branch_of(repo) for repo in {entry.run.repo for entry in entries}}
    counted: Counter[str] = Counter()
    decided: list[tuple[str, str, Decision, Decision]] = []
    for done, entry in enumerate(entries, 1):
        run = entry.run
        default = branch_of(run.repo)
        then = decide(run, runs, default_branch=default, settings=DEFAULT_SETTINGS,
                      until=run.finished_at, branches=others)  # fmt: skip
        now = decide(run, runs, default_branch=default, settings=DEFAULT_SETTINGS, branches=others)
        decided.append((entry.agent, run.id, then, now))
        counted[now.origin.value] += 1
        if progress is not None:
            progress(done, len(entries))
    # Written at once: an origin is no input of another's decision (only runs and causes are).
    runs.settle_origins(decided)
    return counted


def branches(runs: SqlRuns, configured: Mapping[str, str]) -> Callable[[str], str]:
    """Each repository's default branch, read once: configured, else learned from its forge,
    else as its runs show it, the way `theow history eval` tells it from the file
    (``evaluation.default_branches``: ``master``, ``trunk``), else main."""
    known: dict[str, str] = {}

    def branch_of(repo: str) -> str:
        if repo not in known:
            told = runs.known_default_branch(repo, configured)
            shown = default_branches(runs.repo_runs(repo)) if told is None else {}
            known[repo] = told or shown.get(repo, DEFAULT_BRANCH)
        return known[repo]

    return branch_of
