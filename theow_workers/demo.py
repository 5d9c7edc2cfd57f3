"""``theow demo``: the whole resolver path on the embedded stack, start to finish.

Starts Valkey, Milvus Lite and a resolver worker, submits every failure of a
JSON Lines file through ``theow_client`` (as a build agent would), waits for
every verdict, prints which rule matched what (fix, retry or track), and shuts down.
Its failures are stored with source ``demo``: live lists and figures leave them out
(``theow failures list --source demo`` shows them).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from theow_client import Status, TheowClient, Verdict
from theow_client.jsontypes import JsonObject
from theow_workers.client_env import grant_broker_access
from theow_workers.config import Settings
from theow_workers.core.resolve.library import Library
from theow_workers.replay.reader import check, json_object, raw_lines
from theow_workers.runtime import build, sync_index
from theow_workers.stack import EmbeddedStack, StackError
from theow_workers.store.failures import label_agent
from theow_workers.store.tokens import TokenStore
from theow_workers.views.ports import DEMO_SOURCE

DEMO_AGENT = "demo"


def read_failures(path: Path) -> list[JsonObject]:
    """Every line's facts, read as ``theow replay`` reads a history (``.gz`` too); a bad line stops it."""
    check(path)
    failures = []
    for raw in raw_lines(path, duplicates=False):
        facts, problem = json_object(raw.data) if raw.data is not None else (None, "too long")
        if facts is None:
            raise ValueError(f"{path}:{raw.number}: {problem}")
        failures.append(facts)
    return failures


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def run_demo(settings: Settings, path: Path, timeout: float, console: Console) -> int:
    try:
        failures = read_failures(path)
    except (OSError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    stack = EmbeddedStack(settings)
    rt = None
    try:
        with console.status("starting Valkey, Milvus Lite, SQLite…"):
            stack.start()
        with console.status("indexing rules and actions (loads MiniLM)…"):
            settings = stack.settings  # with the password the stack gave its Valkey
            rt = build(settings, "cli")
            knowledge = Library.configured(settings)
            report = sync_index(knowledge, rt.index, rt.embedder, rt.redis)
            rt.index.close()
        console.print(
            f"{len(knowledge.rules.rules)} rules, {len(knowledge.actions)} actions indexed "
            f"({report.added + report.updated} embedded, {report.unchanged} unchanged)"
        )
        stack.start_worker(["resolve"])
        # The demo is an agent like any other: it signs with a token of its own.
        token = str(TokenStore(rt.store.engine).replace(DEMO_AGENT, "agent"))
        grant_broker_access(settings, DEMO_AGENT, token)
        verdicts = _submit_and_wait(settings, failures, timeout, console, token)
    except StackError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    finally:
        with console.status("stopping…"):
            stack.stop()
        if rt is not None:  # the worker has stopped: every failure it recorded is there
            label_agent(rt.store.engine, DEMO_AGENT, DEMO_SOURCE)
    _print_summary(verdicts, len(failures), console)
    return 0 if len(verdicts) == len(failures) else 1


def _submit_and_wait(
    settings: Settings,
    failures: list[JsonObject],
    timeout: float,
    console: Console,
    token: str,
) -> list[Verdict]:
    verdicts: list[Verdict] = []
    client = TheowClient(redis_url=settings.redis_url, token=token)
    with client, _progress(console) as progress:
        sending = progress.add_task("submitting", total=len(failures))
        tickets = []
        for facts in failures:
            tickets.append(client.submit(facts, source=DEMO_SOURCE))
            progress.advance(sending)
        waiting = progress.add_task("verdicts", total=len(tickets))
        for ticket in tickets:
            try:
                verdicts.append(ticket.wait(timeout))
            except TimeoutError as exc:
                console.print(f"[yellow]{exc}[/yellow]")
            progress.advance(waiting)
    return verdicts


def _print_summary(verdicts: list[Verdict], submitted: int, console: Console) -> None:
    by_status = Counter(v.status for v in verdicts)
    by_rule = Counter(v.rule for v in verdicts if v.rule)
    # A rule matches in its mode: fix (its actions ran: resolved, or failed), retry or track.
    table = Table("rule", "mode", "failures", "outcome", title="matched by rule")
    modes = {v.rule: v.mode for v in verdicts if v.rule}
    outcomes = Counter((v.rule, str(v.status)) for v in verdicts if v.rule)
    for rule, count in by_rule.most_common():
        outcome = ", ".join(f"{s} {n}" for (r, s), n in sorted(outcomes.items()) if r == rule)
        table.add_row(rule, modes.get(rule) or "-", str(count), outcome)
    console.print(table)
    summary = Table("outcome", "failures", title=f"{submitted} failures submitted")
    for status in Status:
        if by_status.get(status):
            summary.add_row(status.value, str(by_status[status]))
    missing = submitted - len(verdicts)
    if missing:
        summary.add_row("no verdict in time", str(missing))
    console.print(summary)
    matched = sum(by_rule.values())  # as in the table: a fix rule whose actions failed matched too
    console.print(
        f"matched {matched}/{submitted} ({matched / max(1, submitted):.0%}), "
        f"unmatched {by_status[Status.UNMATCHED]}"
        + (f", unexplained {n}" if (n := by_status[Status.UNEXPLAINED]) else "")
    )
