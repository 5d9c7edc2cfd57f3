"""The console's insight groups and a replay's groups: one answer to "what are our unknown failures"."""

from __future__ import annotations

import shutil

import pytest

from tests.unit.replay_fixtures import *  # noqa: F403
from tests.unit.replay_fixtures import FIXTURES
from theow_workers.core.resolve.library import Library
from theow_workers.replay import report as reports
from theow_workers.store.explore import ExploreStore
from theow_workers.web.groups import BasisCache
from theow_workers.web.insight import insight_data

PRICING = reports.Pricing("m", 1, 1, 0.0, 0.0)
NO_RAKEFILE = "rake aborted!\nNo Rakefile found (looking for: rakefile, Rakefile)\n(See full trace by running task with --trace)\n"
NO_TASK = "rake aborted!\nDon't know how to build task 'spec'\n(See full trace by running task with --trace)\n"
HUNG_UP = "fatal: the remote end hung up unexpectedly\n"


@pytest.fixture(scope="module")
def knowledge(tmp_path_factory) -> Library:
    """The fixture library and the shipped rake wrapper: ``rake aborted!`` is no cause's text."""
    rules = tmp_path_factory.mktemp("rules")
    shutil.copytree(FIXTURES / "rules", rules, dirs_exist_ok=True)
    shutil.copy(FIXTURES.parent.parent / "rules" / "rake_aborted.rule.yaml", rules)
    return Library.load(rules, FIXTURES / "actions")


def bases_of(knowledge: Library) -> BasisCache:
    """The console's cache with the library's wrapper test, as ``theow web`` builds it."""
    return BasisCache(wrappers=lambda: (knowledge.book.version, knowledge.book.is_wrapper))


def failures() -> list[dict]:
    """Five causes in two projects, as a fleet sends them."""
    texts = [NO_RAKEFILE] * 3 + [NO_TASK] * 2
    texts += [
        f"Running tests\nTest {name} ... FAIL\nSome tests FAILED, see the summary\n"
        for name in ("text-objects/lexer", "selections/new-below", "motions/word")
    ]
    texts += [
        f"run {i} at 2026-11-0{i}T10:00:00Z\nfatal: disk quota of /data/{i} exceeded"
        for i in (1, 2)
    ]
    facts = [{"stderr": t, "repo": "org/app", "job": "build"} for t in texts]
    facts += [{"stderr": HUNG_UP, "repo": repo, "job": "build"} for repo in ("org/app", "org/lib")]
    return facts


def replayed(runner, jobs, facts: list[dict]) -> str:
    job = jobs.create(kind="file", source="h.jsonl", source_key="k", total=len(facts))
    items = [{"key": str(n), "line": n, "facts": f} for n, f in enumerate(facts, start=1)]
    runner.run({"job_id": job.id, "items": items})
    return job.id


def partition(groups) -> list[tuple[frozenset[str], str]]:
    return sorted((frozenset(g["failure_ids"]), g["sample"]) for g in groups)


def test_the_insight_page_groups_unknown_failures_as_the_replay_report_does(
    runner, jobs, sql, knowledge
):
    """Given failures replayed into the store, the console shows the replay report's groups.

    Two causes behind one wrapper line share a fingerprint: grouping by
    fingerprint (the console before) showed them as one cause.
    """
    job_id = replayed(runner, jobs, failures())
    report = reports.build(jobs, jobs.get(job_id), PRICING)["unmatched_groups"]
    insight = insight_data(ExploreStore(sql), bases_of(knowledge))["groups"]

    assert partition(insight) == partition(report)
    assert sorted(g["size"] for g in insight) == [1, 1, 2, 2, 3, 3]
    samples = {g["sample"]: g for g in insight}
    rakefile = samples["No Rakefile found (looking for: rakefile, Rakefile)"]
    task = samples["Don't know how to build task 'spec'"]
    assert (rakefile["size"], task["size"]) == (3, 2)
    assert set(rakefile["fingerprints"]) & set(task["fingerprints"])  # one fingerprint, two causes
    for group in insight:  # the example shown is one of the group's failures
        assert group["example"] in group["failure_ids"] and group["last"] is not None


def test_a_failure_stored_after_a_refresh_joins_its_group_on_the_next(runner, jobs, sql):
    store, bases = ExploreStore(sql), BasisCache()
    replayed(runner, jobs, failures()[:3])
    assert [g["size"] for g in insight_data(store, bases)["groups"]] == [3]
    replayed(runner, jobs, failures()[:1])
    assert [g["size"] for g in insight_data(store, bases)["groups"]] == [4]
