"""The explorer's decisions, with a scripted model standing in for Gemini."""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers.adapters.memory import HashingEmbedder, InMemoryExploreState, InMemoryLimiter
from theow_workers.core.actions import load_actions
from theow_workers.core.explore.context import ExplorationContext
from theow_workers.core.explore.proposal import (
    Repository,
    SubmissionRejected,
    check_submission,
    defined_actions,
)
from theow_workers.core.explore.service import ExploreService, ExploreSettings, InFlight
from theow_workers.core.llm.model import Budget, FallbackRunner, Outcome
from theow_workers.core.llm.session import ToolLoop
from theow_workers.core.ports import ModelTurn, ToolCall
from theow_workers.core.rules.schema import load_rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

FAILURE = {"stderr": "step 9\nfatal: widget-7 exploded: pressure=31 bar\n", "job": "build-1"}
GOOD_RULE = """\
name: widget_explosion
description: A widget exploded under pressure.
mode: fix
when:
  - fact: stderr
    regex: 'fatal: (?P<widget>widget-\\d+) exploded: pressure=(?P<pressure>\\d+)'
then:
  - action: vent_widget
    params: {widget: "{widget}", pressure: "{pressure}"}
"""
ACTION_CODE = """\
from theow_workers import action


@action("vent_widget")
def vent_widget(widget: str, pressure: str) -> dict:
    '''Say how to vent a widget.'''
    return {"status": "ok", "vent": widget, "from": pressure}
"""


@pytest.fixture
def repo(tmp_path) -> Repository:
    actions = tmp_path / "actions"
    actions.mkdir()
    registry = load_actions(FIXTURES / "actions")
    return Repository(
        rule_names=frozenset(r.name for r in load_rules(FIXTURES / "rules").rules),
        action_files={s.name: Path(s.source_file) for s in registry},
        actions_dir=actions,
        root=tmp_path,
    )


def test_a_good_submission_becomes_a_rule_and_a_new_file_diff(repo):
    result = check_submission(
        GOOD_RULE, [{"name": "vent_widget", "code": ACTION_CODE}], FAILURE, repo
    )
    assert result.rule.name == "widget_explosion"
    assert result.bound == [
        {"action": "vent_widget", "params": {"widget": "widget-7", "pressure": "31"}}
    ]
    (diff,) = result.actions
    assert diff.path == "actions/vent_widget.py"
    assert diff.diff.startswith("--- /dev/null\n+++ b/actions/vent_widget.py\n")
    assert '+@action("vent_widget")' in diff.diff


@pytest.mark.parametrize(
    ("rule", "actions", "problem"),
    [
        (
            GOOD_RULE.replace("widget_explosion", "tf_echo"),
            "code",
            "a rule named 'tf_echo' already exists",
        ),
        (GOOD_RULE.replace("exploded", "imploded"), "code", "does not match this failure"),
        (GOOD_RULE, [], "unknown action 'vent_widget'"),
        (GOOD_RULE.replace("when:", "whenever:"), "code", "missing required key 'when'"),
        (GOOD_RULE, [{"name": "vent_widget", "code": "def broken(:\n"}], "does not parse"),
        (
            GOOD_RULE,
            [{"name": "vent_widget", "code": "x = 1\n"}],
            "does not define @action('vent_widget')",
        ),
        (
            GOOD_RULE,
            [{"name": "vent_widget", "code": ACTION_CODE, "path": "../evil.py"}],
            "outside actions/",
        ),
        (
            GOOD_RULE,
            [{"name": "vent_widget", "code": ACTION_CODE, "path": "rules/x.py"}],
            "outside actions/",
        ),
        (GOOD_RULE, [{"name": "../../etc/passwd", "code": ACTION_CODE}], "not a valid action name"),
    ],
)
def test_a_bad_submission_is_refused_with_a_reason_the_llm_can_act_on(repo, rule, actions, problem):
    if actions == "code":
        actions = [{"name": "vent_widget", "code": ACTION_CODE}]
    with pytest.raises(SubmissionRejected, match=problem.replace("(", r"\(").replace(")", r"\)")):
        check_submission(rule, actions, FAILURE, repo)


def test_proposed_code_is_parsed_never_run(tmp_path):
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('x')\nfrom theow_workers import action\n@action('a')\ndef a(): ...\n"
    assert defined_actions(code) == {"a"}
    assert not marker.exists()


class ScriptedGateway:
    """A model that answers each turn with the next scripted tool call; counts sessions.

    It makes one model call per turn, as Gemini's gateway does: the loop these
    tests run is the production one (``core/llm/session.py``).
    """

    model = "fake-model"

    def __init__(self, script):
        self.script, self.sessions = script, 0

    def send(self, request):
        turn = sum(isinstance(t, ModelTurn) for t in request.history)
        self.sessions += turn == 0
        if turn >= len(self.script):
            return ModelTurn(text="Nothing more to try.", tokens_in=1000, tokens_out=100)
        name, args = self.script[turn]
        return ModelTurn(calls=(ToolCall(name, args),), tokens_in=1000, tokens_out=100)

    def check(self):
        return None

    def scrub(self, value):
        return value


@pytest.fixture
def explorer_for(repo):
    rules = load_rules(FIXTURES / "rules").rules
    registry = load_actions(FIXTURES / "actions")
    embedder = HashingEmbedder()

    def build(script, **settings):
        gateway = ScriptedGateway(script)
        loop = FallbackRunner(ToolLoop(gateway, InMemoryLimiter()))
        state = InMemoryExploreState()
        recorded = []

        class Sink:
            def add_exploration(self, exploration, proposal=None):
                recorded.append((exploration, proposal))

        service = ExploreService(
            state, Sink(), lambda: loop, lambda text: embedder.embed([text])[0],
            ExploreSettings(budget=Budget(), prices={"fake-model": (1.0, 2.0)}, **settings),
        )  # fmt: skip

        def explore(failure_id, facts, fingerprint="fp-1", session="s"):
            context = ExplorationContext(facts, rules, registry, repo, lambda q, k, n: [])
            return service.explore(
                failure_id, fingerprint, facts, context, facts["stderr"], session
            )

        return explore, gateway, recorded, state

    return build


SUBMIT = (
    "submit_rule",
    {"rule_yaml": GOOD_RULE, "actions": [{"name": "vent_widget", "code": ACTION_CODE}]},
)


def test_a_session_that_submits_ends_in_a_recorded_pending_proposal_with_its_cost(explorer_for):
    explore, _gateway, recorded, _ = explorer_for([SUBMIT])
    exploration = explore("f1", FAILURE)
    assert exploration.outcome == Outcome.PROPOSAL
    ((row, proposal),) = recorded
    assert proposal["status"] == "pending" and proposal["rule_name"] == "widget_explosion"
    assert proposal["diffs"][0]["path"] == "actions/vent_widget.py"
    assert row.cost == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1_000_000)


def test_a_rejected_submission_goes_back_to_the_model_which_corrects_it(explorer_for):
    wrong = (
        "submit_rule",
        {"rule_yaml": GOOD_RULE.replace("exploded", "imploded"), "actions": SUBMIT[1]["actions"]},
    )
    explore, gateway, _recorded, _ = explorer_for([wrong, SUBMIT])
    assert explore("f1", FAILURE).outcome == Outcome.PROPOSAL
    assert gateway.sessions == 1


def test_the_same_root_cause_is_explored_once_and_then_reused(explorer_for):
    explore, gateway, _recorded, _ = explorer_for([SUBMIT])
    first = explore("f1", FAILURE)
    second = explore("f2", FAILURE)
    assert gateway.sessions == 1
    assert second.outcome == Outcome.DEDUPLICATED
    assert second.proposal_id == first.proposal_id


def test_a_root_cause_being_explored_elsewhere_asks_to_come_back_later(explorer_for):
    explore, gateway, _, state = explorer_for([SUBMIT])
    state.take_flight("fp-1", "someone-else", 60)
    with pytest.raises(InFlight):
        explore("f1", FAILURE)
    assert gateway.sessions == 0


def test_a_cached_proposal_is_reused_only_when_its_rule_validates_with_params_rebound(explorer_for):
    explore, gateway, _recorded, _ = explorer_for([SUBMIT])
    explore("f1", FAILURE)
    other_widget = {"stderr": "step 9\nfatal: widget-12 exploded: pressure=55 bar\n"}
    hit = explore("f2", other_widget, fingerprint="fp-2")
    assert hit.outcome == Outcome.CACHE_HIT
    assert hit.bound == [
        {"action": "vent_widget", "params": {"widget": "widget-12", "pressure": "55"}}
    ]
    # Similar words, but the cached rule does not validate: a new session, not a wrong reuse.
    lookalike = {"stderr": "step 9\nfatal: widget-12 exploded: temperature=55 bar\n"}
    assert explore("f3", lookalike, fingerprint="fp-3").outcome != Outcome.CACHE_HIT
    assert gateway.sessions == 2


def test_give_up_and_the_session_limit_are_recorded(explorer_for):
    explore, gateway, recorded, _ = explorer_for(
        [("give_up", {"reason": "flaky hardware"})], session_limit=1
    )
    assert explore("f1", FAILURE, fingerprint="a").outcome == Outcome.GAVE_UP
    limited = explore("f2", {"stderr": "something else entirely"}, fingerprint="b")
    assert limited.outcome == Outcome.LIMIT
    assert "session limit of 1" in limited.reason
    assert gateway.sessions == 1
    assert [r.outcome for r, _ in recorded] == ["gave_up", "session_limit"]


def test_two_causes_sharing_a_fingerprint_do_not_reuse_each_others_rule(explorer_for):
    narrow = GOOD_RULE.replace("(?P<widget>widget-\\d+)", "(?P<widget>widget-7)")
    submit_narrow = ("submit_rule", {"rule_yaml": narrow, "actions": SUBMIT[1]["actions"]})
    explore, gateway, _, _ = explorer_for([submit_narrow])
    assert explore("f1", FAILURE, fingerprint="same").outcome == Outcome.PROPOSAL
    same_shape = {"stderr": "step 9\nfatal: widget-8 exploded: pressure=31 bar\n"}
    second = explore("f2", same_shape, fingerprint="same")
    assert second.outcome != Outcome.DEDUPLICATED
    assert gateway.sessions == 2  # its own session, not widget-7's rule
    third = explore("f3", FAILURE, fingerprint="same")
    assert third.outcome == Outcome.DEDUPLICATED
    assert third.bound == [
        {"action": "vent_widget", "params": {"widget": "widget-7", "pressure": "31"}}
    ]


class TimeLimit(Exception):
    """Stands in for Celery's SoftTimeLimitExceeded, an Exception raised inside whatever runs."""


def test_a_task_time_limit_inside_a_tool_ends_the_session_instead_of_becoming_its_answer():
    from theow_workers.core.llm.model import tool_from_callable

    def slow_check(pattern: str) -> str:
        """Check a pattern.

        Args:
            pattern: the pattern.
        """
        raise TimeLimit()

    tool = tool_from_callable(slow_check)
    crashing = ScriptedGateway([("slow_check", {"pattern": "x"})])
    told = ToolLoop(crashing, InMemoryLimiter()).tool_session("go", [tool], Budget())
    assert "TimeLimit" in told.tool_calls[0].error  # an ordinary bug is the model's information

    interrupted = ScriptedGateway([("slow_check", {"pattern": "x"})])
    loop = ToolLoop(interrupted, InMemoryLimiter(), interrupts=(TimeLimit,))
    with pytest.raises(TimeLimit):
        loop.tool_session("go", [tool], Budget())


def test_a_cause_explored_under_an_older_unversioned_fingerprint_is_still_found_by_it(explorer_for):
    """Failures stored before fingerprints carried their version keep theirs, and its exploration."""
    from theow_workers.core.resolve.fingerprint import fingerprint, fingerprint_version

    explore, gateway, _, state = explorer_for([SUBMIT])
    older = "3f2a9c0d1e4b5a6978877665544332ab"
    assert fingerprint_version(older) == 1 and fingerprint_version(fingerprint(FAILURE)) == 3
    explore("f1", FAILURE, fingerprint=older)
    assert explore("f2", FAILURE, fingerprint=older).outcome == Outcome.DEDUPLICATED
    assert state.finished(older) is not None and gateway.sessions == 1
