"""What every `theow` command prints the same way: errors, log text, JSON, piped lines."""

from __future__ import annotations

import io
import json

import pytest
import typer
from typer.testing import CliRunner

from theow_workers.cli import output


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> tuple[io.StringIO, io.StringIO]:
    stdout, stderr = io.StringIO(), io.StringIO()
    monkeypatch.setattr(output, "out", output.make_console(file=stdout))
    monkeypatch.setattr(output, "err", output.make_console(file=stderr))
    return stdout, stderr


def test_an_error_is_one_line_on_stderr_with_its_text_as_it_is(captured):
    stdout, stderr = captured
    stop = output.fail("no proposal '[red]x' :thumbs_up: (see `theow review`)", 2)
    assert stop.exit_code == 2
    assert stderr.getvalue() == "error: no proposal '[red]x' :thumbs_up: (see `theow review`)\n"
    assert stdout.getvalue() == ""


def test_an_error_stays_one_line_in_a_ci_log_that_sets_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    stream = io.StringIO()
    monkeypatch.setattr(output, "err", output.make_console(stderr=True, file=stream))
    message = (
        "no rule named 'a-rule-whose-name-is-long' in any rules directory (see `theow rules list`)"
    )
    output.fail(message, 2)
    assert stream.getvalue() == f"error: {message}\n"


def test_a_piped_console_prints_a_long_line_whole_and_leaves_emoji_codes_alone():
    stream = io.StringIO()
    console = output.make_console(file=stream)
    line = "src/app.c:12: " + "an error nobody has seen before :boom: " * 10
    console.print(line, markup=False)
    assert stream.getvalue() == line + "\n"


def test_a_command_that_fails_exits_with_the_code_it_names():
    app = typer.Typer()

    @app.command()
    def broken(as_json: output.JsonFlag = False) -> None:
        if as_json:
            output.print_json({"ok": False})
        raise output.fail("it broke", 2)

    result = CliRunner().invoke(app, ["--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout.splitlines()[0]) == {"ok": False}


def test_every_command_is_on_the_theow_command():
    from typer.main import get_command

    from theow_workers.cli import app

    names = set(get_command(app).commands)  # type: ignore[attr-defined]
    assert names == {
        "rules", "db", "replay", "history", "review", "failures", "runs",
        "meow", "doctor", "metrics", "dead-letters", "worker", "web", "up", "demo", "tokens",
        "teach", "incidents", "tests",
    }  # fmt: skip


def test_a_long_wait_is_one_plain_line_on_stderr_when_not_a_terminal(captured):
    from tests.conftest import wait_until

    stdout, stderr = captured
    with output.waiting("embedding 239 rules with MiniLM", after=0.01):
        wait_until(stderr.getvalue, timeout=30, what="the progress line")  # the wait goes on
    assert stderr.getvalue() == "theow: embedding 239 rules with MiniLM…\n"
    assert stdout.getvalue() == ""


def test_a_wait_shorter_than_a_second_says_nothing(captured):
    stdout, stderr = captured
    with output.waiting("embedding 239 rules with MiniLM"):
        pass  # a cache hit
    assert (stdout.getvalue(), stderr.getvalue()) == ("", "")
