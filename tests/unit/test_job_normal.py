"""Given a job's passing runs, I expect the lines they print too to be marked
normal, and a rule that matched only such lines to lose to any rule that
matched something new; without passing runs, nothing changes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from theow_client.job import job_of
from theow_client.messages import PassingRun
from theow_workers import evaluation
from theow_workers.adapters.memory import MemoryNormals
from theow_workers.core.logs.normal import MAX_TEMPLATES, JobNormal, mask, mine, passing_run
from theow_workers.core.resolve.fingerprint import fingerprint
from theow_workers.core.resolve.plan import Hints, RuleBook, plan
from theow_workers.core.rules.schema import parse_rule


def rule(name: str, pattern: str, generic: bool = False) -> object:
    return parse_rule(
        f"name: {name}\nmode: track\ngeneric: {str(generic).lower()}\n"
        f"when:\n  - fact: log\n    regex: '{pattern}'\n"
    )


BOOK = RuleBook(
    (
        rule("command_not_found", r"(?P<cmd>[\w.-]+): command not found"),
        rule("http_404", r"curl: \(22\) The requested URL returned error: 404"),
        rule("python_traceback", r"(?m)^(?P<type>[A-Z]\w+Error): (?P<message>.+)$"),
        rule("gha_exit_code", r"##\[error\]Process completed with exit code \d+", True),
    ),
    "normal",
)


def passing(run: int) -> str:
    return f"""\
2026-11-0{run}T10:00:0{run}.123Z Run actions/checkout@v4
2026-11-0{run}T10:00:0{run}.456Z Syncing repository: acme/app
2026-11-0{run}T10:00:1{run}.500Z curl: (22) The requested URL returned error: 404
2026-11-0{run}T10:00:1{run}.600Z falling back to the bundled copy
2026-11-0{run}T10:01:2{run}.000Z Ran {100 + run} tests in {run}.{run}s
2026-11-0{run}T10:01:2{run}.100Z OK
2026-11-0{run}T10:01:2{run}.200Z ./scripts/version.sh: line 12: bc: command not found
"""


# The cause (a KeyError) comes before the helper script's usual complaint: by
# position alone, the complaint would be chosen.
FAILED = """\
2026-11-23T10:00:01.123Z Run actions/checkout@v4
2026-11-23T10:00:01.456Z Syncing repository: acme/app
2026-11-23T10:00:09.500Z curl: (22) The requested URL returned error: 404
2026-11-23T10:00:09.600Z falling back to the bundled copy
2026-11-23T10:01:20.000Z Traceback (most recent call last):
2026-11-23T10:01:20.001Z   File "app/db.py", line 3, in <module>
2026-11-23T10:01:20.002Z KeyError: 'DATABASE_URL'
2026-11-23T10:01:20.100Z ##[error]Process completed with exit code 1.
2026-11-23T10:01:20.200Z ./scripts/version.sh: line 12: bc: command not found
"""


def learned(*logs: str) -> JobNormal:
    return JobNormal.learn(line for log in logs for line in log.splitlines())


def test_lines_of_passing_runs_are_normal_whatever_their_times_and_numbers():
    normal = learned(passing(1), passing(2), passing(3))
    assert normal.is_normal(
        "2026-11-23T10:00:09.000Z ./scripts/version.sh: line 12: bc: command not found"
    )
    assert normal.is_normal("Ran 250 tests in 9.9s")
    assert not normal.is_normal("KeyError: 'DATABASE_URL'")
    assert not normal.is_normal("./scripts/cleanup.sh: line 4: jq: command not found")


def test_a_template_that_is_mostly_wildcards_calls_nothing_normal():
    normal = learned("error: alpha", "error: beta", "error: gamma")
    assert not normal.is_normal("error: the real one")


def letters(i: int) -> str:
    """A name without digits (digits are masked): a, b, ..., z, ba, bb, ..."""
    word = ""
    while True:
        word = chr(97 + i % 26) + word
        i //= 26
        if not i:
            return word


def test_a_jobs_templates_stay_bounded():
    lines = (f"{letters(i)} step done" for i in range(MAX_TEMPLATES + 500))
    templates = mine(lines)
    assert len(templates) == MAX_TEMPLATES
    assert templates[-1] == f"{letters(MAX_TEMPLATES + 499)} step done"  # the newest kept


def test_with_the_jobs_normal_the_new_cause_wins_and_the_usual_lines_are_marked():
    before = plan(BOOK, {"log": FAILED}, Hints())
    assert before.attempts[0].rule == "command_not_found"  # the last line: nearest the end

    normal = learned(passing(1), passing(2), passing(3))
    after = plan(BOOK, {"log": FAILED}, Hints(), is_normal=normal.is_normal)
    # New evidence first (specific before generic), then the rules on usual lines.
    order = [c.rule for c in after.attempts]
    assert order == ["python_traceback", "gha_exit_code", "command_not_found", "http_404"]
    by_rule = {c.rule: c for c in after.attempts}
    assert by_rule["python_traceback"].match.evidence.text == "KeyError: 'DATABASE_URL'"
    assert by_rule["python_traceback"].match.evidence.normal is False
    assert by_rule["http_404"].normal and by_rule["http_404"].match.evidence.normal is True
    assert "also seen in passing runs" in by_rule["http_404"].match.evidence.describe("http_404")


def test_a_specific_rule_on_normal_lines_ranks_below_a_generic_rule_on_new_ones():
    log = FAILED.replace("KeyError", "note")
    normal = learned(passing(1), passing(2))
    result = plan(BOOK, {"log": log}, Hints(), is_normal=normal.is_normal)
    assert [c.rule for c in result.attempts] == ["gha_exit_code", "command_not_found", "http_404"]


def test_a_rule_on_normal_lines_still_wins_when_nothing_else_matched():
    normal = learned(passing(1))
    result = plan(BOOK, {"log": passing(4)}, Hints(), is_normal=normal.is_normal)
    assert result.attempts and all(c.normal for c in result.attempts)


def test_without_a_normal_evidence_carries_no_mark():
    result = plan(BOOK, {"log": FAILED}, Hints())
    assert all(c.match.evidence.normal is None for c in result.attempts)
    assert "normal" not in result.attempts[0].match.evidence.to_dict()


def test_the_fingerprint_is_built_from_new_lines():
    normal = learned(passing(1), passing(2))
    quiet = "\n".join(ln for ln in FAILED.splitlines() if "curl" not in ln and "bc:" not in ln)
    # The usual complaints change the fingerprint only when nothing says they are usual.
    assert fingerprint({"log": FAILED}) != fingerprint({"log": quiet})
    assert fingerprint({"log": FAILED}, normal.is_normal) == fingerprint(
        {"log": quiet}, normal.is_normal
    )
    other = FAILED.replace("DATABASE_URL", "REDIS_URL")
    assert fingerprint({"log": other}, normal.is_normal) != fingerprint(
        {"log": FAILED}, normal.is_normal
    )


def test_the_job_comes_from_the_job_fact_or_the_ci_systems_variables():
    assert job_of({}, {"CI_PROJECT_PATH": "g/p", "CI_JOB_NAME": "test"}) == "gitlab:g/p/test"
    assert job_of({}, {"JOB_NAME": "app/main", "STAGE_NAME": "Build"}) == "jenkins:app/main/Build"
    assert job_of({}, {"TRAVIS_REPO_SLUG": "o/r", "TRAVIS_JOB_NAME": "lint"}) == "travis:o/r/lint"
    assert (
        job_of({}, {"BUILDKITE_PIPELINE_SLUG": "p", "BUILDKITE_STEP_KEY": "k"}) == "buildkite:p/k"
    )
    assert job_of({}, {"PATH": "/bin"}) is None


def test_a_passing_run_payload_gives_its_job_and_lines():
    from theow_client.passing import build_passing_payload

    job, lines = passing_run(
        PassingRun.from_wire(build_passing_payload({"log": passing(1)}, job="j"))
    )
    assert job == "j" and any("bc: command not found" in ln for ln in lines)
    store = MemoryNormals()
    store.learn(job, lines)
    assert store.normal("j").is_normal(mask("OK")) and store.normal("other") is None


def write(path: Path, rows: list[dict]) -> Path:
    with gzip.open(path, "wt") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def test_eval_with_a_baseline_pairs_each_failure_with_the_passing_runs_of_its_id(tmp_path):
    book = RuleBook(tuple(r for r in BOOK.rules if r.name != "gha_exit_code"), "eval")
    failures = write(tmp_path / "f.jsonl.gz", [{"id": "a", "log": FAILED}])
    success = write(tmp_path / "s.jsonl.gz", [{"id": "a", "log": passing(1)}])
    labels = {"a": "KeyError: 'DATABASE_URL'"}
    plain = evaluation.run(book, failures, passing=success, labels=labels).to_dict()
    based = evaluation.run(book, failures, passing=success, labels=labels, baseline=success)
    report = based.to_dict()
    assert plain["grounded"] == 0 and report["grounded"] == 1
    assert report["with_normal"] == 1 and report["won_on_normal_over_new"] == 0
    assert report["seen_in_passing_by_rule"] == {"command_not_found": 1, "http_404": 1}
    # The passing run is never judged against itself: no other run of its id to learn from.
    assert report["false_alarms"] == plain["false_alarms"]


def test_a_replayed_historys_passing_runs_are_learned_in_file_order_not_resolved(tmp_path):
    from theow_workers.replay.sources import FileSource
    from theow_workers.store.replay import PASSING, ItemRecord

    history = tmp_path / "history.jsonl"
    rows = [
        {"job": "app/build", "outcome": "success", "log": passing(1)},
        {"job": "app/build", "log": FAILED},
        {"outcome": "success", "log": passing(2)},
    ]
    history.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = MemoryNormals()

    def learn(facts):
        if "job" not in facts:
            return "passing run without a job fact: not learned"
        store.learn(facts["job"], facts["log"].splitlines())
        return f"learned {facts['job']}"

    source = FileSource(history, 64 * 1024, 1 << 20)
    source.learn = learn
    pending = [p for batch in source.batches() for p in batch]
    first = pending[0].load()
    assert isinstance(first, ItemRecord) and first.status == PASSING
    # Learned as it was read: the failure after it meets the job's normal.
    assert store.normal("app/build").is_normal("curl: (22) The requested URL returned error: 404")
    assert not isinstance(pending[1].load(), ItemRecord)  # the failure goes to a worker
    last = pending[2].load()
    assert last.status == PASSING and last.sample.endswith("not learned")
