"""A replay history with hostile lines: each gets its own outcome, good lines around it are decided."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from tests.integration.conftest_replay import *  # noqa: F403
from tests.integration.conftest_replay import ReplayFleet
from theow_workers.store.schema import FailureRow, ReplayItemRow

pytestmark = pytest.mark.integration

MB = 1024 * 1024
HOSTILE = {
    "deep 600": '{"stderr": "x", "n": ' + "[" * 600 + "]" * 600 + "}",
    "deep 5000": '{"stderr": "x", "n": ' + "[" * 5000 + "]" * 5000 + "}",
    "lone surrogate": '{"stderr": "error: \\udcff in ECHO sur"}',
    "NaN": '{"stderr": "ECHO nan", "ratio": NaN}',
    "huge key": json.dumps({"stderr": "x", "k" * 5000: 1}),
    "nested 5 MB": json.dumps({"stderr": "x", "steps": [{"log": "z" * 5 * MB}]}),
    "NUL": '{"stderr": "ECHO nul\\u0000here"}',
}


def test_each_hostile_line_has_its_own_outcome_and_good_lines_are_decided(
    replay_fleet: ReplayFleet,
):
    replay_fleet.start_replay_worker()
    lines: list[str] = []
    kinds: dict[str, str] = {}
    hostile = iter(HOSTILE.items())
    for i in range(60):
        if i % 8 == 3 and (entry := next(hostile, None)):
            kinds[str(len(lines) + 1)] = entry[0]
            lines.append(entry[1])
        kinds[str(len(lines) + 1)] = "good"
        lines.append(json.dumps({"stderr": f"ECHO w{i}", "job": f"b{i}"}))
    history = replay_fleet.fleet.home / "hostile.jsonl"
    history.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"))
    history.write_bytes(history.read_bytes() + b'{"stderr": "error: \xff bad byte"}\n')
    kinds[str(len(lines) + 1)] = "invalid UTF-8"

    run = replay_fleet.cli(str(history), "--json", timeout=240)

    assert run.returncode == 0, run.stderr
    job_id = replay_fleet.latest_job_id()
    job = replay_fleet.jobs().get(job_id)
    assert job.status == "done" and job.processed == job.total == len(kinds)
    with replay_fleet.jobs().session() as s:
        items = {
            r.item_key: r for r in s.execute(select(ReplayItemRow).where(ReplayItemRow.job_id == job_id)).scalars()
        }  # fmt: skip
    outcome = {kinds[k]: (r.status, r.sample) for k, r in items.items() if kinds[k] != "good"}
    assert outcome["deep 600"][0] == "invalid" and "nested deeper than 32" in outcome["deep 600"][1]
    assert outcome["deep 5000"][0] == "invalid" and "nested too deeply" in outcome["deep 5000"][1]
    assert outcome["huge key"][0] == "invalid" and "more than 256" in outcome["huge key"][1]
    for kind in ("lone surrogate", "NaN", "NUL", "invalid UTF-8", "nested 5 MB"):
        assert outcome[kind][0] in ("suggested", "unmatched"), (kind, outcome[kind])
    good = [r for k, r in items.items() if kinds[k] == "good"]
    # A dry run: each matched its fix, and none ran.
    assert len(good) == 60 and all(r.status == "suggested" for r in good)

    with replay_fleet.fleet.store().session() as s:
        stored = s.execute(select(FailureRow.facts).where(FailureRow.source == f"replay:{job_id}"))
        assert max(len(json.dumps(f)) for (f,) in stored) < 200_000  # the 5 MB log was bounded
