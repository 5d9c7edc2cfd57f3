"""``theow doctor`` and ``theow metrics``: is this deployment sane, and what does it learn."""

from __future__ import annotations

import errno
import signal
import threading
from typing import Annotated

import typer

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
