"""What a verdict's client-side actions did, as the agent reports it: bounded and masked.

An action's output is whatever the action returned on the build agent (a
command's output, a file it read), and the error is an exception's text: both
may hold what the build had in hand. They are bounded as side data and masked
here, before the report is sent or shown by Flower; the worker masks them again
before it stores them (``theow_workers.tasks.client_outcome``).

>>> report = outcome_report("f-1", "tf_fix", success=False, error="token=ghp_" + "a1B2" * 9)
>>> report["error"]
'token=[masked:github-token]'
"""

from __future__ import annotations

from dataclasses import replace

from theow_client.facts import SIDE_LIMITS, FactsError, bound_facts, bound_text
from theow_client.jsontypes import Json, JsonObject
from theow_client.redact import redact, redact_text
from theow_client.verdict import jsonable

# The worker keeps at most this much of an error; outputs are side data (``SIDE_LIMITS``).
MAX_ERROR_CHARS = 4000
# Past this much text in all, an action's outputs are named, not sent.
MAX_OUTPUTS_CHARS = 64 * 1024
OUTPUT_LIMITS = replace(SIDE_LIMITS, total=MAX_OUTPUTS_CHARS)


def outcome_report(
    failure_id: str,
    rule: str | None,
    *,
    success: bool,
    error: str = "",
    outputs: list[Json] | None = None,
    rerun_passed: bool | None = None,
) -> JsonObject:
    """The argument of ``theow.client_outcome``: what ran, its outputs and error masked."""
    report: JsonObject = {
        "failure_id": failure_id,
        "rule": rule,
        "outcome": "success" if success else "error",
        "error": redact_text(bound_text(error, MAX_ERROR_CHARS)[0]) if error else "",
        "outputs": bounded_outputs(outputs or []),
    }
    if rerun_passed is not None:
        report["rerun_passed"] = rerun_passed
    return report


def bounded_outputs(outputs: list[Json]) -> list[Json]:
    """The outputs bounded and masked; too many or too deep, one line saying so instead.

    The worker bounds what it is sent the same way before it masks and stores it.
    """
    try:
        bounded, _ = bound_facts(
            {"outputs": [jsonable(o) for o in outputs]}, limits=OUTPUT_LIMITS, where="outputs"
        )
    except FactsError as exc:
        return [{"action": "", "output": redact_text(f"not sent: {exc}"[:500])}]
    kept = redact(bounded)["outputs"]
    return kept if isinstance(kept, list) else []
