"""The shipped rules for a program the build ran that stopped on an error nothing caught.

Elixir prints such an error at the start of a line (``** (RuntimeError) …``),
Rust a panic on the main thread; a test runner's failures, which show the same
shapes inside a test's report, stay its runner's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.plan import Hints, RuleBook, plan

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def book() -> RuleBook:
    return Library.load(ROOT / "rules", ROOT / "actions").book


def chosen(book: RuleBook, log: str) -> tuple[str | None, dict[str, str], str]:
    """(chosen rule, its named captures, its evidence line)."""
    attempts = [c for c in plan(book, {"log": log}, Hints()).attempts if not c.generic]
    if not attempts or attempts[0].match is None or attempts[0].match.evidence is None:
        return None, {}, ""
    match = attempts[0].match
    named = {k: v for k, v in match.captures.named.items() if v is not None}
    return attempts[0].rule, named, match.evidence.text


def test_an_elixir_scripts_uncaught_error_is_named_not_a_crash_the_logger_reported(book):
    log = (
        "13:14:06.202 [error] GenServer #PID<0.112.0> terminating\n"
        "** (stop) normal\n"
        "    (inets) httpc_handler.erl:1676: :httpc_handler.update_session/4\n"
        "$ elixir check.exs\n"
        "** (RuntimeError) Line does not match format: '[dummy](https://example.org/dummy)'\n"
        "    check.exs:32: Awesome.parse_line/1\n"
    )
    rule, captures, evidence = chosen(book, log)
    assert (rule, captures["kind"]) == ("elixir_uncaught_error", "RuntimeError")
    assert evidence.startswith("** (RuntimeError) Line does not match format")


def test_an_exunit_failure_stays_the_test_runners(book):
    log = (
        "  1) test parses the header (MyApp.ParserTest)\n"
        "     test/parser_test.exs:12\n"
        "     ** (RuntimeError) boom\n"
        '     code: Parser.parse!("x")\n'
        "\n"
        "Finished in 0.1 seconds\n"
        "3 tests, 1 failure\n"
    )
    assert chosen(book, log)[0] == "exunit_test_failed"


def test_a_rust_program_that_panicked_on_main_names_the_message(book):
    log = (
        "cargo run --bin installer\n"
        "* Failure 404 Not Found\n"
        "thread 'main' panicked at 'called `Result::unwrap()` on an `Err` value: NotFound', "
        "src/libcore/result.rs:997:5\n"
        "note: Run with `RUST_BACKTRACE=1` environment variable to display a backtrace.\n"
        "make: *** [build] Error 101\n"
    )
    rule, captures, _ = chosen(book, log)
    assert rule == "rust_program_panicked"
    assert captures["location"] == "src/libcore/result.rs:997:5"


def test_a_failed_rust_test_stays_the_test_runners(book):
    log = (
        "running 2 tests\n"
        "test tests::parses ... FAILED\n"
        "\n"
        "failures:\n"
        "\n"
        "---- tests::parses stdout ----\n"
        "thread 'tests::parses' panicked at src/lib.rs:12:9:\n"
        "assertion failed: ok\n"
        "\n"
        "test result: FAILED. 1 passed; 1 failed; 0 ignored\n"
    )
    assert chosen(book, log)[0] == "cargo_test_failed"
