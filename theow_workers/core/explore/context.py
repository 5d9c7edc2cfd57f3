"""The explorer's meta-tools and prompt, independent of any model or server.

The LLM gets exactly these tools (DESIGN §4), plus the deployment's own:

=============== ========================== ===========================================
tool            arguments                  does
=============== ========================== ===========================================
search_rules    query                      top rules by similarity
search_actions  query                      top actions: name, signature, docstring
read_action     name                       source of an existing action
test_rule       rule_yaml                  validate a draft rule against this failure (and
                                           count the stored failures and passing templates
                                           it fires on, when the deployment can)
rule_from_lines first_line, last_line      a tested draft rule from the log's lines
                                           first_line..last_line (``theow teach``'s synthesizer)
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

from theow_client.jsontypes import JsonObject
from theow_workers.core.actions import ActionRegistry
from theow_workers.core.explore.proposal import (
    ExploreResult,
    Repository,
    SubmissionRejected,
    check_submission,
)
from theow_workers.core.explore.teaching import TeachError, synthesize
from theow_workers.core.llm.model import Outcome, SessionEnd, ToolError, tool_from_callable
from theow_workers.core.logs.summary import ErrorSummary, summarize
from theow_workers.core.ports import Hit, Tool
from theow_workers.core.resolve.fingerprint import log_text
from theow_workers.core.resolve.plan import RuleBook
from theow_workers.core.rules.matching import Captures, check_condition, evaluate
from theow_workers.core.rules.operators import prompt_operators
from theow_workers.core.rules.schema import Rule, RuleError, parse_rule

log = logging.getLogger("theow.explorer")

Search = Callable[[str, str, int], list[Hit]]  # (query, kind, limit) -> hits
# A draft rule -> where else it fires: {"stored_failures", "scanned", "passing_templates", ...}
Probe = Callable[[Rule], JsonObject]
SEARCH_LIMIT = 8
PROMPT_LOG_CHARS = 24_000
PROMPT_SUMMARY_LINES = 40

INSTRUCTIONS = """\
You are Theow's explorer. A build failed and no reviewed rule matched it. Find the root cause
and propose ONE deterministic rule that recognises this failure (and others with the same cause)
so it is resolved without an LLM next time.

How to work:
1. Read the facts below. Use search_rules and search_actions to see what exists; read_action to
   read an action's code. Reuse existing actions whenever one fits.
2. Start from the error summary: rule_from_lines(first_line, last_line), with the numbers of
   the lines that say why the build failed, gives a tested draft (volatile parts generalized,
   scoped to the repo or job, examples filled in); adapt it (add `then` actions, widen it)
   rather than starting from a blank page. Check every draft with test_rule until every fact
   holds and the params bind; it also says how many stored failures and passing-run lines the
   draft fires on.
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
when: [{fact, OPERATORS, examples}],
then: [{action, params}] with placeholders {extract.N}, {NAME} (named group), {facts.KEY}.
""".replace("OPERATORS", prompt_operators())


def summary_text(summary: ErrorSummary) -> str:
    """The failure's ``ErrorSummary`` as the model reads it: numbered lines, the picked ones
    marked ``>``, wrappers and lines the passing runs print said so."""
    picked = {id(line) for line in summary.errors}
    shown = [line for line in summary.lines if not line.normal or id(line) in picked]
    rows = []
    for line in shown[-PROMPT_SUMMARY_LINES:]:
        mark = ">" if id(line) in picked else " "
        note = "  (a step failed: a wrapper, not why)" if line.wrapper else ""
        rows.append(f"{mark}{line.number:>6}: {line.text}{note}")
    return "\n".join(rows)


def render_prompt(
    facts: JsonObject,
    extra: str = "",
    is_normal: Callable[[str], bool] | None = None,
    is_wrapper: Callable[[str], bool] | None = None,
) -> str:
    """The first user turn: instructions, then the failure's facts, its error summary
    (numbered as the log is, for ``rule_from_lines``), the log bounded.

    With the job's normal (``core.logs.normal``), the error lines shown are the ones
    its passing runs do not print, and the prompt says so.
    """
    short = {k: v for k, v in facts.items() if not isinstance(v, str) or len(v) <= 200}
    log_fact = log_text(facts)
    tail = log_fact[-PROMPT_LOG_CHARS:]
    parts = [extra.strip() or INSTRUCTIONS, "## Facts", json.dumps(short, indent=1, default=str)]
    for key, value in facts.items():
        if isinstance(value, str) and len(value) > 200 and value is not log_fact:
            parts += [f"## {key} (last 2000 characters)", value[-2000:]]
    if log_fact:
        summary = summarize(facts, is_normal=is_normal, is_wrapper=is_wrapper)
        heading = (
            "## Error summary (numbered as in the log; > marks the lines picked as the error; "
            + (
                "lines this job's recent passing runs print are left out)"
                if is_normal
                else "no normal known)"
            )
        )
        parts += [heading, summary_text(summary)]
        parts += [
            "## Log (end; it also holds lines the passing runs print)"
            if is_normal
            else "## Log (end)",
            tail,
        ]
    return "\n\n".join(parts)


@dataclass
class ExplorationContext:
    """What the meta-tools see: the failure, the rules, the actions, the index."""

    facts: JsonObject
    rules: Sequence[Rule]
    actions: ActionRegistry
    repo: Repository
    search: Search
    regex_timeout: float = 0.05
    extra_tools: list[Tool] = field(default_factory=list)  # granted deployment tools
    is_normal: Callable[[str], bool] | None = None  # the job's normal, when learned
    book: RuleBook | None = None  # the library: wrappers and the confusion check for drafts
    probe: Probe | None = None  # where else a draft fires (stored failures, passing templates)

    def meta_tools(self) -> list[Tool]:
        return [
            tool_from_callable(self.search_rules),
            tool_from_callable(self.search_actions),
            tool_from_callable(self.read_action),
            tool_from_callable(self.test_rule),
            tool_from_callable(self.rule_from_lines),
            tool_from_callable(self.submit_rule),
            tool_from_callable(self.give_up),
        ]

    def search_rules(self, query: str) -> list[JsonObject]:
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

    def search_actions(self, query: str) -> list[JsonObject]:
        """Find existing actions that might fix this failure.

        Args:
            query: what the action should do.
        """
        found = []
        for hit in self.search(query, "action", SEARCH_LIMIT):
            spec = self.actions.get(hit.name)
            if spec is not None:
                found.append(
                    {
                        "name": spec.name,
                        "signature": spec.signature,
                        "docstring": spec.doc,
                        "client_side": spec.client_side,
                    }
                )
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

    def test_rule(self, rule_yaml: str) -> JsonObject:
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
        report: JsonObject = {
            "valid": True,
            "matches": match.ok,
            "reason": match.reason,
            "facts": facts_result,
            "actions": [{"action": a.action, "params": a.params} for a in match.actions],
            "unknown_actions": unknown,
            "name_taken": rule.name in {r.name for r in self.rules},
        }
        if self.probe is not None:
            try:
                report["fires_on"] = self.probe(rule)
            except Exception as exc:  # the draft is still tested here; where else is unknown
                log.warning("test_rule: counting where the draft fires failed: %s", exc)
                report["fires_on"] = {"error": f"not counted ({type(exc).__name__})"}
        return report

    def rule_from_lines(self, first_line: int, last_line: int) -> JsonObject:
        """Make a tested draft rule from the log lines that say why the build failed.

        The telling line among them is picked (not a wrapper, not a line the job's
        passing runs print), its volatile parts (numbers, paths, hashes, quoted
        names) generalized, the rule scoped to the failure's repo or job, with
        examples and counter-examples. Adapt it and check it with test_rule.

        Args:
            first_line: number of the first line (as the error summary numbers them).
            last_line: number of the last line (at most 400 after the first).
        """
        book = self.book
        try:
            taught = synthesize(
                self.facts,
                int(first_line),
                int(last_line),
                is_wrapper=book.is_wrapper if book else None,
                is_normal=self.is_normal,
                book=book,
                taken={r.name for r in self.rules},
                origin=f"lines {first_line}-{last_line}, by the explorer",
            )
        except TeachError as exc:
            raise ToolError(str(exc)) from None
        return {
            "rule_yaml": taught.rule_yaml,
            "line": taught.line,
            "text": taught.text,
            "passed_over": list(taught.passed_over),
            "test": self.test_rule(taught.rule_yaml),
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


def result_of(payload: JsonObject) -> ExploreResult | None:
    value = payload.get("result")
    return value if isinstance(value, ExploreResult) else None
