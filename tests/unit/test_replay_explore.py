"""A replay's groups go to the explorer once each, at most the budget, whatever kills the driver."""

from __future__ import annotations

import pytest

from theow_workers.replay.explore import ReplayExplorer
from theow_workers.replay.grouping import error_summary
from theow_workers.store.replay import DONE, ItemRecord, ReplayStore
from theow_workers.store.schema import make_engine, migrate

CAUSES = [
    "fatal: disk quota exceeded on /data/{n}",
    "panic: nil map write in scheduler {n}",
    "error: certificate has expired for mirror{n}.example.org",
    "license seat pool 'team-{n}' is exhausted",
]


class DiesOnce:
    """A sender that dies (as a killed driver would) on its ``at``-th call, and records the rest."""

    def __init__(self, at: int | None = None) -> None:
        self.at, self.calls, self.sent = at, 0, []

    def __call__(self, request: dict) -> None:
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        self.sent.append(request)


@pytest.fixture
def job(tmp_path):
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    store = ReplayStore(make_engine(url))
    items = []
    for c, cause in enumerate(CAUSES):
        for i in range(8 - c):  # the first cause is the largest group
            key = f"{c}-{i}"
            sample, basis = error_summary({"stderr": f"step {i}\n" + cause.format(n=i)})
            items.append(ItemRecord(key, "unmatched", line=len(items) + 1, failure_id=f"f{key}",
                                    fingerprint=f"fp{c}-{i % 2}", sample=sample, basis=basis))  # fmt: skip
    made = store.create(kind="file", source="/h.jsonl", source_key="k", total=len(items))
    store.record(made.id, items)
    store.update(made.id, status=DONE, explore=True, explore_budget=3)
    return store, store.get(made.id)


def test_the_largest_groups_are_sent_under_the_jobs_session_and_budget(job):
    store, made = job
    send = DiesOnce()
    states = ReplayExplorer(store, send).start(made, budget=3)
    assert [r["failure_id"] for r in send.sent] == ["f0-0", "f1-0", "f2-0"]
    assert {(r["session_id"], r["session_limit"]) for r in send.sent} == {(f"replay:{made.id}", 3)}
    assert [s.state for s in states] == ["exploring"] * 3 + ["not explored"]
    assert [s.size for s in states] == [8, 7, 6, 5]


def test_a_driver_killed_while_sending_neither_loses_nor_repeats_a_group(job):
    store, made = job
    dying = DiesOnce(at=2)  # dies sending the second group: its row says "sending"
    with pytest.raises(KeyboardInterrupt):
        ReplayExplorer(store, dying).start(made, budget=3)
    resumed = DiesOnce()
    ReplayExplorer(store, resumed).start(made, budget=3)
    again = DiesOnce()
    ReplayExplorer(store, again).start(made, budget=3)
    sent = [r["failure_id"] for r in dying.sent + resumed.sent + again.sent]
    assert sent == ["f0-0", "f1-0", "f2-0"]  # each group once, the budget kept


def test_a_larger_budget_later_explores_only_the_groups_not_sent(job):
    store, made = job
    first, later = DiesOnce(), DiesOnce()
    ReplayExplorer(store, first).start(made, budget=2)
    ReplayExplorer(store, later).start(made, budget=4)
    assert [r["failure_id"] for r in later.sent] == ["f2-0", "f3-0"]
