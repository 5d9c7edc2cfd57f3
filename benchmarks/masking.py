"""Secret masking: recall on 100+ secret formats mixed into real CI logs, false masking, speed.

    .venv/bin/python benchmarks/masking.py                 # 3 runs, both redactors
    .venv/bin/python benchmarks/masking.py --json --runs 5 # one JSON object on stdout
    .venv/bin/python benchmarks/masking.py --show 20       # the real-log lines masked by mistake

The real logs are the ``stderr`` of every failure in ``../shared/corpus/logchunks-dev``
and ``../shared/corpus/logsage-dev`` (gzip JSON lines), each bounded to 64 KB as
the client bounds it. Each run puts every format of ``secret_corpus.py`` into
the logs ``--per-format`` times (new random values each time, at random line
boundaries of a random log) and masks every log with:

- ``client``: ``theow_client.redact`` (what a build agent runs before sending);
- ``worker``: ``theow_workers.core.logs.redact`` (the client's detectors plus detect-secrets' plugins).

Figures, medians over runs:

- ``recall``: the share of inserted secrets of which nothing is left: every
  character of the value lies in a masked span, and no 12-character piece of
  it appears in the masked log;
- ``missed``: the formats that leaked, with an example line;
- ``false_masked_lines`` / ``false_masked_chars``: the share of the real logs'
  lines (and characters) that were masked although no secret was put there
  (whatever the logs themselves held counts against us);
- ``ms_per_64kb``: masking time of a 64 KB log (median over logs, then runs),
  and ``mb_per_s`` over all of them.

Targets: recall 1.0 for both redactors, false-masked lines < 0.1%, worker
masking < 5 ms per 64 KB. The exit code is 1 when one is missed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from secret_corpus import formats

from theow_client.facts import bound_text
from theow_client.redact import Redactor

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
SOURCES = ("logchunks-dev/failures.jsonl.gz", "logsage-dev/failures.jsonl.gz")
WINDOW = 12
TARGETS = {"recall": 1.0, "false_masked_lines": 0.001, "worker_ms_per_64kb": 5.0}


def real_logs(corpus: Path) -> list[str]:
    logs = []
    for source in SOURCES:
        with gzip.open(corpus / source, "rt", encoding="utf-8") as handle:
            for line in handle:
                text = json.loads(line).get("stderr") or ""
                if text:
                    logs.append(bound_text(text)[0])
    return logs


def leaked(secret: str, text: str) -> bool:
    if secret in text:
        return True
    return len(secret) > WINDOW and any(
        secret[i : i + WINDOW] in text for i in range(len(secret) - WINDOW + 1)
    )


def covered(secret: tuple[int, int], spans: list[tuple[int, int, str]]) -> bool:
    """Every character of the secret lies in a masked span (spans are sorted and disjoint)."""
    start, end = secret
    for span_start, span_end, _ in spans:
        if span_start <= start < span_end:
            start = span_end
        if start >= end:
            return True
    return False


class Mixed:
    """A real log with secret lines put between its lines; knows which characters are real."""

    def __init__(self, log: str, inserted: list[tuple[str, str, list[str]]], r: random.Random):
        lines = log.split("\n")
        slots = sorted(r.randrange(len(lines) + 1) for _ in inserted)
        pieces: list[tuple[str, bool]] = []
        previous = 0
        for slot, (_, line, _) in zip(slots, inserted, strict=True):
            pieces += [(text, True) for text in lines[previous:slot]] + [(line, False)]
            previous = slot
        pieces += [(text, True) for text in lines[previous:]]
        self.text = "\n".join(text for text, _ in pieces)
        self.inserted = inserted
        self.real: list[tuple[int, int]] = []  # (start, end) of every real line
        self.secrets: list[list[tuple[int, int]]] = []  # where each sample's secrets are
        position = 0
        samples = iter(inserted)
        for text, real in pieces:
            if real:
                self.real.append((position, position + len(text)))
            else:
                _, _, secrets = next(samples)
                self.secrets.append(
                    [(position + text.find(s), position + text.find(s) + len(s)) for s in secrets]
                )
            position += len(text) + 1


def one_run(run: int, logs: list[str], redactors: dict[str, Redactor], args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    r = random.Random(args.seed + run)
    every = formats()
    samples = [(name, *make(r)) for name, make in every.items() for _ in range(args.per_format)]
    r.shuffle(samples)
    per_log = max(1, -(-len(samples) // len(logs)))
    mixed = [Mixed(log, samples[i * per_log : (i + 1) * per_log], r) for i, log in enumerate(logs)]
    result: dict[str, Any] = {"formats": len(every), "secrets": len(samples), "logs": len(logs)}
    for who, redactor in redactors.items():
        times, missed, shown = [], {}, []
        masked_secrets = real_lines = false_lines = real_chars = false_chars = 0
        size = 0
        for case in mixed:
            start = time.perf_counter()
            spans = redactor.spans(case.text)
            masked = redactor.redact_text(case.text)
            times.append((time.perf_counter() - start) / 2 / max(len(case.text), 1) * 65536)
            size += len(case.text)
            for (name, line, secrets), ranges in zip(case.inserted, case.secrets, strict=True):
                if any(leaked(s, masked) for s in secrets) or not all(
                    covered(r, spans) for r in ranges
                ):
                    missed.setdefault(name, line[:160])
                else:
                    masked_secrets += 1
            for line_start, line_end in case.real:
                real_lines += 1
                real_chars += line_end - line_start
                hit = sum(
                    max(0, min(end, line_end) - max(start, line_start)) for start, end, _ in spans
                )
                if hit:
                    false_lines += 1
                    false_chars += hit
                    example = case.text[line_start:line_end][:200]
                    if len(shown) < args.show and example not in shown:
                        shown.append(example)
        total_seconds = statistics.fmean(times) / 65536 * size
        result[who] = {
            "recall": masked_secrets / len(samples),
            "missed": missed,
            "false_masked_lines": false_lines / real_lines,
            "false_masked_chars": false_chars / real_chars,
            "ms_per_64kb": statistics.median(times) * 1000,
            "p95_ms_per_64kb": sorted(times)[int(len(times) * 0.95)] * 1000,
            "mb_per_s": size / 1e6 / total_seconds,
            "false_masked_examples": shown,
        }
        print(
            f"run {run + 1} {who}: recall {result[who]['recall']:.4f}, false-masked lines "
            f"{result[who]['false_masked_lines']:.5%}, {result[who]['ms_per_64kb']:.2f} ms/64KB",
            file=sys.stderr,
        )
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--per-format", type=int, default=10, help="insertions of each format per run")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--show", type=int, default=0, help="print N real lines masked by mistake")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()

    from theow_client.redact import default_redactor
    from theow_workers.core.logs.redact import redactor

    redactors = {"client": default_redactor(), "worker": redactor()}
    logs = real_logs(args.corpus)
    runs = [one_run(run, logs, redactors, args) for run in range(args.runs)]
    summary: dict[str, Any] = {
        "config": {k: runs[0][k] for k in ("formats", "secrets", "logs")} | {"runs": args.runs},
    }
    for who in redactors:
        figures = [run[who] for run in runs]
        summary[who] = {
            key: statistics.median(f[key] for f in figures)
            for key in ("recall", "false_masked_lines", "false_masked_chars", "ms_per_64kb",
                        "p95_ms_per_64kb", "mb_per_s")
        }  # fmt: skip
        summary[who]["missed"] = {k: v for f in figures for k, v in f["missed"].items()}
        if args.show:
            summary[who]["false_masked_examples"] = figures[0]["false_masked_examples"]
    ok = (
        all(summary[w]["recall"] >= TARGETS["recall"] for w in redactors)
        and all(summary[w]["false_masked_lines"] < TARGETS["false_masked_lines"] for w in redactors)
        and summary["worker"]["ms_per_64kb"] < TARGETS["worker_ms_per_64kb"]
    )
    summary["targets_met"] = ok
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for who in redactors:
            s = summary[who]
            print(
                f"{who}: recall {s['recall']:.2%} of {summary['config']['secrets']} secrets "
                f"({summary['config']['formats']} formats), false-masked lines "
                f"{s['false_masked_lines']:.4%} (chars {s['false_masked_chars']:.5%}), "
                f"{s['ms_per_64kb']:.2f} ms per 64 KB (p95 {s['p95_ms_per_64kb']:.2f}), "
                f"{s['mb_per_s']:.1f} MB/s"
            )
            for name, line in s["missed"].items():
                print(f"  missed {name}: {line}")
            for line in s.get("false_masked_examples", []):
                print(f"  false: {line}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
