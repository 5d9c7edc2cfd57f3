"""Replay reports, job status and job lists in the terminal (rich)."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from theow_client.jsontypes import JsonObject
from theow_client.terminal import printable
from theow_workers.core.logs.text import strip_ansi
from theow_workers.replay.report import group_where, runs_line, unexplained_note

TOP_GROUPS = 10
TOP_RULES = 20
TOP_PROBLEMS = 10


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def as_text(value: object, limit: int | None = None) -> Text:
    """Data (log lines, paths, rule names) shown as it is: no Rich markup, no emoji codes, no ANSI."""
    shown = strip_ansi(str(value))
    return Text(shown if limit is None else shown[:limit])


def show_report(report: JsonObject, console: Console) -> None:
    job, s = report["job"], report["summary"]
    mode = "dry run" if job["dry_run"] else "actions executed"
    console.print(
        Text.assemble(
            "\n",
            (f"replay {job['id']}", "bold"),
            f" — {job['source']} ({mode}), status ",
            (job["status"], "bold"),
        ),
        highlight=False,
    )
    console.print(
        f"hit rate [bold green]{_pct(s['hit_rate'])}[/bold green] explained: {s['matched']} of "
        f"{s['replayed']} replayed failures explained by a rule · {s['unmatched']} unmatched"
        f"{unexplained_note(s)} · "
        f"{s['failed']} failed · {s['errors']} errors · {s['invalid']} invalid and "
        f"{s['duplicates']} duplicate lines skipped",
        highlight=False,
    )
    if report["rules"]:
        table = Table("rule", "matched", "evidence (one example)", title="matches per rule")
        for row in report["rules"][:TOP_RULES]:
            # Log text is shown as it is: no Rich markup or emoji codes applied to it.
            table.add_row(
                as_text(row["rule"]), str(row["matched"]), as_text(row.get("evidence", ""))
            )
        if len(report["rules"]) > TOP_RULES:
            table.add_row(f"… {len(report['rules']) - TOP_RULES} more", "", "")
        console.print(table)
    idle = report["rules_without_matches"]
    if idle:  # a count: a library of hundreds of rules would list most of them here
        console.print(
            f"{len(idle)} rule(s) matched nothing "
            "(named in the report files below, and in `--json` as rules_without_matches)",
            highlight=False,
        )
    runs = runs_line(report)
    if runs:
        console.print(as_text(runs), highlight=False)
    _show_comparison(report, console)
    groups = report["unmatched_groups"]
    if groups:
        explored = {g["rank"]: g for g in report["explore_request"].get("groups", [])}
        columns = ["failures", "sample error line", "look at (its first failure)"]
        if explored:
            columns += ["exploration", "proposal", "tokens", "cost"]
        table = Table(*columns, title=f"largest unmatched groups ({len(groups)})")
        for rank, g in enumerate(groups[:TOP_GROUPS], 1):
            where = "\n".join(group_where(g))
            shown = as_text(printable(where) or "-")
            cells: list[str | Text] = [str(g["size"]), as_text(g["sample"], 160), shown]
            if explored:
                e = explored.get(rank, {})
                proposal = e.get("rule_name") or e.get("proposal_id") or "-"
                status = f" ({e['proposal_status']})" if e.get("proposal_status") else ""
                outcome = f": {e['outcome']}" if e.get("outcome") else ""
                cells += [
                    as_text(f"{e.get('state', '?')}{outcome}"),
                    as_text(f"{proposal}{status}"),
                    f"{e.get('tokens_in', 0) + e.get('tokens_out', 0):,}",
                    f"${e.get('cost', 0):.4f}",
                ]
            table.add_row(*cells)
        console.print(table)
    cost = report["exploration"]
    console.print(
        f"exploring {cost['sessions']} group(s) would cost ≈ "
        f"[bold]${cost['estimated_usd']:.2f}[/bold] "
        f"({cost['usd_per_session']:.4f} $/session with {cost['model']}; {cost['note']})",
        highlight=False,
    )
    request = report["explore_request"]
    if request["requested"]:
        console.print(Text(f"--explore: {request['status']}", style="yellow"), highlight=False)
        if "groups" in request:
            console.print(
                f"explored: {request['llm_sessions']} LLM session(s), {request['proposals']} "
                f"proposal(s), actual ${request['actual_usd']:.4f} (estimate "
                f"${cost['estimated_usd']:.2f})",
                highlight=False,
            )
    problems = report["input_problems"]
    if problems:
        console.print(f"[yellow]{len(problems)} input line(s) not replayed:[/yellow]")
        for p in problems[:TOP_PROBLEMS]:
            console.print(as_text(f"  line {p['line']}: {p['problem']}"), highlight=False)
        if len(problems) > TOP_PROBLEMS:
            console.print(f"  … {len(problems) - TOP_PROBLEMS} more in the report files")


def _show_comparison(report: JsonObject, console: Console) -> None:
    cmp = report["comparison"]
    if cmp is None:
        return
    console.print(
        f"compared with replay {cmp['previous_job']} of the same source: hit rate "
        f"{_pct(cmp['previous_hit_rate'])} → {_pct(report['summary']['hit_rate'])}; "
        f"LLM sessions {cmp['previous_llm_sessions']} → {cmp['llm_sessions']}; "
        f"{cmp['newly_matched']['count']} newly matched, {cmp['changed_rule']['count']} "
        f"matched by another rule, {cmp['lost_matches']['count']} failure(s) no longer "
        "matched by the same rule",
        highlight=False,
    )
    for row in cmp["newly_matched"]["by_rule"]:
        approved = (
            f" (approved proposal {row['approved_proposal']})" if row["approved_proposal"] else ""
        )
        console.print(
            as_text(f"  newly matched by {row['rule']}: {row['count']}{approved}"), highlight=False
        )
    for change, n in cmp["changed_rule"]["by_change"].items():
        console.print(as_text(f"  changed rule {change}: {n}"), highlight=False)
    for row in cmp["stopped_matching"]:
        gone = "" if row["exists"] else " (rule removed)"
        console.print(
            Text.assemble(
                "  ", ("stopped matching", "red"), f" {row['rule']}: {row['before']} → 0{gone}"
            ),
            highlight=False,
        )


def _age(iso: str | None) -> str:
    if not iso:
        return "-"
    seconds = (datetime.now(UTC) - datetime.fromisoformat(iso)).total_seconds()
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


def show_status(job: JsonObject, console: Console) -> None:
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
        ("passing or passed runs", str(job.get("passing", 0))),
        ("created", job["created_at"]),
        ("heartbeat", _age(job["heartbeat_at"])),
        ("finished", job["finished_at"] or "-"),
    ]
    if job["explore"]:
        rows.append(("explore", job["explore_status"]))
    if job["message"]:
        rows.append(("note", job["message"]))
    for key, value in rows:
        table.add_row(key, as_text(value))
    console.print(table)
    groups = [g for g in job.get("explorations", []) if g["state"] != "not explored"]
    if groups:
        explored = Table(
            "group",
            "failures",
            "exploration",
            "proposal",
            "tokens",
            "cost",
            title="explored groups",
        )
        for g in groups:
            proposal = g["rule_name"] or g["proposal_id"] or "-"
            status = f" ({g['proposal_status']})" if g["proposal_status"] else ""
            explored.add_row(
                str(g["rank"]),
                str(g["size"]),
                as_text(f"{g['state']} {g['outcome']}".strip()),
                as_text(f"{proposal}{status}"),
                f"{g['tokens_in'] + g['tokens_out']:,}",
                f"${g['cost']:.4f}",
            )
        console.print(explored)


def show_jobs(jobs: list[JsonObject], console: Console) -> None:
    table = Table("job", "created", "status", "progress", "hit rate", "source")
    for j in jobs:
        table.add_row(
            j["id"],
            j["created_at"][5:16].replace("T", " "),
            j["status"],
            f"{j['processed']}/{j['total']}",
            _pct(j["hit_rate"]),
            as_text(j["source"][-60:]),
        )
    console.print(table)
    if not jobs:
        console.print("no replays yet: `theow replay FILE.jsonl` or `theow replay --from-db`")
