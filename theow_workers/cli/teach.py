"""``theow teach``: point at the lines that explain a failure; a tested rule goes to review."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.syntax import Syntax
from rich.text import Text

from theow_client.jsontypes import JsonObject
from theow_workers.cli.output import JsonFlag, err, fail, load_settings, out, print_json

if TYPE_CHECKING:
    from theow_workers.config import Settings
    from theow_workers.core.logs.normal import IsNormal
    from theow_workers.core.resolve.plan import RuleBook
    from theow_workers.core.rules.schema import Rule
    from theow_workers.runtime import Runtime
    from theow_workers.store.explore import ExploreStore

LINES = re.compile(r"^\s*(\d+)\s*(?:[-:]\s*(\d+)\s*)?$")


def parse_lines(given: str) -> tuple[int, int]:
    """``A-B`` (or one line ``A``) as (first, last); a malformed range exits 2."""
    found = LINES.match(given)
    if found is None:
        raise fail(f"--lines {given!r}: give the first and the last line, as 12-14 (or 12)", 2)
    first = int(found.group(1))
    last = int(found.group(2) or first)
    if first < 1 or last < first:
        raise fail(f"--lines {given!r}: the first line is 1 or more and not after the last", 2)
    return first, last


def teach(
    failure_id: Annotated[
        str | None, typer.Argument(help="The failure (its id, or a unique prefix).")
    ] = None,
    lines: Annotated[
        str | None,
        typer.Option(
            "--lines", help="The lines that explain it, first-last (as numbered in its log)."
        ),
    ] = None,
    scope: Annotated[
        str,
        typer.Option(help="repo, job or global; by default the failure's repo, else its job."),
    ] = "auto",
    mode: Annotated[
        str, typer.Option(help="track (known, nothing to run) or retry (transient).")
    ] = "track",
    name: Annotated[
        str | None, typer.Option(help="The rule's name [default: from the message].")
    ] = None,
    by: Annotated[
        str | None, typer.Option(help="Who teaches [default: THEOW_REVIEWER or the user].")
    ] = None,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="Teach in bulk: JSON Lines of {failure: ID or facts: {...}, lines: 'A-B' or "
            "chunk: 'the explaining lines'}; one proposal per distinct rule.",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Make a rule from the lines that explain a failure, test it, and file it for review.

    The rule matches what the lines say, not this run's numbers, paths and
    names; it is scoped to the failure's repo (or job), and tested on the
    stored failures and against the job's normal. Approve it with
    `theow review approve ID` as any proposal.
    """
    from theow_workers.review.proposals import reviewer

    if (failure_id is None) == (from_file is None):
        raise fail("give a FAILURE_ID with --lines, or --from EXAMPLES.jsonl", 2)
    settings, store, book = _context()
    who = by or reviewer()
    if from_file is not None:
        _bulk(store, book, from_file, who, scope, mode, as_json)
        return
    if lines is None:
        raise fail("--lines A-B: which lines explain the failure (see `theow failures show ID`)", 2)
    first, last = parse_lines(lines)
    teaching = _teach_one(
        store, book, settings, failure_id or "", first, last, who, scope, mode, name
    )
    if as_json:
        print_json(teaching)
        return
    _print(teaching)


def _context() -> tuple[Settings, ExploreStore, RuleBook]:
    from theow_workers.cli.review import _context as review_context
    from theow_workers.core.actions import ActionLoadError
    from theow_workers.core.resolve.library import Library

    settings, store = review_context()
    try:
        knowledge = Library.configured(settings)
    except ActionLoadError as exc:
        raise fail(str(exc)) from None
    return settings, store, knowledge.book


def _teach_one(
    store: ExploreStore,
    book: RuleBook,
    settings: Settings,
    given: str,
    first: int,
    last: int,
    who: str,
    scope: str,
    mode: str,
    name: str | None,
) -> JsonObject:
    from theow_client.job import job_fact
    from theow_workers.cli.review import _full_id
    from theow_workers.core.explore.teaching import TeachError
    from theow_workers.review.teach import teach as file_teaching

    failure_id = _full_id(store, given, "failure")
    failure = store.failure(failure_id)
    is_normal = _normal(settings, job_fact(failure.facts) if failure is not None else None)
    try:
        teaching = file_teaching(
            store,
            book,
            failure_id,
            first,
            last,
            by=who,
            scope=scope,
            mode=mode,
            name=name,
            is_normal=is_normal,
            taken=frozenset(_taken(settings)),
        )
    except TeachError as exc:
        raise fail(str(exc)) from None
    return teaching.to_dict()


def _normal(settings: Settings, job: str | None) -> IsNormal | None:
    """The job's normal from Redis, or None (no job, none learned, Redis down: said so)."""
    if not job:
        return None
    try:
        from theow_workers.runtime import Runtime

        normal = Runtime(settings).normals.normal(job)
    except Exception as exc:  # the rule is still taught; its normal test is said to be missing
        err.print(
            f"[yellow]the job's normal is not available ({type(exc).__name__}); not tested against it[/yellow]"
        )
        return None
    return normal.is_normal if normal else None


def _taken(settings: Settings) -> set[str]:
    from theow_workers.review.proposals import defined_names

    return {name for layer in settings.rule_layers for name in defined_names(layer)}


class _BadExample(ValueError):
    """One line of an examples file that teaches nothing; the message says why, on one line."""


def _bulk(
    store: ExploreStore, book: RuleBook, path: Path, who: str, scope: str, mode: str, as_json: bool
) -> None:
    """One proposal per distinct rule, in the file's order.

    An example whose lines a rule filed earlier in this run already explains,
    or whose draft is that rule again (same conditions, same pattern), files
    nothing. A bad line is reported as ``FILE:LINE: why`` and the rest go on.
    """
    from theow_workers.core.explore.teaching import TeachError
    from theow_workers.evaluation import read_jsonl
    from theow_workers.review.teach import draft
    from theow_workers.review.teach import teach as file_teaching

    settings = load_settings()
    filed: list[JsonObject] = []
    problems: list[str] = []
    same: list[JsonObject] = []  # {line, proposal_id}: examples of a rule already filed
    by_key: dict[tuple[object, ...], str] = {}
    taken = set(_taken(settings))
    normals = _Normals(settings)
    for number, data, problem in read_jsonl(path):
        where = f"{path}:{number}"
        try:
            if data is None:
                raise _BadExample(str(problem).removeprefix(f"line {number}: "))
            failure_id, facts = _example_failure(store, data)
            first, last = _example_span(facts, data)
            known = [r for r in book.rules if r.name in {f["rule"] for f in filed}]
            explained = _explained(known, facts, (first, last))
            if explained is not None:
                same.append({"line": number, "proposal_id": by_key[("name", explained)]})
                continue
            is_normal = normals.get(facts)
            taught = draft(
                store,
                book,
                failure_id,
                facts,
                first,
                last,
                by=who,
                scope=scope,
                mode=mode,
                is_normal=is_normal,
                taken=frozenset(taken),
            )
            key = _rule_key(taught.rule)
            if key in by_key:
                same.append({"line": number, "proposal_id": by_key[key]})
                continue
            teaching = file_teaching(
                store,
                book,
                failure_id,
                first,
                last,
                by=who,
                scope=scope,
                mode=mode,
                is_normal=is_normal,
                taken=frozenset(taken),
                taught=taught,
            )
        except (_BadExample, TeachError) as exc:
            problems.append(f"{where}: {' '.join(str(exc).split())}"[:1000])
            continue
        by_key[key] = by_key[("name", taught.rule.name)] = teaching.proposal_id
        taken.add(taught.rule.name)
        filed.append({**teaching.to_dict(), "example_line": number})
        book = _with(book, taught.rule)
    if as_json:
        print_json({"filed": filed, "same_rule": same, "problems": problems})
    else:
        for item in filed:
            out.print(
                f"filed proposal {item['proposal_id']} for rule {item['rule']} "
                f"(failure {item['failure_id']} line {item['line']})",
                highlight=False,
            )
        for problem in problems:
            err.print(Text(problem, style="yellow"))
        out.print(
            f"{len(filed)} proposal(s) filed, {len(same)} example(s) of a rule filed "
            f"already, {len(problems)} refused; review them with `theow review list`"
        )


class _Normals:
    """The job's normal line test per job, from one runtime, built when first wanted."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runtime: Runtime | None = None
        self.known: dict[str, IsNormal | None] = {}
        self.down = False

    def get(self, facts: JsonObject) -> IsNormal | None:
        from theow_client.job import job_fact
        from theow_workers.review.teach import normal_test

        job = job_fact(facts)
        if not job or self.down:
            return None
        if job not in self.known:
            try:
                if self.runtime is None:
                    from theow_workers.runtime import Runtime

                    self.runtime = Runtime(self.settings)
                self.known[job] = normal_test(self.runtime, job)
            except Exception:  # no runtime: taught without the normal, as `theow teach` says
                self.down = True
                return None
        return self.known[job]


def _example_failure(store: ExploreStore, data: JsonObject) -> tuple[str, JsonObject]:
    """The stored failure an example names, or the one its facts are stored as (source
    ``taught``, id from their hash: the same facts twice are one failure)."""
    import hashlib
    from datetime import UTC, datetime

    from theow_client.facts import FactsError, bound_facts_kept, dumps_facts
    from theow_workers.core.ports import FailureRecord
    from theow_workers.store import AmbiguousId

    given = data.get("failure", data.get("failure_id", data.get("id")))
    if given is not None:
        if "facts" in data:
            raise _BadExample("give a failure or facts, not both")
        if not isinstance(given, str) or not given.strip() or len(given) > 200:
            raise _BadExample("failure: give a stored failure's id (or a unique prefix)")
        try:
            failure_id = store.full_id("failure", given.strip())
        except AmbiguousId as exc:
            raise _BadExample(str(exc)) from None
        failure = store.failure(failure_id) if failure_id else None
        if failure is None:
            raise _BadExample(f"no failure {given!r}")
        return str(failure_id), failure.facts
    if "facts" not in data:
        raise _BadExample('give "failure": ID or "facts": {...}, with "lines" or "chunk"')
    try:
        facts, _, kept = bound_facts_kept(data["facts"])
    except FactsError as exc:
        raise _BadExample(str(exc)) from None
    if kept and isinstance(data.get("lines"), str):
        raise _BadExample("the log was cut to its bounds: its line numbers moved; give a chunk")
    text = dumps_facts(facts)
    digest = hashlib.sha256(text.encode()).hexdigest()
    failure_id = f"taught-{digest[:24]}"
    if store.failure(failure_id) is None:
        store.sql.add_failure(
            FailureRecord(failure_id, digest, facts, "build_failure", "taught", datetime.now(UTC))
        )
    stored = store.failure(failure_id)
    return failure_id, stored.facts if stored is not None else facts


def _example_span(facts: JsonObject, data: JsonObject) -> tuple[int, int]:
    from theow_workers.core.explore.teaching import MAX_SPAN, chunk_span
    from theow_workers.core.resolve.plan import matching_facts

    lines, chunk = data.get("lines"), data.get("chunk")
    if (lines is None) == (chunk is None):
        raise _BadExample('give "lines": "A-B" or "chunk": "the explaining lines", one of them')
    if lines is not None:
        found = LINES.match(lines) if isinstance(lines, str) else None
        first, last = (
            (int(found.group(1)), int(found.group(2) or found.group(1))) if found else (0, 0)
        )
        if first < 1 or last < first:
            raise _BadExample(f"lines {str(lines)[:40]!r}: give the first and the last, as 12-14")
        return first, last
    log = matching_facts(facts).get("log")
    if not isinstance(chunk, str) or not chunk.strip():
        raise _BadExample("chunk: give the explaining lines as text")
    span = chunk_span(log, chunk) if isinstance(log, str) else None
    if span is None:
        raise _BadExample("the chunk is not in the failure's log")
    first, last = span
    # A whole step copied as the chunk: taught from its end, as a reviewer would point.
    return max(first, last - MAX_SPAN + 1), last


def _rule_key(rule: Rule) -> tuple[object, ...]:
    """What makes two taught rules the same rule: their conditions, examples aside."""
    return tuple((c.fact, c.equals, c.regex, c.contains) for c in rule.when)


def _explained(rules: list[Rule], facts: JsonObject, span: tuple[int, int]) -> str | None:
    """The rule among ``rules`` whose evidence on ``facts`` lies in ``span``, if any."""
    from theow_workers.core.resolve.plan import matching_facts
    from theow_workers.core.rules.matching import evaluate

    for rule in rules:
        match = evaluate(rule, matching_facts(facts))
        if match.ok and match.evidence is not None and span[0] <= match.evidence.line <= span[1]:
            return str(rule.name)
    return None


def _with(book: RuleBook, rule: Rule) -> RuleBook:
    from theow_workers.core.resolve.plan import RuleBook

    return RuleBook((*book.rules, rule), f"{book.version}+{rule.name}", book.client_side)


def _print(teaching: JsonObject) -> None:
    from theow_client.terminal import printable
    from theow_workers.review.risk import visible

    tests = teaching["tests"]
    out.print(
        f"[bold]proposal {teaching['proposal_id']}[/bold]  rule [bold]{teaching['rule']}[/bold]"
        f"  (pending, taught by {teaching['by']}, scope {teaching['scope']})"
    )
    out.print(
        Text(f"from line {teaching['line']}: {visible(printable(teaching['text']))}"),
        highlight=False,
    )
    for why in teaching["passed_over"]:
        out.print(Text(f"  passed over {why}", style="dim"), highlight=False)
    out.print(Syntax(visible(printable(teaching["rule_yaml"])), "yaml", theme="ansi_dark"))
    before = ", ".join(f"{rule} {n}" for rule, n in tests["before"].items()) or "-"
    out.print(
        f"on stored failures: matches {tests['matches']} of {tests['scanned']} "
        f"(their verdicts named before: {before})",
        highlight=False,
    )
    if tests["normal_known"]:
        verdict = (
            "[red]yes: its evidence is a line the passing runs print[/red]"
            if tests["fires_on_normal"]
            else "no"
        )
        out.print(f"fires on the job's normal: {verdict}")
    else:
        out.print("the job's normal is unknown: not tested against passing runs")
    out.print(f"approve with `theow review approve {teaching['proposal_id']}`")
