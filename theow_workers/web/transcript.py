"""An exploration's transcript, turn by turn, as the proposal page shows it.

Turns are what the tool loop records (``core/llm/session.py``): ``model``
turns with text, function calls and tokens; ``user`` turns with text and
function responses; ``tool`` and ``event`` notes. Cost per model turn is an
estimate from ``Settings.llm_prices`` (dollars per million tokens).

>>> rows = turns([{"role": "model", "model": "gemini-2.5-flash", "text": "hi",
...                "tokens_in": 1000000, "tokens_out": 0}], {"gemini-2.5-flash": (0.3, 2.5)})
>>> rows[0]["cost"]
0.3
"""

from __future__ import annotations

import json

from theow_client.jsontypes import Json, JsonObject
from theow_workers.core.logs.redact import redact_text


def _price(model: str, prices: dict[str, tuple[float, float]]) -> tuple[float, float]:
    return prices.get(model, prices.get(model.split("/")[-1], (0.0, 0.0)))


def turns(transcript: list[JsonObject], prices: dict[str, tuple[float, float]]) -> list[JsonObject]:
    rows = []
    for i, turn in enumerate(transcript, 1):
        if not isinstance(turn, dict):
            continue
        tokens_in, tokens_out = int(turn.get("tokens_in") or 0), int(turn.get("tokens_out") or 0)
        price_in, price_out = _price(str(turn.get("model") or ""), prices)
        calls = [
            {"name": str(c.get("name")), "body": _shown(c.get("args"))}
            for c in turn.get("function_calls") or []
            if isinstance(c, dict)
        ]
        responses = [
            {
                "name": str(r.get("name")),
                "body": json.dumps(r.get("response"), indent=1, default=str),
            }
            for r in turn.get("function_responses") or []
            if isinstance(r, dict)
        ]
        note = ""
        if turn.get("role") == "tool":
            note = f"{turn.get('name')} ended the session: {turn.get('ended')}"
        rows.append(
            {
                "n": i,
                "role": str(turn.get("role") or "?"),
                "model": str(turn.get("model") or ""),
                "text": redact_text(str(turn.get("text") or note)),
                "calls": calls,
                "responses": responses,
                "tokens_in": tokens_in,
                "tokens_out": tokens_out,
                "cost": round((tokens_in * price_in + tokens_out * price_out) / 1e6, 6),
            }
        )
    return rows


def _shown(value: object) -> str:
    """A call's arguments or a tool's answer as indented JSON, secrets masked."""
    return redact_text(json.dumps(value, indent=1, default=str))


def test_rule_results(transcript: list[JsonObject]) -> list[Json]:
    """What ``test_rule`` answered, each time the model called it, in order."""
    found = []
    for turn in transcript:
        if not isinstance(turn, dict):
            continue
        for response in turn.get("function_responses") or []:
            if isinstance(response, dict) and response.get("name") == "test_rule":
                found.append(response.get("response"))
    return found
