"""Leaving projects out: the rules' figures on projects nobody tuned or taught for.

    .venv/bin/python benchmarks/folds.py                     # both corpora, 5 folds, a table
    .venv/bin/python benchmarks/folds.py --json              # one JSON object on stdout
    .venv/bin/python benchmarks/folds.py --folds 4 --corpus logsage-dev

Figures on the corpus a library was tuned on run ahead of figures on projects
it has never seen. Each corpus of ``shared/corpus`` is split by project
(``repo``), never by log, into ``--folds`` folds (projects sorted, dealt in
turn). For each fold left out:

- **shipped**: the shipped rules alone on the fold's failures, as ``theow rules
  eval`` scores them (found, unexplained, grounded, precision, located; false
  alarms on the fold's passing runs when the corpus has them, which are then
  also each job's normal, as ``--baseline`` gives it).
- **grouping**: the fold's failures the shipped rules leave unmatched (and,
  ``unknown``, those plus the ones only a wrapper matched: what a replay
  explores) grouped as ``theow replay`` groups them, against the label
  clusters: groups per cause and wrong reuse (failures in a group whose
  majority cluster is not theirs), as ``benchmarks/grouping.py`` defines them
  (logchunks-dev only: logsage-dev has no clusters).
- **taught elsewhere**: a simulated reviewer first teaches every miss of the
  *other* folds in build order (``rules eval --learn``, each rule kept to
  ``--scope``: ``global`` lets it apply to every project), then the shipped
  and learned rules are scored on the fold: what a fleet's teachings carry to
  a project they were not made on, and whether they stay precise there
  (``learned_found`` / ``learned_precision``: the fold's failures a learned
  rule explains, and the grounded share of those).
- **learning**: starting from that library, the fold's own misses are taught in
  build order: ``taught`` (teachings the fold needed), ``grounded``, learned
  precision, and ``next_occurrence`` (of the label clusters met at least twice
  whose first failure was taught, the share of their later failures a learned
  rule grounds; logchunks-dev only, logsage-dev has no clusters).

Each figure is the mean over folds, beside the in-sample figure (the whole
corpus, as ``theow rules eval`` reports it). Definitions are the corpus
README's (``theow_workers.core.resolve.grading``). Deterministic; the time is
the wall clock of the whole run, and ``learn_logs_per_s`` the in-sample
learning run's failures over its wall clock (every teaching included).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from theow_client.client import build_payload  # noqa: E402
from theow_client.messages import SubmitRequest  # noqa: E402
from theow_workers import evaluation  # noqa: E402
from theow_workers.core.resolve.library import Library  # noqa: E402
from theow_workers.core.resolve.plan import RuleBook  # noqa: E402
from theow_workers.core.resolve.service import Submission  # noqa: E402
from theow_workers.replay.grouping import error_summary, group_unmatched  # noqa: E402

SHARED = ROOT.parent / "shared" / "corpus"
if not SHARED.is_dir():  # a worktree beside the main checkout
    SHARED = Path("/work/shared/corpus")
CORPORA = ("logchunks-dev", "logsage-dev")
FIGURES = ("found_rate", "unexplained_rate", "grounded_rate", "precision", "located_rate")
POPULATIONS = ("unmatched", "unknown")  # what grouping is scored on (see the docstring)


def _rows(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def folds_of(rows: list[dict[str, Any]], k: int) -> list[set[str]]:
    """Projects dealt into ``k`` folds, in sorted order: the same split on every run."""
    projects = sorted({str(row.get("repo", "")) for row in rows})
    return [set(projects[i::k]) for i in range(k)]


def _figures(report: dict[str, Any]) -> dict[str, float]:
    n = report["failures"] or 1
    out = {
        "found_rate": report["found_rate"],
        "unexplained_rate": round(report["unexplained"] / n, 4),
        "grounded_rate": report["grounded_rate"],
        "precision": report["precision"],
        "located_rate": report["located_rate"],
    }
    if report["passing"]:
        out["false_alarm_rate"] = report["false_alarm_rate"]
    return out


def _score(
    book: RuleBook, failures: Path, passing: Path | None, labels: dict[str, str], **options: Any
) -> tuple[dict[str, Any], list[evaluation.Outcome], RuleBook]:
    outcomes: list[evaluation.Outcome] = []
    summary = evaluation.run(
        book, failures, passing=passing, labels=labels, emit=outcomes.append, **options
    )
    return summary.to_dict(), outcomes, summary.library or book


def next_occurrence(outcomes: list[evaluation.Outcome], cluster_of: dict[str, str]) -> float | None:
    """Of the causes met at least twice whose first failure was taught, the share of their
    later failures a learned rule grounds: how often one teaching covers a cause."""
    first_taught: dict[str, bool] = {}
    later = caught = 0
    for outcome in outcomes:
        cluster = cluster_of.get(outcome.id)
        if outcome.source != evaluation.FAILURES or cluster is None:
            continue
        if cluster not in first_taught:
            first_taught[cluster] = outcome.taught
        elif first_taught[cluster]:
            later += 1
            caught += outcome.learned and bool(outcome.grounded)
    return round(caught / later, 4) if later else None


Summaries = dict[str, tuple[str, str, str]]  # id -> (fingerprint, sample, basis)


def summaries(rows: list[dict[str, Any]]) -> Summaries:
    """Each failure as a replay groups it: prepared as a worker receives it, then summarized."""
    out: Summaries = {}
    for row in rows:
        facts = {k: v for k, v in row.items() if k != "id"}
        sub = Submission.parse(
            SubmitRequest.from_wire(build_payload(facts, failure_id=row["id"])), row["id"]
        )
        out[row["id"]] = (sub.fingerprint, *error_summary(sub.facts))
    return out


def grouping(ids: list[str], summary: Summaries, cluster_of: dict[str, str]) -> dict[str, Any]:
    """Groups per cause and wrong reuse of ``ids`` grouped as ``theow replay`` groups them."""
    ids = [i for i in ids if i in cluster_of]
    if not ids:
        return {"failures": 0, "groups_per_cause": None, "wrong_reuse": None}
    groups = group_unmatched((i, i, *summary[i]) for i in ids)
    wrong = sum(
        g.size - Counter(cluster_of[f] for f in g.failure_ids).most_common(1)[0][1] for g in groups
    )
    return {
        "failures": len(ids),
        "groups_per_cause": round(len(groups) / len({cluster_of[i] for i in ids}), 4),
        "wrong_reuse": round(wrong / len(ids), 4),
    }


def _populations(outcomes: list[evaluation.Outcome]) -> dict[str, set[str]]:
    """The failures no rule matched, and those plus the ones only a wrapper matched."""
    failed = [o for o in outcomes if o.source == evaluation.FAILURES and o.rule is None]
    return {
        "unmatched": {o.id for o in failed if o.wrapper is None},
        "unknown": {o.id for o in failed},
    }


def corpus_run(name: str, k: int, scope: str, book: RuleBook) -> dict[str, Any]:
    folder = SHARED / name
    failures = _rows(folder / "failures.jsonl.gz")
    passing = _rows(folder / "success.jsonl.gz") if (folder / "success.jsonl.gz").exists() else []
    label_rows = _rows(folder / "labels.jsonl.gz")
    labels = {str(r["id"]): str(r.get("chunk") or "") for r in label_rows}
    cluster_of = {str(r["id"]): str(r["cluster"]) for r in label_rows if r.get("cluster")}
    if len(set(cluster_of.values())) == len(cluster_of):
        cluster_of = {}  # logsage-dev's "cluster" is each pair's own id: it names no cause
    project_of = {str(r["id"]): str(r.get("repo", "")) for r in failures}
    summary = summaries(failures) if cluster_of else {}
    with tempfile.TemporaryDirectory(prefix="theow-folds-") as scratch:
        tmp = Path(scratch)
        every = _write(tmp / "all.jsonl", failures)
        every_passing = _write(tmp / "all-passing.jsonl", passing) if passing else None
        in_sample, shipped_outcomes, _ = _score(
            book, every, every_passing, labels, baseline=every_passing
        )
        population = _populations(shipped_outcomes)
        started = time.perf_counter()
        learned_all, outcomes, _ = _score(book, every, every_passing, labels, learn=True)
        learn_seconds = time.perf_counter() - started
        in_sample_learning = {
            "taught_rate": learned_all["taught_rate"],
            "grounded_rate": learned_all["grounded_rate"],
            "learned_precision": learned_all["learned_precision"],
            "next_occurrence": next_occurrence(outcomes, cluster_of),
            "learn_logs_per_s": round(len(failures) / learn_seconds, 1),
        }
        in_sample_grouping = {
            pop: grouping(sorted(population[pop]), summary, cluster_of)
            for pop in POPULATIONS
            if cluster_of
        }
        per_fold = []
        for i, projects in enumerate(folds_of(failures, k)):
            inside = [r for r in failures if project_of[r["id"]] in projects]
            others = [r for r in failures if project_of[r["id"]] not in projects]
            held = _write(tmp / f"fold{i}.jsonl", inside)
            rest = _write(tmp / f"rest{i}.jsonl", others)
            held_passing = None
            if passing:
                ids = {r["id"] for r in inside}
                held_passing = _write(
                    tmp / f"fold{i}-passing.jsonl", [r for r in passing if r["id"] in ids]
                )
            shipped, _, _ = _score(book, held, held_passing, labels, baseline=held_passing)
            _, _, taught_book = _score(book, rest, None, labels, learn=True, scope=scope)
            carried, carried_outcomes, _ = _score(taught_book, held, held_passing, labels)
            taught_elsewhere = {
                name for name in (r.name for r in taught_book.rules) if book.get(name) is None
            }
            from_elsewhere = [o for o in carried_outcomes if o.rule in taught_elsewhere]
            grounded_elsewhere = sum(bool(o.grounded) for o in from_elsewhere)
            learning, learn_outcomes, _ = _score(
                taught_book, held, held_passing, labels, learn=True, scope=scope
            )
            fold_ids = [r["id"] for r in inside]
            per_fold.append(
                {
                    "projects": sorted(projects),
                    "failures": len(inside),
                    "shipped": _figures(shipped),
                    "grouping": {
                        f"{pop}_{key}": value
                        for pop in POPULATIONS
                        if cluster_of
                        for key, value in grouping(
                            [i for i in fold_ids if i in population[pop]], summary, cluster_of
                        ).items()
                    },
                    "taught_elsewhere": {
                        **_figures(carried),
                        "rules_taught_elsewhere": len(taught_elsewhere),
                        "learned_found": len(from_elsewhere),
                        "learned_precision": round(grounded_elsewhere / len(from_elsewhere), 4)
                        if from_elsewhere
                        else None,
                    },
                    "learning": {
                        "taught_rate": learning["taught_rate"],
                        "grounded_rate": learning["grounded_rate"],
                        "learned_precision": learning["learned_precision"]
                        if learning["learned_found"]
                        else None,
                        "next_occurrence": next_occurrence(learn_outcomes, cluster_of),
                        "learned_on_passing": learning.get("learned_on_passing", 0),
                    },
                }
            )
    return {
        "corpus": name,
        "failures": len(failures),
        "projects": len(set(project_of.values())),
        "folds": k,
        "scope": scope,
        "in_sample": {
            **_figures(in_sample),
            "learning": in_sample_learning,
            "grouping": {
                f"{pop}_{key}": value
                for pop, figures in in_sample_grouping.items()
                for key, value in figures.items()
            },
        },
        "mean_over_folds": {
            part: _mean([fold[part] for fold in per_fold])
            for part in ("shipped", "grouping", "taught_elsewhere", "learning")
        },
        "per_fold": per_fold,
    }


def _mean(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    keys = dict.fromkeys(k for row in rows for k in row)
    out: dict[str, float | None] = {}
    for key in keys:
        values = [row[key] for row in rows if isinstance(row.get(key), int | float)]
        out[key] = round(statistics.fmean(values), 4) if values else None
    return out


def _table(result: dict[str, Any]) -> str:
    lines = [
        f"{result['corpus']}: {result['failures']} failures, {result['projects']} projects, "
        f"{result['folds']} folds, taught rules kept to scope {result['scope']}"
    ]
    inside, mean = result["in_sample"], result["mean_over_folds"]
    lines.append(f"{'figure':28} {'in-sample':>10} {'held out':>10} {'+ taught elsewhere':>19}")
    for key in (*FIGURES, "false_alarm_rate"):
        if key not in inside:
            continue
        carried = mean["taught_elsewhere"].get(key)
        lines.append(
            f"{key:28} {inside[key]:>10.3f} {mean['shipped'][key]:>10.3f} "
            f"{carried if carried is not None else float('nan'):>19.3f}"
        )
    for key in ("groups_per_cause", "wrong_reuse"):
        for pop in POPULATIONS:
            name = f"{pop}_{key}"
            if name in inside["grouping"]:
                held = mean["grouping"].get(name)
                lines.append(
                    f"grouping {name:19} {_fmt(inside['grouping'][name]):>10} {_fmt(held):>10}"
                )
    learning = inside["learning"]
    for key in ("taught_rate", "grounded_rate", "learned_precision", "next_occurrence"):
        held = mean["learning"].get(key)
        lines.append(f"learning {key:19} {_fmt(learning.get(key)):>10} {_fmt(held):>10} {'':>19}")
    lines.append(f"learning logs/s (in-sample, teachings included) {learning['learn_logs_per_s']}")
    carried = mean["taught_elsewhere"]
    lines.append(
        f"rules taught on the other folds that explain a held-out failure: "
        f"{carried.get('learned_found')} per fold, precision {_fmt(carried.get('learned_precision'))}"
    )
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--corpus", action="append", choices=CORPORA, help="default: both")
    ap.add_argument(
        "--scope",
        default="global",
        choices=("auto", "repo", "job", "global"),
        help="what each taught rule is kept to (global: it may apply to other projects)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.folds < 2:
        ap.error("--folds: at least 2")
    started = time.perf_counter()
    book = Library.load(ROOT / "rules", ROOT / "actions").book
    book.scanner  # noqa: B018 - compiled once, before any fold
    results = [corpus_run(name, args.folds, args.scope, book) for name in args.corpus or CORPORA]
    seconds = round(time.perf_counter() - started, 1)
    if args.json:
        print(json.dumps({"results": results, "seconds": seconds}, indent=2))
    else:
        print("\n\n".join(_table(r) for r in results))
        print(f"\n{seconds} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
