"""Does replay's grouping follow the cause? Groups and wrong reuse on labelled CI logs.

    .venv/bin/python benchmarks/grouping.py            # both corpora, a table
    .venv/bin/python benchmarks/grouping.py --json     # one JSON object on stdout

Every log of ``shared/corpus/logchunks-dev`` is prepared as a resolver worker
prepares it (``theow-client``'s payload, bounded and masked by
``Submission.parse``), summarized by ``replay.grouping.error_summary`` and
grouped by ``replay.grouping.group_unmatched``, as ``theow replay`` groups its
unmatched failures and the web console's insight page groups the stored ones
(``web.groups``: the same two functions). Three populations: the whole corpus
(``all``), the failures the shipped rules leave unmatched (``unmatched``), and
those plus the failures only wrapper rules (``generic: true``) match
(``unknown``: what a replay groups and explores once those are unexplained).

Against the human ``cluster`` labels (``project#category``):

- ``groups`` / ``clusters``: groups made over the label clusters present in the
  population. Target ≤ 1.1 (a cause split in two costs a second LLM session).
- ``wrong_reuse``: failures in a group whose majority cluster is not theirs,
  over the population. Target ≤ 2% (a wrongly grouped failure is never
  explored, and its group's proposal will not match it).
- ``singletons``: groups of one failure.

``shared/corpus/logsage-dev`` has no cluster labels: its failures are grouped
the same way and only counted (groups, projects, the largest group), to see
that nothing absurd happens on another CI system's logs.

``--baseline`` also measures, in the same run, the grouping this replaced
(``theow_workers/replay/grouping.py`` at commit ``BASELINE_COMMIT``, read with
``git show``: error words anywhere in the log, ANSI codes and CI boilerplate
kept, Jaccard 0.8 on all tokens). Grouping is deterministic: one pass scores
it; the time is the median of three.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from theow_client.client import build_payload  # noqa: E402
from theow_client.messages import SubmitRequest  # noqa: E402
from theow_workers.core.resolve.plan import Hints, plan  # noqa: E402
from theow_workers.core.resolve.service import Submission  # noqa: E402
from theow_workers.replay import grouping  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus" / "logchunks-dev"
UNLABELLED = ROOT.parent / "shared" / "corpus" / "logsage-dev"
if not CORPUS.is_dir():  # a worktree beside the main checkout
    CORPUS = Path("/work/shared/corpus/logchunks-dev")
    UNLABELLED = Path("/work/shared/corpus/logsage-dev")
BASELINE_COMMIT = "839a54c"
MAX_GROUPS_RATIO = 1.1
MAX_WRONG_REUSE = 0.02
POPULATIONS = ("all", "unmatched", "unknown")


def load(name: str, corpus: Path = CORPUS) -> list[dict[str, Any]]:
    with gzip.open(corpus / name, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def prepared(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """(id, facts as a worker records them, fingerprint) per failure."""
    out = []
    for row in rows:
        facts = {k: v for k, v in row.items() if k != "id"}
        sub = Submission.parse(
            SubmitRequest.from_wire(build_payload(facts, failure_id=row["id"])), row["id"]
        )
        out.append((row["id"], sub.facts, sub.fingerprint))
    return out


def baseline() -> Any:
    """The grouping module as it was before this benchmark existed."""
    import subprocess
    import types

    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{BASELINE_COMMIT}:theow_workers/replay/grouping.py"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    module = types.ModuleType("grouping_baseline")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, "grouping_baseline", "exec"), module.__dict__)
    return module


def unknown_ids(items: list[tuple[str, dict[str, Any], str]]) -> tuple[set[str], set[str]]:
    """(no rule matched, no rule but wrapper rules matched): the ids of each population."""
    from theow_workers.core.resolve.library import Library

    book = Library.load(ROOT / "rules", ROOT / "actions").book
    unmatched, unknown = set(), set()
    for fid, facts, _ in items:
        attempts = plan(book, facts, Hints()).attempts
        if not attempts:
            unmatched.add(fid)
        if all(c.generic for c in attempts):
            unknown.add(fid)
    return unmatched, unknown


def unlabelled() -> dict[str, Any]:
    """logsage-dev grouped as a replay groups it: counts only (it has no cluster labels)."""
    items = prepared(load("failures.jsonl.gz", UNLABELLED))
    groups = grouping.group_unmatched(
        (fid, fid, fp, *grouping.error_summary(facts)) for fid, facts, fp in items
    )
    projects = {g.scope for g in groups}
    return {
        "corpus": str(UNLABELLED),
        "failures": len(items),
        "projects": len(projects),
        "groups": len(groups),
        "groups_per_project": round(len(groups) / max(len(projects), 1), 3),
        "singletons": sum(1 for g in groups if g.size == 1),
        "largest": max((g.size for g in groups), default=0),
    }


def score(groups: list[grouping.Group], cluster_of: dict[str, str]) -> dict[str, Any]:
    total = sum(g.size for g in groups)
    clusters = {cluster_of[f] for g in groups for f in g.failure_ids}
    wrong = 0
    worst: list[dict[str, Any]] = []
    for g in groups:
        counts = Counter(cluster_of[f] for f in g.failure_ids)
        majority, n = counts.most_common(1)[0]
        wrong += g.size - n
        if g.size - n:
            worst.append({"size": g.size, "wrong": g.size - n, "majority": majority,
                          "sample": g.sample[:160], "clusters": dict(counts.most_common(5))})  # fmt: skip
    worst.sort(key=lambda w: -w["wrong"])
    return {
        "failures": total,
        "clusters": len(clusters),
        "groups": len(groups),
        "groups_per_cluster": round(len(groups) / max(len(clusters), 1), 3),
        "wrong_reuse": round(wrong / max(total, 1), 4),
        "wrongly_grouped": wrong,
        "singletons": sum(1 for g in groups if g.size == 1),
        "worst_groups": worst[:5],
    }


def measure(
    items: list[tuple[str, dict[str, Any], str]],
    keep: set[str] | None,
    cluster_of: dict[str, str],
    summarize: Callable[[dict[str, Any]], tuple[str, str]],
    group: Callable[..., list[grouping.Group]],
) -> dict[str, Any]:
    chosen = [(fid, facts, fp) for fid, facts, fp in items if keep is None or fid in keep]
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        rows = [(fid, fid, fp, *summarize(facts)) for fid, facts, fp in chosen]
        groups = group(rows)
        timings.append(time.perf_counter() - started)
    result = score(groups, cluster_of)
    result["seconds"] = round(statistics.median(timings), 3)
    result["pass"] = (
        result["groups_per_cluster"] <= MAX_GROUPS_RATIO
        and result["wrong_reuse"] <= MAX_WRONG_REUSE
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--baseline", action="store_true", help="also the previous grouping")
    args = parser.parse_args()
    rows, labels = load("failures.jsonl.gz"), load("labels.jsonl.gz")
    cluster_of = {row["id"]: row["cluster"] for row in labels}
    rows = [row for row in rows if row["id"] in cluster_of]
    items = prepared(rows)
    unmatched, unknown = unknown_ids(items)
    keep = {"all": None, "unmatched": unmatched, "unknown": unknown}
    variants: dict[str, tuple[Any, Any]] = {
        "theow": (grouping.error_summary, grouping.group_unmatched)
    }
    if args.baseline:
        old = baseline()
        variants["baseline"] = (old.error_summary, old.group_unmatched)
    results: dict[str, Any] = {
        "corpus": str(CORPUS),
        "targets": {"groups_per_cluster": MAX_GROUPS_RATIO, "wrong_reuse": MAX_WRONG_REUSE},
    }
    for name, (summarize, group) in variants.items():
        results[name] = {
            pop: measure(items, keep[pop], cluster_of, summarize, group) for pop in POPULATIONS
        }
    results["logsage-dev"] = unlabelled()
    # The target is on what a replay groups: the failures no specific rule explains.
    results["pass"] = results["theow"]["unmatched"]["pass"] and results["theow"]["unknown"]["pass"]
    if args.json:
        print(json.dumps(results))
    else:
        print(f"{'variant':10} {'population':10} {'failures':>8} {'clusters':>8} {'groups':>6} "
              f"{'ratio':>6} {'wrong':>7} {'single':>6} {'s':>6}")  # fmt: skip
        for name in variants:
            for pop in POPULATIONS:
                r = results[name][pop]
                print(
                    f"{name:10} {pop:10} {r['failures']:8} {r['clusters']:8} {r['groups']:6} "
                    f"{r['groups_per_cluster']:6.2f} {100 * r['wrong_reuse']:6.1f}% "
                    f"{r['singletons']:6} {r['seconds']:6.2f}"
                )
        u = results["logsage-dev"]
        print(f"logsage-dev (no labels): {u['failures']} failures of {u['projects']} projects in "
              f"{u['groups']} groups ({u['groups_per_project']} a project, {u['singletons']} of "
              f"one, the largest {u['largest']})")  # fmt: skip
        print(f"targets on the unmatched and unknown: groups/clusters <= {MAX_GROUPS_RATIO}, wrong "
              f"reuse <= {100 * MAX_WRONG_REUSE:.0f}%: {'PASS' if results['pass'] else 'FAIL'}")  # fmt: skip
    return 0 if results["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
