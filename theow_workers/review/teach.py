"""``theow teach``: a stored failure's selected lines become a tested, pending proposal.

The rule comes from the synthesizer (:mod:`theow_workers.core.explore.teaching`); it
is then tried where a reviewer wants to know: on the stored failures (how many
it would explain, and which rule their verdicts named before) and on the
job's normal (would its evidence be a line the job's passing runs print).
The proposal goes into the review queue the explorer's proposals go to,
approved or rejected the same way. Its origin is recorded as the exploration
row every proposal hangs from: outcome ``taught``, the teacher in
``session_id`` (``taught:<who>``), the lines and the test results in its
transcript; no model, no tokens, no cost.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from theow_client.jsontypes import JsonObject
from theow_workers.core.explore.teaching import Taught, TeachError, synthesize
from theow_workers.core.logs.normal import IsNormal
from theow_workers.core.ports import Exploration
from theow_workers.core.resolve.confusion import rule_confusions
from theow_workers.core.resolve.plan import RuleBook, matching_facts
from theow_workers.core.rules.examples import example_problems
from theow_workers.core.rules.matching import evaluate
from theow_workers.core.rules.schema import Rule, RuleError, parse_rule
from theow_workers.store.explore import ExploreStore

if TYPE_CHECKING:
    from theow_workers.runtime import Runtime

TAUGHT = "taught"  # the exploration outcome, and a proposal's origin, when a person taught it
PAGE = 500
MAX_SCANNED = 20_000  # stored failures a rule is tried on; the newest are not favoured
MAX_SHOWN = 20


@dataclass(frozen=True)
class RuleTests:
    """How a taught rule does where a reviewer looks before approving."""

    scanned: int  # stored failures tried
    matches: int  # ... the rule matches (the taught one included)
    before: dict[str, int]  # what their verdicts named before: rule name, or "(none)"
    examples: list[JsonObject] = field(default_factory=list)  # {failure_id, line, text, before}
    evidence: JsonObject | None = None  # on the taught failure
    normal_known: bool = False  # the job's normal was there to try
    fires_on_normal: bool = False  # its evidence on the taught failure is a normal line

    def to_dict(self) -> JsonObject:
        return {
            "scanned": self.scanned,
            "matches": self.matches,
            "before": self.before,
            "examples": self.examples,
            "evidence": self.evidence,
            "normal_known": self.normal_known,
            "fires_on_normal": self.fires_on_normal,
        }


@dataclass(frozen=True)
class Teaching:
    """A filed proposal for a taught rule, with the tests it went through."""

    proposal_id: str
    failure_id: str
    taught: Taught
    tests: RuleTests
    by: str

    def to_dict(self) -> JsonObject:
        return {
            "proposal_id": self.proposal_id,
            "failure_id": self.failure_id,
            "origin": TAUGHT,
            "by": self.by,
            "rule": self.taught.rule.name,
            "rule_yaml": self.taught.rule_yaml,
            "scope": self.taught.scope,
            "line": self.taught.line,
            "text": self.taught.text,
            "passed_over": list(self.taught.passed_over),
            "tests": self.tests.to_dict(),
        }


def teach(
    store: ExploreStore,
    book: RuleBook,
    failure_id: str,
    first: int,
    last: int,
    *,
    by: str,
    scope: str = "auto",
    mode: str = "track",
    name: str | None = None,
    is_normal: IsNormal | None = None,
    taken: frozenset[str] = frozenset(),
    taught: Taught | None = None,
) -> Teaching:
    """Synthesize, test and file one taught rule; raises TeachError (nothing filed).

    ``taught``: the rule :func:`draft` made already (bulk teaching compares drafts first).
    """
    failure = store.failure(failure_id)
    if failure is None:
        raise TeachError(f"no failure {failure_id!r}")
    if taught is None:
        taught = draft(
            store,
            book,
            failure_id,
            failure.facts,
            first,
            last,
            by=by,
            scope=scope,
            mode=mode,
            name=name,
            is_normal=is_normal,
            taken=taken,
        )
    tests = test_rule(store, taught.rule, failure_id, failure.facts, is_normal, book)
    proposal_id = str(uuid.uuid4())
    exploration = Exploration(
        failure_id=failure_id,
        fingerprint=failure.fingerprint,
        outcome=TAUGHT,
        reason=f"taught by {by}: lines {first}-{last}",
        session_id=f"{TAUGHT}:{by}"[:200],
        proposal_id=proposal_id,
        transcript=[
            {
                "taught": {
                    "by": by,
                    "lines": [first, last],
                    "line": taught.line,
                    "text": taught.text,
                    "passed_over": list(taught.passed_over),
                },
                "tests": tests.to_dict(),
            }
        ],
    )
    store.add_exploration(
        exploration,
        {
            "id": proposal_id,
            "rule_name": taught.rule.name,
            "rule_yaml": taught.rule_yaml,
            "diffs": [],
            "status": "pending",
        },
    )
    return Teaching(proposal_id, failure_id, taught, tests, by)


def draft(
    store: ExploreStore,
    book: RuleBook,
    failure_id: str,
    facts: JsonObject,
    first: int,
    last: int,
    *,
    by: str,
    scope: str = "auto",
    mode: str = "track",
    name: str | None = None,
    is_normal: IsNormal | None = None,
    taken: frozenset[str] = frozenset(),
) -> Taught:
    """The rule :func:`teach` would file, not filed (its name clear of pending proposals')."""
    pending = {_name_of(text) for _, text in store.pending_rules()}
    return synthesize(
        facts,
        first,
        last,
        is_wrapper=book.is_wrapper,
        is_normal=is_normal,
        scope=scope,
        mode=mode,
        name=name,
        taken=set(taken) | pending,
        book=book,
        origin=f"failure {failure_id} lines {first}-{last}, by {by}",
    )


def _name_of(rule_yaml: str) -> str:
    import yaml

    try:
        data = yaml.safe_load(rule_yaml)
    except yaml.YAMLError:
        return ""
    return str(data.get("name", "")) if isinstance(data, dict) else ""


def test_rule(
    store: ExploreStore,
    rule: Rule,
    failure_id: str,
    facts: JsonObject,
    is_normal: IsNormal | None,
    book: RuleBook,
) -> RuleTests:
    """The rule tried on the stored failures and on the taught failure's job's normal."""
    own = evaluate(rule, matching_facts(facts), is_wrapper=book.is_wrapper)
    evidence = own.evidence.to_dict() if own.ok and own.evidence is not None else None
    fires_on_normal = bool(
        is_normal is not None and own.evidence is not None and is_normal(own.evidence.text)
    )
    matched: list[tuple[str, JsonObject]] = []
    scanned, after = 0, ""
    while scanned < MAX_SCANNED:
        page = store.failure_facts(after, PAGE)
        if not page:
            break
        for fid, stored in page:
            scanned += 1
            match = evaluate(rule, matching_facts(stored), is_wrapper=book.is_wrapper)
            if match.ok and match.evidence is not None:
                matched.append((fid, {"line": match.evidence.line, "text": match.evidence.text}))
        after = page[-1][0]
    before_by_id = store.verdict_rules([fid for fid, _ in matched])
    before = Counter(before_by_id.get(fid) or "(none)" for fid, _ in matched)
    examples = [
        {"failure_id": fid, **where, "before": before_by_id.get(fid)}
        for fid, where in sorted(matched, key=lambda m: m[0] != failure_id)[:MAX_SHOWN]
    ]
    return RuleTests(
        scanned,
        len(matched),
        dict(before.most_common()),
        examples,
        evidence,
        is_normal is not None,
        fires_on_normal,
    )


MAX_RULE_CHARS = 20_000  # an edited rule: a rule file, not a log


def rule_problems(
    rule_yaml: str,
    facts: JsonObject,
    book: RuleBook,
    taken: frozenset[str] | set[str] = frozenset(),
    proposed: str | None = None,
) -> tuple[Rule | None, list[str]]:
    """The checks an edited rule goes through before it is saved: (the rule, problems).

    The schema (``parse_rule``), its examples and counter-examples, the
    library's confusion check (no specific rule of ``book`` wins its examples,
    it wins none of theirs), a name no rule file of the library and no other
    pending proposal defines (``taken``), and it still matches the failure it
    was taught from. With ``proposed`` (the proposal's stored YAML), what the
    rule does (:func:`what_it_does`) stays as proposed: an edit may reword,
    rename and re-scope a rule, never turn it into one that does something else.
    """
    if len(rule_yaml) > MAX_RULE_CHARS:
        return None, [f"the rule is {len(rule_yaml):,} characters; at most {MAX_RULE_CHARS:,}"]
    try:
        rule = parse_rule(rule_yaml)
    except RuleError as exc:
        return None, [f"line {exc.line}: {exc.reason}" if exc.line else exc.reason]
    problems = [why for _, why in example_problems(rule)]
    if proposed is not None:
        problems += _changed_action(proposed, rule)
    if rule.name in taken:
        problems.append(
            f"a rule named {rule.name!r} is already in the library or pending review: choose another"
        )
    problems += [why for other, why in rule_confusions(rule, book) if other != rule.name]
    match = evaluate(rule, matching_facts(facts), is_wrapper=book.is_wrapper)
    if not match.ok:
        problems.append(f"it no longer matches the failure it was taught from: {match.reason}")
    return rule, problems


def what_it_does(rule: Rule) -> JsonObject:
    """What a rule does once it matches: its mode, its actions and their params, its LLM."""
    return rule.model_dump(mode="json", include={"mode", "then", "llm_config"})


def _changed_action(proposed: str, edited: Rule) -> list[str]:
    """Why ``edited`` does something the proposal (``proposed``, its YAML) did not; [] if not."""
    try:
        before = what_it_does(parse_rule(proposed))
    except RuleError as exc:  # a stored proposal that no longer parses: nothing to keep
        return [f"the proposal's own rule no longer parses ({exc.reason}): reject it instead"]
    after = what_it_does(edited)
    labels = {"mode": "its mode", "then": "its actions (`then`)", "llm_config": "its `llm_config`"}
    return [
        f"an edit may not change what the rule does: {label} was {_shown(before[key])},"
        f" the edit makes it {_shown(after[key])}"
        for key, label in labels.items()
        if before[key] != after[key]
    ]


def _shown(value: object) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 300 else text[:300] + "…"


def normal_test(runtime: Runtime, job: str | None) -> IsNormal | None:
    """The job's normal line test from the runtime's store (Redis), or None when unknown.

    Teaching goes on without it (its test results say the normal was not tried).
    """
    if not job:
        return None
    try:
        normal = runtime.normals.normal(job)
    except Exception:  # Redis down or no normal learned: not tested against passing runs
        return None
    return normal.is_normal if normal else None
