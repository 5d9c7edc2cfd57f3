"""Replay counters: every input counted once, whatever delivers or records it again.

Given a SQLite database (a file, no server) and the fixture rules, chunks go
through the real runner, ``ResolveService`` and ``ChunkStore``.
"""

from __future__ import annotations

from tests.unit.replay_fixtures import *  # noqa: F403
from tests.unit.replay_fixtures import assert_counters_match_item_rows, count
from theow_workers.replay.jobs import replay_failure_id
from theow_workers.store.replay import CANCELLED, ItemRecord
from theow_workers.store.schema import AttemptRow, FailureRow, ReplayItemRow, VerdictRow


def chunk(job_id: str, *stderrs: str, start: int = 1) -> dict:
    items = [
        {"key": str(n), "line": n, "facts": {"stderr": s, "job": f"j{n}"}}
        for n, s in enumerate(stderrs, start=start)
    ]
    return {"job_id": job_id, "items": items}


def test_recording_the_same_items_twice_counts_them_once(jobs):
    job = jobs.create(kind="file", source="h.jsonl", source_key="k", total=3)
    first = [ItemRecord("1", "resolved", line=1, rule="r"), ItemRecord("2", "unmatched", line=2)]
    assert jobs.record(job.id, first) == 2
    assert jobs.record(job.id, [*first, ItemRecord("3", "invalid", line=3)]) == 1
    job = jobs.get(job.id)
    assert (job.processed, job.matched, job.unmatched, job.invalid) == (3, 1, 1, 1)
    assert_counters_match_item_rows(jobs, job.id)


def test_a_chunk_delivered_twice_decides_and_counts_each_failure_once(runner, jobs, sql):
    job = jobs.create(kind="file", source="h.jsonl", source_key="k", total=3)
    work = chunk(job.id, "ECHO one", "nothing known here", "Connection reset by peer")
    first = runner.run(work)
    again = runner.run(work, delivery=2)
    assert (first["recorded"], again["recorded"], again["skipped"]) == (3, 0, 3)
    job = jobs.get(job.id)
    assert (job.processed, job.matched, job.unmatched) == (3, 2, 1)
    assert count(sql, FailureRow, source=f"replay:{job.id}") == 3
    assert count(sql, VerdictRow) == 3
    assert count(sql, AttemptRow) == 2
    assert_counters_match_item_rows(jobs, job.id)


def test_the_failure_ids_of_a_replay_are_fixed_by_job_and_line(runner, jobs, sql):
    job = jobs.create(kind="file", source="h.jsonl", source_key="k", total=1)
    runner.run(chunk(job.id, "ECHO one"))
    assert sql.verdict(replay_failure_id(job.id, "1")).rule == "tf_echo"


def test_a_dry_run_matches_but_runs_no_action_and_leaves_rule_stats_alone(runner, jobs, sql):
    job = jobs.create(kind="file", source="h.jsonl", source_key="k", total=1, dry_run=True)
    runner.run(chunk(job.id, "EXPLODE 7"))
    verdict = sql.verdict(replay_failure_id(job.id, "1"))
    # Matched, and nothing ran: the fix is suggested, not resolved.
    assert (verdict.status.value, verdict.rule, verdict.outputs) == ("suggested", "tf_explode", ())
    assert sql.rule_stats() == {}


def test_executing_runs_actions_and_counts_each_attempt_once(runner, jobs, sql):
    job = jobs.create(kind="file", source="h.jsonl", source_key="k", total=2, dry_run=False)
    work = chunk(job.id, "EXPLODE 7", "ECHO hi")
    runner.run(work)
    runner.run(work, delivery=2)
    explode = sql.verdict(replay_failure_id(job.id, "1"))
    assert (explode.status.value, explode.rule, explode.attempts) == (
        "resolved",
        "tf_explode_fallback",
        2,
    )
    stats = sql.rule_stats()
    assert (stats["tf_explode"].failures, stats["tf_explode_fallback"].successes) == (1, 1)
    assert stats["tf_echo"].successes == 1


def test_a_cancelled_job_skips_its_queued_chunks(runner, jobs):
    job = jobs.create(kind="file", source="h.jsonl", source_key="k", total=2)
    jobs.update(job.id, status=CANCELLED)
    result = runner.run(chunk(job.id, "ECHO one", "ECHO two"))
    assert result["cancelled"] and jobs.get(job.id).processed == 0


def test_an_item_that_keeps_killing_the_worker_is_recorded_as_an_error(runner, jobs, sql):
    """Redelivered chunks run one item per transaction with a delivery count per item."""
    job = jobs.create(kind="file", source="h.jsonl", source_key="k", total=1)
    work = chunk(job.id, "ECHO poison")
    fid = replay_failure_id(job.id, "1")
    runner.deliveries(fid), runner.deliveries(fid)  # two deliveries died on it already
    runner.run(work, delivery=3)
    verdict = sql.verdict(fid)
    assert verdict.status.value == "error" and "delivered 3 times" in verdict.reason
    assert jobs.get(job.id).errors == 1


def test_unmatched_items_carry_their_fingerprint_and_a_sample_line(runner, jobs):
    job = jobs.create(kind="file", source="h.jsonl", source_key="k", total=2)
    runner.run(
        chunk(
            job.id,
            "step 1\nfatal: quota exceeded on /data/7",
            "step 2\nfatal: quota exceeded on /data/9",
        )
    )
    items = jobs.items(job.id, "unmatched")
    assert len({i.fingerprint for i in items}) == 1
    assert [i.sample for i in items] == [
        "fatal: quota exceeded on /data/7",
        "fatal: quota exceeded on /data/9",
    ]
    # Each carries its own grouping text (two causes may share a fingerprint), the same here.
    assert len({i.basis for i in items}) == 1 and items[0].basis


def test_every_replay_keeps_the_error_text_of_each_root_cause(runner, jobs):
    """A worker that saw a root cause in an earlier job still records it for the next."""
    from theow_workers.replay import report as reports

    texts = ("run 1\nfatal: quota exceeded on /data/7", "run 2\npanic: nil map write in worker")
    for _ in range(2):
        job = jobs.create(kind="file", source="h.jsonl", source_key="k", total=2)
        runner.run(chunk(job.id, *texts))
        assert {bool(i.basis) for i in jobs.items(job.id, "unmatched")} == {True}
    with jobs.session.begin() as s:  # an older job whose items lost their error text
        s.execute(ReplayItemRow.__table__.update().values(basis=""))
    pricing = reports.Pricing("m", 1, 1, 0.0, 0.0)
    groups = reports.build(jobs, jobs.get(job.id), pricing)["unmatched_groups"]
    assert sorted(g["sample"] for g in groups) == [
        "fatal: quota exceeded on /data/7",
        "panic: nil map write in worker",
    ]
