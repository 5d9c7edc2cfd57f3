"""Where ``theow history eval`` was wrong: the confusion and a few misses of each kind, with why.

    theow history eval h.jsonl.gz --truth t.jsonl --out r.jsonl --json
    python benchmarks/fleet_misses.py h.jsonl.gz t.jsonl r.jsonl [--per 5] [--then]

Each miss prints the run (repository, job, branch, attempt), the truth and the
origin said, the classifier's reason and the cause's text as Theow read it.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_check import read

from theow_workers.core.history.cause import cause_of


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("history", type=Path)
    parser.add_argument("truth", type=Path)
    parser.add_argument("results", type=Path)
    parser.add_argument("--per", type=int, default=4, help="misses shown of each kind")
    parser.add_argument("--then", action="store_true", help="judge origin_then, not the final")
    args = parser.parse_args(argv)
    rows = {str(r["id"]): r for r in read(args.history)}
    truth = {str(t["id"]): t for t in read(args.truth)}
    said = {str(r["id"]): r for r in read(args.results)}
    field = "origin_then" if args.then else "origin"
    pairs: Counter[tuple[str, str]] = Counter()
    misses: dict[tuple[str, str], list[str]] = defaultdict(list)
    wrong_culprit = 0
    for key, t in truth.items():
        got = said.get(key)
        if got is None:
            continue
        pair = (str(t["origin"]), str(got[field]))
        pairs[pair] += 1
        if pair[0] != pair[1]:
            misses[pair].append(key)
        elif t["origin"] == "main" and got["culprit"] != t["culprit"] and not args.then:
            wrong_culprit += 1
            misses[("main", "main, wrong culprit")].append(key)
    print("truth -> said: count")
    for (real, guess), count in sorted(pairs.items(), key=lambda p: -p[1]):
        print(f"  {real:>7} -> {guess:<7} {count}")
    print(f"  main with a wrong culprit: {wrong_culprit}")
    for pair, keys in sorted(misses.items(), key=lambda p: -len(p[1])):
        print(f"\n== {pair[0]} said {pair[1]}: {len(keys)}")
        for key in keys[: args.per]:
            row, got = rows[key], said[key]
            cause = cause_of(str(row.get("log", "")))
            where = f"pr {row['pr']} base {str(row.get('base_sha'))[:8]}" if row.get("pr") else ""
            print(
                f"- {key} {row['repo']} {row['job']} {row['branch']} {str(row['sha'])[:8]} "
                f"attempt {row.get('attempt', 1)} {where} culprit {str(truth[key]['culprit'])[:8]}"
                f"/{str(got['culprit'])[:8]}\n  reason: {got['reason_then' if args.then else 'reason']}"
                "\n  cause: " + cause.text.replace("\n", " | ")[:240]
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
