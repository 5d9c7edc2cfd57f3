"""What the CI's own pages show of Theow's verdict, through a real Redis and a real Celery worker.

``theow-client run`` reads the CI's variables: under GitHub Actions an ``::error``
annotation on stdout and a Markdown job summary; under GitLab CI the block in a
collapsible section; under Buildkite an annotation through ``buildkite-agent``;
elsewhere the plain block, as before. Log text in any of them is masked and escaped.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from tests.integration.conftest_client import *  # noqa: F403
from tests.integration.conftest_client import FakeResolver, verdict
from theow_client import ci_output
from theow_client.cli import main
from theow_client.verdict import Status, Where

pytestmark = pytest.mark.integration

FAILING = [sys.executable, "-c", "import sys; sys.exit(1)"]
CONSOLE = "https://theow.example"
ERROR_LINE = "src/foo.c:12:3: error: 'count' undeclared (first use in this function)"

# A C compiler's error as a track rule explains it, and the worker's lines to look at.
COMPILE = verdict(
    Status.TRACKED,
    rule="c_undeclared",
    mode="track",
    evidence={"fact": "log", "line": 7, "text": ERROR_LINE, "context": []},
    where=(Where("log", 7, ERROR_LINE), Where("log", 5, "src/foo.c: In function 'main':")),
)

PLAIN_BLOCK = [
    "theow: status:  tracked",
    "theow: failure: {fid}",
    "theow: rule:    c_undeclared (mode track)",
    f"theow: line:    log:7: {ERROR_LINE}",
    f"theow: look at: log line 7: {ERROR_LINE}",
    "theow:          log line 5: src/foo.c: In function 'main':",
    "theow: done:    nothing run (mode track)",
]

SUMMARY = f"""### Theow: c\\_undeclared \\(tracked\\)

Lines to look at:

```text
log line 7: {ERROR_LINE}
log line 5: src/foo.c: In function 'main':
```

What was done:

- done: nothing run \\(mode track\\)

Failure [{{fid}}]({CONSOLE}/failures/{{fid}}) in the Theow console.
"""

CI_VARIABLES = ("GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "GITHUB_STEP_SUMMARY",
                "GITHUB_WORKSPACE", "THEOW_CI_OUTPUT", "THEOW_CONSOLE_URL")  # fmt: skip


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A build's checkout holding the file the compiler names; no CI variable set yet."""
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("THEOW_CLIENT_ENV", str(tmp_path / "no-client.env"))
    root = tmp_path / "checkout"
    (root / "src").mkdir(parents=True)
    (root / "src" / "foo.c").write_text("int main(void) { return count; }\n")
    monkeypatch.chdir(root)
    yield root


def run(resolver: FakeResolver, scenario: str, answer: object) -> str:
    """``theow-client run`` of a failing step under ``scenario``; the failure's id."""
    resolver.script(scenario, answer)  # type: ignore[arg-type]
    assert main(["run", "--fact", f"scenario={scenario}", "--", *FAILING]) == 1
    (payload,) = resolver.payloads(scenario)
    return str(payload["failure_id"])


def on_github(monkeypatch: pytest.MonkeyPatch, checkout: Path) -> Path:
    summary = checkout.parent / "step_summary.md"
    summary.write_text("## Tests\n\n")  # what an earlier step of the job wrote
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(checkout))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("THEOW_CONSOLE_URL", CONSOLE + "/")
    return summary


def test_on_github_actions_the_verdict_is_an_annotation_at_the_file_and_line_and_a_job_summary(
    resolver: FakeResolver,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    summary = on_github(monkeypatch, checkout)
    fid = run(resolver, "gh-compile", COMPILE)

    out, err = capfd.readouterr()
    assert out == (
        "::error file=src/foo.c,line=12,col=3,title=Theow%3A c_undeclared (tracked)::"
        f"log line 7: {ERROR_LINE}%0Afailure {fid}: {CONSOLE}/failures/{fid}\n"
    )
    assert summary.read_text() == "## Tests\n\n" + SUMMARY.format(fid=fid)
    # The build log still tells the whole answer.
    ours = [line for line in err.splitlines() if line.startswith("theow:")]
    assert ours == [line.format(fid=fid) for line in PLAIN_BLOCK]


def test_an_unexplained_failure_whose_line_names_no_file_of_the_checkout_is_annotated_without_one(
    resolver: FakeResolver,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    summary = on_github(monkeypatch, checkout)
    monkeypatch.delenv("THEOW_CONSOLE_URL")
    line = "dial tcp: lookup registry.example.com:443: no such host (vendor/lib.go:3)"
    answer = verdict(Status.UNMATCHED, where=(Where("log", 2_461, line),))
    fid = run(resolver, "gh-unexplained", answer)

    out = capfd.readouterr().out
    assert out == (
        f"::error title=Theow%3A unexplained::log line 2,461: {line}%0A"
        f"failure {fid}: theow failures show {fid}\n"
    )
    assert summary.read_text() == (
        "## Tests\n\n### Theow: unexplained\n\nLines to look at:\n\n"
        f"```text\nlog line 2,461: {line}\n```\n\n"
        f"Failure `{fid}`: `theow failures show {fid}`.\n"
    )


def test_a_summary_file_that_cannot_be_written_is_a_warning_and_the_annotation_still_shows(
    resolver: FakeResolver,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    on_github(monkeypatch, checkout)
    missing = checkout.parent / "no-such-dir" / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(missing))
    run(resolver, "gh-summary-unwritable", COMPILE)  # asserts exit code 1, the step's own

    out, err = capfd.readouterr()
    assert out.startswith("::error file=src/foo.c,line=12,col=3,")
    assert err.splitlines()[-1] == (
        f"theow: job summary not written ({missing}: No such file or directory)"
    )


def test_hostile_log_text_is_masked_and_escaped_and_cannot_leave_its_annotation_or_code_block(
    resolver: FakeResolver,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    summary = on_github(monkeypatch, checkout)
    (checkout / "src" / "we,ird:1.py").write_text("raise SystemExit(1)\n")
    token = "ghp_" + "a1B2" * 9
    hostile = (
        'File "src/we,ird:1.py", line 4, in <module> 100% done\r\n'
        "::add-mask::x\n::set-env name=A::B, c: d\n"
        "```` </code><img src=x onerror=alert(1)> [a](javascript:x) "
        f"GITHUB_TOKEN={token}\x1b]52;c;ZWNobw==\x07"
    )
    answer = verdict(
        Status.TRACKED,
        rule="r:1,2%",
        mode="track",
        evidence={"fact": "log", "line": 9, "text": hostile},
    )
    fid = run(resolver, "gh-hostile", answer)

    out = capfd.readouterr().out
    shown = (
        'File "src/we,ird:1.py", line 4, in <module> 100% done ::add-mask::x '
        "::set-env name=A::B, c: d ```` </code><img src=x onerror=alert(1)> [a](javascript:x) "
        "GITHUB_TOKEN=[masked:github-token]"
    )
    assert out == (
        "::error file=src/we%2Cird%3A1.py,line=4,title=Theow%3A r%3A1%2C2%25 (tracked)::"
        f"log line 9: {shown.replace('%', '%25')}%0Afailure {fid}: {CONSOLE}/failures/{fid}\n"
    )
    assert out.count("\n") == 1 and token not in out

    markdown = summary.read_text().removeprefix("## Tests\n\n")
    assert markdown.startswith("### Theow: r:1,2% \\(tracked\\)\n\nLines to look at:\n\n")
    assert f"`````text\nlog line 9: {shown}\n`````\n" in markdown
    assert token not in markdown
    # Read as GitHub reads it: one code block holding the line, and no HTML anywhere.
    tokens = MarkdownIt("commonmark").parse(markdown)
    (block,) = [t for t in tokens if t.type == "fence"]
    assert block.content == f"log line 9: {shown}\n"
    inline = [child for t in tokens for child in t.children or ()]
    links = [t.attrs["href"] for t in inline if t.type == "link_open"]
    assert links == [f"{CONSOLE}/failures/{fid}"]  # the console's, not the log's javascript:
    assert not [t for t in tokens + inline if t.type.startswith("html")]


def test_on_gitlab_the_block_is_a_collapsed_section_stamped_by_the_clock(
    resolver: FakeResolver,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    monkeypatch.setenv("GITLAB_CI", "true")
    monkeypatch.setenv("THEOW_CONSOLE_URL", CONSOLE)
    ticks = iter([1_700_000_000.9, 1_700_000_003.2])
    monkeypatch.setattr(ci_output, "now", lambda: next(ticks))
    fid = run(resolver, "gitlab-section", COMPILE)

    out, err = capfdbinary.readouterr()
    assert out == b""
    block = "\n".join(line.format(fid=fid) for line in PLAIN_BLOCK)
    section = (
        f"\x1b[0Ksection_start:1700000000:theow_{fid}[collapsed=true]\r\x1b[0K"
        "Theow: c_undeclared (tracked)\n"
        f"{block}\ntheow: console: {CONSOLE}/failures/{fid}\n"
        f"\x1b[0Ksection_end:1700000003:theow_{fid}\r\x1b[0K\n"
    ).encode()
    assert err.endswith(section)


def test_log_text_cannot_end_a_gitlab_section_or_open_one(
    resolver: FakeResolver,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    monkeypatch.setenv("GITLAB_CI", "true")
    forged = "\x1b[0Ksection_end:1:theow_x\r\x1b[0Kall good\x1b[0Ksection_start:1:y\r\x1b[0K"
    answer = verdict(Status.UNMATCHED, where=(Where("log", 3, forged),))
    run(resolver, "gitlab-forged", answer)

    err = capfdbinary.readouterr().err
    assert err.count(b"\x1b[0Ksection_start:") == 1 and err.count(b"\x1b[0Ksection_end:") == 1
    assert b"theow: look at: log line 3: section_end:1:theow_x all goodsection_start:1:y" in err


def fake_agent(directory: Path, code: int = 0) -> Path:
    """A ``buildkite-agent`` that records its arguments and stdin next to itself."""
    directory.mkdir()
    agent = directory / "buildkite-agent"
    agent.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > "{directory}/args"\n'
        f'cat > "{directory}/stdin"\n'
        f"echo 'fatal: annotation refused' >&2\nexit {code}\n"
    )
    agent.chmod(0o755)
    return directory


def test_on_buildkite_the_summary_is_an_annotation_made_by_the_agent(
    resolver: FakeResolver,
    checkout: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    bin_dir = fake_agent(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("BUILDKITE", "true")
    monkeypatch.setenv("THEOW_CONSOLE_URL", CONSOLE)
    fid = run(resolver, "buildkite", COMPILE)

    assert (bin_dir / "args").read_text().split() == [
        "annotate", "--style", "error", "--context", "theow",
    ]  # fmt: skip
    assert (bin_dir / "stdin").read_text() == SUMMARY.format(fid=fid)
    out, err = capfd.readouterr()
    assert out == ""
    assert [line for line in err.splitlines() if line.startswith("theow:")] == [
        line.format(fid=fid) for line in PLAIN_BLOCK
    ]


def test_an_agent_that_refuses_the_annotation_is_a_warning_and_the_build_keeps_its_exit_code(
    resolver: FakeResolver,
    checkout: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PATH", f"{fake_agent(tmp_path / 'bin', code=1)}:/usr/bin:/bin")
    monkeypatch.setenv("BUILDKITE", "true")
    run(resolver, "buildkite-refused", COMPILE)  # asserts exit code 1, the step's own

    err = capfd.readouterr().err.splitlines()
    assert err[-1] == "theow: buildkite-agent annotate failed: fatal: annotation refused"


def test_on_buildkite_without_the_agent_on_path_the_plain_block_is_shown(
    resolver: FakeResolver,
    checkout: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("BUILDKITE", "true")
    fid = run(resolver, "buildkite-no-agent", COMPILE)

    out, err = capfd.readouterr()
    assert out == ""
    assert [line for line in err.splitlines() if line.startswith("theow:")] == [
        line.format(fid=fid) for line in PLAIN_BLOCK
    ]


@pytest.mark.parametrize(
    "env",
    [
        {"JENKINS_URL": "https://ci.example/", "JOB_NAME": "build"},
        {},
        {"GITHUB_ACTIONS": "true", "THEOW_CI_OUTPUT": "plain"},
        {"GITLAB_CI": "true", "THEOW_CI_OUTPUT": "PLAIN"},
    ],
    ids=["jenkins", "no-ci", "github-turned-off", "gitlab-turned-off"],
)
def test_elsewhere_or_when_turned_off_the_plain_block_is_shown_unchanged(
    env: dict[str, str],
    resolver: FakeResolver,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    summary = checkout.parent / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("THEOW_CONSOLE_URL", CONSOLE)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    fid = run(resolver, f"plain-{len(env)}-{sorted(env)[:1]}", COMPILE)

    out, err = capfd.readouterr()
    assert out == ""
    assert not summary.exists()
    assert "\x1b" not in err
    assert [line for line in err.splitlines() if line.startswith("theow:")] == [
        line.format(fid=fid) for line in PLAIN_BLOCK
    ]


def test_an_unknown_ci_output_choice_is_named_in_a_warning_and_the_block_is_plain(
    resolver: FakeResolver,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("THEOW_CI_OUTPUT", "teamcity")
    fid = run(resolver, "ci-output-unknown", COMPILE)

    out, err = capfd.readouterr()
    assert out == ""
    ours = [line for line in err.splitlines() if line.startswith("theow:")]
    assert ours == [
        "theow: THEOW_CI_OUTPUT='teamcity' is not one of auto, plain, github, gitlab, buildkite; "
        "plain output",
        *(line.format(fid=fid) for line in PLAIN_BLOCK),
    ]


def test_the_ci_output_choice_written_in_client_env_is_honoured(
    resolver: FakeResolver,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    client_env = checkout.parent / "client.env"
    client_env.write_text("THEOW_CI_OUTPUT=plain\n")  # as an agent's owner sets it, once
    monkeypatch.setenv("THEOW_CLIENT_ENV", str(client_env))
    summary = on_github(monkeypatch, checkout)
    fid = run(resolver, "ci-output-client-env", COMPILE)

    out, err = capfd.readouterr()
    assert out == ""
    assert summary.read_text() == "## Tests\n\n"
    assert [line for line in err.splitlines() if line.startswith("theow:")] == [
        line.format(fid=fid) for line in PLAIN_BLOCK
    ]


def test_the_job_summary_and_annotation_say_the_fix_masked_and_escaped(
    resolver: FakeResolver,
    checkout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    summary = on_github(monkeypatch, checkout)
    token = "ghp_" + "a1B2" * 9
    fix = f"pip install PyYAML --index-url https://x:{token}@pypi.example/``` [a](b)"
    suggested = verdict(
        Status.SUGGESTED,
        rule="python_module_not_found",
        mode="fix",
        outputs=({"action": "suggest_pip_install", "output": {"fix": fix}},),
    )
    fid = run(resolver, "gh-fix", suggested)

    out, err = capfd.readouterr()
    shown = "pip install PyYAML --index-url https://x:[masked:github-token]@pypi.example/``` [a](b)"
    assert f"%0Afix: {shown}%0Afailure {fid}" in out
    assert f"\n\nFix:\n\n````text\n{shown}\n````\n\n" in summary.read_text()
    assert f"theow: fix:     {shown}" in err.splitlines()
    assert token not in out + err + summary.read_text()
