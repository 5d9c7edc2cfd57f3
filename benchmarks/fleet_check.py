"""Whether a generated history's truth follows the definitions of the origins.

Read from the rows and the truth alone, whatever style made them:

- every failed run has one truth row, no passed run has one, ids are unique;
- a culprit is given for ``main`` and only for it;
- ``change`` is said of pull-request or branch runs only, never of the default branch;
- a ``main`` culprit is a default-branch commit of the same repository on which
  the same job failed as ``main`` with that culprit, and no commit of that job
  failed as ``main`` with that culprit before it (the first commit of the streak);
- on the default branch, a ``main`` failure is not a lone one: its streak failed
  on two commits or twice on one (a failure seen once, then passing, is ``flaky``);
- a pull request's ``main`` failure is based on the culprit or a later commit.

    python benchmarks/fleet_check.py h.jsonl.gz t.jsonl
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path

INF = float("inf")
SLACK = 3600.0  # seconds: two commits' runs may finish out of the commits' order by this much


def when(row: dict[str, object]) -> float:
    value = row["finished_at"]
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def default_branches(rows: list[dict[str, object]]) -> dict[str, str]:
    """Each repository's default branch: the branch the commits its changes are based on were
    run on (``main``, ``master``...), else ``main``."""
    bases = {str(r["base_sha"]) for r in rows if r.get("base_sha")}
    seen: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        if r.get("pr") is None and str(r["sha"]) in bases:
            seen[str(r["repo"])][str(r["branch"])] += 1
    return {repo: count.most_common(1)[0][0] for repo, count in seen.items()}


def problems(
    rows: list[dict[str, object]],
    truth: list[dict[str, object]],
    default_branch: str | Mapping[str, str] = "main",
) -> list[str]:
    """What in ``truth`` breaks the definitions (see the module's note), one line each.

    ``default_branch``: one for every repository, or each repository's (``main`` for others).
    """
    branch_of = _branches(default_branch)
    found: list[str] = []
    ids = [str(r["id"]) for r in rows]
    if len(set(ids)) != len(ids):
        found.append("run ids are not unique")
    by_id = {str(r["id"]): r for r in rows}
    said = {str(t["id"]): t for t in truth}
    failed = {i for i, r in by_id.items() if r["outcome"] == "failed"}
    found += [f"{i}: failed run without truth" for i in sorted(failed - said.keys())]
    found += [f"{i}: truth for a run that did not fail" for i in sorted(said.keys() - failed)]
    # Default-branch commits of each repository in the order their first run finished.
    order: dict[str, dict[str, float]] = defaultdict(dict)
    for r in sorted(rows, key=when):
        if r.get("pr") is None and r["branch"] == branch_of(r):
            order[str(r["repo"])].setdefault(str(r["sha"]), when(r))
    streaks: dict[tuple[str, str, str], list[dict[str, object]]] = defaultdict(list)
    for key, t in said.items():
        row = by_id.get(key)
        if row is None:
            continue
        on_main = row.get("pr") is None and row["branch"] == branch_of(row)
        culprit = t.get("culprit")
        if (t["origin"] == "main") != (culprit is not None):
            found.append(f"{key}: culprit {culprit!r} with origin {t['origin']}")
        if t["origin"] == "change" and on_main:
            found.append(f"{key}: change on the default branch")
        if t["origin"] == "main" and culprit is not None:
            streaks[(str(row["repo"]), str(row["job"]), str(culprit))].append(row)
    for (repo, job, culprit), members in streaks.items():
        commits = order[repo]
        if culprit not in commits:
            found.append(f"{repo} {job}: culprit {culprit[:12]} is no default-branch commit")
            continue
        main_runs = [r for r in members if r.get("pr") is None and r["branch"] == branch_of(r)]
        shas = {str(r["sha"]) for r in main_runs}
        if main_runs and culprit not in shas:
            found.append(f"{repo} {job}: culprit {culprit[:12]} did not fail as main itself")
        if any(commits[s] < commits[culprit] - SLACK for s in shas if s in commits):
            found.append(f"{repo} {job}: culprit {culprit[:12]} is not the streak's first commit")
        if len(main_runs) == 1:
            found.append(f"{main_runs[0]['id']}: a lone failure of main labelled main, not flaky")
        for r in members:
            base = r.get("base_sha")
            # Commits are ordered by their first run's finish: a job's length is no order.
            early = commits.get(str(base), INF) < commits[culprit] - SLACK
            if base is not None and early:
                found.append(f"{r['id']}: based on {str(base)[:12]}, before its culprit")
    return found


def settle(
    rows: list[dict[str, object]],
    truth: list[dict[str, object]],
    default_branch: str | Mapping[str, str] = "main",
) -> None:
    """Make a simulation's ``main`` truth follow the definitions, in place.

    The culprit is the first default-branch commit seen failing (its own run may have
    failed another way: an outage); a break seen on one default-branch run only is
    flaky there, as a person reading the history would say.
    """
    branch_of = _branches(default_branch)
    by_id = {str(r["id"]): r for r in rows}
    groups: dict[tuple[str, str, str], list[dict[str, object]]] = defaultdict(list)
    for t in truth:
        row = by_id[str(t["id"])]
        if t["origin"] == "main":
            groups[(str(row["repo"]), str(row["job"]), str(t["culprit"]))].append(t)
    for members in groups.values():
        on_main = sorted(
            (by_id[str(t["id"])] for t in members),
            key=when,
        )
        on_main = [r for r in on_main if r.get("pr") is None and r["branch"] == branch_of(r)]
        if not on_main:
            continue
        for t in members:
            t["culprit"] = on_main[0]["sha"]
        if len(on_main) == 1:
            lone = next(t for t in members if t["id"] == on_main[0]["id"])
            lone["origin"], lone["culprit"] = "flaky", None


def _branches(default_branch: str | Mapping[str, str]) -> Callable[[dict[str, object]], str]:
    if isinstance(default_branch, str):
        return lambda row: default_branch
    return lambda row: default_branch.get(str(row["repo"]), "main")


def read(path: Path) -> list[dict[str, object]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def main(argv: list[str]) -> int:
    rows = read(Path(argv[0]))
    found = problems(rows, read(Path(argv[1])), default_branches(rows))
    for line in found[:50]:
        print(line)
    print(f"{len(found)} problems", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
