"""Every verdict says which lines to look at, numbered as in the build's own log.

Given a log the client cut to 64 KB, when a worker decides it, I expect the
lines the verdict points at (``where`` and the evidence) to carry the line
numbers a person finds in the log the build printed.
"""

from pathlib import Path

import pytest

from theow_client.client import build_payload
from theow_client.facts import FactLimits, bound_facts_kept
from theow_client.lines import original_line
from theow_client.messages import SubmitRequest
from theow_client.verdict import Status, Verdict, Where
from theow_workers.adapters.memory import InMemoryStore
from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.plan import RuleBook
from theow_workers.core.resolve.service import ResolveService, ResolveSettings
from theow_workers.core.rules.schema import Rule

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
BIG = 400_000
ERROR_AT = 399_990


def big_log(error: str = "KeyError: 'DATABASE_URL'") -> str:
    lines = [f"step {n}: compiled module_{n}.c" for n in range(1, BIG + 1)]
    lines[ERROR_AT - 2] = "Traceback (most recent call last):"
    lines[ERROR_AT - 1] = error
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def knowledge() -> Library:
    return Library.load(FIXTURES / "rules", FIXTURES / "actions")


@pytest.fixture
def service(knowledge) -> ResolveService:
    return ResolveService(
        InMemoryStore(),
        rulebook=lambda: knowledge.book,
        actions=lambda: knowledge.actions,
        settings=ResolveSettings(action_timeout=1.0),
    )


def test_the_client_records_which_lines_of_a_cut_log_it_kept():
    log = big_log()
    payload = build_payload({"log": log})
    pieces = tuple(tuple(p) for p in payload["kept_lines"]["log"])
    bounded = bound_facts_kept({"log": log})[0]["log"].split("\n")
    original = log.split("\n")
    kept = [(n, ln) for n, ln in enumerate(bounded, 1) if ln and "theow:" not in ln]
    assert len(kept) > 100
    # Every line kept is the line the map names in the original.
    assert all(ln in original[original_line(pieces, n) - 1] for n, ln in kept)


def test_a_log_short_enough_to_send_whole_carries_no_line_map():
    assert "kept_lines" not in build_payload({"log": "a\nKeyError: 'X'\n"})


def test_the_last_error_of_a_400000_line_log_is_reported_at_its_own_line(service):
    verdict = service.resolve(SubmitRequest.from_wire(build_payload({"log": big_log()})), "f-big")
    assert verdict.status is Status.UNMATCHED
    assert verdict.where[0].line == ERROR_AT
    assert verdict.where[0].text == "KeyError: 'DATABASE_URL'"


def test_the_evidence_of_a_matched_rule_counts_in_the_original_log(service):
    verdict = service.resolve(
        SubmitRequest.from_wire(build_payload({"stderr": big_log("ECHO hello"), "job": "build-7"})),
        "f-echo",
    )
    assert verdict.rule == "tf_echo"
    assert verdict.evidence["line"] == ERROR_AT
    assert verdict.where[0].line == ERROR_AT
    shown = verdict.evidence["context"].index("ECHO hello")
    assert verdict.evidence["context_start"] + shown == ERROR_AT


def test_a_log_cut_by_the_client_and_again_by_the_worker_still_counts_in_the_original(
    knowledge,
):
    small = ResolveService(
        InMemoryStore(),
        rulebook=lambda: knowledge.book,
        actions=lambda: knowledge.actions,
        settings=ResolveSettings(fact_limit=8 * 1024),
    )
    verdict = small.resolve(SubmitRequest.from_wire(build_payload({"log": big_log()})), "f-twice")
    assert verdict.where[0].line == ERROR_AT


def test_an_older_client_without_line_maps_gets_lines_counted_as_received(service):
    payload = build_payload({"log": big_log()})
    bounded = bound_facts_kept({"log": big_log()})[0]["log"].split("\n")
    del payload["kept_lines"]
    verdict = service.resolve(SubmitRequest.from_wire(payload), "f-old")
    assert verdict.where[0].line == bounded.index("KeyError: 'DATABASE_URL'") + 1


@pytest.mark.parametrize(
    "kept",
    [
        "lines",
        {"log": [[1, 1]]},
        {"log": [[1, 1, 5], [2, 900, 3]]},
        {"log": [[0, 1, 5]]},
        {"nope": [[1, 1, 5]]},
        {"log": [[1, 1, True]]},
        {"log": [[1, 1, 5]] * 5000},
    ],
)
def test_a_malformed_line_map_is_ignored_with_a_note_never_a_crash(service, kept):
    payload = build_payload({"log": "building\nKeyError: 'DATABASE_URL'\n"})
    payload["kept_lines"] = kept
    verdict = service.resolve(SubmitRequest.from_wire(payload), "f-bad")
    assert verdict.status is Status.UNMATCHED
    assert verdict.where[0] == Where("log", 2, "KeyError: 'DATABASE_URL'")
    notes = service.store.failures[verdict.failure_id].notes
    assert notes["kept_lines_ignored"].startswith("kept_lines")
    assert "kept_lines" not in notes


def test_an_unmatched_failure_shows_its_error_line_instead_of_nothing(service):
    log = (
        "collecting settings\n"
        "Traceback (most recent call last):\n"
        '  File "app.py", line 3, in <module>\n'
        "    url = os.environ['DATABASE_URL']\n"
        "KeyError: 'DATABASE_URL'\n"
    )
    verdict = service.resolve(
        SubmitRequest.from_wire({"failure_id": "f-u", "facts": {"log": log}}), "f-u"
    )
    assert verdict.status is Status.UNMATCHED
    assert verdict.where and verdict.where[0].line == 5
    assert verdict.where[0].text == "KeyError: 'DATABASE_URL'"
    # What the agent receives carries them too.
    assert Verdict.from_dict(verdict.to_dict()).where == verdict.where


def test_a_log_sent_as_stdout_and_stderr_points_into_the_stream_with_the_line(service):
    facts = {"stdout": "installing\nrunning\n", "stderr": "Traceback\nKeyError: 'HOME'\n"}
    verdict = service.resolve(SubmitRequest.from_wire({"failure_id": "f-s", "facts": facts}), "f-s")
    assert (verdict.where[0].fact, verdict.where[0].line) == ("stderr", 2)


def test_nested_text_cut_by_bounding_sends_no_map_for_what_is_not_a_fact():
    steps = {"steps": [{"log": big_log()}]}
    payload = build_payload(steps, failure_id="f-n")
    assert "kept_lines" not in payload
    _, notes, cut = bound_facts_kept(steps, limits=FactLimits(total=10**8))
    assert "steps[0].log" in notes and "steps[0].log" in cut


def test_a_failure_given_up_on_still_says_which_line_to_look_at(service):
    payload = build_payload({"log": "compiling\nerror: linker ran out of memory\n"})
    verdict = service.give_up(
        SubmitRequest.from_wire(payload), "f-g", "resolution exceeded the time limit"
    )
    assert verdict.status is Status.ERROR
    assert verdict.where[0] == Where("log", 2, "error: linker ran out of memory")


def test_a_whole_log_sent_by_an_older_client_is_cut_here_and_still_counts_in_the_original(
    service,
):
    payload = {"failure_id": "f-whole", "facts": {"log": big_log()}}
    verdict = service.resolve(SubmitRequest.from_wire(payload), "f-whole")
    assert (verdict.where[0].line, verdict.where[0].text) == (ERROR_AT, "KeyError: 'DATABASE_URL'")


def test_a_rule_on_stderr_reads_a_log_sent_alone_and_points_at_the_logs_line(knowledge):
    """`theow-client run` sends one log (both streams on one pipe): a rule written to the
    library spec's `stderr` still matches, and its line counts in the build's log."""
    spec = Rule.model_validate(
        {"name": "db_url_missing", "mode": "track",
         "when": [{"fact": "stderr", "regex": r"KeyError: 'DATABASE_URL'"}]}
    )  # fmt: skip
    book = RuleBook(rules=(spec,), version="spec")
    service = ResolveService(
        InMemoryStore(),
        rulebook=lambda: book,
        actions=lambda: knowledge.actions,
        settings=ResolveSettings(action_timeout=1.0),
    )
    payload = build_payload({"log": big_log()}, failure_id="f-spec")
    verdict = service.resolve(SubmitRequest.from_wire(payload), "f-spec")
    assert (verdict.status, verdict.rule) == (Status.TRACKED, "db_url_missing")
    assert verdict.evidence is not None
    assert (verdict.evidence["fact"], verdict.evidence["line"]) == ("log", ERROR_AT)
