"""What names a cause survives the masking, and a tool's message is read behind a CI annotation.

Given failures that differ only by an error code (``TS2322`` / ``TS2345``,
``E-CAUSE-31`` … ``E-CAUSE-35``), I expect as many fingerprints, groups and
explorations as codes, while runs of one cause that differ in times, ids,
paths and line numbers still share one. Given a GitHub Actions log whose
tool message arrives only inside ``##[error]``, I expect the tool's rule to
explain it, on the annotated line.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from theow_workers import evaluation
from theow_workers.core.logs.text import mask_volatile
from theow_workers.core.resolve.fingerprint import fingerprint
from theow_workers.core.resolve.library import Library
from theow_workers.core.rules.generalize import draft_pattern
from theow_workers.replay.explore import ReplayExplorer
from theow_workers.replay.grouping import error_summary, group_unmatched
from theow_workers.store.replay import DONE, ItemRecord, ReplayStore
from theow_workers.store.schema import make_engine, migrate

ROOT = Path(__file__).resolve().parents[2]

KEPT_APART = [
    (
        "src/a.ts(3,5): error TS2322: Type 'x' is wrong",
        "src/a.ts(3,5): error TS2345: Type 'x' is wrong",
    ),
    ("error[E0308]: mismatched types", "error[E0425]: mismatched types"),
    ("ORA-00942: table or view does not exist", "ORA-01017: table or view does not exist"),
    ("ld terminated with signal 9 [Killed]", "ld terminated with signal 11 [Killed]"),
    ("npm ERR! code E404", "npm ERR! code E403"),
    ("ERROR: relation (SQLSTATE 42P01)", "ERROR: relation (SQLSTATE 42703)"),
    ("HTTP/1.1 503 Service Unavailable", "HTTP/1.1 502 Service Unavailable"),
    ("fatal: E-CAUSE-31 raised", "fatal: E-CAUSE-32 raised"),
    ("Program.cs(12,7): error CS1002: ; expected", "Program.cs(12,7): error CS1003: ; expected"),
]
MASKED_ALIKE = [
    (
        "at 2025-06-01T10:00:01Z run 7f3a9c2e1 took 12s",
        "at 2024-01-09T23:59:59Z run 0b1c2d3e4 took 3.5s",
    ),
    ("/tmp/build123/src/x.c:12:3: boom", "/home/ci/w/src/x.c:99:1: boom"),
    ("Thread-12 died after 3 retries", "Thread-7 died after 4 retries"),
    ("1. [L296] 301 https://github.com/a/b", "1. [L941] 301 https://github.com/c/b"),
    ("uuid 3F2504E0-4F89-11D3-9A0C-0305E82C3301", "uuid 9B2504E0-4F89-11D3-9A0C-0305E82C3301"),
    ("hash DEADBEEF12 not in /tmp/ABC-123/", "hash 0ABCDEF99 not in /tmp/ABC-456/"),
]


@pytest.mark.parametrize(("one", "other"), KEPT_APART)
def test_two_codes_are_two_causes_for_the_normalizer_and_the_fingerprint(one, other):
    assert mask_volatile(one) != mask_volatile(other)
    assert fingerprint({"log": f"build\n{one}\n"}) != fingerprint({"log": f"build\n{other}\n"})


def test_an_exit_code_is_kept_though_a_line_that_only_says_a_step_exited_is_no_cause():
    assert mask_volatile("Process completed with exit code 137.") != mask_volatile(
        "Process completed with exit code 1."
    )
    assert mask_volatile("make: *** [all] Error 2") != mask_volatile("make: *** [all] Error 1")


@pytest.mark.parametrize(("one", "other"), MASKED_ALIKE)
def test_times_ids_hashes_paths_and_line_numbers_are_still_masked(one, other):
    assert mask_volatile(one) == mask_volatile(other)


def _cause_log(code: int, rng: random.Random) -> str:
    """One run of cause ``E-CAUSE-<code>``: its times, ids, paths and line numbers drawn anew."""
    stamp = f"2025-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T{rng.randint(10, 23)}:0{rng.randint(0, 9)}:00Z"
    run = "".join(rng.choice("0123456789abcdef") for _ in range(12))
    home = rng.choice(
        ["/home/runner/work/app", "/tmp/build" + str(rng.randint(1, 999)), "/srv/ci/x"]
    )
    return (
        f"{stamp} starting job {rng.randint(1, 99999)} (run {run})\n"
        f"compiling {home}/src/main.c\n"
        f"{home}/src/main.c:{rng.randint(1, 500)}: fatal: E-CAUSE-{code}: the widget service refused"
        f" the request after {rng.randint(1, 90)}s\n"
    )


@pytest.fixture
def replay_of_five_causes(tmp_path):
    """A replay of 400 unmatched failures of five causes that differ only by their code."""
    rng = random.Random(39)
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    store = ReplayStore(make_engine(url))
    items, rows = [], []
    for n in range(400):
        code = 31 + n % 5
        facts = {"log": _cause_log(code, rng), "repo": "acme/app"}
        sample, basis = error_summary(facts)
        fp = fingerprint(facts)
        rows.append((f"f{n}", f"k{n}", fp, sample, basis))
        items.append(ItemRecord(f"k{n}", "unmatched", line=n + 1, failure_id=f"f{n}",
                                fingerprint=fp, sample=sample, basis=basis))  # fmt: skip
    made = store.create(kind="file", source="/h.jsonl", source_key="k", total=len(items))
    store.record(made.id, items)
    store.update(made.id, status=DONE, explore=True, explore_budget=10)
    return store, store.get(made.id), rows


def test_a_replay_of_five_causes_that_differ_only_by_their_code_explores_five_groups(
    replay_of_five_causes,
):
    store, made, rows = replay_of_five_causes
    assert len({fp for _, _, fp, _, _ in rows}) == 5
    groups = group_unmatched(rows)
    assert sorted(g.size for g in groups) == [80] * 5
    sent: list[dict] = []
    ReplayExplorer(store, sent.append).start(made, budget=10)
    explored = {int(r["failure_id"][1:]) % 5 for r in sent}
    assert len(sent) == 5 and explored == {0, 1, 2, 3, 4}


def test_a_taught_pattern_keeps_the_code_and_generalizes_the_rest():
    draft = draft_pattern("src/app.ts(3,5): error TS2322: Type 'number' is not assignable")
    assert draft is not None
    import regex

    same = "lib/other.ts(40,12): error TS2322: Type 'string' is not assignable"
    other = "src/app.ts(3,5): error TS2345: Type 'number' is not assignable"
    assert regex.search(draft.pattern, same) is not None
    assert regex.search(draft.pattern, other) is None


@pytest.fixture(scope="module")
def book():
    return Library.load(ROOT / "rules", ROOT / "actions").book


ANNOTATED = (
    "2025-03-02T10:14:05.0000000Z ##[group]Run cargo build\n"
    "2025-03-02T10:14:06.0000000Z    Compiling app v0.1.0 (/home/runner/work/app)\n"
    "2025-03-02T10:14:07.1190456Z ##[error]error[E0308]: mismatched types\n"
    "2025-03-02T10:14:07.2301234Z ##[error]Process completed with exit code 101.\n"
)


def test_a_tool_message_inside_an_annotation_is_explained_by_the_tools_rule_on_its_line(book):
    plain = ANNOTATED.replace("##[error]error[E0308]", "error[E0308]")
    expected, _ = evaluation.decide(book, {"log": plain}, "plain")
    assert expected.rule is not None and expected.rule != "github_actions_error"
    outcome, _ = evaluation.decide(book, {"log": ANNOTATED}, "annotated")
    assert outcome.rule == expected.rule and outcome.wrapper is None
    assert outcome.evidence is not None and outcome.evidence["line"] == 3
    assert outcome.where[0].line == 3 and "E0308" in outcome.where[0].text


def test_an_annotation_no_tool_rule_knows_is_still_only_a_wrapper(book):
    log = (
        "2025-03-02T10:14:07.1190456Z ##[error]The widget quota of this account is spent\n"
        "2025-03-02T10:14:07.2301234Z ##[error]Process completed with exit code 1.\n"
    )
    outcome, _ = evaluation.decide(book, {"log": log}, "wrapped")
    assert outcome.rule is None and outcome.wrapper == "github_actions_error"


def test_a_label_copied_with_its_annotation_is_found_whole_in_the_log_rules_read():
    from theow_workers.core.explore.teaching import chunk_span
    from theow_workers.core.resolve.plan import matching_facts

    raw = (
        "2025-02-27T19:17:18.1Z ##[group]Run some/notify-action@v2\n"
        "2025-02-27T19:17:18.2Z with:\n"
        "2025-02-27T19:17:18.3Z ##[endgroup]\n"
        "2025-02-27T19:17:18.7Z ##[error]Input required and not supplied: WEBHOOK_URL\n"
    )
    chunk = "##[group]Run some/notify-action@v2\nwith:\n##[endgroup]\n##[error]Input required and not supplied: WEBHOOK_URL"
    log = matching_facts({"log": raw})["log"]
    assert log.splitlines()[3] == "Input required and not supplied: WEBHOOK_URL"
    assert chunk_span(log, chunk) == (2, 4)  # the group mark is the CI system's own line
