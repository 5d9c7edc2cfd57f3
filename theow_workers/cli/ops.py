"""``theow doctor`` and ``theow metrics``: is this deployment sane, and what does it learn."""

from __future__ import annotations

import errno
import signal
import threading
from typing import Annotated

import typer
from rich.text import Text

from theow_workers.cli.output import fail, load_settings, out, print_json, waiting
from theow_workers.config import ConfigError, Settings
from theow_workers.ops.checks import FAIL, OK, WARN, Finding

STYLE = {OK: "[green]ok[/green]", WARN: "[yellow]warn[/yellow]", FAIL: "[red]FAIL[/red]"}


def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    deep: Annotated[bool, typer.Option("--deep", help="Also load MiniLM and embed.")] = False,
) -> None:
    """Check Redis, Milvus, SQL, the model, the rules, the index and the LLM key; exit 1 on a failure."""
    from rich.table import Column, Table

    from theow_workers.ops.doctor import diagnose, report

    try:
        settings = Settings.load()
    except ConfigError as exc:  # a finding like any other, not a reason to stop
        findings = [Finding("config", FAIL, str(exc), "fix theow.yaml or the THEOW_* variables")]
    else:
        with waiting("checking the services, the model, the rules and the index"):
            findings = diagnose(settings, deep)
    result = report(findings)
    if as_json:
        print_json(result)
    else:
        table = Table(
            "check", "status", Column("detail", overflow="fold"), Column("fix", overflow="fold")
        )
        for f in findings:
            table.add_row(f.check, STYLE.get(f.status, f"[dim]{f.status}[/dim]"), f.detail, f.fix)
        out.print(table)
        failed = sum(f.status == FAIL for f in findings)
        out.print(
            "[green]all good[/green]" if not failed else f"[red]{failed} check(s) failed[/red]"
        )
    if not result["ok"]:
        raise typer.Exit(1)


def metrics(
    port: Annotated[
        int | None, typer.Option(help="Port to serve /metrics on [default: THEOW_METRICS_PORT].")
    ] = None,
    address: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
) -> None:
    """Serve Theow's Prometheus metrics (failures, verdicts, explorations, LLM cost, replays)."""
    from prometheus_client import start_http_server

    from theow_workers.core.logs.redact import redact_text
    from theow_workers.ops.metrics import registry_for

    settings = load_settings()
    port = settings.metrics_port if port is None else port
    try:
        server, thread = start_http_server(port, address, registry_for(settings))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise fail(f"port {port} on {address} is in use: choose another with --port") from None
        raise fail(f"cannot listen on {address}:{port}: {exc.strerror}") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    url = f"http://{address}:{port}/metrics"
    out.print(
        f"metrics on {url} from {redact_text(settings.store_url)}", markup=False, highlight=False
    )
    while not stop.wait(1.0):
        pass
    server.shutdown()
    thread.join(5)


def dead_letters(
    limit: Annotated[int, typer.Option(help="How many, newest first.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Messages the workers refused off their queues: when, which queue, why, and how they began."""
    import redis
    from rich.table import Column, Table

    from theow_client.terminal import printable
    from theow_workers.core.logs.redact import redact_text
    from theow_workers.edge.dead_letters import counts, newest

    settings = load_settings()
    client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=5, socket_timeout=5)
    try:
        found, letters = counts(client), newest(client, limit)
    except redis.RedisError as exc:
        raise fail(
            f"cannot read the dead letters at {redact_text(settings.redis_url)}: {exc}"
        ) from None
    finally:
        client.close()
    refused = [
        {"task": task, "reason": reason, "count": n}
        for (task, reason), n in sorted(found.refused.items())
    ]
    if as_json:
        print_json({"refused": refused, "kept": found.kept, "dead_letters": letters})
        return
    out.print(
        f"{found.total} message(s) refused at the broker edge; {found.kept} kept "
        f"(the newest {len(letters)} below)",
        markup=False,
        highlight=False,
    )
    table = Table("at", "queue", "task", "reason", Column("message", overflow="fold"))
    for letter in letters:
        shown = f"{letter.get('detail', '')} ({letter.get('size', '?')} bytes): {letter.get('head', '')}"
        table.add_row(
            # What a sender pushed is printed without its escape sequences (terminal.py).
            *(Text(printable(str(letter.get(k, "")))) for k in ("at", "queue", "task", "reason")),
            Text(printable(shown[:400])),
        )
    out.print(table)
