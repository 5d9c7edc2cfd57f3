"""``theow history eval`` takes each repository's default branch: ``main`` unless the history
shows a repository's pull requests based on another branch (``master``, ``trunk``)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from theow_workers.core.history.cause import cause_of
from theow_workers.core.history.evaluation import default_branches, evaluate
from theow_workers.core.history.model import Outcome, Run

LOGS = [
    "FAILED tests/test_api.py::test_login - AssertionError: assert 3 == 4",
    "FAILED tests/test_api.py::test_login - TimeoutError: timed out after 5.0s",
    "src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.",
]


@st.composite
def histories(draw):
    """A few hours of two repositories' runs: their default branch's commits and pull
    requests based on them, passing or failing one of a few ways, some retried."""
    runs, at = [], 0.0
    for index in range(draw(st.integers(4, 24))):
        repo = draw(st.sampled_from(["o/a", "o/b"]))
        mains = [r.sha for r in runs if r.repo == repo and r.pr is None]
        on_main = not mains or draw(st.booleans())
        sha = draw(st.sampled_from([f"s{index}", *mains[-1:]])) if on_main else f"p{index}"
        log = draw(st.none() | st.sampled_from(LOGS))
        at += draw(st.floats(60, 7200))
        cause = cause_of(log) if log else None
        runs.append(
            Run(
                id=f"r{index}",
                repo=repo,
                job="test",
                branch="main" if on_main else f"feature/{index % 3}",
                sha=sha,
                outcome=Outcome.FAILED if log else Outcome.PASSED,
                finished_at=at,
                cause=cause.key if cause else None,
                category=cause.category if cause else None,
                pr=None if on_main else str(index % 3),
                base_sha=None if on_main else draw(st.sampled_from(mains)),
            )
        )
    return runs


@settings(max_examples=60, deadline=None)
@given(histories())
def test_a_repository_whose_default_branch_is_master_gets_the_origins_it_would_on_main(runs):
    renamed = [replace(r, branch="master") if r.repo == "o/b" and r.pr is None else r for r in runs]

    def origins(history):
        return [(r.id, r.origin, r.final.culprit, r.origin_then) for r in evaluate(history)]

    assert origins(renamed) == origins(runs)


def test_the_default_branch_is_the_one_the_pull_requests_are_based_on_else_main():
    def at(id, branch, sha, pr=None, base=None, repo="o/r"):
        return Run(id, repo, "t", branch, sha, Outcome.PASSED, 1.0, pr=pr, base_sha=base)

    runs = [
        at("1", "master", "a"),
        at("2", "release", "b"),
        at("3", "fix", "c", pr="9", base="a"),
        at("4", "main", "d", repo="o/other"),
        at("5", "develop", "e", repo="o/lone"),
    ]

    assert default_branches(runs) == {"o/r": "master", "o/other": "main", "o/lone": "develop"}
    assert evaluate(runs) == []  # passed runs only: nothing to decide
