"""Teaching by pointing: the selected lines become the rule a reviewer would write."""

from __future__ import annotations

import json

import pytest

from theow_workers.core.explore.teaching import TeachError, chunk_span, synthesize
from theow_workers.core.resolve.plan import RuleBook, plan
from theow_workers.core.rules.examples import example_problems
from theow_workers.core.rules.generalize import draft_pattern
from theow_workers.core.rules.matching import evaluate
from theow_workers.core.rules.schema import parse_rule

WRAPPER = parse_rule(
    "name: make_failed\nmode: track\ngeneric: true\n"
    "when: [{fact: log, regex: 'make: \\*\\*\\* \\[[^\\]\\n]+\\] Error \\d+'}]"
)
BOOK = RuleBook((WRAPPER,), "test")

LOG = """\
$ ./check_docs.sh
checking 41 pages
\x1b[31mERROR\x1b[0m 2019/08/01 15:12:45 REF_NOT_FOUND: Ref "/docs/4.3/intro": "/home/travis/build/acme/site/a.md:206:95": page not found
make: *** [docs] Error 1
"""
LATER = """\
$ ./check_docs.sh
checking 57 pages
\x1b[31mERROR\x1b[0m 2020/01/09 09:01:02 REF_NOT_FOUND: Ref "/docs/5.0/layout/grid": "/home/travis/build/acme/site/b/c.md:12:4": page not found
make: *** [docs] Error 2
"""


def teach(log: str = LOG, first: int = 3, last: int = 4, **kw):
    return synthesize({"log": log, "repo": "acme/site"}, first, last,
                      is_wrapper=BOOK.is_wrapper, book=BOOK, **kw)  # fmt: skip


def test_the_rule_matches_the_same_failure_with_other_numbers_paths_and_names():
    taught = teach()

    later = evaluate(taught.rule, {"log": LATER, "repo": "acme/site"}, is_wrapper=BOOK.is_wrapper)

    assert later.ok
    assert later.evidence is not None and later.evidence.line == 3
    assert "REF_NOT_FOUND" in later.evidence.text
    assert later.captures.named["name"] == "/docs/5.0/layout/grid"


def test_it_picks_the_telling_line_not_the_wrapper_and_scopes_to_the_repo():
    taught = teach()

    assert taught.line == 3
    assert taught.rule.when[0].fact == "repo" and taught.rule.when[0].equals == "acme/site"
    assert taught.rule.mode.value == "track" and "taught" in taught.rule.tags
    assert taught.rule.name == "ref_not_found_ref_page_not_found"
    assert any("wrapper" in why for why in taught.passed_over)
    other_repo = evaluate(taught.rule, {"log": LATER, "repo": "other/site"})
    assert not other_repo.ok


def test_the_rule_passes_the_checks_rules_check_runs():
    taught = teach()

    assert example_problems(taught.rule) == []
    assert taught.rule.when[1].examples and taught.rule.when[1].counter_examples
    reloaded = parse_rule(taught.rule_yaml)
    assert reloaded == taught.rule  # the YAML is what was checked


def test_global_scope_has_no_project_condition():
    taught = teach(scope="global")

    assert [c.fact for c in taught.rule.when] == ["log"]
    assert evaluate(taught.rule, {"log": LATER}).ok


def test_a_scope_the_failure_has_no_fact_for_is_refused():
    with pytest.raises(TeachError, match="no 'job' fact"):
        teach(scope="job")


def test_lines_the_jobs_passing_runs_print_are_passed_over():
    log = "Using config ~/build/acme/gulpfile.js\nTask never defined: default\n"

    taught = teach(log, 1, 2, is_normal=lambda line: line.startswith("Using config"))

    assert taught.line == 2
    assert "Task" in (taught.rule.when[1].regex or "")


def test_a_rule_that_would_fire_on_a_passing_line_is_not_made():
    log = "Compiling widget 3 of 9\n"
    with pytest.raises(TeachError, match="passing runs print"):
        teach(log, 1, 1, normal_lines=["Compiling widget 1 of 9"])


def test_a_selection_of_only_wrapper_lines_teaches_nothing():
    with pytest.raises(TeachError, match="no rule made from lines 4-4"):
        teach(first=4, last=4)


def test_a_line_with_too_little_text_is_not_a_rule():
    assert draft_pattern("  01. [404] 301 -> 302") is None
    assert draft_pattern("... FAIL") is None


def test_a_subject_before_a_short_message_is_a_named_group():
    draft = draft_pattern("\x1b[?1h\x1b=\x1b[?1l\x1b>motions/line-end           FAIL")

    assert draft is not None and "(?P<file>" in draft.pattern
    taught = teach("\x1b[?1h\x1b=\x1b[?1l\x1b>motions/line-end           FAIL\n", 1, 1)
    later = evaluate(
        taught.rule, {"log": "x\n\x1b>visual-mode/orientation    FAIL\n", "repo": "acme/site"}
    )
    assert later.ok and later.captures.named["file"] == "visual-mode/orientation"
    assert not evaluate(taught.rule, {"log": "... FAIL\n", "repo": "acme/site"}).ok


def test_no_other_specific_rule_may_win_its_examples():
    shipped = parse_rule(
        "name: ref_error\nmode: track\n"
        "when: [{fact: log, regex: 'REF_NOT_FOUND: (?P<what>[^\\n]+)', examples: ['REF_NOT_FOUND: x']}]"
    )
    book = RuleBook((WRAPPER, shipped), "test")

    with pytest.raises(TeachError, match="is won by ref_error"):
        synthesize({"log": LOG, "repo": "acme/site"}, 3, 3, is_wrapper=book.is_wrapper, book=book)


def test_a_taught_rule_joins_the_library_and_wins_its_failure():
    taught = teach()
    book = RuleBook((WRAPPER, taught.rule), "with taught")

    chosen = plan(book, {"log": LATER, "repo": "acme/site"}).specific

    assert [c.rule for c in chosen] == [taught.rule.name]


def test_a_chunk_is_found_in_the_raw_log_past_colour_codes_and_time_stamps():
    log = (
        "a\n2025-03-10T22:19:54.2440131Z \x1b[31mError: boom\x1b[0m\n2025-03-10T22:19:55Z next\nz\n"
    )

    assert chunk_span(log, "Error: boom\nnext") == (2, 3)
    assert chunk_span(log, "[?1h=Error: boom") == (2, 2)  # a copy that dropped the escape byte
    assert chunk_span(log, "never printed") is None


def test_a_quoted_message_keeps_its_words_and_generalizes_the_names_it_quotes():
    log = '** (throw) "Words not in order \\"exos\\" and \\"ex_lttb\\""\n    check.exs:9: Awesome.check/1\n'

    taught = teach(log, 1, 2)

    later = '** (throw) "Words not in order \\"yuri\\" and \\"Crawly\\""\n'
    assert evaluate(taught.rule, {"log": later, "repo": "acme/site"}).ok
    other = '** (throw) "Duplicate links found"\n'
    assert not evaluate(taught.rule, {"log": other, "repo": "acme/site"}).ok
    assert (
        taught.rule.description
        == 'Taught: (throw) "Words not in order \\"<name>\\" and \\"<name>\\""'
    )


def test_in_a_whole_step_the_error_near_its_end_is_taught_not_the_steps_echo_or_warnings():
    step = [
        "##[group]Run npm run build",
        "npm run build",
        "env:",
        "  FAILED_BUILDS_WEBHOOK: ***",
        "##[endgroup]",
        "> app@1.0.0 build",
        "> webpack --mode production --bail",
        "Warning: the last build failed to write its cache",
        *[f"asset chunk-{i}.js {i * 3} KiB [emitted]" for i in range(40)],
        "ERROR in ./src/index.js 3:0-27",
        "Module not found: Error: Can't resolve './missing' in '/home/runner/work/app/src'",
        "##[error]Process completed with exit code 1.",
    ]
    log = "\n".join(step) + "\n"

    taught = synthesize({"log": log, "repo": "acme/app"}, 1, len(step), book=BOOK,
                        is_wrapper=BOOK.is_wrapper)  # fmt: skip

    assert "Module not found" in taught.text or taught.text.startswith("ERROR in")
    reasons = " ".join(taught.passed_over)
    assert "the step's definition, echoed before it ran" in reasons
    assert "a command echoed before it ran" in reasons


def test_a_whole_step_with_no_error_line_near_its_end_teaches_nothing():
    step = ["compiling"] + [f"asset chunk-{i}.js {i} KiB [emitted]" for i in range(40)]

    with pytest.raises(TeachError, match="carries an error marker"):
        synthesize({"log": "\n".join(step)}, 1, len(step), book=BOOK)


def test_a_ruby_stack_frame_is_not_the_telling_line():
    log = (
        "/gems/albacore-1.0/lib/albacore/support/failure.rb:12:in `fail_with_message'\n"
        "xunit: 3 tests failed in Nancy.Tests\n"
    )

    taught = teach(log, 1, 2)

    assert taught.line == 2
    assert any("a stack frame" in why for why in taught.passed_over)


def test_a_wider_rule_may_retire_the_narrower_taught_rules_it_covers():
    old_line = LOG.splitlines()[2]
    old = parse_rule(
        "name: old_ref\nmode: track\ntags: [taught]\nwhen:\n"
        "  - {fact: repo, equals: acme/site}\n"
        "  - fact: log\n    regex: 'ERROR[^\\n]*REF_NOT_FOUND: Ref \"/docs/4\\.3/intro\"'\n"
        f"    examples: [{json.dumps(old_line)}]\n"
    )
    book = RuleBook((WRAPPER, old), "with a narrow taught rule")
    later = {"log": LATER, "repo": "acme/site"}

    kept = synthesize(later, 3, 3, is_wrapper=book.is_wrapper, book=book)
    wider = synthesize(later, 3, 3, is_wrapper=book.is_wrapper, book=book, replaceable={"old_ref"})

    # Not told it may retire the old rule, it stays out of its way: the names stay literal.
    assert (
        kept.replaces == () and not evaluate(kept.rule, {"log": old_line, "repo": "acme/site"}).ok
    )
    assert wider.replaces == ("old_ref",)
    assert evaluate(wider.rule, {"log": old_line, "repo": "acme/site"}).ok
