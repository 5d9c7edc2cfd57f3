"""What a build's log shows of Theow's verdict, through a real Redis and a real Celery worker.

``theow-client run`` waits a few seconds for the verdict by default and shows
the rule, the line it matched, what it captured and what was done; a fleet
turns waiting off with ``THEOW_CLIENT_WAIT=0``; ``@mark`` logs the same
summary; ``--retries`` re-runs after a delay it announces.
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

import pytest

from tests.integration.conftest_client import *  # noqa: F403
from tests.integration.conftest_client import FakeResolver, verdict
from theow_client import mark
from theow_client.capture import shell_join
from theow_client.cli import main
from theow_client.verdict import BoundAction, Status, Where

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

FAILING = [
    sys.executable,
    "-c",
    "import sys; print('--- FAIL: TestParse', file=sys.stderr); sys.exit(1)",
]

# A `go test` failure as a track rule explains it: the line and the test's name.
TRACKED = verdict(
    Status.TRACKED,
    rule="go_test_failed",
    mode="track",
    evidence={"fact": "log", "line": 3, "text": "--- FAIL: TestParse (0.00s)", "context": []},
    captures={"test": "TestParse", "where": "parse_test.go:41"},
)


def test_run_waits_for_the_verdict_by_default_and_shows_rule_line_captures_and_what_was_done(
    resolver: FakeResolver, capfd: pytest.CaptureFixture[str]
) -> None:
    resolver.script("shown", TRACKED)
    code = main(["run", "--fact", "scenario=shown", "--", *FAILING])

    assert code == 1
    err = capfd.readouterr().err.splitlines()
    assert "theow: rule:    go_test_failed (mode track)" in err
    assert "theow: line:    log:3: --- FAIL: TestParse (0.00s)" in err
    assert "theow: captured: test=TestParse where=parse_test.go:41" in err
    assert "theow: done:    nothing run (mode track)" in err


def test_run_prints_the_lines_to_look_at_under_an_unmatched_verdict(
    resolver: FakeResolver, capfd: pytest.CaptureFixture[str]
) -> None:
    where = (Where("log", 2_461, "KeyError: 'DATABASE_URL'"),
             Where("log", 2_455, "Traceback (most recent call last):"))  # fmt: skip
    resolver.script("unmatched-where", verdict(Status.UNMATCHED, where=where))
    assert main(["run", "--fact", "scenario=unmatched-where", "--", *FAILING]) == 1
    err = capfd.readouterr().err.splitlines()
    at = err.index("theow: look at: log line 2,461: KeyError: 'DATABASE_URL'")
    assert err[at + 1] == "theow:          log line 2,455: Traceback (most recent call last):"


def test_run_shows_a_status_it_does_not_know_as_it_came(
    resolver: FakeResolver, capfd: pytest.CaptureFixture[str]
) -> None:
    resolver.script(
        "newer-run",
        lambda payload: {"failure_id": payload["failure_id"], "status": "suggested", "rule": "r"},
    )
    assert main(["run", "--fact", "scenario=newer-run", "--", *FAILING]) == 1
    assert "theow: status:  suggested" in capfd.readouterr().err.splitlines()


@pytest.mark.parametrize(
    ("env", "options"), [({"THEOW_CLIENT_WAIT": "0"}, []), ({}, ["--no-wait"])]
)
def test_with_waiting_turned_off_run_says_where_to_find_the_verdict_in_one_line(
    env: dict[str, str],
    options: list[str],
    resolver: FakeResolver,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    scenario = "no-wait-flag" if options else "no-wait-env"
    resolver.script(scenario, TRACKED)
    assert main(["run", *options, "--fact", f"scenario={scenario}", "--", *FAILING]) == 1

    (payload,) = resolver.wait_for(scenario, 1)
    failure_id = payload["failure_id"]
    ours = [line for line in capfd.readouterr().err.splitlines() if line.startswith("theow:")]
    assert ours == [
        f"theow: reported failure {failure_id}; its verdict: `theow failures show {failure_id}`"
    ]


def test_a_verdict_that_comes_too_late_is_one_line_saying_where_to_look(
    resolver: FakeResolver, capfd: pytest.CaptureFixture[str]
) -> None:
    resolver.script("run-late", verdict(Status.TRACKED, rule="slow", delay=3.0))
    options = ["--wait-timeout", "0.5", "--fact", "scenario=run-late"]
    assert main(["run", *options, "--", *FAILING]) == 1

    (payload,) = resolver.payloads("run-late")
    failure_id = payload["failure_id"]
    ours = [line for line in capfd.readouterr().err.splitlines() if line.startswith("theow:")]
    assert ours == [
        f"theow: no verdict for failure {failure_id} within 0.5s (is a resolver worker running?); "
        f"its verdict later: `theow failures show {failure_id}`"
    ]


def test_mark_logs_the_verdict_it_got(
    resolver: FakeResolver, caplog: pytest.LogCaptureFixture
) -> None:
    resolver.script("mark-log", TRACKED)

    @mark(lambda: {"scenario": "mark-log"}, max_retries=1, wait_timeout=20)
    def step() -> None:
        raise RuntimeError("go test failed")

    with caplog.at_level(logging.WARNING, logger="theow.client"), pytest.raises(RuntimeError):
        step()

    (record,) = [r for r in caplog.records if "go_test_failed" in r.getMessage()]
    logged = record.getMessage().splitlines()
    assert logged[0] == f"theow: {step.__qualname__} failed"
    assert "theow: line:    log:3: --- FAIL: TestParse (0.00s)" in logged
    assert "theow: captured: test=TestParse where=parse_test.go:41" in logged
    assert "theow: done:    nothing run (mode track)" in logged


def test_retries_wait_the_announced_delay_before_running_again(
    resolver: FakeResolver, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    resolver.script("backoff", verdict(Status.RETRY, rule="registry_timeout", mode="retry"))
    times = tmp_path / "times"
    # Each run appends its start time; the first also its end, just before it fails.
    script = (
        "import pathlib, sys, time\n"
        f"p = pathlib.Path({str(times)!r})\n"
        "runs = p.read_text().split() if p.exists() else []\n"
        "p.write_text(' '.join([*runs, repr(time.time())]))\n"
        "if not runs:\n"
        "    p.write_text(p.read_text() + ' ' + repr(time.time()))\n"
        "    sys.exit(1)\n"
    )
    command = [sys.executable, "-c", script]
    options = ["--retries", "1", "--retry-delay", "1.5", "--fact", "scenario=backoff"]
    code = main(["run", *options, "--wait-timeout", "20", "--", *command])

    assert code == 0
    assert f"theow: re-running {shell_join(command)} in 1.5 s (1/1)" in capfd.readouterr().err
    _, first_end, second_start = (float(t) for t in times.read_text().split())
    assert second_start - first_end >= 1.5  # not before the delay it announced


def test_run_says_the_fix_the_action_suggests_in_plain_words(
    resolver: FakeResolver, capfd: pytest.CaptureFixture[str]
) -> None:
    fix = "pip install PyYAML  (and declare PyYAML in the project's dependencies)"
    suggested = verdict(
        Status.SUGGESTED,
        rule="python_module_not_found",
        mode="fix",
        outputs=({"action": "suggest_pip_install",
                  "output": {"status": "ok", "package": "PyYAML", "fix": fix}},),
    )  # fmt: skip
    resolver.script("fix-line", suggested)
    assert main(["run", "--fact", "scenario=fix-line", "--", *FAILING]) == 1
    err = capfd.readouterr().err.splitlines()
    assert (
        "theow: fix:     pip install PyYAML (and declare PyYAML in the project's dependencies)"
        in err
    )


def test_a_client_side_fix_says_what_it_changed_before_the_re_run(
    resolver: FakeResolver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    actions = tmp_path / "actions"
    actions.mkdir()
    shutil.copy(ROOT / "actions" / "go.py", actions)  # the shipped action, as an agent has it
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "go.mod").write_text("module example.com/app\n")
    monkeypatch.chdir(checkout)
    params = {"old_path": "github.com/imdario/mergo", "new_path": "dario.cat/mergo",
              "version": "v1.0.0"}  # fmt: skip
    renamed = verdict(
        Status.SUGGESTED,
        rule="go_module_path_rename",
        mode="fix",
        actions=(BoundAction("go_mod_replace", params, client_side=True),),
    )
    resolver.script("go-rename", renamed)
    # Fails until go.mod has the replace directive, as go would.
    build = [sys.executable, "-c", "import sys; sys.exit('replace' not in open('go.mod').read())"]
    options = ["--retries", "1", "--retry-delay", "0", "--actions-dir", str(actions)]
    code = main(["run", *options, "--fact", "scenario=go-rename", "--", *build])

    assert code == 0
    err = capfd.readouterr().err.splitlines()
    fix = "theow: fix:     go mod edit -replace github.com/imdario/mergo=dario.cat/mergo@v1.0.0"
    assert err.index(fix) < next(i for i, line in enumerate(err) if "re-running" in line)
