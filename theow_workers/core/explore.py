"""The explorer's meta-tools and prompt, independent of any model or server.

The LLM gets exactly these tools (DESIGN §4), plus the deployment's own:

=============== ========================== ===========================================
tool            arguments                  does
=============== ========================== ===========================================
search_rules    query                      top rules by similarity
search_actions  query                      top actions: name, signature, docstring
read_action     name                       source of an existing action
test_rule       rule_yaml                  validate a draft rule against this failure
submit_rule     rule_yaml, actions         end the session with a proposal
give_up         reason                     end the session without a proposal
=============== ========================== ===========================================
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from theow_workers.core.actions import ActionRegistry
from theow_workers.core.llm import Outcome, SessionEnd, Tool, ToolError, tool_from_callable
from theow_workers.core.matching import Captures, check_condition, evaluate
from theow_workers.core.ports import Hit
from theow_workers.core.proposal import (
    ExploreResult,
    Repository,
    SubmissionRejected,
    check_submission,
)
from theow_workers.core.query import error_lines, log_text
from theow_workers.core.rules import Rule, RuleError, parse_rule
from theow_workers.core.summary import summarize

log = logging.getLogger("theow.explorer")

Search = Callable[[str, str, int], list[Hit]]  # (query, kind, limit) -> hits
SEARCH_LIMIT = 8
PROMPT_LOG_CHARS = 24_000

INSTRUCTIONS = """\
You are Theow's explorer. A build failed and no reviewed rule matched it. Find the root cause
and propose ONE deterministic rule that recognises this failure (and others with the same cause)
so it is resolved without an LLM next time.

How to work:
1. Read the facts below. Use search_rules and search_actions to see what exists; read_action to
   read an action's code. Reuse existing actions whenever one fits.
2. Draft a rule in YAML and check it with test_rule until every fact holds and the params bind.
   Regexes must be precise (distinctive wording, not generic words like "error"), capture the
   values an action needs with named groups, and avoid nested quantifiers. Regexes are searched
   with MULTILINE and DOTALL: `^`/`$` match at every line, `.` crosses lines; use `[^\\n]` (or a
   leading `(?-s)`) to stay on one line.
3. Call submit_rule with the rule YAML and, only if no existing action fits, the complete code of
   new or changed action files: {"name": ..., "code": ...}. Action code is plain Python:
   `from theow_workers import action` and `@action("name")` on a function that returns a dict.
   Use mode: retry for transient failures, mode: track for known causes nothing can fix.
4. If you cannot find a cause worth a rule, call give_up with the reason.

Rule YAML schema: name (new, snake_case), description, tags, mode (fix|retry|track),
when: [{fact, equals|contains|regex|one_of|not_contains|not_regex, examples}],
then: [{action, params}] with placeholders {extract.N}, {NAME} (named group), {facts.KEY}.
"""


def render_prompt(
    facts: dict[str, Any], extra: str = "", is_normal: Callable[[str], bool] | None = None
) -> str:
    """The first user turn: instructions, then the failure's facts, the log bounded.

    With the job's normal (``core.normal``), the error lines shown are the ones
    its passing runs do not print, and the prompt says so.
    """
    short = {k: v for k, v in facts.items() if not isinstance(v, str) or len(v) <= 200}
    log_fact = log_text(facts)
    tail = log_fact[-PROMPT_LOG_CHARS:]
    parts = [extra.strip() or INSTRUCTIONS, "## Facts", json.dumps(short, indent=1, default=str)]
    for key, value in facts.items():
        if isinstance(value, str) and len(value) > 200 and value is not log_fact:
            parts += [f"## {key} (last 2000 characters)", value[-2000:]]
    if log_fact and is_normal is not None:
        parts += [
            "## New error lines (this job's recent passing runs do not print these)",
            "\n".join(error_lines(summarize(facts, is_normal=is_normal))),
            "## Log (end; it also holds lines the passing runs print)",
            tail,
        ]
    elif log_fact:
        parts += ["## Error lines", "\n".join(error_lines(summarize(facts))), "## Log (end)", tail]
    return "\n\n".join(parts)


@dataclass
class ExplorationContext:
    """What the meta-tools see: the failure, the rules, the actions, the index."""

    facts: dict[str, Any]
    rules: Sequence[Rule]
    actions: ActionRegistry
    repo: Repository
    search: Search
    regex_timeout: float = 0.05
    extra_tools: list[Tool] = field(default_factory=list)  # granted deployment tools
    is_normal: Callable[[str], bool] | None = None  # the job's normal, when learned

    def meta_tools(self) -> list[Tool]:
        return [
            tool_from_callable(self.search_rules),
            tool_from_callable(self.search_actions),
            tool_from_callable(self.read_action),
            tool_from_callable(self.test_rule),
            tool_from_callable(self.submit_rule),
            tool_from_callable(self.give_up),
        ]

    def search_rules(self, query: str) -> list[dict[str, Any]]:
        """Find existing rules similar to a description or an error message.

        Args:
            query: words or an error line to look for.
        """
        by_name = {r.name: r for r in self.rules}
        return [
            {
                "name": h.name,
                "description": " ".join(by_name[h.name].description.split())
                if h.name in by_name
                else "",
                "distance": round(1.0 - h.similarity, 4),
            }
            for h in self.search(query, "rule", SEARCH_LIMIT)
        ]

    def search_actions(self, query: str) -> list[dict[str, Any]]:
        """Find existing actions that might fix this failure.

        Args:
            query: what the action should do.
        """
        found = []
        for hit in self.search(query, "action", SEARCH_LIMIT):
            spec = self.actions.get(hit.name)
            if spec is not None:
                found.append({"name": spec.name, "signature": spec.signature, "docstring": spec.doc,
                              "client_side": spec.client_side})  # fmt: skip
        return found

    def read_action(self, name: str) -> str:
        """Read the source code of an existing action.

        Args:
            name: the action's registered name.
        """
        spec = self.actions.get(name)
        if spec is None:
            raise ToolError(f"no action named {name!r}; use search_actions")
        try:
            return inspect.getsource(spec.func)
        except (OSError, TypeError) as exc:
            raise ToolError(f"source of {name!r} is not available: {exc}") from exc

    def test_rule(self, rule_yaml: str) -> dict[str, Any]:
        """Check a draft rule against this failure: each fact's result and the bound params.

        Args:
            rule_yaml: the rule as YAML.
        """
        known = frozenset(self.actions.names())
        try:
            rule = parse_rule(rule_yaml)
        except RuleError as exc:
            return {"valid": False, "error": f"line {exc.line}: {exc.reason}"}
        facts_result = []
        for condition in rule.when:
            reason = check_condition(condition, self.facts, Captures(), self.regex_timeout)
            facts_result.append(
                {"fact": condition.fact, "holds": not reason, "reason": reason or "holds"}
            )
        match = evaluate(rule, self.facts, regex_timeout=self.regex_timeout)
        unknown = [s.action for s in rule.then if s.action not in known]
        return {
            "valid": True,
            "matches": match.ok,
            "reason": match.reason,
            "facts": facts_result,
            "actions": [{"action": a.action, "params": a.params} for a in match.actions],
            "unknown_actions": unknown,
            "name_taken": rule.name in {r.name for r in self.rules},
        }

    def submit_rule(self, rule_yaml: str, actions: list[dict[str, str]]) -> str:
        """Submit the rule (and new or changed action files) for human review; ends the session.

        Args:
            rule_yaml: the rule as YAML; its name must be new.
            actions: new or changed actions, each {"name": ..., "code": complete file source}; may be empty.
        """
        try:
            result = check_submission(
                rule_yaml, actions, self.facts, self.repo, regex_timeout=self.regex_timeout
            )
        except SubmissionRejected as exc:
            log.info("submission rejected: %s", exc)
            raise ToolError(f"submission rejected: {exc}") from None
        raise SessionEnd(Outcome.PROPOSAL, {"result": result})

    def give_up(self, reason: str) -> str:
        """End the session without a proposal.

        Args:
            reason: why no rule is worth proposing.
        """
        raise SessionEnd(Outcome.GAVE_UP, {"reason": reason})


def result_of(payload: dict[str, Any]) -> ExploreResult | None:
    value = payload.get("result")
    return value if isinstance(value, ExploreResult) else None
