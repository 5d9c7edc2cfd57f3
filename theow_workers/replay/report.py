"""The replay report: hit rate, rules, what stopped matching, what is still unknown.

Built from the item rows in SQL (never from what one process happened to
see), so a resumed or redelivered job reports each input once. Written as
JSON (everything, with the failure ids of every unmatched group) and
Markdown (the same, abridged), and printed in the terminal.

The exploration cost is an estimate: one LLM session per unmatched group x
the configured tokens per session x the configured price per million tokens
(``Settings.llm_session_*_tokens`` and ``Settings.model_prices``, whose defaults
are Gemini list prices).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from theow_client.jsontypes import JsonObject
from theow_client.verdict import Verdict
from theow_client.verdict_text import where_text
from theow_workers.core.logs.text import strip_ansi
from theow_workers.replay.grouping import Group, group_unmatched
from theow_workers.replay.jobs import with_basis
from theow_workers.store.replay import (
    DONE,
    DUPLICATE,
    INVALID,
    PASSED,
    UNKNOWN,
    Job,
    ReplayStore,
)
from theow_workers.store.replay_explore import ReplayExplorations

if TYPE_CHECKING:
    from theow_workers.config import Settings

LOST_SAMPLE = 50


@dataclass(frozen=True)
class Pricing:
    model: str
    input_tokens: int  # per exploration session
    output_tokens: int
    input_per_mtok: float  # USD per million tokens
    output_per_mtok: float

    @classmethod
    def from_settings(cls, settings: Settings) -> Pricing:
        """The primary model's price from ``model_prices`` ("gemini/x" is looked up as "x")."""
        model = settings.llm
        prices = settings.model_prices
        price_in, price_out = prices.get(model, prices.get(model.split("/")[-1], (0.0, 0.0)))
        return cls(
            model,
            settings.llm_session_input_tokens,
            settings.llm_session_output_tokens,
            price_in,
            price_out,
        )

    @property
    def per_session(self) -> float:
        return (
            self.input_tokens * self.input_per_mtok + self.output_tokens * self.output_per_mtok
        ) / 1e6


def build(store: ReplayStore, job: Job, pricing: Pricing) -> JsonObject:
    by_rule = store.counts(job.id, "rule")
    samples = store.evidence_samples(job.id)
    unmatched = with_basis(store, store.items(job.id, UNKNOWN))
    statuses = store.counts(job.id)
    groups = group_unmatched(
        (i.failure_id or "", i.key, i.fingerprint or "", i.sample, i.basis) for i in unmatched
    )
    # The lines to look at of each group's first failure: what a person opens first.
    where = store.where_lines(g.failure_ids[0] for g in groups if g.failure_ids)
    problems = [i for i in store.items(job.id) if i.status in (INVALID, DUPLICATE)]
    report: JsonObject = {
        "job": job.to_dict(),
        "generated_at": datetime.now(UTC).isoformat(),
        "complete": job.status == DONE,
        "summary": {
            "total": job.total,
            "processed": job.processed,
            "replayed": job.replayed,
            "matched": job.matched,
            "unmatched": job.unmatched,  # unexplained ones included
            "unexplained": statuses.get("unexplained", 0),
            "failed": job.failed,
            "errors": job.errors,
            "invalid": job.invalid,
            "duplicates": job.duplicates,
            "passing": job.passing,
            "passed_runs": statuses.get(PASSED, 0),
            "hit_rate": round(job.hit_rate, 4),
        },
        "runs": _runs(store, job, statuses),
        "statuses": statuses,
        "rules": [
            {"rule": r, "matched": n, "evidence": samples.get(r, "")}
            for r, n in Counter(by_rule).most_common()
        ],
        "rules_without_matches": sorted(set(job.rules) - set(by_rule)),
        "comparison": _compare(store, job, by_rule),
        "unmatched_groups": [
            {**g.to_dict(), "where": where.get(g.failure_ids[0], []) if g.failure_ids else []}
            for g in groups
        ],
        "exploration": _cost(len(groups), job, pricing),
        "explore_request": _explored(store, job, groups),
        "input_problems": [
            {"line": i.line, "kind": i.status, "problem": i.sample} for i in problems
        ],
        "rules_versions": store.counts(job.id, "rules_version"),
    }
    return report


def _runs(store: ReplayStore, job: Job, statuses: dict[str, int]) -> JsonObject:
    """A history of runs in the ledger: the passed runs recorded, and the replayed failures'
    origins (``ledger.replayed``); all zero for a history of failures alone."""
    then, now = store.origins(job.id)
    return {
        "passed": statuses.get(PASSED, 0),
        "failed": sum(now.values()),
        "origins": now,
        "origins_then": then,
    }


def runs_line(report: JsonObject) -> str:
    """The ledger's part of a report in one line ("" when the history had no runs)."""
    runs = report.get("runs") or {}
    if not runs.get("passed") and not runs.get("failed"):
        return ""
    origins = " · ".join(
        f"{o} {n}" for o, n in sorted(runs["origins"].items(), key=lambda i: -i[1])
    )
    return f"runs recorded in the ledger: {runs['passed']} passed, {runs['failed']} failed" + (
        f"; origins of the failures: {origins}" if origins else ""
    )


def _explored(store: ReplayStore, job: Job, groups: list[Group]) -> JsonObject:
    """Per group, what its exploration did; the actual tokens and cost beside the estimate."""
    request: JsonObject = {
        "requested": job.explore,
        "budget": job.explore_budget,
        "status": job.explore_status,
    }
    if not job.explore:
        return request
    from theow_workers.replay.explore import ReplayExplorer

    states = ReplayExplorer(store, lambda _: None).status(job, groups)
    request.update(
        groups=[g.to_dict() for g in states],
        llm_sessions=sum(g.llm_sessions for g in states),
        proposals=sum(1 for g in states if g.proposal_id and g.state == "explored"),
        tokens_in=sum(g.tokens_in for g in states),
        tokens_out=sum(g.tokens_out for g in states),
        actual_usd=round(sum(g.cost for g in states), 4),
    )
    return request


def _compare(store: ReplayStore, job: Job, by_rule: dict[str, int]) -> JsonObject | None:
    """What changed since the replay ``job`` is compared with (``--again``/``--compare``),
    else since the previous finished replay of the same source."""
    before = None
    if job.options.get("compare_with"):
        before = store.get(str(job.options["compare_with"]))
    before = before or store.previous(job)
    if before is None:
        return None
    earlier = store.counts(before.id, "rule")
    lost = store.lost_matches(before.id, job.id)
    return {
        "previous_job": before.id,
        "previous_created_at": before.created_at.isoformat(),
        "previous_hit_rate": round(before.hit_rate, 4),
        "stopped_matching": [
            {"rule": r, "before": n, "now": 0, "exists": r in job.rules}
            for r, n in sorted(earlier.items(), key=lambda kv: -kv[1])
            if not by_rule.get(r)
        ],
        "changed": [
            {"rule": r, "before": earlier.get(r, 0), "now": by_rule.get(r, 0)}
            for r in sorted(set(earlier) | set(by_rule))
            if earlier.get(r, 0) != by_rule.get(r, 0)
        ],
        "previous_llm_sessions": llm_sessions(store, before),
        "llm_sessions": llm_sessions(store, job),
        "newly_matched": newly_matched(store, before.id, job.id),
        "changed_rule": changed_rule(store, before.id, job.id),
        "lost_matches": {
            "count": len(lost),
            "by_rule": dict(Counter(rule for _, _, rule, _, _ in lost).most_common()),
            "sample": [
                {"key": k, "line": ln, "rule_before": r, "status_now": st, "rule_now": nr}
                for k, ln, r, st, nr in lost[:LOST_SAMPLE]
            ],
        },
    }


def llm_sessions(store: ReplayStore, job: Job) -> int:
    """LLM sessions spent under a replay's session id (its exploration), from the explorer's rows."""
    from theow_workers.replay.explore import session_id

    return ReplayExplorations(store).sessions(session_id(job))


def newly_matched(store: ReplayStore, before: str, now: str) -> JsonObject:
    """Items no rule matched in ``before`` that one matches in ``now``, per rule now.

    Each rule says whether it came from an approved proposal (and which).
    """
    counts, approved = store.newly_matched(before, now)
    rules = [
        {"rule": r, "count": n, "approved_proposal": approved.get(r)}
        for r, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    return {"count": sum(counts.values()), "by_rule": rules}


def changed_rule(store: ReplayStore, before: str, now: str) -> JsonObject:
    """Items matched in both replays, by a different rule now."""
    rows = store.changed_rule(before, now)
    pairs = Counter(f"{r} → {nr}" for _, _, r, nr in rows)
    return {
        "count": len(rows),
        "by_change": dict(pairs.most_common()),
        "sample": [
            {"key": k, "line": ln, "rule_before": r, "rule_now": nr}
            for k, ln, r, nr in rows[:LOST_SAMPLE]
        ],
    }


def _cost(groups: int, job: Job, pricing: Pricing) -> JsonObject:
    sessions = min(groups, job.explore_budget) if job.explore_budget is not None else groups
    return {
        "groups": groups,
        "sessions": sessions,
        "model": pricing.model,
        "tokens_per_session": {"input": pricing.input_tokens, "output": pricing.output_tokens},
        "usd_per_million_tokens": {
            "input": pricing.input_per_mtok,
            "output": pricing.output_per_mtok,
        },
        "usd_per_session": round(pricing.per_session, 4),
        "estimated_usd": round(sessions * pricing.per_session, 2),
        "estimated_usd_all_groups": round(groups * pricing.per_session, 2),
        "note": "estimate: one LLM session per unmatched group at configured tokens and prices",
    }


def write(report: JsonObject, directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / f"replay-{report['job']['id']}"
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md_path.write_text(markdown(report))
    return json_path, md_path


def _cell(text: str, limit: int = 120) -> str:
    """Text safe inside a Markdown table cell and code span."""
    text = " ".join(strip_ansi(text).split()).replace("|", "\\|").replace("`", "'")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _idle_rules(names: list[str]) -> list[str]:
    """A count, and the names folded away: in a large library most rules match nothing."""
    if not names:
        return ["Every rule matched at least one failure.", ""]
    return [
        "<details>",
        f"<summary>{len(names)} rule(s) matched nothing</summary>",
        "",
        ", ".join(names),
        "",
        "</details>",
        "",
    ]


def markdown(report: JsonObject, top: int = 25) -> str:
    job, s = report["job"], report["summary"]
    mode = "dry run" if job["dry_run"] else "executed actions"
    out = [
        f"# Replay {job['id']}",
        "",
        f"Source: `{job['source']}` ({job['kind']}, {mode}); status **{job['status']}**; "
        f"rules version `{job['rules_version'] or '?'}`.",
        "",
        f"**Hit rate {_pct(s['hit_rate'])} explained**: {s['matched']} of {s['replayed']} "
        f"replayed failures explained by a rule; {s['unmatched']} unmatched"
        f"{unexplained_note(s)}, {s['failed']} failed, "
        f"{s['errors']} errors; {s['invalid']} invalid and {s['duplicates']} duplicate "
        f"lines not replayed ({s['processed']} of {s['total']} inputs done).",
        "",
        *([runs_line(report) + ".", ""] if runs_line(report) else []),
        "## Rules",
        "",
        "| rule | matched | evidence (one example) |",
        "| --- | ---: | --- |",
        *(
            f"| {r['rule']} | {r['matched']} | `{_cell(r.get('evidence', ''))}` |"
            for r in report["rules"]
        ),
        "",
        *_idle_rules(report["rules_without_matches"]),
    ]
    cmp = report["comparison"]
    if cmp is not None:
        out += [f"## Compared with replay {cmp['previous_job']} of the same source", ""]
        out.append(
            f"Hit rate then {_pct(cmp['previous_hit_rate'])}, now {_pct(s['hit_rate'])}. "
            f"LLM sessions then {cmp['previous_llm_sessions']}, now {cmp['llm_sessions']}. "
            f"{cmp['newly_matched']['count']} failures newly matched, "
            f"{cmp['changed_rule']['count']} matched by another rule, "
            f"{cmp['lost_matches']['count']} matched before and not by the same rule now."
        )
        if cmp["newly_matched"]["by_rule"]:
            out += [
                "",
                "| newly matched by | failures | approved proposal |",
                "| --- | ---: | --- |",
            ]
            out += [
                f"| {r['rule']} | {r['count']} | {r['approved_proposal'] or '-'} |"
                for r in cmp["newly_matched"]["by_rule"]
            ]
        out += ["", "| rule | before | now |", "| --- | ---: | ---: |"]
        out += [f"| {c['rule']} | {c['before']} | {c['now']} |" for c in cmp["changed"]]
        stopped = ", ".join(c["rule"] for c in cmp["stopped_matching"]) or "none"
        out += ["", f"Stopped matching: {stopped}.", ""]
    groups = report["unmatched_groups"]
    out += [f"## Largest groups of unmatched failures ({len(groups)} groups)", ""]
    out += [
        "| failures | sample error line | look at (its first failure) |",
        "| ---: | --- | --- |",
    ]
    out += [f"| {g['size']} | `{_md(g['sample'])}` | {_look_at(g)} |" for g in groups[:top]]
    cost = report["exploration"]
    out += [
        "",
        f"Exploring them would cost {cost['sessions']} LLM session(s) x "
        f"${cost['usd_per_session']:.4f} "
        f"≈ **${cost['estimated_usd']:.2f}** with {cost['model']} ({cost['note']}).",
    ]
    req = report["explore_request"]
    if req["requested"]:
        out.append(f"Exploration requested with budget {req['budget']}: {req['status']}.")
        if "groups" in req:
            out += [
                "",
                f"Explored: {req['llm_sessions']} LLM session(s), {req['proposals']} proposal(s), "
                f"{req['tokens_in']:,} tokens in / {req['tokens_out']:,} out, "
                f"**${req['actual_usd']:.4f} actual** (estimate ${cost['estimated_usd']:.2f}).",
                "",
                "| group | failures | state | outcome | proposal | status | tokens | cost |",
                "| ---: | ---: | --- | --- | --- | --- | ---: | ---: |",
                *(
                    f"| {g['rank']} | {g['size']} | {g['state']} | {g['outcome'] or '-'} | "
                    f"{_cell(g['rule_name'] or g['proposal_id'] or '-', 60)} | "
                    f"{g['proposal_status'] or '-'} | {g['tokens_in'] + g['tokens_out']:,} | "
                    f"${g['cost']:.4f} |"
                    for g in req["groups"][:top]
                ),
            ]
    problems = report["input_problems"]
    if problems:
        out += ["", f"## Input problems ({len(problems)})", ""]
        out += [f"- line {p['line']}: {p['problem']}" for p in problems[:50]]
        if len(problems) > 50:
            out.append(f"- … {len(problems) - 50} more in the JSON report")
    return "\n".join(out) + "\n"


def group_where(group: JsonObject) -> list[str]:
    """A report group's lines to look at, as text (``log line 7: ...``); none when its verdict has none."""
    lines = Verdict.from_dict({"failure_id": "-", "status": "-", "where": group.get("where")}).where
    return [where_text(w) for w in lines]


def _look_at(group: JsonObject) -> str:
    return "<br>".join(f"`{_cell(line)}`" for line in group_where(group)) or "-"


def unexplained_note(summary: JsonObject) -> str:
    """`` (N of them unexplained: only a wrapper matched)`` when there are some."""
    n = summary.get("unexplained", 0)
    return f" ({n} of them unexplained: only a wrapper matched)" if n else ""


def _md(text: str) -> str:
    return strip_ansi(text).replace("`", "'").replace("|", "\\|")[:200]
