"""``theow meow`` and the insight page's totals: is the LLM making itself less needed?

Counts come from the read model's figures (``Reads.figures``: in SQL, the
same queries as the Prometheus metrics) over an optional window. The hit
rate is shown before and after the most recent approval in the window: the
learning loop working looks like that number going up. A rule struggles when
its fixes ran and failed more often than they worked; client-side fixes the
build agents have not reported on yet are pending, not failures. The demo's
failures (``theow demo``) are not counted unless asked for.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta

from theow_client.jsontypes import JsonObject
from theow_workers.core.ports import CLIENT_PENDING, SUGGESTED
from theow_workers.views.ports import (
    LLM_OUTCOMES,
    MATCHED,
    SAVED_OUTCOMES,
    FigureReads,
    Reads,
    VerdictCount,
)

# A rule's attempts as meow counts them: a fix that ran and worked or not, one waiting
# for the build agent to run it and report (pending), one only offered (suggested).
RULE_COUNTS = ("successes", "failures", "pending", "suggested")
RULE_COUNT_OF = {"success": "successes", CLIENT_PENDING: "pending", SUGGESTED: "suggested"}

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


def meow(reads: Reads, since: timedelta | None = None, demo: bool = False) -> JsonObject:
    """``theow meow`` and the insight page's totals, over ``since`` (None: all time);
    ``demo`` counts the demo's failures too."""
    start = datetime.now(UTC) - since if since else datetime(1970, 1, 1, tzinfo=UTC)
    figures = reads.figures
    verdicts = _by_status(figures.verdicts(since=start, demo=demo))
    per_rule: dict[str, dict[str, int]] = {}
    for attempt in figures.attempts(since=start, demo=demo):
        entry = per_rule.setdefault(attempt.rule, dict.fromkeys(RULE_COUNTS, 0))
        entry[RULE_COUNT_OF.get(attempt.outcome, "failures")] += attempt.count
    explorations = figures.explorations(since=start)
    last_approval = figures.last_approval(since=start)
    pending = figures.proposals().get("pending", 0)
    split = _hit_rates(figures, start, last_approval, demo)

    by_outcome = {e.outcome: e.count for e in explorations}
    sessions = sum(e.count for e in explorations if e.outcome in LLM_OUTCOMES)
    cost = sum(e.cost for e in explorations)
    saved = sum(by_outcome.get(o, 0) for o in SAVED_OUTCOMES)
    total = sum(verdicts.values())
    matched = sum(verdicts[s] for s in MATCHED)
    rules: list[JsonObject] = [{"rule": r, **counts} for r, counts in per_rule.items()]
    return {
        "since": start.isoformat() if since else None,
        "failures": total,
        "resolves": matched,  # a rule matched: resolved, suggested, retry or tracked
        "resolved": verdicts["resolved"],
        "suggested": verdicts["suggested"],
        "verdicts": dict(verdicts),
        "hit_rate": _rate(matched, total),
        "hit_rate_change": split,
        "explores": sum(by_outcome.values()),
        "explorations": by_outcome,
        "llm_sessions": sessions,
        "llm_tokens_in": sum(e.tokens_in for e in explorations),
        "llm_tokens_out": sum(e.tokens_out for e in explorations),
        "llm_cost": round(cost, 6),
        "cache_hits_saved": saved,
        "estimated_cost_saved": round(saved * cost / sessions, 6) if sessions else 0.0,
        # No rule knows the cause: nothing matched, or only a wrapper did (not a hit).
        "unexplained": verdicts["unexplained"],
        "unmatched_waiting": verdicts["unmatched"]
        + verdicts["unexplained"]
        + verdicts["exploring"],
        "proposals_pending": int(pending),
        "top_rules": sorted(rules, key=lambda r: (-r["successes"], r["rule"]))[:10],
        # Failures the fix ran and did not cure: a fix still waiting for its agent is pending.
        "struggling_rules": sorted(
            (r for r in rules if r["failures"] > r["successes"]), key=lambda r: -r["failures"]
        ),
        "client_pending": sum(r["pending"] for r in rules),
        "pending_rules": sorted(
            (r for r in rules if r["pending"]), key=lambda r: (-r["pending"], r["rule"])
        ),
    }


def _by_status(counts: list[VerdictCount]) -> Counter[str]:
    by_status: Counter[str] = Counter()
    for count in counts:
        by_status[count.status] += count.count
    return by_status


def _hit_rates(
    figures: FigureReads, start: datetime, approval: datetime | None, demo: bool
) -> JsonObject:
    """Hit rate of failures received before and after the last approval in the window."""
    if approval is None:
        return {"last_approval": None, "before": None, "after": None}

    def rate(received: tuple[datetime | None, datetime | None]) -> JsonObject:
        counts = _by_status(figures.verdicts(received=received, demo=demo))
        total = sum(counts.values())
        return {"failures": total, "hit_rate": _rate(sum(counts[s] for s in MATCHED), total)}

    return {
        "last_approval": approval.isoformat(),
        "before": rate((start, approval)),
        "after": rate((approval, None)),
    }
