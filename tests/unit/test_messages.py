"""The task arguments are read once where a message arrives; old clients' messages still read."""

from pathlib import Path

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from theow_client import names
from theow_client.client import build_payload
from theow_client.messages import ExploreRequest, PassingRun, SubmitRequest
from theow_client.passing import build_passing_payload
from theow_client.verdict import Status
from theow_workers.adapters.memory import InMemoryStore
from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.service import ResolveService, ResolveSettings
from theow_workers.delivery import DeliveryPolicy

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_what_the_client_sends_reads_back_and_is_written_again_unchanged():
    payload = build_payload({"stderr": "boom\n" * 3, "job": "ci/build"}, idempotency_key="k1")
    request = SubmitRequest.from_wire(payload)
    assert request.facts_json == payload["facts_json"]
    assert (request.idempotency_key, request.job) == ("k1", "ci/build")
    assert request.extra == {"submitted_at": payload["submitted_at"]}
    assert request.to_wire() == payload
    assert list(request.to_wire()) == list(payload)  # the same message, field for field


def test_an_older_clients_facts_object_and_a_newer_clients_fields_are_kept():
    old = SubmitRequest.from_wire({"failure_id": "f1", "facts": {"stderr": "x"}, "hue": "red"})
    assert (old.facts_json, old.facts) == (None, {"stderr": "x"})
    assert old.extra == {"hue": "red"}
    assert old.to_wire()["hue"] == "red"


def test_a_message_that_is_no_submission_says_why_and_never_raises():
    assert (
        SubmitRequest.from_wire("garbage").malformed == "submission must be a JSON object, got str"
    )
    assert SubmitRequest.from_wire("garbage").preview() == "'garbage'"
    unreadable = SubmitRequest.from_wire({names.UNREADABLE: "nested too deeply"})
    assert unreadable.malformed == "nested too deeply"


def test_an_implausible_failure_id_gives_way_to_the_tasks_id():
    request = SubmitRequest.from_wire({"failure_id": "x" * 65, "facts": {}})
    assert request.failure_id is None
    assert request.failure_id_or("task-1") == "task-1"


def test_an_explore_request_keeps_only_a_sane_session_limit():
    wire = ExploreRequest("f1", None, "replay:j", 3).to_wire()
    assert ExploreRequest.from_wire(wire) == ExploreRequest("f1", None, "replay:j", 3)
    assert ExploreRequest.from_wire({**wire, "session_limit": True}).session_limit is None
    assert ExploreRequest.from_wire({**wire, "session_limit": -1}).session_limit is None
    with pytest.raises(KeyError):
        ExploreRequest.from_wire({"rule": "r"})


def test_a_passing_run_without_a_usable_job_is_refused_with_the_reason():
    run = PassingRun.from_wire(build_passing_payload({"log": "ok"}, job=" ci/test "))
    assert run.job == "ci/test" and run.facts_json == '{"log": "ok"}'
    with pytest.raises(ValueError, match="without a usable job"):
        PassingRun.from_wire({"job": "", "facts_json": "{}"})
    with pytest.raises(ValueError, match="must be a JSON object"):
        PassingRun.from_wire(["job"])


@pytest.fixture(scope="module")
def knowledge() -> Library:
    return Library.load(FIXTURES / "rules", FIXTURES / "actions")


def service_of(knowledge: Library, store: InMemoryStore) -> ResolveService:
    return ResolveService(
        store,
        rulebook=lambda: knowledge.book,
        actions=lambda: knowledge.actions,
        settings=ResolveSettings(action_timeout=1.0),
    )


POISON = SubmitRequest(failure_id="p1", facts_json='{"stderr": "ECHO never read"}')


def test_a_live_failure_delivered_too_often_is_dead_lettered_without_reading_its_facts(knowledge):
    store = InMemoryStore()
    policy = DeliveryPolicy.live(max_deliveries=3, time_limit=300)
    verdict = policy.resolve(service_of(knowledge, store), POISON, "p1", delivery=4).verdict
    assert verdict.status is Status.ERROR
    assert verdict.reason == (
        "delivered 4 times without a verdict (worker crashed or was killed each time)"
    )
    assert store.failures["p1"].facts == {}


def test_a_replayed_failure_delivered_too_often_is_given_up_with_its_facts(knowledge):
    store = InMemoryStore()
    policy = DeliveryPolicy.replay(max_deliveries=2, time_limit=300)
    verdict = policy.resolve(service_of(knowledge, store), POISON, "p1", delivery=3).verdict
    assert verdict.reason == "delivered 3 times without a verdict (a worker died each time)"
    assert store.failures["p1"].facts == {"stderr": "ECHO never read"}


def test_a_resolve_stopped_at_the_soft_limit_is_an_error_with_what_already_ran(
    knowledge, monkeypatch
):
    import theow_workers.core.resolve.service as service_module

    real, calls = service_module.call_action, []

    def second_call_hits_the_limit(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise SoftTimeLimitExceeded()
        return real(*args, **kwargs)

    monkeypatch.setattr(service_module, "call_action", second_call_hits_the_limit)
    store = InMemoryStore()
    policy = DeliveryPolicy.live(max_deliveries=3, time_limit=300)
    request = SubmitRequest(failure_id="f1", facts={"stderr": "EXPLODE 42"})
    delivered = policy.resolve(service_of(knowledge, store), request, "f1", delivery=1)
    assert delivered.timed_out
    assert (delivered.verdict.status, delivered.verdict.attempts) == (Status.ERROR, 1)
    assert delivered.verdict.reason.startswith("resolution ran past its soft time limit (285s:")
    assert [a.rule for a in store.attempts] == ["tf_explode"]
