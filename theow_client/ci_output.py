"""A verdict where the CI shows it, chosen from the CI's own variables; no token needed.

==================== =====================================================================
``GITHUB_ACTIONS``   an ``::error`` annotation on stdout at the line to look at (with its
                     file and line when the line names a file of the checkout, and the
                     fix the actions suggest or made), one at each failed test's file and
                     line instead when a test report named them, and a Markdown job
                     summary appended to ``$GITHUB_STEP_SUMMARY`` (with the failed tests)
``GITLAB_CI``        the block inside a collapsible section (``section_start``/``section_end``)
``BUILDKITE``        ``buildkite-agent annotate --style error --context theow`` (the Markdown
                     on stdin) when the agent is on PATH
anything else        the plain block, as always
==================== =====================================================================

Each says whose failure it is when the verdict has an origin (``theow_client.origin``):
in the annotation's title and message, the summary's first line, the section's header.
A flaky or an infrastructure failure is a ``::warning`` (Buildkite: ``--style warning``):
no code to fix, retry it; the job still fails, its exit status is the command's own.

The plain block (``theow: status: ...`` on stderr) is printed in every case, so the
build log tells the whole answer wherever it is read. ``THEOW_CI_OUTPUT=plain`` turns
the rest off; ``github``, ``gitlab`` or ``buildkite`` choose one whatever the variables say.

Every text from a log, a rule's captures or an action's output is untrusted (a pull
request writes the log): it is bounded, masked (``theow_client.redact``), stripped of
control characters (``theow_client.terminal``) and escaped for where it goes: GitHub's
workflow-command format, Markdown (a fence longer than any run of backticks inside it).

>>> annotation("error", {"file": "a,b.c", "line": "3", "title": "T: x"}, "50% done\\n::stop")
'::error file=a%2Cb.c,line=3,title=T%3A x::50%25 done%0A::stop'
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TextIO
from urllib.parse import quote

from theow_client import config
from theow_client.origin import OriginKind, origin_label, origin_text
from theow_client.redact import redact_text
from theow_client.terminal import printable
from theow_client.verdict import FailedTest, Status, Verdict
from theow_client.verdict_text import explained, format_verdict, prefixed

# A line of log text, once made safe: long enough for a compiler's message, short in a summary.
MAX_LINE_CHARS = 500
# The most lines to look at (the evidence and the worker's up to three ``where`` lines).
MAX_LINES = 4
# The most lines of what was done (actions, their outputs, the reason) in a summary.
MAX_DONE_LINES = 10
# The most failed tests annotated (as many as the worker's ``where`` lines), and listed.
MAX_TEST_ANNOTATIONS = 3
MAX_TESTS_LISTED = 50
# Seconds ``buildkite-agent annotate`` may take before the build goes on without it.
AGENT_TIMEOUT = 10.0
SECTION_NAME = re.compile(r"[^A-Za-z0-9_.-]")

# Where a line names a source file: ``src/foo.c:12:3: error``, ``(Foo.java:12)``,
# ``--> src/main.rs:4:5`` or Python's ``File "x.py", line 4``. A URL's ``host:port``
# never matches (nothing after ``//`` or ``:``), nor a bare ``log:3``.
SOURCE_LINE = re.compile(
    r'File "(?P<pyfile>[^"\n]{1,300})", line (?P<pyline>\d{1,9})'
    r"|(?<![\w/:.\\-])(?P<file>/?(?:[\w.~+-]+/){0,30}[\w.+-]*\w\.[A-Za-z][\w+]{0,9})"
    r":(?P<line>\d{1,9})(?::(?P<col>\d{1,6}))?"
)


class CI(StrEnum):
    PLAIN = "plain"
    GITHUB = "github"
    GITLAB = "gitlab"
    BUILDKITE = "buildkite"


def _environ() -> Mapping[str, str]:
    """The process's environment, with ``THEOW_CI_OUTPUT`` from ``client.env`` when it has none."""
    if config.ENV_CI_OUTPUT in os.environ:
        return os.environ
    written = config.client_env().get(config.ENV_CI_OUTPUT)
    return os.environ if written is None else {**os.environ, config.ENV_CI_OUTPUT: written}


def ci_of(environ: Mapping[str, str]) -> CI:
    """The CI whose forms to use: $THEOW_CI_OUTPUT when it names one, else the CI's own variable.

    Raises ValueError naming the variable when it holds something else than ``auto`` or a CI.

    >>> ci_of({"GITLAB_CI": "true"}), ci_of({"GITLAB_CI": "true", "THEOW_CI_OUTPUT": "plain"})
    (<CI.GITLAB: 'gitlab'>, <CI.PLAIN: 'plain'>)
    """
    choice = environ.get(config.ENV_CI_OUTPUT, "").strip().lower()
    if choice not in ("", "auto"):
        try:
            return CI(choice)
        except ValueError:
            known = ", ".join(["auto", *CI])
            raise ValueError(f"{config.ENV_CI_OUTPUT}={choice!r} is not one of {known}") from None
    for variable, ci in (
        ("GITHUB_ACTIONS", CI.GITHUB),
        ("GITLAB_CI", CI.GITLAB),
        ("BUILDKITE", CI.BUILDKITE),
    ):
        if environ.get(variable, "").strip().lower() == "true":
            return ci
    return CI.PLAIN


@dataclass(frozen=True)
class Look:
    """A line to look at, made safe: ``log line 3: src/foo.c:12: error: x`` and its parts."""

    fact: str
    line: int | None
    text: str

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.fact}: {self.text}"
        return f"{self.fact} line {self.line:,}: {self.text}"


def safe(text: object, limit: int = MAX_LINE_CHARS) -> str:
    """Untrusted text as one bounded, masked line without control characters.

    >>> safe("token=ghp_" + "a1B2" * 9 + "\\x1b[2J\\r\\nnext")
    'token=[masked:github-token] next'
    """
    raw = str(text)[: limit * 4]  # bounded before the masking, which reads all of it
    line = " ".join(redact_text(printable(raw)).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def lines_to_look_at(verdict: Verdict) -> list[Look]:
    """The evidence first, then the ``where`` lines not already shown; each made safe."""
    looks: list[Look] = []
    seen: set[tuple[str, int | None]] = set()
    evidence = verdict.evidence or {}
    if evidence.get("text"):
        line = evidence.get("line")
        number = int(str(line)) if str(line).isdigit() else None
        looks.append(Look(safe(evidence.get("fact") or "log", 40), number, safe(evidence["text"])))
        seen.add((looks[0].fact, number))
    for where in verdict.where:
        if (where.fact, where.line) not in seen and len(looks) < MAX_LINES:
            seen.add((where.fact, where.line))
            looks.append(Look(safe(where.fact, 40), where.line, safe(where.text)))
    return looks


def headline(verdict: Verdict) -> str:
    """``go_test_failed (tracked)``, ``unexplained``, or the status when nothing was decided."""
    if verdict.rule:
        return safe(f"{verdict.rule} ({verdict.status})", 200)
    if verdict.status in (Status.UNMATCHED, Status.UNEXPLAINED):
        wrapper = f" (wrapper: {verdict.wrapper})" if verdict.wrapper else ""
        return safe(f"unexplained{wrapper}", 200)
    return safe(verdict.status, 200)


def what_was_done(verdict: Verdict) -> list[str]:
    """The plain block's ``action``, ``output``, ``done`` and ``reason`` lines, made safe."""
    shown = format_verdict(verdict).splitlines()
    kept = [line for line in shown if line.startswith(("action:", "output:", "done:", "reason:"))]
    if len(kept) > MAX_DONE_LINES:  # a worker's outputs are many; the console has them all
        kept[MAX_DONE_LINES - 1 :] = [f"... and {len(kept) - MAX_DONE_LINES + 1} more"]
    return [safe(" ".join(line.split())) for line in kept]


def source_of(
    text: str, workspace: Path, cwd: Path | None = None
) -> tuple[str, int, int | None] | None:
    """The checkout's file, line and column that ``text`` names, or None.

    A relative name is looked up from the step's directory ``cwd`` (a build run in a
    subdirectory names its files from there), then from ``workspace``. Only a file that
    exists inside ``workspace`` counts, named relative to it: a ``registry.example.com:443``,
    a path in site-packages or ``../`` out of the checkout is no place in the code.
    """
    try:
        root = workspace.resolve()
        bases = [root] if cwd is None else [cwd.resolve(), root]
    except (OSError, RuntimeError):
        return None
    for match in SOURCE_LINE.finditer(text):
        name = match["pyfile"] or match["file"]
        number = int(match["pyline"] or match["line"])
        column = int(match["col"]) if match["col"] else None
        found = _in_checkout(name, root, bases)
        if found is not None and number > 0:
            return found, number, column
    return None


def failed_test_source(
    test: FailedTest, workspace: Path, cwd: Path | None = None
) -> tuple[str, int | None] | None:
    """The checkout's file where a failed test failed, and its line when the report said;
    None when the file is not one of the checkout's (as :func:`source_of`)."""
    if not test.file or len(test.file) > MAX_LINE_CHARS:
        return None
    try:
        root = workspace.resolve()
        bases = [root] if cwd is None else [cwd.resolve(), root]
    except (OSError, RuntimeError):
        return None
    found = _in_checkout(test.file, root, bases)
    line = test.line if test.line is not None and test.line > 0 else None
    return (found, line) if found is not None else None


def _in_checkout(name: str, root: Path, bases: list[Path]) -> str | None:
    """``name`` relative to ``root`` when it is a file inside it, looked up from each base."""
    for base in bases:
        try:
            path = (base / name).resolve()
            if path.is_file() and path.is_relative_to(root):
                return path.relative_to(root).as_posix()
        except (OSError, RuntimeError, ValueError):  # a name no file system accepts
            continue
    return None


def console_link(verdict: Verdict, base: str | None) -> str | None:
    """The failure's page in the console; a space or parenthesis in ``base`` cannot end a link."""
    if not base:
        return None
    return f"{quote(base, safe=':/?#@!$&*+,;=%')}/failures/{quote(verdict.failure_id, safe='')}"


# GitHub's workflow-command format (actions/toolkit, packages/core/src/command.ts).


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, properties: Mapping[str, str], message: str) -> str:
    """``::level key=value,...::message``, every part escaped as the runner unescapes it."""
    props = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    return f"::{level}{' ' + props if props else ''}::{escape_data(message)}"


def github_annotation(
    verdict: Verdict, workspace: Path, link: str | None, cwd: Path | None = None
) -> str:
    """The verdict's annotation; one per failed test (at its file and line) when tests failed."""
    if verdict.tests:
        tests = verdict.tests[:MAX_TEST_ANNOTATIONS]
        return "\n".join(failed_test_annotation(verdict, t, workspace, link, cwd) for t in tests)
    looks = lines_to_look_at(verdict)
    properties: dict[str, str] = {}
    if looks:
        source = source_of(looks[0].text, workspace, cwd)
        if source is not None:
            properties["file"], line, column = source[0], source[1], source[2]
            properties["line"] = str(line)
            if column is not None:
                properties["col"] = str(column)
    properties["title"] = title(verdict)
    first = str(looks[0]) if looks else safe(verdict.reason) or "no line to look at"
    return annotation(level(verdict), properties, first + after_the_line(verdict, link))


def failed_test_annotation(
    verdict: Verdict, test: FailedTest, workspace: Path, link: str | None, cwd: Path | None = None
) -> str:
    """``::error file=…,line=…,title=Theow: …::name failed: message``: a failed test's annotation."""
    properties: dict[str, str] = {}
    source = failed_test_source(test, workspace, cwd)
    if source is not None:
        properties["file"] = source[0]
        if source[1] is not None:
            properties["line"] = str(source[1])
    properties["title"] = title(verdict)
    return annotation(
        level(verdict), properties, failed_test_line(test) + after_the_line(verdict, link)
    )


def title(verdict: Verdict) -> str:
    """``Theow: go_test_failed (tracked) · flaky``: the rule, then whose failure it is."""
    origin = f" · {safe(origin_label(verdict.origin), 60)}" if verdict.origin else ""
    return f"Theow: {headline(verdict)}{origin}"


def level(verdict: Verdict) -> str:
    """``warning`` for a flaky or an infrastructure failure (retry it: no code to fix), else
    ``error``. The job fails either way: its exit status is the command's own."""
    kind = verdict.origin.origin if verdict.origin else None
    return "warning" if kind in (OriginKind.FLAKY, OriginKind.INFRA) else "error"


def after_the_line(verdict: Verdict, link: str | None) -> str:
    """The annotation's lines after the one to look at: origin, fixes, where to read more."""
    origin = f"\norigin: {safe(origin_text(verdict.origin))}" if verdict.origin else ""
    fixes = "".join(f"\nfix: {safe(fix)}" for fix in verdict.fixes)
    more = link or f"theow failures show {verdict.failure_id}"
    return f"{origin}{fixes}\nfailure {verdict.failure_id}: {more}"


def failed_test_line(test: FailedTest, place: bool = False) -> str:
    """``tests.test_calc::test_add failed: assert 3 == 4`` (after its ``file:line`` with ``place``)."""
    where = ""
    if place and test.file:
        where = safe(test.file if test.line is None else f"{test.file}:{test.line}", 200) + ": "
    message = safe(test.message)
    return f"{where}{safe(test.name, 300)} failed" + (f": {message}" if message else "")


# Markdown: GitHub's job summary and Buildkite's annotation.

# Markdown's punctuation, but ``-``, ``+`` and ``.``: they act only at a line's start,
# where untrusted text never is (a heading's or a list item's marker comes first).
MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#!|~])")


def markdown_text(text: str) -> str:
    r"""Text that Markdown shows as it is: no link, emphasis, HTML or heading.

    >>> markdown_text("<img src=x> [a](b) *c*")
    '&lt;img src=x&gt; \\[a\\]\\(b\\) \\*c\\*'
    """
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return MARKDOWN_SPECIAL.sub(r"\\\1", text)


def fenced(lines: list[str]) -> str:
    """A code block no line inside can close: its fence is longer than any run of backticks."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return "\n".join([fence + "text", *lines, fence])


def markdown(verdict: Verdict, link: str | None) -> str:
    parts = [f"### Theow: {markdown_text(headline(verdict))}"]
    if verdict.origin:  # is it mine? before what failed
        parts.append(f"**Origin:** {markdown_text(safe(origin_text(verdict.origin)))}")
    looks = lines_to_look_at(verdict)
    if looks:
        parts += ["Lines to look at:", fenced([str(look) for look in looks])]
    else:
        parts.append("No line to look at.")
    if verdict.tests:
        shown = [failed_test_line(t, place=True) for t in verdict.tests[:MAX_TESTS_LISTED]]
        parts += [f"Failed tests ({len(shown)}):", fenced(shown)]
    fixes = [safe(fix) for fix in verdict.fixes]
    if fixes:  # the answer in plain words, before what was tried to find it
        parts += ["Fix:", fenced(fixes)]
    said = [safe(" ".join(line.split())) for line in explained(verdict.explanation)]
    if said:  # a model's words: masked on the worker, escaped here like log text
        parts.append("Explanation:\n\n" + "\n".join(f"- {markdown_text(s)}" for s in said))
    done = what_was_done(verdict)
    if done:
        parts.append("What was done:\n\n" + "\n".join(f"- {markdown_text(d)}" for d in done))
    failure = safe(verdict.failure_id, 100).replace("`", "")
    if link:
        parts.append(f"Failure [{markdown_text(failure)}]({link}) in the Theow console.")
    else:
        parts.append(f"Failure `{failure}`: `theow failures show {failure}`.")
    return "\n\n".join(parts) + "\n"


# GitLab's collapsible section.


def gitlab_section(block: str, verdict: Verdict, started: float, ended: float) -> str:
    name = "theow_" + SECTION_NAME.sub("_", verdict.failure_id)[:40]
    header = title(verdict)
    return (
        f"\x1b[0Ksection_start:{int(started)}:{name}[collapsed=true]\r\x1b[0K{header}\n"
        f"{block}\n"
        f"\x1b[0Ksection_end:{int(ended)}:{name}\r\x1b[0K"
    )


def now() -> float:
    """The clock of GitLab's section markers (a test replaces it)."""
    return time.time()


def show_verdict(
    verdict: Verdict,
    environ: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    clock: Callable[[], float] | None = None,
) -> None:
    """Show ``verdict`` in the build log, and where the CI shows it. Never raises for the CI's sake."""
    environ = _environ() if environ is None else environ
    out, err = stdout or sys.stdout, stderr or sys.stderr
    block = prefixed(format_verdict(verdict))
    try:
        ci = ci_of(environ)
    except ValueError as exc:
        print(f"theow: {exc}; plain output", file=err)
        ci = CI.PLAIN
    link = console_link(verdict, config.console_url())
    if ci is CI.GITLAB:
        started = (clock or now)()
        if link:
            block += f"\ntheow: console: {link}"
        ended = (clock or now)()
        print(gitlab_section(block, verdict, started, ended), file=err, flush=True)
        return
    print(block, file=err, flush=True)
    try:
        if ci is CI.GITHUB:
            cwd = Path(os.getcwd())
            workspace = Path(environ.get("GITHUB_WORKSPACE") or cwd)
            print(github_annotation(verdict, workspace, link, cwd), file=out, flush=True)
            write_summary(environ.get("GITHUB_STEP_SUMMARY", ""), markdown(verdict, link), err)
        elif ci is CI.BUILDKITE:
            annotate_buildkite(markdown(verdict, link), environ, err, level(verdict))
    except Exception as exc:  # the block is shown; the CI's page must not cost the re-run
        print(f"theow: {ci} output failed ({type(exc).__name__}: {exc})", file=err)


def write_summary(path: str, text: str, err: TextIO) -> None:
    if not path:
        print("theow: no GITHUB_STEP_SUMMARY file; no job summary", file=err)
        return
    try:
        with open(path, "a", encoding="utf-8") as summary:
            summary.write(text)
    except OSError as exc:
        print(f"theow: job summary not written ({path}: {exc.strerror or exc})", file=err)


def annotate_buildkite(
    text: str, environ: Mapping[str, str], err: TextIO, style: str = "error"
) -> None:
    agent = shutil.which("buildkite-agent", path=environ.get("PATH"))
    if agent is None:  # a Buildkite build in a container without the agent: the block is shown
        return
    command = [agent, "annotate", "--style", style, "--context", "theow"]
    try:
        done = subprocess.run(
            command, input=text, text=True, capture_output=True, timeout=AGENT_TIMEOUT, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"theow: buildkite-agent annotate failed ({type(exc).__name__}: {exc})", file=err)
        return
    if done.returncode != 0:
        why = safe(done.stderr or done.stdout, 200) or f"exit {done.returncode}"
        print(f"theow: buildkite-agent annotate failed: {why}", file=err)
