"""Grouping unmatched failures by root cause: largest groups first, near-duplicates merged."""

from __future__ import annotations

import random

from theow_workers.core.logs.summary import wrapper_predicate
from theow_workers.core.resolve.fingerprint import fingerprint
from theow_workers.core.rules.schema import Rule
from theow_workers.replay.grouping import (
    Group,
    _shared_tokens,
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
    assert "frobnicate==<n>" in basis  # a version is a number like any other


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
    # Words without digits: in a masked basis a digit is left only in a code, and two
    # groups naming different codes are never merged.
    vocab = [f"w{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(40)]
    groups = []
    for i in range(300):
        base = rng.sample(vocab, rng.randint(3, 12))
        if rng.random() < 0.5 and groups:  # a near copy of an earlier group
            base = sorted(groups[rng.randrange(len(groups))].tokens)
            base = base[:-1] if len(base) > 5 and rng.random() < 0.5 else base
        basis = " ".join(base)
        groups.append(Group(basis, basis, tokens(basis), [f"f{i}"], [str(i)], {f"fp{i}"}))
    copies = [
        Group(g.sample, g.basis, g.tokens, list(g.failure_ids), list(g.keys), set(g.fingerprints))
        for g in groups
    ]
    compared = _shared_tokens(copies)  # what merging compares: tokens another group has too
    merged = merge_similar(copies)
    assert sum(g.size for g in merged) == 300
    reps = [compared[id(g)] for g in merged]
    for i, a in enumerate(reps):  # no two surviving groups were similar enough to merge
        for b in reps[i + 1 :]:
            assert jaccard(a, b) < 0.8


def test_two_groups_naming_different_error_codes_are_never_merged():
    message = "src/a.ts(3,5): error TS23{}2: Type 'x' is not assignable to 'y'"
    groups = group_unmatched([unmatched(f"f{i}", message.format(i % 2)) for i in range(6)])
    assert sorted(g.size for g in groups) == [3, 3]


def test_ten_thousand_distinct_failures_are_each_grouped_once():
    # How long grouping takes is benchmarks/grouping.py's figure (its `s` column), not an assert.
    items = [
        unmatched(f"f{i}", f"error: step {chr(97 + i % 26)}{i // 26} failed on host h{i % 7}")
        for i in range(10_000)
    ]
    groups = group_unmatched(items)
    assert sum(g.size for g in groups) == 10_000


TRAVIS_HEADER = (
    "travis_fold:start:system_info\r\x1b[0K\x1b[33;1mBuild system information\x1b[0m\r\n"
    "Sudo version 1.8.9p5\r\n"
    "Configure options: --prefix=/usr -v --with-all-insults --enable-tmpfiles.d=/usr/lib/tmpfiles.d "
    "CFLAGS=-g -O2 -fstack-protector --param=ssp-buffer-size=4 -Wformat -Werror=format-security\r\n"
    "Authentication timestamp timeout: 15.0 minutes\r\n"
    "Password prompt timeout: 0.0 minutes\r\n"
    "travis_fold:end:system_info\r\x1b[0K\r\n"
)


def travis_log(body: str, command: str = "./run-tests.sh") -> str:
    return (
        TRAVIS_HEADER
        + f"travis_time:start:0a1b2c3d\r\x1b[0K$ {command}\r\n{body}"
        + "travis_time:end:0a1b2c3d:start=1565270049462327702,finish=1565270068541396092,"
        'duration=19079068390\r\x1b[0K\x1b[31;1mThe command "'
        + command
        + '" exited with 1.\x1b[0m\r\n'
        "travis_fold:start:after_failure\r\x1b[0Ktravis_fold:end:after_failure\r\x1b[0K\r\n"
        "\r\nDone. Your build exited with 1.\r\n"
    )


def test_travis_boilerplate_and_colour_codes_are_neither_sample_nor_basis():
    """Given Travis logs whose real error has no error word, I expect it, not the sudo header."""
    log = travis_log(
        "Checking links...\r\n\x1b[31mbroken link in README.md: ./docs/setup\x1b[0m\r\n"
    )
    sample, basis = error_summary({"stderr": log})
    assert sample == "broken link in README.md: ./docs/setup"
    for noise in ("password", "werror", "travis_fold", "exited with", "merror", "\x1b", "[31m"):
        assert noise not in basis.lower()


def test_causes_that_share_only_the_ci_header_are_not_grouped():
    a = travis_log("Checking links...\nbroken link in README.md: ./docs/setup\n")
    b = travis_log(
        "Compiling...\nundefined reference to `curl_easy_init'\ncollect2: ld returned 1\n"
    )
    groups = group_unmatched([unmatched("a", a), unmatched("b", b)])
    assert [g.size for g in groups] == [1, 1]


def test_timestamps_durations_ids_and_paths_do_not_split_a_cause():
    """Given one cause on five runs, differing only in what differs between runs, one group."""
    runs = [
        f"[2019-0{i + 1}-1{i}T10:0{i}:00Z] starting\n"
        f"Mon Mar 2{i} 16:52:5{i} UTC 2019\n"
        f"'runtests-parallel' errored after {i + 3}.{i}{i} min\n"
        f"Error: worker {i}f3a9c2e{i} lost its lease at /home/travis/build/org{i}/repo/src/lease.go:{40 + i}\n"
        for i in range(5)
    ]
    groups = group_unmatched([unmatched(f"r{i}", text) for i, text in enumerate(runs)])
    assert [g.size for g in groups] == [5]


def test_a_wrapper_line_alone_is_not_the_cause_the_line_after_it_is():
    """A wrapper is what a generic rule matches: the rules say so, not a list in the grouping."""
    wrapper = Rule.model_validate(
        {"name": "rake_aborted", "mode": "track", "generic": True,
         "when": [{"fact": "log", "regex": r"rake aborted!\r?\n(?P<message>[^\n]*\S)"}]}
    )  # fmt: skip
    is_wrapper = wrapper_predicate([wrapper])
    rake = "rake aborted!\nNo Rakefile found (looking for: rakefile, Rakefile)\n(See full trace by running task with --trace)\n"
    other = "rake aborted!\nDon't know how to build task 'spec'\n(See full trace by running task with --trace)\n"
    items = [
        (
            name,
            name,
            fingerprint({"stderr": text}),
            *error_summary({"stderr": text}, None, is_wrapper),
        )
        for name, text in [("a", rake), ("b", other), ("c", rake)]
    ]
    groups = group_unmatched(items)
    assert sorted(g.size for g in groups) == [1, 2]
    assert groups[0].sample.startswith("No Rakefile found")


def test_one_message_in_two_projects_makes_two_groups():
    text = "fatal: the remote end hung up unexpectedly\n"
    items = []
    for i, repo in enumerate(["org/a", "org/a", "org/b"]):
        facts = {"stderr": text, "repo": repo}
        items.append((f"f{i}", f"f{i}", fingerprint(facts), *error_summary(facts)))
    groups = group_unmatched(items)
    assert [(g.size, g.scope) for g in groups] == [(2, "org/a"), (1, "org/b")]


def test_the_same_kind_of_failure_naming_different_tests_is_one_group():
    """Given a runner's failure line naming a different test each run, one group: the runner's words decide."""
    tests = [
        "text-objects/lexer",
        "selections/new-below",
        "visual-mode/orientation",
        "motions/word",
    ]
    items = [
        unmatched(
            f"t{i}", f"Running tests\nTest {name} ... FAIL\nSome tests FAILED, see the summary\n"
        )
        for i, name in enumerate(tests)
    ]
    items.append(unmatched("x", "Linking\nFAIL: undefined symbol: _curl_easy_init\n"))
    assert sorted(g.size for g in group_unmatched(items)) == [1, 4]


def test_a_count_in_the_plural_does_not_split_a_cause():
    runs = [
        "[info] *** 1 TEST FAILED ***",
        "[info] *** 2 TESTS FAILED ***",
        "[info] *** 1 TEST FAILED ***",
    ]
    items = [unmatched(f"r{i}", f"[info] Run completed\n{line}\n") for i, line in enumerate(runs)]
    assert [g.size for g in group_unmatched(items)] == [3]


def test_a_cause_stated_alone_joins_the_runs_that_name_the_failed_test_above_it():
    """Given a runner's summary line, some runs with the failed test's line above it, one group."""
    summary = "[info] *** 1 TEST FAILED ***\n"
    items = [unmatched("s1", "[info] Run completed\n" + summary)]
    items += [
        unmatched(f"t{i}", f"[info] Run completed\n[info] - {name} *** FAILED ***\n" + summary)
        for i, name in enumerate(["handles a closed socket", "drops requests over the limit"])
    ]
    items.append(unmatched("x", "[info] Compiling 3 Scala sources\n[error] not found: value foo\n"))
    assert sorted(g.size for g in group_unmatched(items)) == [1, 3]


def test_a_line_every_build_prints_does_not_gather_the_causes_printed_after_it():
    """Given a deprecation warning picked alone for some runs, runs with three errors more stay apart."""
    warning = "conf.py:53: UserWarning: Config path ~/.tool is deprecated\n"
    other = (
        warning
        + "E   AttributeError: module 'tool.rules' has no attribute 'which'\n"
        + "E   assert 'shoaib' in readme\n"
        + "E   NameError: name 'FileNotFoundError' is not defined\n"
    )
    items = [unmatched("w1", warning), unmatched("w2", warning), unmatched("o1", other)]
    assert sorted(g.size for g in group_unmatched(items)) == [1, 2]
