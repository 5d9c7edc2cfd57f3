"""The explorer starts from a tested rule: the model reads the failure's error summary, calls
``rule_from_lines`` (the synthesizer ``theow teach`` uses) and ``test_rule`` (which also says
where else the draft fires), and submits the draft.

The model is the fake Gemini server, through the real Gemini gateway; the stored failures
are a real SQLite store; the job's normal is learned from a passing run's lines.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gemini_server import FakeGemini, function_call, function_responses, user_texts
from theow_workers.adapters.gemini import GeminiGateway
from theow_workers.adapters.memory import HashingEmbedder, InMemoryExploreState, InMemoryLimiter
from theow_workers.core.explore.context import ExplorationContext
from theow_workers.core.explore.proposal import Repository
from theow_workers.core.explore.service import ExploreService, ExploreSettings
from theow_workers.core.llm.model import Budget, FallbackRunner, Outcome
from theow_workers.core.llm.session import ToolLoop
from theow_workers.core.logs.normal import JobNormal
from theow_workers.core.ports import FailureRecord
from theow_workers.explorer.run import draft_probe
from theow_workers.runtime import Library
from theow_workers.store.explore import ExploreStore
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import migrate

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KEY = "AIzaSyFAKE-test-key-0123456789abcdefghij"
MODEL = "gemini-2.5-flash"
FACTS = {"repo": "acme/widgets", "job": "docs"}
LOG = "\n".join([
    "$ ./run-checks",
    "checking docs in 3 folders",
    "docs/guide.md:14: broken link to 'install-notes' (anchor missing)",
    "checks: 1 problem(s) found",
    "make: *** [check] Error 1",
])  # fmt: skip
ALIKE = LOG.replace("guide.md:14", "faq.md:9").replace("install-notes", "proxy")
OTHER = "$ make\ncc: fatal: no input files\nmake: *** [all] Error 1"
PASSING = ["$ ./run-checks", "checking docs in 4 folders", "checks: 0 problem(s) found"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ExploreStore]:
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    sql = SqlStore(url)
    for fid, log in (("f-taught", LOG), ("f-alike", ALIKE), ("f-other", OTHER)):
        sql.add_failure(FailureRecord(fid, f"fp-{fid}", {"log": log, **FACTS}, "build_failure",
                                      "ci", datetime.now(UTC)))  # fmt: skip
    yield ExploreStore(sql)
    sql.dispose()


def _answer(body: dict[str, Any], name: str) -> dict[str, Any]:
    """The last answer of tool ``name`` in a request (the model reads its own tool's result)."""
    answers = [r for r in function_responses(body) if r["name"] == name]
    assert answers, f"no {name} answer yet"
    response = answers[-1]["response"]
    assert "result" in response, response
    return response["result"]


def test_the_model_starts_from_a_synthesized_rule_and_submits_it_tested(store, tmp_path):
    knowledge = Library.load(FIXTURES / "rules", FIXTURES / "actions")
    normal = JobNormal.learn(PASSING, "docs")
    turns: list[dict[str, Any]] = []

    def model(_model: str, body: dict[str, Any]) -> dict[str, Any]:
        turns.append(body)
        if len(turns) == 1:
            # The summary numbers the lines and marks the picked one: the model points at it.
            prompt = "\n".join(user_texts(body))
            assert "> " in prompt and "     3: docs/guide.md:14: broken link" in prompt
            return function_call("rule_from_lines", first_line=3, last_line=4)
        if len(turns) == 2:
            return function_call("test_rule", rule_yaml=_answer(body, "rule_from_lines")["rule_yaml"])  # fmt: skip
        drafted = _answer(body, "rule_from_lines")["rule_yaml"]
        return function_call("submit_rule", rule_yaml=drafted, actions=[])

    recorded: list[tuple[Any, Any]] = []

    class Sink:
        def add_exploration(self, exploration: Any, proposal: Any = None) -> None:
            recorded.append((exploration, proposal))

    actions_dir = tmp_path / "actions"
    actions_dir.mkdir()
    repo = Repository(
        rule_names=frozenset(r.name for r in knowledge.rules.rules),
        action_files={s.name: Path(s.source_file) for s in knowledge.actions},
        actions_dir=actions_dir,
        root=tmp_path,
    )
    embedder = HashingEmbedder()
    with FakeGemini(model, api_key=KEY) as fake:
        loop = FallbackRunner(ToolLoop(GeminiGateway(MODEL, api_key=KEY, base_url=fake.url),
                                        InMemoryLimiter()))  # fmt: skip
        service = ExploreService(InMemoryExploreState(), Sink(), lambda: loop,
                                 lambda text: embedder.embed([text])[0],
                                 ExploreSettings(budget=Budget()))  # fmt: skip
        facts = {"log": LOG, **FACTS}
        context = ExplorationContext(facts, knowledge.rules.rules, knowledge.actions, repo,
                                     lambda q, k, n: [], is_normal=normal.is_normal,
                                     book=knowledge.book, probe=draft_probe(store, normal))  # fmt: skip
        exploration = service.explore("f-taught", "fp-1", facts, context, "broken link", "s")
        assert fake.rejections == []

    assert "rule_from_lines" in [d for t in turns[:1] for d in _declared(t)]
    drafted = _answer(turns[1], "rule_from_lines")
    assert drafted["line"] == 3 and "anchor missing" in drafted["text"]
    assert drafted["test"]["matches"] is True
    tested = _answer(turns[2], "test_rule")
    assert tested["matches"] is True
    # Where else it fires: its own failure and the one alike of the 3 stored; no passing line.
    fires = tested["fires_on"]
    assert (fires["stored_failures"], fires["scanned"]) == (2, 3)
    assert sorted(fires["examples"]) == ["f-alike", "f-taught"]
    assert fires["passing_templates"] == 0

    assert exploration.outcome == Outcome.PROPOSAL.value
    ((_, proposal),) = recorded
    assert proposal["rule_yaml"] == drafted["rule_yaml"]
    assert "equals: acme/widgets" in proposal["rule_yaml"]


def test_lines_no_rule_can_be_made_from_are_a_tool_error_the_model_reads(store, tmp_path):
    knowledge = Library.load(FIXTURES / "rules", FIXTURES / "actions")
    context = ExplorationContext({"log": LOG, **FACTS}, knowledge.rules.rules, knowledge.actions,
                                 Repository(frozenset(), {}, tmp_path, tmp_path),
                                 lambda q, k, n: [], book=knowledge.book)  # fmt: skip
    tool = next(t for t in context.meta_tools() if t.name == "rule_from_lines")
    from theow_workers.core.llm.model import ToolError

    with pytest.raises(ToolError, match="lines 40-41 hold no text"):
        tool.func(first_line=40, last_line=41)


def test_a_draft_that_fires_on_a_passing_line_is_counted(store):
    normal = JobNormal.learn([*PASSING, "docs/old.md:3: broken link to 'x' (anchor missing)"])
    knowledge = Library.load(FIXTURES / "rules", FIXTURES / "actions")
    from theow_workers.core.explore.teaching import synthesize

    rule = synthesize({"log": LOG, **FACTS}, 3, 3, book=knowledge.book).rule
    fires = draft_probe(store, normal)(rule)
    assert fires["passing_templates"] == 1
    assert "anchor missing" in json.dumps(fires["passing_examples"])


def _declared(body: dict[str, Any]) -> list[str]:
    return [
        d["name"] for tool in body.get("tools", []) for d in tool.get("functionDeclarations", [])
    ]
