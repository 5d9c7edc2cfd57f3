"""Replay reports, job status and job lists in the terminal (rich)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

TOP_GROUPS = 10
TOP_RULES = 20
TOP_PROBLEMS = 10


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def show_report(report: dict[str, Any], console: Console) -> None:
    job, s = report["job"], report["summary"]
    mode = "dry run" if job["dry_run"] else "actions executed"
    console.print(
        f"\n[bold]replay {job['id']}[/bold] — {job['source']} ({mode}), status [bold]{job['status']}[/bold]",
        highlight=False,
    )
    console.print(
        f"hit rate [bold green]{_pct(s['hit_rate'])}[/bold green]: {s['matched']} of "
        f"{s['replayed']} replayed failures matched a rule · {s['unmatched']} unmatched · "
        f"{s['failed']} failed · {s['errors']} errors · {s['invalid']} invalid and "
        f"{s['duplicates']} duplicate lines skipped",
        highlight=False,
    )
    if report["rules"]:
        table = Table("rule", "matched", "evidence (one example)", title="matches per rule")
        for row in report["rules"][:TOP_RULES]:
            # Log text is shown as it is: no Rich markup or emoji codes applied to it.
            table.add_row(row["rule"], str(row["matched"]), Text(row.get("evidence", "")))
        if len(report["rules"]) > TOP_RULES:
            table.add_row(f"… {len(report['rules']) - TOP_RULES} more", "", "")
        console.print(table)
    idle = report["rules_without_matches"]
    if idle:
        console.print(f"[yellow]{len(idle)} rule(s) matched nothing:[/yellow] {', '.join(idle)}")
    _show_comparison(report, console)
    groups = report["unmatched_groups"]
    if groups:
        table = Table(
            "failures", "sample error line", title=f"largest unmatched groups ({len(groups)})"
        )
        for g in groups[:TOP_GROUPS]:
            table.add_row(str(g["size"]), g["sample"][:160])
        console.print(table)
    cost = report["exploration"]
    console.print(
        f"exploring {cost['sessions']} group(s): ≈ [bold]${cost['estimated_usd']:.2f}[/bold] "
        f"({cost['usd_per_session']:.4f} $/session with {cost['model']}; {cost['note']})",
        highlight=False,
    )
    request = report["explore_request"]
    if request["requested"]:
        console.print(f"[yellow]--explore: {request['status']}[/yellow]", highlight=False)
    problems = report["input_problems"]
    if problems:
        console.print(f"[yellow]{len(problems)} input line(s) not replayed:[/yellow]")
        for p in problems[:TOP_PROBLEMS]:
            console.print(f"  line {p['line']}: {p['problem']}", highlight=False)
        if len(problems) > TOP_PROBLEMS:
            console.print(f"  … {len(problems) - TOP_PROBLEMS} more in the report files")


def _show_comparison(report: dict[str, Any], console: Console) -> None:
    cmp = report["comparison"]
    if cmp is None:
        return
    console.print(
        f"compared with replay {cmp['previous_job']} of the same source: hit rate "
        f"{_pct(cmp['previous_hit_rate'])} → {_pct(report['summary']['hit_rate'])}; "
        f"{cmp['lost_matches']['count']} failure(s) no longer matched by the same rule",
        highlight=False,
    )
    for row in cmp["stopped_matching"]:
        gone = "" if row["exists"] else " (rule removed)"
        console.print(
            f"  [red]stopped matching[/red] {row['rule']}: {row['before']} → 0{gone}",
            highlight=False,
        )


def _age(iso: str | None) -> str:
    if not iso:
        return "-"
    seconds = (datetime.now(UTC) - datetime.fromisoformat(iso)).total_seconds()
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


def show_status(job: dict[str, Any], console: Console) -> None:
    table = Table(show_header=False, title=f"replay {job['id']}")
    state = job["status"] + (" (its command stopped beating: resume it)" if job["orphaned"] else "")
    rows = [
        ("status", state),
        ("source", f"{job['source']} ({job['kind']})"),
        ("mode", "dry run" if job["dry_run"] else "actions executed"),
        ("progress", f"{job['processed']} / {job['total']}"),
        ("hit rate", f"{_pct(job['hit_rate'])} of {job['replayed']} replayed"),
        ("matched", str(job["matched"])),
        ("unmatched", str(job["unmatched"])),
        ("failed", str(job["failed"])),
        ("errors", str(job["errors"])),
        ("invalid input", str(job["invalid"])),
        ("duplicates", str(job["duplicates"])),
        ("passing runs learned", str(job.get("passing", 0))),
        ("created", job["created_at"]),
        ("heartbeat", _age(job["heartbeat_at"])),
        ("finished", job["finished_at"] or "-"),
    ]
    if job["explore"]:
        rows.append(("explore", job["explore_status"]))
    if job["message"]:
        rows.append(("note", job["message"]))
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)


def show_jobs(jobs: list[dict[str, Any]], console: Console) -> None:
    table = Table("job", "created", "status", "progress", "hit rate", "source")
    for j in jobs:
        table.add_row(
            j["id"], j["created_at"][5:16].replace("T", " "), j["status"], f"{j['processed']}/{j['total']}",
            _pct(j["hit_rate"]), j["source"][-60:],
        )  # fmt: skip
    console.print(table)
    if not jobs:
        console.print("no replays yet: `theow replay FILE.jsonl` or `theow replay --from-db`")
