"""``theow review``, ``theow meow`` and ``theow failures``: looking at what came in and what was learned."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from theow_client.jsontypes import Json, JsonObject
from theow_client.terminal import printable
from theow_client.verdict import Verdict, Where
from theow_client.verdict_text import explained, fix_lines, look_at
from theow_workers.cli.output import err, load_settings, out, print_json, waiting
from theow_workers.cli.output import fail as _fail
from theow_workers.core.logs.text import strip_ansi
from theow_workers.review.live import LIVE_WAIT

if TYPE_CHECKING:
    from theow_workers.config import Settings
    from theow_workers.store.explore import ExploreStore
    from theow_workers.views.ports import Reads

review_app = typer.Typer(no_args_is_help=True, help="Review the explorer's proposals.")
failures_app = typer.Typer(
    no_args_is_help=True, help="Failures received and what happened to them."
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def _context() -> tuple[Settings, ExploreStore]:
    """The settings and an ExploreStore on the configured database (migrated)."""
    from theow_workers.store import migrate
    from theow_workers.store.explore import ExploreStore
    from theow_workers.store.results import SqlStore

    settings = load_settings()
    migrate(settings.store_url)
    return settings, ExploreStore(SqlStore(settings.store_url))


def _reads(store: ExploreStore) -> Reads:
    """The read model on the store's database (what the views read)."""
    from theow_workers.store.reads import SqlReads

    return SqlReads(store)


def _window(since: str | None) -> timedelta | None:
    """``--since 24h`` as a window (None: all time); a malformed one exits 2."""
    from theow_workers.views.stats import parse_duration

    try:
        return parse_duration(since) if since else None
    except ValueError as exc:
        raise _fail(str(exc), 2) from None


def _full_id(
    store: ExploreStore, given: str, what: str, unknown: Callable[[], str] | None = None
) -> str:
    """The id ``given`` names, a unique prefix accepted; unknown (``unknown()`` says why)
    or ambiguous exits 1."""
    from theow_workers.store import AmbiguousId

    try:
        full: str | None = store.full_id(what, given)
    except AmbiguousId as exc:
        raise _fail(str(exc)) from None
    if full is None and unknown is not None:
        raise _fail(unknown())
    if full is None:
        listing = "theow review list --status all" if what == "proposal" else "theow failures list"
        raise _fail(f"no {what} {given!r} (see `{listing}`)")
    return full


@review_app.command("list")
def review_list(
    status: Annotated[str | None, typer.Option(help="pending, approved or rejected")] = "pending",
    as_json: JsonFlag = False,
) -> None:
    """Proposals, newest last."""
    from theow_workers.views.proposals import proposal_list

    if status not in (None, "pending", "approved", "rejected", "all"):
        raise _fail(f"--status {status!r}: choose pending, approved, rejected or all", 2)
    _, store = _context()
    rows = proposal_list(_reads(store), None if status == "all" else status)
    if as_json:
        print_json(rows)
        return
    table = Table(
        "id", "rule", "status", "files", "cost $", "created", title=f"{len(rows)} proposal(s)"
    )
    for r in rows:
        table.add_row(
            r["id"],
            r["rule"],
            r["status"],
            ", ".join(r["files"]) or "-",
            f"{r['cost']:.4f}",
            (r["created_at"] or "")[:19],
        )
    out.print(table)


@review_app.command("show")
def review_show(proposal_id: str, as_json: JsonFlag = False) -> None:
    """The failure, the risk flags, the rule, the action diffs, tokens and cost."""
    from theow_workers.core.logs.summary import summarize
    from theow_workers.core.resolve.fingerprint import error_lines
    from theow_workers.review.flags import proposal_flags
    from theow_workers.review.risk import NOT_A_VERDICT, visible
    from theow_workers.views.proposals import summary

    settings, store = _context()
    proposal = store.proposal(_full_id(store, proposal_id, "proposal"))
    if proposal is None:
        raise _fail(f"no proposal {proposal_id!r} (see `theow review list`)")
    failure = store.failure(proposal.failure_id)
    entry = _reads(store).proposals.one(proposal.id)
    assert entry is not None  # read above, and proposals are never deleted
    info = summary(entry)
    origin = store.replay_origin(proposal.failure_id)
    flags = proposal_flags(
        proposal, failure.facts if failure else {}, settings.rule_layers, settings.action_layers
    )
    if as_json:
        print(
            json.dumps(
                {
                    **info,
                    "rule_yaml": proposal.rule_yaml,
                    "diffs": proposal.diffs,
                    "facts": failure.facts if failure else None,
                    "replay": origin,
                    "risk": [f.to_dict() for f in flags],
                    "risk_note": NOT_A_VERDICT,
                }
            )
        )
        return
    out.print(
        f"[bold]proposal {proposal.id}[/bold]  rule [bold]{proposal.rule_name}[/bold]  ({proposal.status})"
    )
    if info["origin"] == "taught":
        out.print(
            Text(f"taught by {info['taught_by']} (theow teach): no model, no cost"), highlight=False
        )
    if failure is not None:
        out.print(
            f"failure {failure.id} received {failure.received_at:%Y-%m-%d %H:%M} from {failure.source}"
        )
        if origin is not None:
            out.print(
                f"explored for replay {origin['job']}: group {origin['group']} of "
                f"{origin['failures']} failure(s)",
                highlight=False,
            )
        for line in error_lines(summarize(failure.facts))[-8:]:
            # Log text as text: no Rich markup or emoji codes, no ANSI.
            out.print(Text("  " + visible(strip_ansi(line)), style="dim"), highlight=False)
    out.print(Text(f"risk: {len(flags)} flag(s)", style="bold"))
    for flag in flags:
        out.print(Text(f"  ! {printable(str(flag))}", style="yellow"), highlight=False)
    out.print(Text(f"  {NOT_A_VERDICT}", style="dim"), highlight=False)
    # A model wrote the rule and the diffs: no escape sequence of theirs reaches the terminal,
    # and hidden characters show as <U+202E>, as the forges show them: the reviewer reads what runs.
    out.print(Syntax(visible(printable(proposal.rule_yaml)), "yaml", theme="ansi_dark"))
    if not proposal.diffs:
        out.print("no action file changes: the rule calls existing actions (see the flags above)")
    for change in proposal.diffs:
        out.print(Text(visible(printable(change["path"])), style="bold"))
        out.print(Syntax(visible(printable(change["diff"])), "diff", theme="ansi_dark"))
    out.print(f"tokens {info['tokens_in']} in / {info['tokens_out']} out, cost ${info['cost']:.4f}")
    out.print(f"transcript: theow review transcript {proposal.id}")


@review_app.command("transcript")
def review_transcript(proposal_id: str) -> None:
    """The LLM session that produced a proposal, as JSON."""
    _, store = _context()
    proposal = store.proposal(_full_id(store, proposal_id, "proposal"))
    if proposal is None:
        raise _fail(f"no proposal {proposal_id!r}")
    exploration = store.exploration(proposal.exploration_id)
    print(json.dumps(exploration.transcript if exploration else [], indent=1))


@review_app.command("approve")
def review_approve(
    proposal_ids: Annotated[list[str], typer.Argument(help="One or more proposal ids.")],
    edit: Annotated[bool, typer.Option("--edit", help="Edit the rule in $EDITOR first.")] = False,
    replace_shipped: Annotated[
        bool,
        typer.Option(
            "--replace-shipped",
            help="Allow replacing a shipped action: editing its file, or its name in any layer.",
        ),
    ] = False,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            metavar="S",
            help="Seconds to wait for the running workers to load the rules (0: do not wait).",
        ),
    ] = LIVE_WAIT,
) -> None:
    """Write the rules and apply the action diffs to the working tree (not committed).

    Several ids (a replay's proposals) are approved in order, the index synced once.
    Then it waits (--wait) until the running workers resolve with the new rules and
    says whether they do.
    """
    from theow_workers.review.proposals import ReviewError, approve

    settings, store = _context()
    wrote: list[str] = []
    for given in proposal_ids:
        proposal_id = _full_id(store, given, "proposal")
        rule_yaml = None
        if edit:
            proposal = store.proposal(proposal_id)
            if proposal is None:
                raise _fail(f"no proposal {proposal_id!r}")
            rule_yaml = _edit(proposal.rule_yaml)
        try:
            result = approve(
                store,
                proposal_id,
                settings.rule_layers,
                settings.action_layers,
                rule_yaml,
                replace_shipped=replace_shipped,
            )
        except ReviewError as exc:
            if wrote:
                _sync(settings, wrote, wait)
            raise _fail(str(exc)) from None
        if result.already:
            out.print(f"proposal {proposal_id} was already approved by {result.by}; nothing to do")
            continue
        for path in result.written:
            out.print(f"wrote {path}")
        wrote.append(result.rule_name)
        out.print(f"approved {result.rule_name}; commit the files when you are happy with them")
    if wrote:
        _sync(settings, wrote, wait)


@review_app.command("reject")
def review_reject(
    proposal_id: str,
    reason: Annotated[str, typer.Option("--reason", help="Why (kept with the proposal).")],
) -> None:
    """Reject a proposal; nothing is written."""
    from theow_workers.review.proposals import ReviewError, reject

    _, store = _context()
    proposal_id = _full_id(store, proposal_id, "proposal")
    try:
        reject(store, proposal_id, reason)
    except ReviewError as exc:
        raise _fail(str(exc)) from None
    out.print(f"rejected {proposal_id}")


def _edit(text: str) -> str:
    editor = os.environ.get("EDITOR") or os.environ.get("VISUAL") or "vi"
    with tempfile.NamedTemporaryFile("w", suffix=".rule.yaml", delete=False) as handle:
        handle.write(text)
    try:
        subprocess.run([*editor.split(), handle.name], check=True)
        return Path(handle.name).read_text()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise _fail(f"editor {editor!r} failed: {exc}") from None
    finally:
        os.unlink(handle.name)


def _sync(settings: Settings, rules: list[str], wait: float) -> None:
    """Sync the index now (when Milvus or Redis is down, workers sync on their next poll),
    then say whether the running workers resolve with ``rules`` (``review.live``)."""
    from theow_workers.core.resolve.library import Library
    from theow_workers.review.live import wait_live
    from theow_workers.review.proposals import sync_after_approval

    library = Library.configured(settings)
    synced, message = sync_after_approval(settings, library=library)
    if synced:
        out.print(message)
    else:
        err.print(f"[yellow]{message}[/yellow]")
    if wait <= 0:
        return
    with waiting(f"waiting for the workers to load {', '.join(rules)}", after=0.5):
        live = wait_live(settings, rules, library.book.version, timeout=wait)
    # One line, however narrow the terminal: it wraps it, rich does not cut it.
    if live.live:
        out.print(live.line, highlight=False, markup=False, soft_wrap=True)
    else:
        err.print(live.line, style="yellow", highlight=False, markup=False, soft_wrap=True)


def meow_command(
    since: Annotated[str | None, typer.Option(help="Window, e.g. 24h, 7d.")] = None,
    demo: Annotated[
        bool, typer.Option("--demo", help="Count theow demo's failures too (left out by default).")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Resolves, explores, hit rate, top and struggling rules, LLM cost (cat)."""
    from theow_workers.views.stats import meow

    window = _window(since)
    _, store = _context()
    stats = meow(_reads(store), window, demo=demo)
    if as_json:
        print_json(stats)
        return
    rate = "-" if stats["hit_rate"] is None else f"{stats['hit_rate']:.0%}"
    out.print(
        f"(cat) {stats['resolves']} matched ({stats['resolved']} resolved,"
        f" {stats['suggested']} suggested), {stats['explores']} explores, hit rate {rate}"
        f" over {stats['failures']} failures"
    )
    change = stats["hit_rate_change"]
    if change["last_approval"]:
        before, after = change["before"]["hit_rate"], change["after"]["hit_rate"]
        out.print(
            f"(cat) hit rate {_percent(before)} before the last approval, {_percent(after)} since"
        )
    out.print(
        f"(cat) {stats['llm_sessions']} LLM sessions, ${stats['llm_cost']:.4f}; "
        f"{stats['cache_hits_saved']} reused (about ${stats['estimated_cost_saved']:.4f} saved)"
    )
    out.print(
        f"(cat) {stats['unmatched_waiting']} unmatched waiting"
        + (f" ({n} unexplained: only a wrapper matched)" if (n := stats["unexplained"]) else "")
        + f", {stats['proposals_pending']} proposals pending"
    )
    if stats["client_pending"]:
        out.print(
            f"(cat) {stats['client_pending']} client-side fixes pending: waiting for"
            " their build agents to run them and report"
        )
    tables = (
        ("top rules", "top_rules"),
        ("struggling", "struggling_rules"),
        ("pending (waiting for the agent)", "pending_rules"),
    )
    for title, key in tables:
        if stats[key]:
            table = Table("rule", "successes", "failures", "pending", title=title)
            for r in stats[key]:
                table.add_row(r["rule"], str(r["successes"]), str(r["failures"]), str(r["pending"]))
            out.print(table)


@failures_app.command("list")
def failures_list(
    status: Annotated[
        str | None, typer.Option(help="Only failures whose verdict has this status.")
    ] = None,
    since: Annotated[str | None, typer.Option(help="Window, e.g. 24h.")] = None,
    source: Annotated[
        str,
        typer.Option(
            help="live (build agents), replay (replayed history), demo (theow demo's) or all.",
            show_default=True,
        ),
    ] = "live",
    origin: Annotated[
        str | None,
        typer.Option(help="Only failures of this origin: change, main, flaky, infra, unknown."),
    ] = None,
    limit: int = 50,
    as_json: JsonFlag = False,
) -> None:
    """Recent failures with their verdicts: live ones unless --source says otherwise."""
    from theow_workers.core.history.model import Origin
    from theow_workers.views.failures import cli_rows
    from theow_workers.views.ports import SOURCES, UnknownSource

    window = _window(since)
    if source not in SOURCES:
        raise _fail(str(UnknownSource(source)), 2)
    if origin is not None and origin not in {o.value for o in Origin}:
        choices = ", ".join(o.value for o in Origin)
        raise _fail(f"--origin {origin!r}: use {choices}", 2)
    _, store = _context()
    rows = cli_rows(
        _reads(store), status=status, since=window, limit=limit, source=source, origin=origin
    )
    if as_json:
        print_json(rows)
        return
    table = Table(
        "id",
        "received",
        "source",
        "problem_type",
        "status",
        "origin",
        "rule",
        "reason",
        title=f"{len(rows)} {'' if source == 'all' else source + ' '}failure(s)",
    )
    for r in rows:
        table.add_row(
            r["id"],
            r["received_at"][:19],
            r["source"],
            r["problem_type"] or "",
            r["status"] or "-",
            r["origin"] or "-",
            r["rule"] or _wrapper(r),
            r["reason"] or "",
        )
    out.print(table)


def _wrapper(row: JsonObject) -> str:
    """What an unexplained failure shows where a rule would be: its wrapper."""
    return f"(wrapper: {row['wrapper']})" if row.get("wrapper") else ""


@failures_app.command("show")
def failures_show(failure_id: str, as_json: JsonFlag = False) -> None:
    """One failure: its facts, every attempt, its verdict and explorations."""
    from theow_workers.cli.pending import not_recorded
    from theow_workers.views.failures import failure_detail

    settings, store = _context()
    # Not recorded (yet): whether it waits in the queue, and for whom.
    failure_id = _full_id(store, failure_id, "failure", lambda: not_recorded(settings, failure_id))
    info = failure_detail(_reads(store), failure_id)
    if info is None:
        raise _fail(f"no failure {failure_id!r} (see `theow failures list`)")
    if info["verdict"] is None:
        from theow_workers.cli.pending import pending

        info["pending"] = pending(settings, info)
    if as_json:
        print_json(info)
        return
    verdict = info["verdict"] or {"status": info["pending"]}
    out.print(
        f"[bold]failure {failure_id}[/bold] from {info['source']} at {info['received_at'][:19]}"
    )
    # What a log or a model wrote (reasons, lines, errors) is printed as plain text
    # without escape sequences: it may come from a pull request's build.
    named = verdict.get("rule") or (
        f"(wrapper: {verdict['wrapper']})" if verdict.get("wrapper") else ""
    )
    shown = f"verdict: {verdict.get('status', '-')} {named} {verdict.get('reason', '')}".rstrip()
    out.print(printable(shown), highlight=False, markup=False)
    for line in origin_lines(info["origin"]):
        out.print(printable(line), highlight=False, markup=False)
    for line in look_at(_wheres(verdict.get("where"))):
        out.print(printable(line), highlight=False, markup=False)
    for line in fix_lines(verdict.get("fixes") or []):  # built from log text: plain only
        out.print(printable(line), highlight=False, markup=False)
    for line in explained(verdict.get("explanation")):  # a model's words: plain text only
        out.print(printable(line), highlight=False, markup=False)
    evidence = verdict.get("evidence")
    if evidence:
        for offset, line in enumerate(evidence.get("context") or [evidence["text"]]):
            number = evidence.get("context_start", evidence["line"]) + offset
            marker = ">" if number == evidence["line"] else " "
            shown = f"  {marker} {evidence['fact']}:{number} | {line}"
            out.print(printable(shown), highlight=False, markup=False)
    if verdict.get("also"):
        out.print(f"also matched: {', '.join(verdict['also'])}", highlight=False)
    if verdict.get("seen_in_passing"):
        seen = ", ".join(verdict["seen_in_passing"])
        out.print(f"also seen in passing runs (ranked last): {seen}", highlight=False)
    for a in info["attempts"]:
        shown = f"  attempt {a['rule']}: {a['outcome']} {a['error']} ({a['duration_ms']:.0f} ms)"
        out.print(printable(shown), highlight=False, markup=False)
    for e in info["explorations"]:
        shown = f"  exploration {e['outcome']}: {e['reason']} (proposal {e['proposal_id'] or '-'}, ${e['cost']:.4f})"
        out.print(printable(shown), highlight=False, markup=False)
    for line in info["error_lines"]:
        out.print(Text(f"  {strip_ansi(line)}", style="dim"))  # log text: no markup, no emoji


def origin_lines(origin: JsonObject | None) -> list[str]:
    """Whose failure it is, in a line or two: as it stands, as decided at its verdict, why.

    >>> origin_lines({"origin": "main", "origin_then": "change", "culprit": "a" * 40,
    ...               "fixed_by": None, "reason": "fails the same way on the default branch"})
    ['origin: main (at the verdict: change), culprit aaaaaaaaaaaa: fails the same way on the default branch']
    >>> origin_lines(None)
    []
    """
    if not origin or not origin.get("origin"):
        return []
    line = f"origin: {origin['origin']}"
    if origin.get("origin_then") and origin["origin_then"] != origin["origin"]:
        line += f" (at the verdict: {origin['origin_then']})"
    for name in ("culprit", "fixed_by"):
        if origin.get(name):
            line += f", {name.replace('_', ' ')} {str(origin[name])[:12]}"
    return [f"{line}: {origin['reason']}" if origin.get("reason") else line]


def _wheres(stored: Json) -> list[Where]:
    """The stored lines to look at; one that is not ``{fact, line, text}`` is left out."""
    return list(Verdict.from_dict({"failure_id": "-", "status": "-", "where": stored}).where)


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"
