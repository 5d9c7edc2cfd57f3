"""The views on the in-memory read model: what each screen shows, with no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from theow_workers.views.failures import (
    api_page,
    cli_rows,
    console_page,
    failure_detail,
    failure_list,
)
from theow_workers.views.memory import MemoryReads
from theow_workers.views.ports import (
    ANY_TIME,
    AttemptDetail,
    Cursor,
    ExplorationCost,
    ExplorationSummary,
    FailureDetail,
    FailureFilter,
    ProposalEntry,
    UnknownSource,
    VerdictDetail,
)
from theow_workers.views.proposals import proposal_list, recently_reviewed, review_queue
from theow_workers.views.replays import api_replays, replay_list
from theow_workers.views.stats import meow

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOW = datetime.now(UTC)


def verdict(status: str, rule: str | None = "tf_echo", **kw: object) -> VerdictDetail:
    values: dict[str, object] = {
        "status": status,
        "rule": rule,
        "mode": "fix",
        "actions": [],
        "outputs": [],
        "reason": "because",
        "evidence": None,
        "also": [],
        "seen_in_passing": [],
        "where": [],
        "wrapper": None,
        "explanation": None,
        "decided_at": NOW,
    }
    values.update(kw)
    return VerdictDetail(**values)  # type: ignore[arg-type]


def failure(fid: str, at: datetime, v: VerdictDetail | None, source: str = "agent", **kw: object):
    facts = {"repo": "acme/app", "job": "build", "stderr": "error: boom\n"}
    return FailureDetail(fid, at, source, "fp", "build_failure", facts, {}, v, **kw)  # type: ignore[arg-type]


@pytest.fixture
def reads() -> MemoryReads:
    reads = MemoryReads()
    reads.add_failure(
        failure(
            "f-1",
            T0,
            verdict("resolved"),
            attempts=(AttemptDetail("tf_echo", [], "success", "", 12.0, 1, None, NOW),),
        )
    )
    reads.add_failure(failure("f-2", T0 + timedelta(minutes=1), verdict("unmatched", None)))
    reads.add_failure(
        failure(
            "f-3",
            T0 + timedelta(minutes=2),
            verdict("unexplained", None, wrapper="gradle"),
            explorations=(
                ExplorationSummary("x-3", "proposal", "found", "p-1", ["m"], 2, 100, 10, 0.25, NOW),
            ),
        )
    )
    reads.add_failure(failure("f-4", T0 + timedelta(minutes=3), None, source="replay:j"))
    cost = ExplorationCost("proposal", "s", 100, 10, 0.25, ["m"])
    for n, status in enumerate(("pending", "pending", "rejected"), start=1):
        reads.add_proposal(
            ProposalEntry(
                f"p-{n}",
                "x-3",
                "f-3",
                f"rule_{n}",
                "name: r\n",
                [{"path": "actions/a.py", "diff": "+x\n", "base_sha256": ""}],
                status,
                T0 + timedelta(minutes=n),
                reviewed_by="bob" if status == "rejected" else None,
                reviewed_at=NOW if status == "rejected" else None,
                exploration=cost,
            )
        )
    return reads


def test_the_failure_list_is_live_newest_first_with_its_verdicts(reads):
    listed = failure_list(reads, FailureFilter())
    assert [r["id"] for r in listed.rows] == ["f-3", "f-2", "f-1"] and listed.next is None
    assert listed.rows[0] == {
        "id": "f-3",
        "received_at": T0 + timedelta(minutes=2),
        "source": "agent",
        "problem_type": "build_failure",
        "repo": "acme/app",
        "job": "build",
        "outcome": "unexplained",
        "rule": None,
        "mode": "fix",
        "reason": "because",
        "wrapper": "gradle",
        "origin": None,  # it came without its run's metadata
    }
    with pytest.raises(UnknownSource):
        failure_list(reads, FailureFilter(source="elsewhere"))


def test_the_cli_and_the_console_show_the_same_list(reads):
    shown = cli_rows(reads, source="all")
    rows, more = console_page(reads, FailureFilter(source="all"))
    assert [r["id"] for r in shown] == [r["id"] for r in rows] == ["f-4", "f-3", "f-2", "f-1"]
    assert more is None
    assert shown[1] == {
        "id": "f-3",
        "received_at": (T0 + timedelta(minutes=2)).isoformat(),
        "problem_type": "build_failure",
        "source": "agent",
        "status": "unexplained",
        "rule": None,
        "wrapper": "gradle",
        "reason": "because",
        "origin": None,
    }
    assert [r["id"] for r in cli_rows(reads, status="resolved")] == ["f-1"]
    assert cli_rows(reads, since=timedelta(hours=1)) == []


def test_the_console_pages_by_time_and_the_api_by_cursor(reads):
    rows, more = console_page(reads, FailureFilter(), limit=2)
    assert [r["id"] for r in rows] == ["f-3", "f-2"] and more == T0 + timedelta(minutes=1)
    rows, more = console_page(reads, FailureFilter(), before=more, limit=2)
    assert [r["id"] for r in rows] == ["f-1"] and more is None

    page = api_page(reads, FailureFilter(), None, 2, ANY_TIME)
    assert [r["id"] for r in page["failures"]] == ["f-3", "f-2"]
    assert page["failures"][0]["status"] == "unexplained"
    assert "outcome" not in page["failures"][0]
    after = Cursor.decode(page["next"])
    assert after == Cursor(T0 + timedelta(minutes=1), "f-2")
    rest = api_page(reads, FailureFilter(), after, 2, ANY_TIME)
    assert [r["id"] for r in rest["failures"]] == ["f-1"] and rest["next"] is None


def test_one_failure_shows_its_verdict_attempts_explorations_and_error_lines(reads):
    info = failure_detail(reads, "f-1")
    assert info is not None
    assert info["received_at"] == T0.isoformat() and info["source"] == "agent"
    assert info["verdict"]["status"] == "resolved" and info["verdict"]["rule"] == "tf_echo"
    assert info["attempts"] == [
        {
            "rule": "tf_echo",
            "params": [],
            "outcome": "success",
            "error": "",
            "duration_ms": 12.0,
            "delivery": 1,
            "evidence": None,
        },
    ]
    assert any("boom" in line for line in info["error_lines"])
    explored = failure_detail(reads, "f-3")
    assert explored is not None and explored["explorations"][0]["proposal_id"] == "p-1"
    bare = failure_detail(reads, "f-4")
    assert bare is not None and bare["verdict"] is None
    assert failure_detail(reads, "nope") is None


def test_the_proposal_screens(reads):
    listed = proposal_list(reads, "pending")
    assert [p["id"] for p in listed] == ["p-1", "p-2"]
    assert listed[0]["origin"] == "explorer" and listed[0]["files"] == ["actions/a.py"]
    assert listed[0]["cost"] == 0.25 and listed[0]["tokens_in"] == 100
    assert [p["id"] for p in proposal_list(reads)] == ["p-1", "p-2", "p-3"]
    queue = review_queue(reads)
    assert [q["id"] for q in queue] == ["p-2", "p-1"] and queue[0]["models"] == ["m"]
    (done,) = recently_reviewed(reads)
    assert (done["id"], done["status"], done["reviewed_by"]) == ("p-3", "rejected", "bob")


def test_a_taught_proposal_says_who_taught_it():
    reads = MemoryReads()
    taught = ExplorationCost("taught", "taught:ada", 0, 0, 0.0)
    reads.add_proposal(
        ProposalEntry("p", "x", "f", "r", "name: r\n", [], "pending", T0, exploration=taught)
    )
    (shown,) = proposal_list(reads)
    assert (shown["origin"], shown["taught_by"], shown["cost"]) == ("taught", "ada", 0.0)


def test_meow_counts_live_and_replayed_verdicts_explorations_and_pending_proposals(reads):
    stats = meow(reads)
    assert stats["failures"] == 3 and stats["resolves"] == 1 and stats["resolved"] == 1
    assert stats["hit_rate"] == round(1 / 3, 4)
    assert stats["unmatched_waiting"] == 2 and stats["unexplained"] == 1
    assert stats["explores"] == 1 and stats["llm_sessions"] == 1 and stats["llm_cost"] == 0.25
    assert stats["proposals_pending"] == 2
    assert stats["top_rules"] == [
        {"rule": "tf_echo", "successes": 1, "failures": 0, "pending": 0, "suggested": 0}
    ]
    assert stats["hit_rate_change"] == {"last_approval": None, "before": None, "after": None}


def test_the_replay_list_and_its_json():
    from tests.contract.test_reads import replay_job

    reads = MemoryReads()
    for n in range(3):
        reads.add_replay(replay_job(f"j-{n}", T0 + timedelta(minutes=n), n))
    assert [j.id for j in replay_list(reads, limit=2)] == ["j-2", "j-1"]
    shown = api_replays(reads)["replays"]
    assert [j["id"] for j in shown] == ["j-2", "j-1", "j-0"]
    assert shown[0]["created_at"] == (T0 + timedelta(minutes=2)).isoformat()
    assert shown[0]["replayed"] == 10 and shown[0]["hit_rate"] == 0.2
