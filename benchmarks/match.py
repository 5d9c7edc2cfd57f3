"""Matching cost against the rule count, on real CI logs.

    .venv/bin/python benchmarks/match.py                  # 100, 1,000, 10,000 rules; 3 runs
    .venv/bin/python benchmarks/match.py --json --runs 5  # one JSON object on stdout
    .venv/bin/python benchmarks/match.py --sizes 100,1000 # a quicker run
    .venv/bin/python benchmarks/match.py --learned 5000   # the shipped rules + 5,000 taught ones

The logs are ``shared/corpus/logchunks-dev`` (280 real Travis CI logs, 28
languages), each bounded as ``theow-client`` bounds it and prepared as a
worker prepares it (masked, fingerprinted) once, before timing. Then, per
library size, the time of :func:`theow_workers.core.resolve.plan.plan` per log
(the whole matching step a worker runs: one scan, the full regex engine on
candidates, ranking, evidence), as p50/p99 and logs/s in one process.

Libraries: the shipped ``rules/`` alone, and libraries of exactly 100, 1,000
and 10,000 rules: the shipped rules (the first 100 by name for the smallest,
when the library has more), then generated, distinct rules. Generated rules read like
real ones (a tool's name and code, a file:line, a message, captures) and
almost never match a given log, like most of a large library. Building the
scanner (Hyperscan compile, once per rules version) is start-up and is
reported separately.

Targets: p50 at 10,000 rules (the shipped ones plus generated) <= 2x p50 at
the shipped library alone (cost flat in the rule count); >= 200 logs/s at the
shipped library. The ratio to the 100-rule library is reported too, but it
compares different real rules: the shipped library is larger than 100, and
its real rules cost more than generated ones that match nothing.

``--learned N``: instead of generated rules, N rules made by the teaching
synthesizer (:func:`theow_workers.core.explore.teaching.synthesize`) from the real
labelled failures of ``logchunks-dev`` and ``logsage-dev``, as a fleet's
reviewers would have taught them: each source log belongs to several of
``LEARNED_REPOS`` synthetic projects (the same message met in different
projects), and is taught from its labelled span and from single lines of it,
so every learned rule is scoped by ``repo`` equals to one project. The
library is the shipped rules plus those N; each timed log carries the repo
its first teaching was made in, so its own project's learned rules apply.
Reported: p50/p99 against the shipped library alone in the same run (target
<= 1.5x), and the similarity calls (a counting stub in place of the model):
plans whose order fell to similarity, split by whether learned rules tie
only among themselves. The synthesized rules are cached in ``/tmp``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import statistics
import string
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from theow_client.client import build_payload  # noqa: E402
from theow_client.facts import bound_facts  # noqa: E402
from theow_client.messages import SubmitRequest  # noqa: E402
from theow_workers.core.explore.teaching import MAX_SPAN, TeachError, chunk_span, synthesize  # noqa: E402
from theow_workers.core.resolve.plan import Plan, RuleBook, matching_facts, plan  # noqa: E402
from theow_workers.core.resolve.service import Submission  # noqa: E402
from theow_workers.core.rules.schema import Rule, load_rules, parse_rule  # noqa: E402

CORPORA = ROOT.parent / "shared" / "corpus"
if not CORPORA.is_dir():
    CORPORA = Path("/work/shared/corpus")
CORPUS = CORPORA / "logchunks-dev" / "failures.jsonl.gz"
FLAT_RATIO = 2.0
LEARNED_RATIO = 1.5
LEARNED_REPOS = 400  # synthetic projects of the fleet
SINGLE_LINES = 6  # of a labelled span, its last lines are taught one by one too
SHIPPED_LOGS_PER_S = 200.0

TOOLS = ["gcc", "javac", "rustc", "tsc", "ghc", "swiftc", "csc", "erlc", "kotlinc", "scalac"]
EXTS = ["c", "java", "rs", "ts", "hs", "swift", "cs", "erl", "kt", "scala"]


def word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(5, 9)))


def generated_rule(i: int, rng: random.Random) -> Rule:
    tool, ext = TOOLS[i % len(TOOLS)], EXTS[i % len(EXTS)]
    code = f"{word(rng)[:3].upper()}{i:05d}"
    message = f"{word(rng)} {word(rng)}"
    if i % 4 == 0:
        condition = f"{{fact: log, contains: '{tool}: fatal {code}: {message}'}}"
    elif i % 4 == 1:
        condition = (
            f"{{fact: log, regex: '(?m)^(?P<file>[\\w/.-]+\\.{ext}):(?P<line>\\d+):\\d+: "
            f"{tool} {code}: {message} (?P<detail>.+)$'}}"
        )
    elif i % 4 == 2:
        condition = f"{{fact: log, regex: '(?i){code}.*{message}'}}"
    else:
        condition = f"{{fact: log, regex: '\\[{tool}\\] {message} \\((?P<id>\\w+-{i})\\)'}}"
    return parse_rule(
        f"name: gen_{i}\nmode: track\ndescription: '{tool} {code} {message}'\n"
        f"when:\n  - {condition}\n"
    )


def library(shipped: tuple[Rule, ...], size: int) -> RuleBook:
    """``size`` rules: the shipped ones (the first ``size`` by name when there are more), then generated."""
    rng = random.Random(size)
    real = sorted(shipped, key=lambda r: r.name)[:size]
    rules = real + [generated_rule(i, rng) for i in range(size - len(real))]
    return RuleBook(tuple(rules), f"bench-{size}")


def fleet_repo(source: int, round_: int) -> str:
    """The synthetic project the ``source``-th log is met in, its ``round_``-th time."""
    return f"fleet/project-{(source * 37 + round_ * 101) % LEARNED_REPOS:03d}"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _taught_spans(log: str, chunk: str) -> list[tuple[int, int]]:
    """The labelled span (its end, when longer than a person may select), then its last lines."""
    span = chunk_span(log, chunk)
    if span is None:
        return []
    first, last = span
    first = max(first, last - MAX_SPAN + 1)
    singles = [(n, n) for n in range(max(first, last - SINGLE_LINES + 1), last + 1)]
    return [(first, last), *[s for s in singles if s != (first, last)]]


def learned_rules(count: int, shipped: RuleBook, say: Any) -> list[Rule]:
    """``count`` rules taught by the synthesizer from the corpora's labelled failures, cached."""
    key = hashlib.sha256()
    for part in ("core/explore/teaching.py", "core/rules/generalize.py"):
        key.update((ROOT / "theow_workers" / part).read_bytes())
    key.update(f"{count} {LEARNED_REPOS} {SINGLE_LINES} {shipped.version}".encode())
    for corpus in ("logchunks-dev", "logsage-dev"):
        for name in ("failures.jsonl.gz", "labels.jsonl.gz"):
            key.update(str((CORPORA / corpus / name).stat().st_size).encode())
    cache = Path("/tmp") / f"theow-bench-learned-{count}-{key.hexdigest()[:12]}.jsonl"
    if cache.exists():
        say(f"learned rules: read from {cache}")
        return [parse_rule(json.loads(line)) for line in cache.read_text().splitlines()]

    sources: list[tuple[str, dict[str, Any], list[tuple[int, int]]]] = []
    for corpus in ("logchunks-dev", "logsage-dev"):
        labels = {
            row["id"]: row.get("chunk") or ""
            for row in _jsonl(CORPORA / corpus / "labels.jsonl.gz")
        }
        for row in _jsonl(CORPORA / corpus / "failures.jsonl.gz"):
            ident = row["id"]
            facts = {k: v for k, v in row.items() if k != "id"}
            payload = build_payload(facts, failure_id=ident)
            parsed = Submission.parse(SubmitRequest.from_wire(payload), ident)
            prepared = matching_facts(parsed.facts)
            log, chunk = prepared.get("log"), labels.get(ident, "")
            spans = _taught_spans(log, chunk) if isinstance(log, str) and chunk.strip() else []
            sources.append((ident, prepared, spans))  # index = source, as fleet_repo reads it

    started = time.perf_counter()
    rules: list[Rule] = []
    yamls: list[str] = []
    taken: set[str] = {r.name for r in shipped.rules}
    seen: set[tuple[str, str]] = set()  # (repo, pattern): one project holds one copy of a rule
    barren: set[tuple[int, tuple[int, int]]] = set()  # spans no rule is made from, in any repo
    for round_ in range(LEARNED_REPOS):
        before = len(rules)
        for number, (ident, prepared, spans) in enumerate(sources):
            repo = fleet_repo(number, round_)
            for span in spans:
                if len(rules) == count:
                    break
                if (number, span) in barren:
                    continue
                try:
                    taught = synthesize(
                        {**prepared, "repo": repo}, *span, is_wrapper=shipped.is_wrapper,
                        taken=taken, origin=f"failure {ident} lines {span[0]}-{span[1]}",
                    )  # fmt: skip
                except TeachError:
                    barren.add((number, span))
                    continue
                pattern = next(c.regex or "" for c in taught.rule.when if c.fact == "log")
                if (repo, pattern) in seen:
                    continue
                seen.add((repo, pattern))
                taken.add(taught.rule.name)
                rules.append(taught.rule)
                yamls.append(taught.rule_yaml)
        say(f"learned rules: {len(rules)} after round {round_ + 1}")
        if len(rules) == count or len(rules) == before:
            break
    if len(rules) < count:
        raise SystemExit(f"only {len(rules)} rules could be taught from the corpora")
    say(f"learned rules: {count} synthesized in {time.perf_counter() - started:.0f}s, to {cache}")
    cache.write_text("".join(json.dumps(y) + "\n" for y in yamls))
    return rules


class CountingSimilarity:
    """The similarity callback a worker passes to ``plan``, counting its calls instead of embedding."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, names: Any) -> dict[str, float]:
        self.calls += 1
        return {name: 0.5 for name in names}


def tie_kinds(result: Plan, learned: frozenset[str]) -> set[str]:
    """What the rules level on specificity and evidence position are (why similarity was asked)."""
    groups: dict[tuple[bool, float], list[str]] = {}
    for c in result.attempts:
        groups.setdefault((c.generic, c.position), []).append(c.rule)
    kinds = set()
    for names in groups.values():
        if len(names) > 1:
            mine = sum(name in learned for name in names)
            kinds.add(
                "learned_only"
                if mine == len(names)
                else "learned_and_shipped"
                if mine
                else "shipped_only"
            )
    return kinds


def prepared_logs() -> list[dict[str, Any]]:
    logs = []
    with gzip.open(CORPUS, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            data = json.loads(line)
            data.pop("id", None)
            facts, _ = bound_facts(data)
            logs.append(Submission.parse(SubmitRequest(facts=facts), str(number)).facts)
    return logs


def measure(
    book: RuleBook, logs: list[dict[str, Any]], ties: Counter[str] | None = None
) -> dict[str, float]:
    """Times of ``plan`` per log; with ``ties``, plans are given a counting similarity callback
    (as a worker gives the model's) and ``ties`` counts its calls and why each was made."""
    times = []
    learned = frozenset(r.name for r in book.rules if "taught" in r.tags)
    for facts in logs:
        similarity = CountingSimilarity() if ties is not None else None
        started = time.perf_counter()
        result = plan(book, facts, similarity=similarity)
        times.append(time.perf_counter() - started)
        if ties is not None and similarity is not None and similarity.calls:
            ties["similarity_calls"] += similarity.calls
            ties.update(tie_kinds(result, learned))
    times.sort()
    return {
        "p50_ms": statistics.median(times) * 1000,
        "p99_ms": times[int(len(times) * 0.99) - 1] * 1000,
        "logs_per_s": len(times) / sum(times),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--learned", type=int, default=0, metavar="N",
        help="the shipped rules plus N taught by the synthesizer, against the shipped alone",
    )  # fmt: skip
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    if args.learned:
        return learned_run(args.learned, args.runs, args.json, say)

    shipped = load_rules(ROOT / "rules").rules
    logs = prepared_logs()
    books = {"shipped": RuleBook(shipped, "bench-shipped")}
    books.update({str(n): library(shipped, n) for n in sizes})
    build_s = {}
    for name, book in books.items():
        started = time.perf_counter()
        book.scanner  # noqa: B018 - start-up, measured apart
        build_s[name] = time.perf_counter() - started
        say(f"{name}: {len(book.rules)} rules, scanner built in {build_s[name]:.1f}s")

    runs: dict[str, list[dict[str, float]]] = {name: [] for name in books}
    for run in range(args.runs):
        for name, book in books.items():
            runs[name].append(measure(book, logs))
        say(
            f"run {run + 1}: "
            + ", ".join(f"{n} p50 {r[-1]['p50_ms']:.2f} ms" for n, r in runs.items())
        )
    figures = {
        name: {
            "rules": len(books[name].rules),
            "scanner_build_s": round(build_s[name], 2),
            **{k: round(statistics.median(r[k] for r in rs), 3) for k in rs[0]},
        }
        for name, rs in runs.items()
    }
    # The ratio within each run, then its median: runs on a shared machine drift.
    # Against the shipped library: the same real rules, plus thousands generated.
    smallest, largest = str(min(sizes)), str(max(sizes))

    def ratio_to(base: str) -> float:
        pairs = zip(runs[largest], runs[base], strict=True)
        return statistics.median(a["p50_ms"] / b["p50_ms"] for a, b in pairs)

    ratio, ratio_smallest = ratio_to("shipped"), ratio_to(smallest)
    shipped_n = len(books["shipped"].rules)
    targets = {
        f"p50 at {largest} / p50 at the shipped {shipped_n} <= {FLAT_RATIO}": ratio <= FLAT_RATIO,
        f"shipped library >= {SHIPPED_LOGS_PER_S:.0f} logs/s": figures["shipped"]["logs_per_s"]
        >= SHIPPED_LOGS_PER_S,
    }
    report = {
        "logs": len(logs),
        "runs": args.runs,
        "libraries": figures,
        "p50_ratio_largest_to_shipped": round(ratio, 3),
        # Not the same rules: the smallest holds only part of the shipped library.
        "p50_ratio_largest_to_smallest": round(ratio_smallest, 3),
        "targets": targets,
    }
    if args.json:
        print(json.dumps(report))
    else:
        for name, row in figures.items():
            print(
                f"{name:>8}: {row['rules']:>6} rules  p50 {row['p50_ms']:.2f} ms  "
                f"p99 {row['p99_ms']:.2f} ms  {row['logs_per_s']:.0f} logs/s  "
                f"(scanner built in {row['scanner_build_s']}s)"
            )
        print(
            f"p50 ratio {largest}/shipped: {ratio:.2f} ({largest}/{smallest}: {ratio_smallest:.2f})"
        )
        for target, ok in targets.items():
            print(("ok   " if ok else "FAIL ") + target)
    return 0 if all(targets.values()) else 1


def learned_run(count: int, runs_n: int, as_json: bool, say: Any) -> int:
    """The shipped library against it plus ``count`` taught rules, on the same logs and runs."""
    shipped = RuleBook(load_rules(ROOT / "rules").rules, "bench-shipped")
    learned = learned_rules(count, shipped, say)
    books = {
        "shipped": shipped,
        "learned": RuleBook(shipped.rules + tuple(learned), f"bench-learned-{count}"),
    }
    # Each log from the project its first teaching was made in: its own learned rules apply.
    logs = [{**facts, "repo": fleet_repo(n, 0)} for n, facts in enumerate(prepared_logs())]
    build_s = {}
    for name, book in books.items():
        started = time.perf_counter()
        book.scanner  # noqa: B018 - start-up, measured apart
        build_s[name] = time.perf_counter() - started
        say(f"{name}: {len(book.rules)} rules, scanner built in {build_s[name]:.1f}s")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in books}
    ties: dict[str, Counter[str]] = {}
    for run in range(runs_n):
        for name, book in books.items():
            counted: Counter[str] = Counter()
            runs[name].append(measure(book, logs, counted))
            ties[name] = counted  # the same every run: the last is kept
        say(
            f"run {run + 1}: "
            + ", ".join(f"{n} p50 {r[-1]['p50_ms']:.2f} ms" for n, r in runs.items())
        )
    figures = {
        name: {
            "rules": len(books[name].rules),
            "scanner_build_s": round(build_s[name], 2),
            **{k: round(statistics.median(r[k] for r in rs), 3) for k in rs[0]},
            "similarity_calls": ties[name]["similarity_calls"],
            "plans_tied": {k: v for k, v in ties[name].items() if k != "similarity_calls"},
        }
        for name, rs in runs.items()
    }
    pairs = list(zip(runs["learned"], runs["shipped"], strict=True))
    ratio = statistics.median(a["p50_ms"] / b["p50_ms"] for a, b in pairs)
    ratio_p99 = statistics.median(a["p99_ms"] / b["p99_ms"] for a, b in pairs)
    on_learned = ties["learned"]["learned_only"] + ties["learned"]["learned_and_shipped"]
    targets = {
        f"p50 with {count} learned / p50 at the shipped alone <= {LEARNED_RATIO}": ratio
        <= LEARNED_RATIO,
        "no similarity call for learned rules tied": on_learned == 0,
    }
    report = {
        "logs": len(logs),
        "runs": runs_n,
        "learned_rules": count,
        "fleet_repos": LEARNED_REPOS,
        "libraries": figures,
        "p50_ratio_learned_to_shipped": round(ratio, 3),
        "p99_ratio_learned_to_shipped": round(ratio_p99, 3),
        "targets": targets,
    }
    if as_json:
        print(json.dumps(report))
    else:
        for name, row in figures.items():
            print(
                f"{name:>8}: {row['rules']:>6} rules  p50 {row['p50_ms']:.2f} ms  "
                f"p99 {row['p99_ms']:.2f} ms  {row['logs_per_s']:.0f} logs/s  "
                f"similarity calls {row['similarity_calls']} {row['plans_tied']}"
            )
        print(f"p50 ratio learned/shipped: {ratio:.2f} (p99 {ratio_p99:.2f})")
        for target, ok in targets.items():
            print(("ok   " if ok else "FAIL ") + target)
    return 0 if all(targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
