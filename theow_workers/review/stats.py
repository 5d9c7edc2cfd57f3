"""``theow meow``: is the LLM making itself less needed?

Counts come from SQL (verdicts, attempts, explorations, proposals) over an
optional window. The hit rate is shown before and after the most recent
approval in the window: the learning loop working looks like that number
going up.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select

from theow_workers.adapters.explore_sql import ExplorationRow, ProposalRow
from theow_workers.adapters.sql import AttemptRow, FailureRow, SqlStore, VerdictRow

MATCHED = ("resolved", "retry", "tracked")
# Outcomes in which a model was actually called (the rest cost nothing).
LLM_OUTCOMES = ("proposal", "gave_up", "budget", "done", "rate_limited", "error")
SAVED_OUTCOMES = ("cache_hit", "deduplicated")
DURATION = re.compile(r"^(\d+)\s*([smhdw])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """``30m``, ``24h``, ``7d``, ``2w``."""
    found = DURATION.match(text.strip().lower())
    if not found:
        raise ValueError(f"duration {text!r}: use a number and s, m, h, d or w, e.g. 24h")
    return timedelta(**{UNITS[found.group(2)]: int(found.group(1))})


def _rate(matched: int, total: int) -> float | None:
    return round(matched / total, 4) if total else None


def meow(store: SqlStore, since: timedelta | None = None) -> dict[str, Any]:
    start = datetime.now(UTC) - since if since else datetime(1970, 1, 1, tzinfo=UTC)
    with store.session() as s:
        verdicts = Counter(
            dict(
                s.execute(
                    select(VerdictRow.status, func.count())
                    .where(VerdictRow.decided_at >= start)
                    .group_by(VerdictRow.status)
                ).all()
            )
        )
        per_rule: dict[str, dict[str, int]] = {}
        for rule, outcome, count in s.execute(
            select(AttemptRow.rule, AttemptRow.outcome, func.count())
            .where(AttemptRow.created_at >= start)
            .group_by(AttemptRow.rule, AttemptRow.outcome)
        ):
            entry = per_rule.setdefault(rule, {"successes": 0, "failures": 0})
            entry["successes" if outcome == "success" else "failures"] += count
        explorations = list(
            s.execute(
                select(ExplorationRow.outcome, func.count(), func.sum(ExplorationRow.cost),
                       func.sum(ExplorationRow.tokens_in), func.sum(ExplorationRow.tokens_out))
                .where(ExplorationRow.finished_at >= start)
                .group_by(ExplorationRow.outcome)
            ).all()
        )  # fmt: skip
        last_approval = s.execute(
            select(func.max(ProposalRow.reviewed_at)).where(
                ProposalRow.status == "approved", ProposalRow.reviewed_at >= start
            )
        ).scalar_one()
        pending = s.execute(
            select(func.count()).select_from(ProposalRow).where(ProposalRow.status == "pending")
        ).scalar_one()
        split = _hit_rates(s, start, last_approval)

    by_outcome = {o: int(n) for o, n, *_ in explorations}
    llm_rows = [row for row in explorations if row[0] in LLM_OUTCOMES]
    sessions = sum(int(n) for _, n, *_ in llm_rows)
    cost = sum(float(c or 0) for _, _, c, *_ in explorations)
    saved = sum(by_outcome.get(o, 0) for o in SAVED_OUTCOMES)
    total = sum(verdicts.values())
    matched = sum(verdicts[s] for s in MATCHED)
    rules: list[dict[str, Any]] = [{"rule": r, **counts} for r, counts in per_rule.items()]
    return {
        "since": start.isoformat() if since else None,
        "failures": total,
        "resolves": matched,
        "verdicts": dict(verdicts),
        "hit_rate": _rate(matched, total),
        "hit_rate_change": split,
        "explores": sum(by_outcome.values()),
        "explorations": by_outcome,
        "llm_sessions": sessions,
        "llm_tokens_in": sum(int(t or 0) for _, _, _, t, _ in explorations),
        "llm_tokens_out": sum(int(t or 0) for *_, t in explorations),
        "llm_cost": round(cost, 6),
        "cache_hits_saved": saved,
        "estimated_cost_saved": round(saved * cost / sessions, 6) if sessions else 0.0,
        "unmatched_waiting": verdicts["unmatched"] + verdicts["exploring"],
        "proposals_pending": int(pending),
        "top_rules": sorted(rules, key=lambda r: (-r["successes"], r["rule"]))[:10],
        "struggling_rules": sorted(
            (r for r in rules if r["failures"] > r["successes"]), key=lambda r: -r["failures"]
        ),
    }


def _hit_rates(session: Any, start: datetime, approval: datetime | None) -> dict[str, Any]:
    """Hit rate of failures received before and after the last approval in the window."""
    if approval is None:
        return {"last_approval": None, "before": None, "after": None}
    if approval.tzinfo is None:  # SQLite gives naive datetimes back
        approval = approval.replace(tzinfo=UTC)

    def rate(*conditions: Any) -> dict[str, Any]:
        rows = session.execute(
            select(VerdictRow.status, func.count())
            .join(FailureRow, FailureRow.id == VerdictRow.failure_id)
            .where(*conditions)
            .group_by(VerdictRow.status)
        ).all()
        counts = {status: int(n) for status, n in rows}
        total = sum(counts.values())
        return {"failures": total, "hit_rate": _rate(sum(counts.get(s, 0) for s in MATCHED), total)}

    return {
        "last_approval": approval.isoformat(),
        "before": rate(FailureRow.received_at >= start, FailureRow.received_at < approval),
        "after": rate(FailureRow.received_at >= approval),
    }
