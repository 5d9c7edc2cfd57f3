"""One reading of log text: cleaning, volatile parts, error tiers, wrappers, the job's normal, where."""

from __future__ import annotations

from theow_workers.core.logs.normal import JobNormal
from theow_workers.core.logs.summary import summarize, where_lines, wrapper_predicate
from theow_workers.core.logs.text import mask_volatile, numbered_lines, without_stamps
from theow_workers.core.resolve.fingerprint import fingerprint, fingerprint_version
from theow_workers.core.resolve.plan import RuleBook, matching_facts, plan
from theow_workers.core.rules.evidence import evidence_at
from theow_workers.core.rules.schema import Rule


def rule(name: str, pattern: str, generic: bool = False) -> Rule:
    return Rule.model_validate(
        {"name": name, "mode": "track", "generic": generic,
         "when": [{"fact": "log", "regex": pattern}]}
    )  # fmt: skip


MAKE = rule(
    "make_recipe_failed", r"make(?:\[\d+\])?: \*\*\* \[(?P<target>[^\]\n]+)\] Error \d+", True
)
RAKE = rule("rake_aborted", r"rake aborted!\r?\n(?P<message>[^\n]*\S)", True)
IS_WRAPPER = wrapper_predicate([MAKE, RAKE, rule("specific", r"No Rakefile found")])


def test_colour_codes_ci_markers_and_stamps_are_gone_and_each_line_keeps_its_number():
    log = (
        "2025-04-14T09:20:39.1Z ##[group]Run make\n"
        "2025-04-14T09:20:39.2Z \x1b[31merror:\x1b[0m disk full\n"
        "\n"
        "[2025-04-14T09:20:40Z] [1mcompiling[0m 10%\r100%\r\n"
        "travis_fold:start:worker_info\r\x1b[0KWorker information\nhostname: x\n"
        "travis_fold:end:worker_info\r\x1b[0K\n"
        'The command "make" exited with 2.\n'
    )
    assert numbered_lines(log) == [
        (2, "error: disk full"),
        (4, "compiling 10%"),
        (4, "100%"),
    ]


def test_one_time_stamp_stripper_for_matching_and_reading():
    """The resolver strips what the reader strips: a stamp with or without the Z, in brackets."""
    log = "2025-06-01T10:00:00.1Z a\n\n[2025-06-01T10:00:01Z] b\n2025-06-01T10:00:02 c"
    assert without_stamps(log) == "a\n\nb\nc"
    assert matching_facts({"log": log})["log"] == "a\n\nb\nc"
    assert [text for _, text in numbered_lines(log)] == ["a", "b", "c"]


def test_volatile_parts_are_masked_so_two_runs_of_one_cause_read_alike():
    one = "[12:01:02] Error at /home/travis/build/a/src/x.c:12:3 after 11 min (run 7f3a9c2e, 2019-08-04T19:36:50Z)"
    two = "[09:59:59] Error at /home/runner/work/b/src/x.c:98:1 after 3 min (run 0bd41e77, 2020-01-01T00:00:00Z)"
    assert mask_volatile(one) == mask_volatile(two)
    assert "x.c" in mask_volatile(one) and "error at" in mask_volatile(one)


def test_the_strongest_marker_near_the_end_is_picked_not_an_incidental_word():
    log = "\n".join(
        ["Installing html_sanitizer 1.0 (the error page helper)"]
        + [f"compiling unit {i}" for i in range(100)]
        + ["src/a.c:3:1: error: expected ';' before 'return'", "build failed after 3 warnings"]
    )
    summary = summarize({"log": log})
    assert [line.text for line in summary.errors] == [
        "src/a.c:3:1: error: expected ';' before 'return'"
    ]
    assert summary.errors[0].number == 102
    assert summary.sample == "src/a.c:3:1: error: expected ';' before 'return'"


def test_a_wrapper_line_is_never_picked_while_a_cause_is_there_and_never_shown():
    log = "Running tests\nKeyError: 'DATABASE_URL'\nmake: *** [all] Error 1\n"
    summary = summarize({"log": log}, is_wrapper=IS_WRAPPER)
    assert [line.text for line in summary.wrappers] == ["make: *** [all] Error 1"]
    assert [line.text for line in summary.errors] == ["KeyError: 'DATABASE_URL'"]
    where = where_lines({"log": log}, is_wrapper=IS_WRAPPER)
    assert where[0].text == "KeyError: 'DATABASE_URL'" and where[0].line == 2
    assert all("make: ***" not in w.text for w in where)


def test_without_a_cause_line_the_wrapper_points_at_the_line_after_it():
    log = "bundle exec rake\nrake aborted!\nDon't know how to build task 'spec'\n(See full trace by running task with --trace)\n"
    summary = summarize({"log": log}, is_wrapper=IS_WRAPPER)
    assert summary.sample == "Don't know how to build task 'spec'"
    assert where_lines({"log": log}, is_wrapper=IS_WRAPPER)[0].line == 3


def test_a_wrapper_is_what_a_generic_rule_matches_alone_or_as_its_first_line():
    assert IS_WRAPPER("make[2]: *** [opt] Error 2")
    assert IS_WRAPPER("rake aborted!")  # the rule goes on to the next line
    assert not IS_WRAPPER("No Rakefile found")  # a specific rule's line is not a wrapper
    assert not IS_WRAPPER("error: expected ';'")


def test_lines_the_jobs_passing_runs_print_come_after_every_new_one():
    passing = ["warning: bc: command not found", "curl: (22) The requested URL returned error: 404"]
    normal = JobNormal.learn(passing)
    log = "\n".join([*passing, "ERROR: could not connect to database at db:5432", "done"])
    where = where_lines({"log": log}, is_normal=normal.is_normal)
    assert where[0].text == "ERROR: could not connect to database at db:5432"
    assert {w.text for w in where[1:]} >= {passing[1]}
    assert [line.text for line in summarize({"log": log}, is_normal=normal.is_normal).errors] == [
        "ERROR: could not connect to database at db:5432"
    ]


def test_where_puts_the_specific_rules_evidence_first_then_the_lines_by_tier():
    log = (
        "collected 2 items\n"
        "_________________________ test_add _________________________\n"
        "    def test_add():\n"
        ">       assert add(2, 3) == 5\n"
        "E       assert -1 == 5\n"
        "FAILED tests/test_math.py::test_add - assert -1 == 5\n"
        "================= 1 failed, 1 passed in 0.03s =================\n"
    )
    at = log.index("E       assert")
    evidence = evidence_at("log", log, at, log.index("\n", at))
    where = where_lines({"log": log}, evidence)
    assert where[0].line == 5 and where[0].text == "E       assert -1 == 5"
    assert where[1].line == 6 and where[1].text.startswith("FAILED tests/test_math.py")
    assert len(where) == 3
    assert all(
        "____" not in w.text and "=====" not in w.text for w in where
    )  # banners name sections


def test_evidence_starting_with_a_wrapper_line_shows_the_line_that_says_why():
    log = "rake aborted!\nNo Rakefile found (looking for: rakefile, Rakefile)\n"
    specific = rule("rake_rakefile_missing", r"rake aborted!\r?\nNo Rakefile found[^\n]*")
    (candidate,) = plan(RuleBook((specific,), "t"), {"log": log}).attempts
    assert candidate.match is not None and candidate.match.evidence is not None
    where = where_lines({"log": log}, candidate.match.evidence, is_wrapper=IS_WRAPPER)
    assert where[0].line == 2 and where[0].text.startswith("No Rakefile found")


def test_a_ci_annotation_is_markup_its_message_decides_whether_it_is_a_wrapper():
    annotation = rule("github_actions_error", r"##\[error\](?P<message>[^\n]*\S)", True)
    is_wrapper = wrapper_predicate([annotation, MAKE])
    log = "Run ./check\n##[error]Every PR must have at least one label starting with 'cl-'.\n##[error]make: *** [all] Error 2\n"
    summary = summarize({"log": log}, is_wrapper=is_wrapper)
    assert [line.text for line in summary.wrappers] == ["##[error]make: *** [all] Error 2"]
    assert where_lines({"log": log}, is_wrapper=is_wrapper)[0].line == 2


def test_where_spends_no_line_on_a_traceback_header_or_a_progress_banner():
    log = (
        "step 1/3: fetch widgets\n"
        "[2/4] Linking dependencies...\n"
        "Traceback (most recent call last):\n"
        '  File "app.py", line 3, in <module>\n'
        "    settings = os.environ['DATABASE_URL']\n"
        "KeyError: 'DATABASE_URL'\n"
    )
    shown = [w.text for w in where_lines({"log": log})]
    assert shown[0] == "KeyError: 'DATABASE_URL'" and len(shown) == 3
    assert not {"Traceback (most recent call last):", "step 1/3: fetch widgets"} & set(shown)
    assert "[2/4] Linking dependencies..." not in shown
    # A banner that says what went wrong is not filler.
    assert "step 2/3: build failed" in [
        w.text for w in where_lines({"log": "step 2/3: build failed\n"})
    ]


def test_every_failure_gets_where_lines_even_without_any_marker():
    where = where_lines(
        {"log": "step one\nstep two\nPlease commit all changes generated by building\n"}
    )
    assert [w.line for w in where] == [3, 2, 1]
    assert where_lines({"log": ""}) == [] and where_lines({"exit_code": 2}) == []


def test_the_fingerprint_is_the_same_for_runs_that_differ_in_numbers_paths_and_times():
    def run(n: int, home: str) -> dict[str, str]:
        return {
            "log": f"2025-0{n}-01T10:00:0{n}Z start job {n}00\n"
            f"at {home}/src/db.py:{40 + n}: took {n}.{n}s\n"
            f"2025-0{n}-01T10:00:0{n}Z psycopg.OperationalError: connection to {home}/db.sock refused (pid {n}4{n}1)\n"
        }

    prints = {
        fingerprint(run(n, home))
        for n, home in [(1, "/home/a/x"), (2, "/home/b/yy"), (3, "/tmp/zz1")]
    }
    assert len(prints) == 1
    other = {"log": "psycopg.OperationalError: password authentication failed for user app\n"}
    assert fingerprint(other) not in prints


def test_the_fingerprint_says_its_version_and_an_older_one_still_reads_as_version_one():
    current = fingerprint({"log": "error: disk full\n"})
    assert current.startswith("v3:") and fingerprint_version(current) == 3
    assert fingerprint_version("v2:3f2a9c0d1e4b5a6978877665544332ab") == 2  # codes masked then
    assert len(current) <= 64  # the column it is stored in
    assert fingerprint_version("3f2a9c0d1e4b5a6978877665544332211") == 1


def test_a_stack_frame_is_no_compilers_line_the_exception_above_it_is_picked():
    log = (
        "Running check.exs\n"
        "** (RuntimeError) Line does not match format: '[x](https://x.io) - a tool'\n"
        "    check.exs:32: Awesome.parse_line/1\n"
        "    check.exs:57: anonymous fn/2 in Awesome.check_list/1\n"
        "    (elixir) lib/enum.ex:737: Enum.each/2\n"
    )
    assert where_lines({"log": log})[0].line == 2


def test_on_travis_the_failed_commands_own_lines_come_before_the_later_commands_output():
    # Travis runs the commands after a failed one; their output, however long, is not why.
    later = "".join(f"install step {n}: warning: cache miss, fetching\n" for n in range(300))
    log = (
        "$ ./check_integrity.sh\n"
        "man/git-line-summary.md is required for bin/git-line-summary\n"
        '\x1b[31;1mThe command "./check_integrity.sh" exited with 1.\x1b[0m\n'
        f"$ make install\n{later}"
        'The command "make install" exited with 0.\n'
        "Done. Your build exited with 1.\n"
    )
    where = where_lines({"log": log})
    assert (where[0].line, where[0].text) == (
        2,
        "man/git-line-summary.md is required for bin/git-line-summary",
    )
