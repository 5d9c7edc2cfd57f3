"""How often the replay grouping's error line is the labelled cause, with and without the job's normal.

    .venv/bin/python benchmarks/normal_picker.py [--corpus ../shared/corpus/logsage-dev] [--json]

For each failed log of a corpus with passing twins (``success.jsonl.gz``,
same ``id``): the failure shaped as ``theow-client`` sends it, its twin as
``theow-client success`` sends it, and the line ``error_summary`` (the
replay grouping's "error text" and sample) picks, graded against the label
with the corpus README's definition of grounded. Deterministic: one run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from theow_client.client import build_payload  # noqa: E402
from theow_client.facts import loads_facts  # noqa: E402
from theow_client.passing import build_passing_payload  # noqa: E402
from theow_workers.core.logs.normal import JobNormal, run_lines  # noqa: E402
from theow_workers.core.resolve.grading import grounded  # noqa: E402
from theow_workers.core.resolve.plan import matching_facts  # noqa: E402
from theow_workers.replay.grouping import error_summary  # noqa: E402


def read(path: Path) -> dict[str, dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return {str(r["id"]): r for r in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared/corpus/logsage-dev")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    failures = read(args.corpus / "failures.jsonl.gz")
    passing = read(args.corpus / "success.jsonl.gz")
    labels = read(args.corpus / "labels.jsonl.gz")
    plain = with_normal = paired = 0
    for ident, row in failures.items():
        sent = build_payload({k: v for k, v in row.items() if k != "id"}, failure_id=ident)
        facts = matching_facts(loads_facts(sent["facts_json"]))
        chunk = str(labels.get(ident, {}).get("chunk") or "")
        line = error_summary(facts)[0]
        plain += grounded(line, line, chunk)
        twin = passing.get(ident)
        is_normal = None
        if twin is not None:
            paired += 1
            run = build_passing_payload({k: v for k, v in twin.items() if k != "id"}, job=ident)
            is_normal = JobNormal.learn(run_lines(loads_facts(run["facts_json"]))).is_normal
        line = error_summary(facts, is_normal)[0]
        with_normal += grounded(line, line, chunk)
    n = len(failures)
    report = {
        "failures": n,
        "with_passing_twin": paired,
        "grounded_plain": plain,
        "grounded_with_normal": with_normal,
        "rate_plain": round(plain / n, 4) if n else 0.0,
        "rate_with_normal": round(with_normal / n, 4) if n else 0.0,
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(
            f"error line is the labelled cause: {plain}/{n} plain, {with_normal}/{n} with the job's normal"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
