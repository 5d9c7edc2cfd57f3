"""The shipped rules for documentation link checkers and gulp's task errors.

A link checker fails a build with a list of links and a count; a person needs
the first link it names, on the document's line, not the count. Each case goes
through the path a worker takes, on a Travis log: the rule chosen, what it
captured and the line a person is shown.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers import evaluation
from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.plan import Hints, RuleBook, plan

ROOT = Path(__file__).resolve().parents[3]
FAILED = '\x1b[31;1mThe command "{}" exited with 1.\x1b[0m\r\n'


@pytest.fixture(scope="module")
def book() -> RuleBook:
    return Library.load(ROOT / "rules", ROOT / "actions").book


def shown(book: RuleBook, log: str) -> tuple[str | None, dict[str, str], str]:
    """(chosen rule, its named captures, the evidence line)."""
    outcome, _ = evaluation.decide(book, {"log": log}, "f1")
    attempts = [c for c in plan(book, {"log": log}, Hints()).attempts if not c.generic]
    captures = attempts[0].match.captures.named if attempts and attempts[0].match else {}
    evidence = (outcome.evidence or {}).get("text", "")
    return outcome.rule, {k: v for k, v in captures.items() if v is not None}, evidence


def test_awesome_bot_shows_its_first_issue_with_the_document_line_and_status(book):
    log = (
        "$ awesome_bot README.md --allow-dupe\r\n"
        "Checking URLs: ✓✓→✓✓x✓\r\n"
        "Issues :-( \r\n"
        "> Links \r\n"
        "  1. [L296] 301 https://github.com/a/helm-dash  → https://github.com/b/helm-dash \r\n"
        "  2. [L494] 502 https://www.emacswiki.org/emacs/MakefileMode  \r\n"
        "> Dupes \r\n"
        "  None ✓\r\n"
        "Wrote results to ab-results-README.md.json\r\n" + FAILED.format("awesome_bot README.md")
    )
    rule, captures, evidence = shown(book, log)
    assert rule == "awesome_bot_link_issues"
    assert (captures["line"], captures["status"]) == ("296", "301")
    assert evidence.startswith("1. [L296] 301 https://github.com/a/helm-dash")


def test_awesome_bot_with_no_issues_is_no_failure(book):
    log = "Checking URLs: ✓✓✓\r\nNo issues :-) \r\nWrote results to ab-results-README.md.json\r\n"
    assert shown(book, log)[0] is None


def test_html_proofer_shows_the_first_page_and_what_is_wrong_on_it(book):
    log = (
        'Running ["LinkCheck"] on ["./_site"] on *.html... \r\n'
        "- ./_site/patterns/visitor/index.html\r\n"
        "  *  internally linking to ../visitor/README.md, which does not exist (line 1)\r\n"
        "- ./_site/patterns/proxy/index.html\r\n"
        "  *  External link http://www.example.edu/proxy.pdf failed: 404 No error\r\n"
        "htmlproofer 3.0.6 | Error:  HTML-Proofer found 2 failures!\r\n"
        + FAILED.format("bash cibuild.sh")
    )
    rule, captures, evidence = shown(book, log)
    assert rule == "html_proofer_failures"
    assert captures["file"] == "./_site/patterns/visitor/index.html"
    assert captures["message"].startswith("internally linking to ../visitor/README.md")
    assert evidence == "- ./_site/patterns/visitor/index.html"


def test_linkinator_shows_the_first_broken_link_with_its_status(book):
    log = (
        "> linkinator _gh_pages --recurse --silent\r\n"
        "\r\n"
        "  [404] http://localhost:5710/docs/dist/js/app.bundle.js\r\n"
        "\r\n"
        "ERROR: Detected 1 broken links. Scanned 589 links in 5.881 seconds.\r\n"
        "npm ERR! code ELIFECYCLE\r\n" + FAILED.format("npm test")
    )
    rule, captures, evidence = shown(book, log)
    assert (rule, captures["status"]) == ("linkinator_broken_links", "404")
    assert evidence == "[404] http://localhost:5710/docs/dist/js/app.bundle.js"


def test_gulp_names_the_task_its_gulpfile_does_not_define(book):
    log = (
        "> gulp\r\n"
        "[\x1b[90m02:22:53\x1b[39m] Using gulpfile \x1b[35m~/build/site/gulpfile.js\x1b[39m\r\n"
        "[\x1b[90m02:22:53\x1b[39m] \x1b[31mTask never defined: default\x1b[39m\r\n"
        "[\x1b[90m02:22:53\x1b[39m] To list available tasks, try running: gulp --tasks\r\n"
        "npm ERR! Test failed.  See above for more details.\r\n" + FAILED.format("npm test")
    )
    rule, captures, _ = shown(book, log)
    assert (rule, captures["task"]) == ("gulp_task_failed", "default")
