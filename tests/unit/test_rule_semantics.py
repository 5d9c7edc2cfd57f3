"""Rules mean what they meant.

Given rules written for the single-process library, I expect their regexes
searched as there (MULTILINE and DOTALL) by the scanner and the full engine
alike; given an example whose reading depends on those flags, I expect
`rules check` to say so; and given a library where one tool's rule wins
another tool's example, I expect the check to name the rule, the example and
the winner, unless the winner declares it supersedes that rule.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from theow_workers.core.resolve.confusion import confusion_errors, confusions
from theow_workers.core.resolve.plan import RuleBook, plan
from theow_workers.core.rules.examples import example_problems
from theow_workers.core.rules.scanner import BACK_BYTES
from theow_workers.core.rules.schema import Rule, load_rules, parse_rule

ROOT = Path(__file__).resolve().parents[2]


def track(name: str, pattern: str, *examples: str, extra: str = "") -> Rule:
    """A track rule on the log, written as a rule file would be."""
    quoted = ", ".join(json.dumps(e) for e in examples)  # JSON strings are YAML strings
    regex = "'" + pattern.replace("'", "''") + "'"
    return parse_rule(
        f"name: {name}\nmode: track\n{extra}"
        f"when: [{{fact: log, regex: {regex}, examples: [{quoted}]}}]\n"
    )


def winner(book: RuleBook, log: str) -> tuple[str, dict[str, str]]:
    first = plan(book, {"log": log}).attempts[0]
    assert first.match is not None
    return first.rule, first.match.captures.named


# --- the library's regex semantics ---------------------------------------------------

GO_FAIL = r"^FAIL\s+(?P<pkg>\S+)"
GO_PANIC = r"panic:.*goroutine (?P<gid>\d+)"


@pytest.mark.parametrize(
    ("pattern", "log", "captured"),
    [
        (GO_FAIL, "ok  a/b 0.1s\nFAIL github.com/x/y [build failed]", {"pkg": "github.com/x/y"}),
        (GO_PANIC, "panic: runtime error\n\ngoroutine 7 [running]:", {"gid": "7"}),
        # The hit's end is further from the match's start than the scanner looks back.
        (
            GO_PANIC,
            "panic: boom\n" + "frame\n" * BACK_BYTES + "goroutine 9 [running]:",
            {"gid": "9"},
        ),
    ],
)
def test_library_regexes_match_across_lines_through_the_scanner(
    pattern, log, captured, tmp_path, monkeypatch
):
    monkeypatch.setenv("THEOW_SCANNER_CACHE", str(tmp_path))
    book = RuleBook((track("r", pattern),), "v")
    assert winner(book, log) == ("r", captured)
    assert book.scanner.compiled  # the scanner decided it, not the fallback


def test_a_leading_minus_s_keeps_the_dot_on_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("THEOW_SCANNER_CACHE", str(tmp_path))
    bound = track("bound", r"(?-s)error: (?P<what>.+)")
    book = RuleBook((bound,), "v")
    assert winner(book, "error: disk full\nnext line") == ("bound", {"what": "disk full"})
    loose = RuleBook((track("loose", r"error: (?P<what>.+)"),), "v")
    assert winner(loose, "error: disk full\nnext line")[1] == {"what": "disk full\nnext line"}


def test_an_example_that_reads_differently_under_the_new_default_is_reported():
    old_style = track("r", r"error: (?P<what>.*)", "error: disk full")
    problems = [reason for _, reason in example_problems(old_style)]
    assert len(problems) == 1
    assert "reads differently" in problems[0]
    assert "capturing {'what': 'disk full'} before" in problems[0]
    # Saying which is meant settles it, either way.
    assert example_problems(track("r", r"(?-s)error: (?P<what>.*)", "error: disk full")) == []
    assert example_problems(track("r", r"(?s)error: (?P<what>.*)", "error: disk full")) == []


def test_an_anchor_that_only_matched_at_the_start_of_the_log_is_reported():
    problems = example_problems(track("r", GO_FAIL, "FAIL github.com/x/y"))
    assert ["no match before, a match at line 2" in reason for _, reason in problems] == [True]
    assert example_problems(track("r", "(?m)" + GO_FAIL, "FAIL github.com/x/y")) == []


def test_every_shipped_example_reads_as_it_did():
    ruleset = load_rules(ROOT / "rules")
    changed = [
        (rule.name, reason)
        for rule in ruleset.rules
        for _, reason in example_problems(rule)
        if "reads differently" in reason
    ]
    assert changed == []


# --- no rule wins another's example ------------------------------------------------

ANY_ERROR = r"error: (?P<message>[^\n]+)"
C_ERROR = r"(?m)^\w+\.c:\d+:\d+: error: "
C_EXAMPLE = "main.c:5:12: error: expected ';' before 'return'"


def test_a_rule_that_wins_another_tools_example_is_reported_with_its_winner():
    broad = track("broad_error", ANY_ERROR, "error: boom")
    c_rule = track("c_error", C_ERROR, C_EXAMPLE)
    found = confusions([broad, c_rule])
    assert [(c.rule, c.example, c.winner) for c in found] == [("c_error", C_EXAMPLE, "broad_error")]


def test_a_rule_that_supersedes_the_other_may_win_its_examples():
    broad = track("broad_error", ANY_ERROR, "error: boom", extra="supersedes: [c_error]\n")
    assert confusions([broad, track("c_error", C_ERROR, C_EXAMPLE)]) == []


def test_a_supersedes_declaration_the_ranking_contradicts_is_reported():
    # c_error declares it wins, yet the broad rule's evidence ranks first on its example.
    c_rule = track("c_error", C_ERROR, C_EXAMPLE, extra="supersedes: [broad_error]\n")
    reasons = [
        c.describe() for c in confusions([track("broad_error", ANY_ERROR, "error: x"), c_rule])
    ]
    assert "c_error supersedes broad_error, but broad_error ranks first" in reasons[0]
    assert "of c_error is won by broad_error" in reasons[1]


@pytest.mark.parametrize(
    ("supersedes", "reason"),
    [
        ("[nowhere]", "supersedes 'nowhere', which is no rule of the library"),
        ("[other]", "but no example shows both applying"),
    ],
)
def test_a_supersedes_declaration_must_name_a_rule_and_be_shown(supersedes, reason):
    rule = track("mine", r"mine: \d+", "mine: 1", extra=f"supersedes: {supersedes}\n")
    other = track("other", r"other: \d+", "other: 1")
    assert [reason in c.describe() for c in confusions([rule, other])] == [True]


def test_a_rule_cannot_supersede_itself():
    with pytest.raises(ValueError, match="cannot supersede itself"):
        track("mine", r"mine", "mine", extra="supersedes: [mine]\n")


def test_confusions_are_reported_at_the_example_line(tmp_path):
    (tmp_path / "c_error.rule.yaml").write_text(
        "name: c_error\nmode: track\nwhen:\n  - fact: log\n"
        f"    regex: '{C_ERROR}'\n    examples:\n      - \"{C_EXAMPLE}\"\n"
    )
    rules = (track("broad_error", ANY_ERROR, "error: boom"), *load_rules(tmp_path).rules)
    files = {"c_error": tmp_path / "c_error.rule.yaml", "broad_error": tmp_path / "x"}
    [error] = confusion_errors(rules, files)
    assert (error.path, error.line) == (str(tmp_path / "c_error.rule.yaml"), 7)
    assert "of c_error is won by broad_error" in error.reason


# --- the shipped library: one tool's rule never wins another tool's line -------------


@pytest.fixture(scope="module")
def shipped() -> RuleBook:
    ruleset = load_rules(ROOT / "rules")
    return RuleBook(ruleset.rules, ruleset.version)


def test_the_shipped_library_has_no_confusion(shipped):
    assert [c.describe() for c in confusions(shipped.rules, shipped)] == []


GCC_MISSING_SEMICOLON = (
    "main.c: In function 'main':\n"
    "main.c:5:12: error: expected ';' before 'return'\n"
    '    5 |   puts("hi")\n'
    "make: *** [Makefile:2: main] Error 1\n"
)
E, RESET, RED = "\x1b[01m\x1b[K", "\x1b[m\x1b[K", "\x1b[01;31m\x1b[K"
GCC_WERROR_THEN_SYNTAX_ERROR = (
    f"{E}src/app.c:{RESET} In function '{E}main{RESET}':\n"
    f"{E}src/app.c:10:9:{RESET} {RED}error: {RESET}unused variable '{E}x{RESET}'"
    f" [{RED}-Werror=unused-variable{RESET}]\n"
    f"{E}src/app.c:14:1:{RESET} {RED}error: {RESET}expected '{E};{RESET}' before '{E}}}{RESET}'"
    " token\n"
    "cc1: all warnings being treated as errors\n"
    "make[2]: *** [CMakeFiles/app.dir/build.make:76: src/app.c.o] Error 1\n"
)
PIP_CONNECT_TIMEOUT = (
    "Collecting requests (from -r requirements.txt (line 1))\n"
    + "".join(
        f"  WARNING: Retrying (Retry(total={n}, connect=None, read=None, redirect=None,"
        " status=None)) after connection broken by 'ConnectTimeoutError(<pip._vendor.urllib3"
        ".connection.HTTPSConnection object at 0x7f0>, 'Connection to pypi.org timed out."
        " (connect timeout=15)')': /simple/requests/\n"
        for n in (4, 3, 2, 1, 0)
    )
    + "ERROR: Could not find a version that satisfies the requirement requests"
    " (from versions: none)\nERROR: No matching distribution found for requests\n"
)


def test_a_gcc_error_is_a_c_compile_error_not_a_rust_one(shipped):
    rule, captured = winner(shipped, GCC_MISSING_SEMICOLON)
    assert (rule, captured["file"], captured["line"]) == ("c_compile_error", "main.c", "5")
    assert "rust_compile_error" not in [
        c.rule for c in plan(shipped, {"log": GCC_MISSING_SEMICOLON}).attempts
    ]


def test_a_syntax_error_below_a_werror_one_wins_in_plain_and_coloured_gcc(shipped):
    plain = GCC_WERROR_THEN_SYNTAX_ERROR.replace(E, "").replace(RESET, "").replace(RED, "")
    for log in (plain, GCC_WERROR_THEN_SYNTAX_ERROR):
        attempts = plan(shipped, {"log": log}).attempts
        assert [c.rule for c in attempts[:2]] == ["c_compile_error", "cpp_warnings_as_errors"]
        assert attempts[0].match is not None and attempts[0].match.captures.named["line"] == "14"


def test_pip_finding_nothing_after_its_connection_timed_out_is_a_network_retry(shipped):
    attempts = plan(shipped, {"log": PIP_CONNECT_TIMEOUT}).attempts
    assert [c.rule for c in attempts] == ["network_flake"]
    assert attempts[0].match is not None and attempts[0].match.evidence is not None
    assert "Retry(total=0" in attempts[0].match.evidence.text
    assert shipped.get("network_flake").mode.value == "retry"
