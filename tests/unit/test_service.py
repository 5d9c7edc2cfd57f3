"""Resolving one submission: every failure gets exactly one recorded verdict."""

import shutil
from pathlib import Path

import pytest

from theow_client.messages import SubmitRequest
from theow_client.verdict import Status
from theow_workers.adapters.memory import InMemoryStore
from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.service import ResolveService, ResolveSettings

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="module")
def knowledge() -> Library:
    loaded = Library.load(FIXTURES / "rules", FIXTURES / "actions")
    assert loaded.rules.errors == ()
    return loaded


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def service(knowledge, store) -> ResolveService:
    return ResolveService(
        store,
        rulebook=lambda: knowledge.book,
        actions=lambda: knowledge.actions,
        settings=ResolveSettings(action_timeout=1.0),
    )


def submit(service, facts, failure_id="f1", **extra):
    return service.resolve(
        SubmitRequest.from_wire({"failure_id": failure_id, "facts": facts, **extra}),
        fallback_id=failure_id,
    )


def test_a_matching_rule_runs_its_action_and_the_verdict_carries_the_output(service, store):
    verdict = submit(service, {"stderr": "x\nECHO hello\n", "job": "build-7"})
    assert verdict.status is Status.RESOLVED
    assert verdict.rule == "tf_echo"
    assert verdict.outputs == (
        {
            "action": "echo",
            "output": {"status": "ok", "params": {"word": "hello", "job": "build-7"}},
        },
    )
    assert store.attempts[0].outcome == "success"
    assert store.stats["tf_echo"].successes == 1


def test_facts_that_are_not_an_object_are_rejected_and_recorded(service, store):
    verdict = service.resolve(
        SubmitRequest.from_wire({"failure_id": "bad", "facts": ["not", "an", "object"]}), "bad"
    )
    assert verdict.status is Status.REJECTED
    assert "facts must be a JSON object, got list" in verdict.reason
    assert "bad" in store.failures
    assert store.verdicts["bad"] is verdict


def test_a_payload_that_is_not_an_object_is_recorded_under_the_task_id(service, store):
    verdict = service.resolve(SubmitRequest.from_wire("garbage"), fallback_id="task-1")
    assert verdict.status is Status.REJECTED
    assert store.failures["task-1"].notes["payload_preview"] == "'garbage'"


@pytest.mark.parametrize("facts", [{"job": "j"}, {"stderr": ""}, {"stderr": "   \n"}])
def test_missing_or_empty_stderr_is_unmatched_with_the_reason(service, facts):
    verdict = submit(service, facts)
    assert verdict.status is Status.UNMATCHED
    assert "no log text" in verdict.reason


def test_a_50_mb_log_is_cut_to_head_and_tail_and_the_cut_is_noted(service, store):
    log = "noise line\n" * (50 * 1024 * 1024 // 11) + "ECHO tail\n"
    verdict = submit(service, {"stderr": log, "job": "j"})
    assert verdict.status is Status.RESOLVED  # the error at the end survives
    kept = store.failures["f1"].facts["stderr"]
    assert len(kept) < 70 * 1024
    note = store.failures["f1"].notes["truncated"]["stderr"]
    assert note["original_chars"] == len(log)
    assert note["omitted_chars"] > 49 * 1024 * 1024


def test_bytes_that_are_not_utf8_are_replaced_not_fatal(service, store):
    verdict = submit(service, {"stderr": b"ECHO caf\xe9 \xff\xfe", "job": "j"})
    assert verdict.status is Status.RESOLVED
    assert "\ufffd" in store.failures["f1"].facts["stderr"]


def test_an_action_that_raises_fails_the_attempt_and_the_next_rule_is_tried(service, store):
    verdict = submit(service, {"stderr": "EXPLODE 42"})
    assert verdict.status is Status.RESOLVED
    assert verdict.rule == "tf_explode_fallback"
    assert verdict.attempts == 2
    first, second = store.attempts
    assert (first.rule, first.outcome) == ("tf_explode", "error")
    assert "RuntimeError: boom" in first.error
    assert (second.rule, second.outcome) == ("tf_explode_fallback", "success")
    assert store.stats["tf_explode"].failures == 1


def test_when_every_attempt_fails_the_verdict_is_failed_with_each_reason(service):
    verdict = submit(service, {"stderr": "EXPLODE without a number"})
    assert verdict.status is Status.FAILED
    assert "tf_explode: action 'explode' raised RuntimeError: boom" in verdict.reason


def test_an_action_that_hangs_is_stopped_at_its_time_limit_and_recorded(service, store):
    verdict = submit(service, {"stderr": "HANG_FOREVER"})
    assert verdict.status is Status.FAILED
    assert store.attempts[0].outcome == "timeout"
    assert "timed out after 1s" in store.attempts[0].error


def test_retry_and_track_rules_decide_without_running_anything(service):
    assert submit(service, {"stderr": "read: Connection reset by peer"}, "a").status is Status.RETRY
    tracked = submit(service, {"stderr": "test timed out", "problem_type": "test_failure"}, "b")
    assert (tracked.status, tracked.rule, tracked.mode) == (
        Status.TRACKED,
        "tf_problem_type",
        "track",
    )


def test_a_client_side_action_is_bound_but_not_run_on_the_worker(service):
    verdict = submit(service, {"stderr": "missing file config.ini"})
    assert verdict.status is Status.SUGGESTED  # offered to the agent; resolved once it worked
    assert verdict.outputs == ()
    (bound,) = verdict.client_actions
    assert (bound.action, bound.params) == ("touch_file", {"name": "config.ini"})


def test_the_verdict_shows_what_the_rule_captured(service):
    verdict = submit(service, {"stderr": "step 3\nmissing file config.ini\n"})
    assert verdict.captures == {"name": "config.ini"}


def test_a_client_side_fix_is_not_counted_until_the_agent_reports_it(service, store):
    submit(service, {"stderr": "missing file config.ini"})
    (attempt,) = store.attempts
    assert attempt.outcome == "client_pending"
    assert "tf_client_fix" not in store.rule_stats()


def test_a_fix_whose_actions_only_suggest_is_suggested_not_resolved_and_not_counted(tmp_path):
    # The shipped rule and its advisor: it names the package, installs nothing.
    (tmp_path / "rules").mkdir()
    (tmp_path / "actions").mkdir()
    shutil.copy(ROOT / "rules" / "python_module_not_found.rule.yaml", tmp_path / "rules")
    shutil.copy(ROOT / "actions" / "python.py", tmp_path / "actions")
    loaded = Library.load(tmp_path / "rules", tmp_path / "actions")
    store = InMemoryStore()
    service = ResolveService(store, lambda: loaded.book, lambda: loaded.actions)
    verdict = submit(service, {"stderr": "ModuleNotFoundError: No module named 'yaml'"})
    assert (verdict.status, verdict.rule) == (Status.SUGGESTED, "python_module_not_found")
    assert verdict.outputs[0]["output"]["package"] == "PyYAML"  # the advice is in the verdict
    assert store.attempts[0].outcome == "suggested"
    assert store.rule_stats() == {}


def test_a_dry_run_suggests_the_fix_it_matched_and_runs_nothing(knowledge, store):
    dry = ResolveService(store, lambda: knowledge.book, lambda: knowledge.actions,
                         settings=ResolveSettings(dry_run=True))  # fmt: skip
    verdict = submit(dry, {"stderr": "x\nECHO hello\n", "job": "build-7"})
    assert (verdict.status, verdict.rule, verdict.outputs) == (Status.SUGGESTED, "tf_echo", ())
    assert store.attempts[0].outcome == "suggested"
    assert store.rule_stats() == {}


def test_the_same_failure_twice_gives_one_failure_and_one_verdict(service, store):
    first = submit(service, {"stderr": "ECHO once", "job": "j"}, failure_id="dup")
    second = submit(service, {"stderr": "ECHO once", "job": "j"}, failure_id="dup")
    assert first == second
    assert len(store.failures) == 1 and len(store.verdicts) == 1
    assert len(store.attempts) == 1  # the action did not run twice


def test_a_backtracking_regex_costs_a_bounded_time_and_the_next_failure_is_served(service):
    verdict = submit(service, {"stderr": "a" * 50_000 + "!"}, "slow")
    assert verdict.status is Status.UNMATCHED
    assert submit(service, {"stderr": "ECHO next", "job": "j"}, "next").status is Status.RESOLVED


def test_secrets_in_facts_never_reach_the_store(service, store):
    submit(
        service,
        {
            "stderr": "ECHO x\nexport GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "job": "j",
        },
    )
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in store.failures["f1"].facts["stderr"]


def test_facts_sent_as_one_json_text_are_parsed_under_limits(service, store):
    text = '{"stderr": "ECHO wire", "job": "b", "n": ' + "[" * 5000 + "]" * 5000 + "}"
    rejected = service.resolve(
        SubmitRequest.from_wire({"failure_id": "deep", "facts_json": text}), fallback_id="deep"
    )
    assert rejected.status is Status.REJECTED
    assert rejected.reason == "facts: nested too deeply to parse"
    ok = service.resolve(
        SubmitRequest.from_wire(
            {"failure_id": "ok", "facts_json": '{"stderr": "ECHO wire", "job": "b"}'}
        ),
        "ok",
    )
    assert (ok.status, ok.rule) == (Status.RESOLVED, "tf_echo")


def test_a_dead_letter_is_recorded_without_reading_its_facts(service, store):
    payload = {"failure_id": "poison", "facts_json": '{"stderr": "ECHO never read"}'}
    verdict = service.dead_letter(
        SubmitRequest.from_wire(payload), "poison", "delivered 4 times without a verdict"
    )
    assert verdict.status is Status.ERROR and "delivered 4 times" in verdict.reason
    assert store.failures["poison"].facts == {}
    assert store.failures["poison"].notes["dead_letter"] == "delivered 4 times without a verdict"
    assert "ECHO never read" in store.failures["poison"].notes["payload_preview"]
    assert store.attempts == []  # no rule ran


class TimeLimit(BaseException):
    """Stands for Celery's SoftTimeLimitExceeded, raised inside whatever runs."""


def test_what_ran_before_a_time_limit_is_recorded_with_the_verdict_that_gives_up(
    service, store, monkeypatch
):
    import theow_workers.core.resolve.service as service_module

    real, calls = service_module.call_action, []

    def second_call_hits_the_limit(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise TimeLimit()
        return real(*args, **kwargs)

    monkeypatch.setattr(service_module, "call_action", second_call_hits_the_limit)
    request = SubmitRequest.from_wire({"failure_id": "f1", "facts": {"stderr": "EXPLODE 42"}})
    ran = []
    with pytest.raises(TimeLimit):
        service.resolve(request, fallback_id="f1", ran=ran)

    verdict = service.give_up(request, "f1", "resolution exceeded the time limit", ran)

    assert (verdict.status, verdict.attempts) == (Status.ERROR, 1)
    (ran,) = store.attempts
    assert (ran.rule, ran.outcome) == ("tf_explode", "error")
    assert store.stats["tf_explode"].failures == 1


def test_facts_seen_before_are_prepared_once_per_service_and_a_new_service_starts_afresh(
    knowledge, store, monkeypatch
):
    def service_of() -> ResolveService:
        return ResolveService(
            store, rulebook=lambda: knowledge.book, actions=lambda: knowledge.actions
        )

    import theow_workers.core.resolve.service as service_module

    real, masked = service_module.redact, []

    def counted(facts):
        masked.append(facts)
        return real(facts)

    monkeypatch.setattr(service_module, "redact", counted)
    first = service_of()
    for failure_id in ("a", "b"):
        submit(first, {"stderr": "ECHO twice", "job": "j"}, failure_id=failure_id)
    assert len(masked) == 1
    submit(service_of(), {"stderr": "ECHO twice", "job": "j"}, failure_id="c")
    assert len(masked) == 2
