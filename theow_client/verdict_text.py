"""A verdict as a person reads it: the one formatting that ``theow-client`` and ``@mark`` share.

What a user needs from a verdict, in order: whose failure it is (``origin:``,
when the workers know the job's history), which rule, the line of the log
it matched (fact, line number, text), what the rule captured there (a test's
name, a file:line), the lines to look at (for every failure, matched or not),
the fix its actions suggest or made (``fix:``), and what was done about it. A status or a field from a
newer worker is shown as it came.

Every part of a verdict came from a log or a model (the matched line, the
captures, an exploration's reason), so the text is made printable
(``theow_client.terminal``): no escape sequence reaches the terminal.

>>> from theow_client.verdict import Verdict
>>> print(format_verdict(Verdict.from_dict({
...     "failure_id": "f-1", "status": "tracked", "rule": "go_test_failed", "mode": "track",
...     "evidence": {"fact": "log", "line": 42, "text": "--- FAIL: TestParse (0.00s)"},
...     "captures": {"test": "TestParse"},
...     "where": [{"fact": "log", "line": 42, "text": "--- FAIL: TestParse (0.00s)"},
...               {"fact": "log", "line": 40, "text": "parse_test.go:12: got 1, want 2"}],
...     "origin": {"origin": "change", "reason": "main does not fail this way"}})))
status:  tracked
failure: f-1
origin:  probably this change (main does not fail this way)
rule:    go_test_failed (mode track)
line:    log:42: --- FAIL: TestParse (0.00s)
captured: test=TestParse
look at: log line 42: --- FAIL: TestParse (0.00s)
         log line 40: parse_test.go:12: got 1, want 2
done:    nothing run (mode track)
>>> print(format_verdict(Verdict.from_dict({
...     "failure_id": "f-2", "status": "unexplained", "wrapper": "make_recipe_failed"})))
status:  unexplained (wrapper: make_recipe_failed)
failure: f-2
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from theow_client.jsontypes import JsonObject
from theow_client.origin import origin_text
from theow_client.redact import redact_text
from theow_client.terminal import printable
from theow_client.verdict import FailedTest, Verdict, Where

TESTS_NAMED = 10  # failed tests named in the plain block; the job summary lists more


def format_verdict(verdict: Verdict) -> str:
    # Unexplained: only a wrapper (``make: *** [all] Error 1``) matched; it is named, as no rule is.
    wrapper = f" (wrapper: {verdict.wrapper})" if verdict.wrapper else ""
    lines = [f"status:  {verdict.status}{wrapper}", f"failure: {verdict.failure_id}"]
    if verdict.origin is not None:  # the first question of a red build: is it mine?
        lines.append(f"origin:  {origin_text(verdict.origin)}")
    if verdict.rule:
        lines.append(
            f"rule:    {verdict.rule}" + (f" (mode {verdict.mode})" if verdict.mode else "")
        )
    if verdict.evidence:
        lines.append(f"line:    {evidence_line(verdict.evidence)}")
    if verdict.captures:
        lines.append("captured: " + " ".join(f"{k}={v}" for k, v in verdict.captures.items()))
    lines += look_at(verdict.where)
    lines += failed_tests_line(verdict.tests)
    lines += fix_lines(verdict.fixes)
    lines += explained(verdict.explanation)
    for bound in verdict.actions:
        params = " ".join(f"{k}={json.dumps(v)}" for k, v in bound.params.items())
        where = " [client-side]" if bound.client_side else ""
        lines.append(f"action:  {bound.action} {params}".rstrip() + where)
    for output in verdict.outputs:
        # An action's output holds what it read from the log: masked like the ``fix`` lines.
        lines.append(f"output:  {redact_text(json.dumps(output, default=str))}")
    if verdict.rule and not verdict.actions and not verdict.outputs:
        # A track or retry rule runs nothing; say so rather than leave the user to wonder.
        lines.append("done:    nothing run" + (f" (mode {verdict.mode})" if verdict.mode else ""))
    if verdict.reason:
        lines.append(f"reason:  {verdict.reason}")
    if verdict.also:
        lines.append(f"also:    {', '.join(verdict.also)}")
    if verdict.seen_in_passing:
        lines.append(f"seen in passing runs (ranked last): {', '.join(verdict.seen_in_passing)}")
    # From a newer worker: shown as they came, so an older agent still tells the whole answer.
    lines += [f"{name}: {json.dumps(value, default=str)}" for name, value in verdict.extra.items()]
    return printable("\n".join(lines))


def fix_lines(fixes: Iterable[str]) -> list[str]:
    """``fix:     pip install pyyaml``: what the actions suggest or made, the answer in plain words.

    >>> fix_lines(["pip install pyyaml", "pip install pyyaml-include"])
    ['fix:     pip install pyyaml', '         pip install pyyaml-include']
    """
    return [("fix:     " if i == 0 else " " * 9) + fix for i, fix in enumerate(fixes)]


def format_exploration(exploration: JsonObject) -> str:
    lines = [f"exploration: {exploration.get('outcome')}"]
    if exploration.get("proposal_id"):
        lines.append(
            f"proposal: {exploration['proposal_id']} (theow review show {exploration['proposal_id']})"
        )
    if exploration.get("reason"):
        lines.append(f"why:     {exploration['reason']}")
    return printable("\n".join(lines))


def explained(explanation: JsonObject | None) -> list[str]:
    """explain's answer (``likely:  dependency: PyYAML is missing.``), or why there is none.

    >>> explained({"state": "explained", "cause": "dependency", "text": "PyYAML is missing.",
    ...            "next_step": "pip install pyyaml", "model": "qwen"})
    ['likely:  dependency: PyYAML is missing.', 'next:    pip install pyyaml', '         (explained by qwen, not by a rule)']
    >>> explained({"state": "pending"})
    ['likely:  (an explanation is being written)']
    """
    if not explanation:
        return []
    state = explanation.get("state")
    if state == "explained":
        cause = f"{explanation['cause']}: " if explanation.get("cause") else ""
        lines = [f"likely:  {cause}{' '.join(str(explanation.get('text', '')).split())}"]
        if explanation.get("next_step"):
            lines.append(f"next:    {' '.join(str(explanation['next_step']).split())}")
        by = f" by {explanation['model']}" if explanation.get("model") else ""
        return [*lines, f"         (explained{by}, not by a rule)"]
    if state == "pending":
        return ["likely:  (an explanation is being written)"]
    return [f"likely:  no explanation ({state}: {explanation.get('reason') or 'no reason given'})"]


def evidence_line(evidence: JsonObject) -> str:
    """``fact:line: text``, the line to look at; whatever parts the worker sent."""
    where = ":".join(str(evidence[k]) for k in ("fact", "line") if evidence.get(k) is not None)
    text = " ".join(str(evidence.get("text") or "").split())
    return f"{where}: {text}" if where and text else where or text


def failed_tests_line(tests: Sequence[FailedTest]) -> list[str]:
    """``tests:   2 failed: t::test_a, t::test_b``, the first ``TESTS_NAMED`` by name; masked."""
    if not tests:
        return []
    names = ", ".join(" ".join(t.name.split())[:200] for t in tests[:TESTS_NAMED])
    more = f" and {len(tests) - TESTS_NAMED} more" if len(tests) > TESTS_NAMED else ""
    return [f"tests:   {len(tests)} failed: {redact_text(names)}{more}"]


def look_at(where: Iterable[Where]) -> list[str]:
    """The lines to look at, most telling first: ``look at: log line 2,461: KeyError: 'X'``."""
    shown = [where_text(w) for w in where]
    return [("look at: " if i == 0 else " " * 9) + line for i, line in enumerate(shown)]


def where_text(where: Where) -> str:
    """One line to look at: ``log line 2,461: KeyError: 'X'`` (not yet made printable)."""
    return f"{where.fact} line {where.line:,}: {' '.join(where.text.split())}"


def prefixed(text: str, prefix: str = "theow: ") -> str:
    """Every line of ``text`` after ``prefix``: on a build's stderr, Theow's lines stand out."""
    return "\n".join(prefix + line for line in text.splitlines())
