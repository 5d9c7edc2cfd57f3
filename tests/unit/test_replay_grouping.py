"""Grouping unmatched failures by root cause: largest groups first, near-duplicates merged."""

from __future__ import annotations

import random

from theow_workers.core.query import fingerprint
from theow_workers.replay.grouping import (
    Group,
    error_summary,
    group_unmatched,
    jaccard,
    merge_similar,
    tokens,
)


def unmatched(failure_id: str, stderr: str) -> tuple[str, str, str, str, str]:
    facts = {"stderr": stderr}
    sample, basis = error_summary(facts)
    return failure_id, failure_id, fingerprint(facts), sample, basis


def test_the_sample_is_the_telling_error_line_not_the_generic_exit_line():
    stderr = (
        "Collecting requests\n"
        "ERROR: No matching distribution found for frobnicate==9.9\n"
        "make: *** [Makefile:12: deps] Error 1\n"
        "Error: Process completed with exit code 2.\n"
    )
    sample, basis = error_summary({"stderr": stderr})
    assert sample == "ERROR: No matching distribution found for frobnicate==9.9"
    assert "frobnicate==<n>.<n>" in basis


def test_a_failure_without_a_log_is_summarized_by_its_facts():
    sample, _ = error_summary({"problem_type": "infra", "exit_code": 137})
    assert sample == "(no log text) exit_code=137, problem_type=infra"


def test_the_same_root_cause_on_different_runs_forms_one_group_and_keeps_every_id():
    items = [
        unmatched(
            f"f{i}",
            f"run {i} at 2026-11-0{i % 9 + 1}T10:00:00Z\nfatal: disk quota of /data/{i} exceeded",
        )
        for i in range(5)
    ]
    items.append(unmatched("other", "panic: runtime error: index out of range [3] with length 3"))
    groups = group_unmatched(items)
    assert [g.size for g in groups] == [5, 1]
    assert groups[0].failure_ids == ["f0", "f1", "f2", "f3", "f4"]
    assert "disk quota" in groups[0].sample


def test_near_identical_errors_with_different_fingerprints_are_merged():
    a = "error: cannot find module 'left-pad' imported by src/app/index.ts line 3 of the bundle"
    b = "error: cannot find module 'left-pad' imported by src/app/main.ts line 3 of the bundle"
    c = "error: linker `cc` not found"
    items = [unmatched("a1", a), unmatched("a2", a), unmatched("b1", b), unmatched("c1", c)]
    assert items[0][2] != items[2][2]  # different fingerprints
    groups = group_unmatched(items)
    assert [(g.size, sorted(g.failure_ids)) for g in groups] == [
        (3, ["a1", "a2", "b1"]),
        (1, ["c1"]),
    ]
    assert len(groups[0].fingerprints) == 2


def test_merging_with_prefix_filtering_finds_what_comparing_every_pair_finds():
    """Given random token sets, every merge the brute force would allow is found."""
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(40)]
    groups = []
    for i in range(300):
        base = rng.sample(vocab, rng.randint(3, 12))
        if rng.random() < 0.5 and groups:  # a near copy of an earlier group
            base = sorted(groups[rng.randrange(len(groups))].tokens)
            base = base[:-1] if len(base) > 5 and rng.random() < 0.5 else base
        basis = " ".join(base)
        groups.append(Group(basis, basis, tokens(basis), [f"f{i}"], [str(i)], {f"fp{i}"}))
    merged = merge_similar(
        [
            Group(
                g.sample, g.basis, g.tokens, list(g.failure_ids), list(g.keys), set(g.fingerprints)
            )
            for g in groups
        ]
    )
    assert sum(g.size for g in merged) == 300
    reps = [g.tokens for g in merged]
    for i, a in enumerate(reps):  # no two surviving groups were similar enough to merge
        for b in reps[i + 1 :]:
            assert jaccard(a, b) < 0.8


def test_ten_thousand_distinct_failures_group_quickly():
    import time

    items = [
        unmatched(f"f{i}", f"error: step {chr(97 + i % 26)}{i // 26} failed on host h{i % 7}")
        for i in range(10_000)
    ]
    start = time.perf_counter()
    groups = group_unmatched(items)
    assert time.perf_counter() - start < 5
    assert sum(g.size for g in groups) == 10_000
