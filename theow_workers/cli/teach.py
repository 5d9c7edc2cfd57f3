"""``theow teach``: point at the lines that explain a failure; a tested rule goes to review."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.syntax import Syntax
from rich.text import Text

from theow_workers.cli.output import JsonFlag, err, fail, load_settings, out, print_json

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
            help="Teach in bulk: JSON Lines of {failure_id, lines: 'A-B'} or {failure_id, chunk}.",
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


def _context() -> tuple[Any, Any, Any]:
    from theow_workers.cli.review import _context as review_context
    from theow_workers.core.actions import ActionLoadError
    from theow_workers.core.knowledge import Knowledge

    settings, store = review_context()
    try:
        knowledge = Knowledge.configured(settings)
    except ActionLoadError as exc:
        raise fail(str(exc)) from None
    return settings, store, knowledge.book


def _teach_one(
    store: Any, book: Any, settings: Any, given: str, first: int, last: int, who: str,
    scope: str, mode: str, name: str | None,
) -> dict[str, Any]:  # fmt: skip
    from theow_client.job import job_fact
    from theow_workers.cli.review import _full_id
    from theow_workers.core.teaching import TeachError
    from theow_workers.review.teach import teach as file_teaching

    failure_id = _full_id(store, given, "failure")
    failure = store.failure(failure_id)
    is_normal = _normal(settings, job_fact(failure.facts) if failure is not None else None)
    try:
        teaching = file_teaching(
            store, book, failure_id, first, last, by=who, scope=scope, mode=mode, name=name,
            is_normal=is_normal, taken=frozenset(_taken(settings)),
        )  # fmt: skip
    except TeachError as exc:
        raise fail(str(exc)) from None
    return teaching.to_dict()


def _normal(settings: Any, job: str | None) -> Any:
    """The job's normal from Redis, or None (no job, none learned, Redis down: said so)."""
    if not job:
        return None
    try:
        from theow_workers.runtime import Runtime

        normal = Runtime(settings).normals.normal(job)
    except Exception as exc:  # the rule is still taught; its normal test is said to be missing
        err.print(f"[yellow]the job's normal is not available ({type(exc).__name__}); not tested against it[/yellow]")  # fmt: skip
        return None
    return normal.is_normal if normal else None


def _taken(settings: Any) -> set[str]:
    from theow_workers.review.proposals import defined_names

    return {name for layer in settings.rule_layers for name in defined_names(layer)}


def _bulk(
    store: Any, book: Any, path: Path, who: str, scope: str, mode: str, as_json: bool
) -> None:
    """One proposal per distinct rule: a line whose rule is already filed in this run is skipped."""
    from theow_workers.core.teaching import TeachError, chunk_span
    from theow_workers.evaluation import read_jsonl
    from theow_workers.review.teach import teach as file_teaching
    from theow_workers.store import AmbiguousId

    filed: list[dict[str, Any]] = []
    problems: list[str] = []
    seen_patterns: set[str] = set()
    taken = set(_taken(load_settings()))
    for number, data, problem in read_jsonl(path):
        if data is None:
            problems.append(f"{path}:{problem}")
            continue
        given = str(data.get("failure_id") or data.get("id") or "")
        try:
            failure_id = store.full_id("failure", given) if given else None
        except AmbiguousId as exc:
            problems.append(f"{path}:{number}: {exc}")
            continue
        failure = store.failure(failure_id) if failure_id else None
        if failure_id is None or failure is None:
            problems.append(f"{path}:{number}: no failure {given!r}")
            continue
        span: tuple[int, int] | None = None
        if isinstance(data.get("lines"), str):
            found = LINES.match(data["lines"])
            span = (int(found.group(1)), int(found.group(2) or found.group(1))) if found else None
        elif isinstance(data.get("chunk"), str):
            from theow_workers.core.resolver import matching_facts

            log = matching_facts(failure.facts).get("log")
            span = chunk_span(log, data["chunk"]) if isinstance(log, str) else None
        if span is None:
            problems.append(
                f"{path}:{number}: no lines (give lines 'A-B' or a chunk found in the log)"
            )
            continue
        known = [
            r for r in book.rules if r.name in {f["rule"] for f in filed}
        ]  # rules filed in this run: a line they already match is not taught twice
        if _explained(known, failure.facts, span):
            continue
        try:
            teaching = file_teaching(
                store, book, failure_id, *span, by=who, scope=scope, mode=mode, taken=frozenset(taken),
            )  # fmt: skip
        except TeachError as exc:
            problems.append(f"{path}:{number}: {exc}")
            continue
        pattern = teaching.taught.rule.when[-1].regex or ""
        if pattern in seen_patterns:
            continue
        seen_patterns.add(pattern)
        taken.add(teaching.taught.rule.name)
        filed.append(teaching.to_dict())
        book = _with(book, teaching.taught.rule)
    if as_json:
        print_json({"filed": filed, "problems": problems})
    else:
        for item in filed:
            out.print(f"filed proposal {item['proposal_id']} for rule {item['rule']} "
                      f"(failure {item['failure_id']} line {item['line']})", highlight=False)  # fmt: skip
        for problem in problems:
            err.print(Text(problem, style="yellow"))
        out.print(f"{len(filed)} proposal(s) filed; review them with `theow review list`")


def _explained(rules: list[Any], facts: dict[str, Any], span: tuple[int, int]) -> bool:
    from theow_workers.core.matching import evaluate
    from theow_workers.core.resolver import matching_facts

    for rule in rules:
        match = evaluate(rule, matching_facts(facts))
        if match.ok and match.evidence is not None and span[0] <= match.evidence.line <= span[1]:
            return True
    return False


def _with(book: Any, rule: Any) -> Any:
    from theow_workers.core.resolver import RuleBook

    return RuleBook((*book.rules, rule), f"{book.version}+{rule.name}", book.client_side)


def _print(teaching: dict[str, Any]) -> None:
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
        verdict = "[red]yes: its evidence is a line the passing runs print[/red]" if tests["fires_on_normal"] else "no"  # fmt: skip
        out.print(f"fires on the job's normal: {verdict}")
    else:
        out.print("the job's normal is unknown: not tested against passing runs")
    out.print(f"approve with `theow review approve {teaching['proposal_id']}`")
