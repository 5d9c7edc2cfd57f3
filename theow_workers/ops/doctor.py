"""``theow doctor``: is every dependency of this deployment there and sane?

One finding per check, each ``ok``, ``warn``, ``fail`` or ``skip``, with what is
wrong and how to fix it; exit code 1 when any check fails.

=================  ==============================================================
config             settings load; visibility timeout above every task time limit
redis              reachable, version; ``maxmemory-policy noeviction``; persistence
milvus             reachable; the index collection exists
sql                reachable; Alembic at the head revision of this code
model              the MiniLM files are installed (``--deep``: load it and embed)
rules              rules and actions load without errors (``Knowledge.load``)
index              Milvus holds exactly the content hashes of the current rules
llm                with ``THEOW_EXPLORE=1``, an API key is set
=================  ==============================================================

Every check has a time limit; nothing here writes to a service, except that
reading the index loads the collection into Milvus memory. Service URLs are
shown with their credentials masked; no secret is ever printed.

Run it where the workers run (``docker compose exec explorer theow doctor``)
to check that container's configuration.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated, Any

import typer

from theow_workers.config import ConfigError, Settings
from theow_workers.ops.checks import CHECKS, FAIL, OK, WARN, Context, Finding


def diagnose(settings: Settings, deep: bool = False) -> list[Finding]:
    """Run every check; a check that crashes is itself a failed finding."""
    from theow_workers.logs import SecretFilter, secrets_of

    ctx = Context(settings, deep)
    findings: list[Finding] = []
    for check in CHECKS:
        name = check.__name__.removeprefix("check_")
        try:
            findings.extend(check(ctx))
        except Exception as exc:
            findings.append(Finding(name, FAIL, f"the check itself failed: {exc!r}"))
    mask = SecretFilter(secrets_of(settings)).mask
    return [Finding(f.check, f.status, mask(f.detail), mask(f.fix)) for f in findings]


def report(findings: list[Finding]) -> dict[str, Any]:
    return {
        "ok": all(f.status != FAIL for f in findings),
        "checks": [asdict(f) for f in findings],
    }


STYLE = {OK: "[green]ok[/green]", WARN: "[yellow]warn[/yellow]", FAIL: "[red]FAIL[/red]"}


def doctor_command(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    deep: Annotated[bool, typer.Option("--deep", help="Also load MiniLM and embed.")] = False,
) -> None:
    """Check Redis, Milvus, SQL, the model, the rules, the index and the LLM key; exit 1 on a failure."""
    from rich.table import Column, Table

    from theow_workers.console import make_console

    try:
        settings = Settings.load()
    except ConfigError as exc:
        findings = [Finding("config", FAIL, str(exc), "fix theow.yaml or the THEOW_* variables")]
    else:
        findings = diagnose(settings, deep)
    result = report(findings)
    if as_json:
        print(json.dumps(result))
    else:
        table = Table(
            "check", "status", Column("detail", overflow="fold"), Column("fix", overflow="fold")
        )
        for f in findings:
            table.add_row(f.check, STYLE.get(f.status, f"[dim]{f.status}[/dim]"), f.detail, f.fix)
        console = make_console()
        console.print(table)
        failed = sum(f.status == FAIL for f in findings)
        console.print(
            "[green]all good[/green]" if not failed else f"[red]{failed} check(s) failed[/red]"
        )
    if not result["ok"]:
        raise typer.Exit(1)
