"""The web console in a real browser: headless Chromium (Debian's) driven by Playwright.

The server is the real app under uvicorn on a loopback port, over a SQLite
store seeded through the store and explorer code; approving goes through the
review service the CLI uses. Set ``THEOW_WEB_SCREENSHOTS=docs`` to refresh
the README's screenshots.
"""

from __future__ import annotations

import difflib
import os
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port, unavailable
from theow_client.messages import SubmitRequest
from theow_client.verdict import Status, Verdict
from theow_workers.config import Settings
from theow_workers.core.ports import AttemptRecord, Exploration, FailureRecord
from theow_workers.store.explore import ExploreStore
from theow_workers.store.replay import ReplayStore
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import ExplorationRow, VerdictRow, migrate

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PASSWORD, READONLY = "reviewer-console-pw", "reader-console-pw"
CHROMIUM = ("chromium", "/usr/bin/chromium", "chromium-browser", "google-chrome")
HISTORY = 84  # failures over 21 days
RESOLVED = 7 * (3 + 2 + 1)
SCRIPT_LINE = "<script>document.title='pwned'</script> ECHO hello"

RULE = """\
name: web_echo_rule
description: The build printed WEBECHO and a word; echo it with the new action.
when:
  - fact: stderr
    regex: 'WEBECHO (?P<word>\\w+)'
    examples: ["WEBECHO hello"]
then:
  - action: web_echo
    params: {word: "{word}"}
"""
ACTION = '''"""Echo a word (proposed by the explorer)."""

from theow_workers import action


@action("web_echo")
def web_echo(word: str) -> dict:
    """Return the word."""
    return {"status": "ok", "word": word}
'''
OTHER_RULE = RULE.replace("web_echo_rule", "web_other_rule").replace("web_echo", "echo")
LINKER_RULE = """\
name: web_linker_rule
description: A symbol the linker cannot find.
mode: track
when:
  - fact: stderr
    regex: 'linker: undefined symbol (?P<symbol>\\w+)'
    examples: ["linker: undefined symbol s1"]
"""


def chromium() -> str:
    for name in CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    unavailable("Chromium (apt-get install chromium)")
    raise AssertionError  # unreachable


def new_file_diff(path: str, text: str) -> dict[str, str]:
    lines = difflib.unified_diff([], text.splitlines(keepends=True), "/dev/null", f"b/{path}")
    return {"path": path, "diff": "".join(lines), "base_sha256": ""}


def seed(url: str) -> dict[str, str]:
    sql = SqlStore(url)
    explore = ExploreStore(sql)
    now = datetime.now(UTC)
    log = "\n".join(["step 1: compile", "warning: deprecated", SCRIPT_LINE, "WEBECHO hello",
                     "make: *** [all] Error 1"])  # fmt: skip
    ids: dict[str, str] = {}
    # Three weeks of history for the insight plots: the hit rate climbing as rules were
    # approved, a few explorations a day; the unmatched in three root causes.
    for n in range(HISTORY):
        day = n // 4
        fid = f"hist-{n:02d}"
        at = now - timedelta(days=day, hours=1 + n % 4)
        matched = n % 4 < (3 if day < 7 else 2 if day < 14 else 1)
        facts = {"stderr": f"ECHO word{n}" if matched else f"linker: undefined symbol s{n % 3}",
                 "repo": "acme/app", "job": "build"}  # fmt: skip
        sql.add_failure(FailureRecord(fid, f"fp{n % 3}", facts, "build_failure", "ci", at))
        sql.add_verdict(Verdict(fid, Status.RESOLVED if matched else Status.UNMATCHED,
                                rule="tf_echo" if matched else None,
                                reason="resolved" if matched else "no rule matched"))  # fmt: skip
        if matched:
            sql.add_attempt(AttemptRecord(fid, "tf_echo", [{"action": "echo", "params": {"word": "x"},
                                          "output": {"status": "ok"}}], "success", duration_ms=3))  # fmt: skip
            sql.count_attempt("tf_echo", True)
        else:
            gave_up = Exploration(fid, f"fp{n % 3}", "gave_up", reason="no fix found",
                                  models=["gemini-2.5-flash"], turns=3, tokens_in=30000 + 900 * n,
                                  tokens_out=1200, cost=0.01 + 0.0004 * n)  # fmt: skip
            explore.add_exploration(gave_up)
            with sql.session.begin() as s:
                s.query(ExplorationRow).filter_by(id=gave_up.id).update({"finished_at": at})
        with sql.session.begin() as s:
            s.query(VerdictRow).filter_by(failure_id=fid).update({"decided_at": at})
    for name, rule_yaml, diffs, cost, text in (
        ("web_echo_rule", RULE, [new_file_diff("actions/web_echo.py", ACTION)], 0.0123, log),
        ("web_other_rule", OTHER_RULE, [], 0.004, log),
        ("web_linker_rule", LINKER_RULE, [], 0.02, "ld: linker: undefined symbol s7"),
    ):
        fid = f"source-{name}"
        sql.add_failure(FailureRecord(fid, f"fp-{name}", {"stderr": text, "repo": "acme/app",
                                      "job": "build"}, "build_failure", "ci", now))  # fmt: skip
        sql.add_verdict(Verdict(fid, Status.UNMATCHED, reason="no rule matched"))
        transcript = [
            {"role": "user", "text": "Investigate this failure"},
            {"role": "model", "model": "gemini-2.5-flash", "text": "<b>Let me test</b> a rule",
             "function_calls": [{"name": "test_rule", "args": {"rule_yaml": rule_yaml}}],
             "tokens_in": 12000, "tokens_out": 800},
            {"role": "user", "text": "", "function_responses": [{"name": "test_rule",
             "response": {"result": {"matches": True, "facts": {"stderr": "ok"}}}}]},
            {"role": "model", "model": "gemini-2.5-flash", "text": "Submitting.",
             "function_calls": [{"name": "submit_rule", "args": {}}], "tokens_in": 13000,
             "tokens_out": 600},
        ]  # fmt: skip
        exploration = Exploration(fid, f"fp-{name}", "proposal", models=["gemini-2.5-flash"],
                                  turns=2, tokens_in=25000, tokens_out=1400, cost=cost,
                                  transcript=transcript)  # fmt: skip
        pid = f"prop-{name}"
        exploration.proposal_id = pid
        explore.add_exploration(exploration, {"id": pid, "rule_name": name, "rule_yaml": rule_yaml,
                                              "diffs": diffs, "status": "pending"})  # fmt: skip
        ids[name] = pid
        ids[f"failure-{name}"] = fid
    ReplayStore(sql.engine).create(id="replay-1", kind="file", source="history.jsonl",
                                   source_key="k", status="done", rules=["tf_echo"],
                                   total=HISTORY, processed=HISTORY, matched=RESOLVED,
                                   unmatched=HISTORY - RESOLVED)  # fmt: skip
    ReplayStore(sql.engine).create(id="replay-2", kind="file", source="more.jsonl", source_key="m",
                                   status="running", rules=["tf_echo"], total=100, processed=40,
                                   matched=30, unmatched=10)  # fmt: skip
    sql.dispose()
    return ids


class Server:
    def __init__(self, settings: Settings) -> None:
        import uvicorn

        from theow_workers.web.app import create_app

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="on")  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the console did not start within 30 s"
            assert self.thread.is_alive(), "the console's server thread ended"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("web")
    rules, actions = root / "rules", root / "actions"
    shutil.copytree(FIXTURES / "rules", rules)
    shutil.copytree(FIXTURES / "actions", actions)
    url = f"sqlite:///{root / 'theow.db'}"
    migrate(url)
    ids = seed(url)
    settings = Settings.load(env={
        "THEOW_DATABASE_URL": url, "THEOW_RULES_DIR": str(rules), "THEOW_ACTIONS_DIR": str(actions),
        "THEOW_HOME": str(root / "home"), "THEOW_WEB_PASSWORD": PASSWORD,
        "THEOW_WEB_READONLY_PASSWORD": READONLY,
        "THEOW_REDIS_URL": "redis://127.0.0.1:1/0",  # no broker: the index sync is deferred
    })  # fmt: skip
    with Server(settings) as server:
        yield {"url": server.url, "ids": ids, "rules": rules, "actions": actions, "db": url}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package (pip install '.[dev]')")

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])  # fmt: skip
        yield launched
        launched.close()


def logged_in(browser: Any, base: str, password: str = PASSWORD, name: str = "ada") -> Any:
    context = browser.new_context(base_url=base, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto("/queue")
    assert "/login" in page.url  # not logged in yet: sent to the login page
    page.fill("input[name=name]", name)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url("**/queue")
    return page


def screenshot(page: Any, name: str, tmp_path: Path) -> None:
    folder = os.environ.get("THEOW_WEB_SCREENSHOTS")
    target = (Path(folder) if folder else tmp_path) / f"web-{name}.png"
    page.screenshot(path=str(target), full_page=False)
    assert target.stat().st_size > 10_000


def test_a_reviewer_approves_a_proposal_and_finds_its_rule_in_the_catalogue(
    console, browser, tmp_path
):
    page = logged_in(browser, console["url"])
    queue = page.locator("#queue")
    assert queue.get_by_text("web_echo_rule").is_visible()
    # How many stored failures the rule would have matched, counted in the background.
    deadline = time.monotonic() + 20
    stored = HISTORY + 3
    while f"2 of {stored} stored failures" not in queue.inner_text():  # its own and one alike
        assert time.monotonic() < deadline, queue.inner_text()
        page.reload()
    unmatched = HISTORY - RESOLVED + 1
    waiting = queue.locator("tbody tr").count()
    first = queue.locator("tbody tr").first.inner_text()  # the most affecting first
    assert "web_linker_rule" in first and f"{unmatched} of {stored} stored failures" in first
    screenshot(page, "queue", tmp_path)

    page.click("text=web_echo_rule")
    page.wait_for_url("**/proposals/prop-web_echo_rule")
    diff = page.locator(".diff").first
    assert '+@action("web_echo")' in diff.inner_text()
    assert diff.locator("span.gi").count() > 0  # the added lines highlighted
    assert page.locator("#check").inner_text() == "matches"
    assert page.locator("tr.ev").inner_text().count("WEBECHO hello") == 1  # evidence marked
    assert "matches" in page.locator(".json").first.inner_text()  # what test_rule said
    assert "12,000 in / 800 out" in page.locator(".turns").inner_text()
    assert "<b>Let me test</b> a rule" in page.locator(".turns").inner_text()  # LLM text as text
    screenshot(page, "proposal", tmp_path)

    with page.expect_navigation():
        page.click("button.approve")
    assert page.locator("#status").inner_text() == "approved"
    assert "approved web_echo_rule" in page.locator(".flash").inner_text()
    assert "by ada (web)" in page.locator(".reviewed").inner_text()
    assert (console["rules"] / "web_echo_rule.rule.yaml").read_text() == RULE
    assert "def web_echo" in (console["actions"] / "web_echo.py").read_text()

    page.goto("/rules")
    page.click("#rules >> text=web_echo_rule")
    assert "WEBECHO (?P<word>" in page.locator("#rule").inner_text()
    page.goto("/queue")
    # Approving takes its own proposal out of the queue, and only it (another test of the
    # module, in any order, may have rejected web_other_rule already).
    assert page.locator("#queue").get_by_text("web_echo_rule").count() == 0
    assert page.locator("#queue tbody tr").count() == waiting - 1

    page.goto("/insight")
    assert page.locator("svg.chart").count() == 4
    assert "linker: undefined symbol" in page.locator("#groups").inner_text()
    screenshot(page, "insight", tmp_path)

    page.click("text=Replays")
    page.click("#replays >> text=replay-1")
    assert "hit rate 50.0%: 42 of 84 replayed matched" in page.locator("main").inner_text()
    page.goto("/replays/replay-2")  # still running: its progress, and the page refreshes itself
    assert page.locator("progress").get_attribute("value") == "40"
    assert "40 of 100 processed" in page.locator("main").inner_text()
    page.context.close()


def test_a_rejected_proposal_keeps_its_reason(console, browser):
    page = logged_in(browser, console["url"], name="bob")
    page.goto(f"/proposals/{console['ids']['web_other_rule']}")
    page.fill("input[name=reason]", "too broad: <matches> every WEBECHO")
    with page.expect_navigation():
        page.click("button.reject")
    assert page.locator("#status").inner_text() == "rejected"
    assert page.locator("#reason").inner_text() == "too broad: <matches> every WEBECHO"
    assert not (console["rules"] / "web_other_rule.rule.yaml").exists()
    page.goto("/queue")
    assert "too broad: <matches> every WEBECHO" in page.locator("main").inner_text()
    page.context.close()


def test_nothing_is_served_without_a_login(console, browser):
    context = browser.new_context(base_url=console["url"])
    page = context.new_page()
    page.goto(f"/failures/{console['ids']['failure-web_echo_rule']}")
    assert "/login" in page.url
    assert page.locator("input[type=password]").is_visible()
    answer = context.request.get("/queue", headers={"accept": "application/json"}, max_redirects=0)
    assert answer.status == 401
    page.fill("input[name=password]", "wrong")
    page.click("button[type=submit]")
    assert page.locator(".error").inner_text() == "wrong password"
    context.close()


def test_a_post_without_the_csrf_token_is_refused(console, browser):
    page = logged_in(browser, console["url"])
    pid = console["ids"]["web_linker_rule"]
    for form in ({"reason": "x"}, {"csrf": "forged", "reason": "x"}):
        answer = page.request.post(f"/proposals/{pid}/reject", form=form)
        assert answer.status == 403
        assert "CSRF" in answer.text()
    page.goto(f"/proposals/{pid}")
    assert page.locator("#status").inner_text() == "pending"
    page.context.close()


def test_a_read_only_login_sees_proposals_but_cannot_approve(console, browser):
    page = logged_in(browser, console["url"], password=READONLY, name="reader")
    pid = console["ids"]["web_linker_rule"]
    page.goto(f"/proposals/{pid}")
    assert page.locator("#status").inner_text() == "pending"
    assert page.locator("button.approve").count() == 0
    assert "Read-only login" in page.locator(".note").inner_text()
    token = page.locator("input[name=csrf]").first.get_attribute("value")
    answer = page.request.post(f"/proposals/{pid}/approve", form={"csrf": token})
    assert answer.status == 403
    assert "read-only" in answer.text()
    assert not (console["rules"] / "web_linker_rule.rule.yaml").exists()
    page.goto(f"/proposals/{pid}")
    assert page.locator("#status").inner_text() == "pending"
    page.context.close()


def test_a_log_line_holding_a_script_tag_shows_as_text(console, browser):
    page = logged_in(browser, console["url"])
    answer = page.goto(f"/failures/{console['ids']['failure-web_echo_rule']}")
    assert "script-src" not in answer.headers["content-security-policy"]  # no script, ever
    assert page.get_by_text(SCRIPT_LINE).count() == 1  # shown, as text
    assert page.title().startswith("Failure")  # and not run: the title is not 'pwned'
    assert page.locator("main script").count() == 0
    page.goto("/failures?repo=acme/app&outcome=resolved")
    assert page.locator("#failures tbody tr").count() == RESOLVED
    page.goto("/failures")
    assert page.locator("#failures tbody tr").count() == 50  # a page; the next one is linked
    page.click("a[rel=next]")
    assert page.locator("#failures tbody tr").count() == HISTORY + 3 - 50
    page.context.close()


def seed_live_and_replayed(url: str) -> None:
    """One live failure whose client-side fix waits for its agent, two replayed ones, and
    one of ``theow demo``'s whose fix waits too."""
    sql = SqlStore(url)
    now = datetime.now(UTC)
    facts = {"stderr": "missing file app.cfg", "repo": "acme/app", "job": "build"}
    sql.add_failure(FailureRecord("live-1", "fp-live", facts, "build_failure", "theow-client", now))
    sql.record_outcome(Verdict("live-1", Status.SUGGESTED, rule="tf_client_fix", mode="fix"),
                       [AttemptRecord("live-1", "tf_client_fix", [], "client_pending")])  # fmt: skip
    for n in range(2):
        fid = f"replayed-{n}"
        at = now - timedelta(minutes=1 + n)
        sql.add_failure(FailureRecord(fid, "fp-old", facts, "build_failure", "replay:r1", at))
        sql.record_outcome(Verdict(fid, Status.SUGGESTED, rule="tf_client_fix", mode="fix"),
                           [AttemptRecord(fid, "tf_client_fix", [], "suggested")])  # fmt: skip
    sql.add_failure(FailureRecord("demo-1", "fp-demo", facts, "build_failure", "demo", now))
    sql.record_outcome(Verdict("demo-1", Status.SUGGESTED, rule="tf_client_fix", mode="fix"),
                       [AttemptRecord("demo-1", "tf_client_fix", [], "client_pending")])  # fmt: skip
    sql.dispose()


@pytest.fixture(scope="module")
def mixed_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("web-mixed")
    url = f"sqlite:///{root / 'theow.db'}"
    migrate(url)
    seed_live_and_replayed(url)
    settings = Settings.load(env={
        "THEOW_DATABASE_URL": url, "THEOW_RULES_DIR": str(FIXTURES / "rules"),
        "THEOW_ACTIONS_DIR": str(FIXTURES / "actions"), "THEOW_HOME": str(root / "home"),
        "THEOW_WEB_PASSWORD": PASSWORD, "THEOW_REDIS_URL": "redis://127.0.0.1:1/0",
    })  # fmt: skip
    with Server(settings) as server:
        yield {"url": server.url}


def test_the_failures_page_lists_live_failures_unless_replayed_ones_are_asked_for(
    mixed_console, browser
):
    page = logged_in(browser, mixed_console["url"])
    page.goto("/failures")
    rows = page.locator("#failures tbody tr")
    assert rows.count() == 1
    assert rows.first.locator("td.source").inner_text() == "theow-client"
    assert rows.first.locator("td.st-suggested").inner_text() == "suggested"
    page.select_option("select[name=source]", "replay")
    with page.expect_navigation():
        page.click("form.filters button[type=submit]")
    assert [c.inner_text() for c in rows.locator("td.source").all()] == ["replay:r1"] * 2
    page.select_option("select[name=source]", "demo")
    with page.expect_navigation():
        page.click("form.filters button[type=submit]")
    assert [c.inner_text() for c in rows.locator("td.source").all()] == ["demo"]
    page.goto("/failures?source=all")
    assert rows.count() == 4
    answer = page.request.get("/failures?source=everything")
    assert answer.status == 400 and "use live, replay, demo, all" in answer.text()
    page.context.close()


def test_insight_shows_a_client_side_fix_waiting_for_its_agent_as_pending_not_struggling(
    mixed_console, browser
):
    page = logged_in(browser, mixed_console["url"])
    page.goto("/insight")
    assert "tf_client_fix: 1 pending" in page.locator("#pending").inner_text()  # not the demo's
    assert page.get_by_text("Struggling rules").count() == 0
    page.context.close()


BIG_LOG_LINES, KEY_ERROR_AT = 400_000, 399_990


@pytest.fixture(scope="module")
def cut_log_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A console over one unmatched failure whose 400,000-line log the client cut to 64 KB."""
    from theow_client.client import build_payload
    from theow_workers.core.resolve.library import Library
    from theow_workers.core.resolve.service import ResolveService

    root = tmp_path_factory.mktemp("web-cut")
    url = f"sqlite:///{root / 'theow.db'}"
    migrate(url)
    lines = [f"step {n}: compiled module_{n}.c" for n in range(1, BIG_LOG_LINES + 1)]
    lines[KEY_ERROR_AT - 1] = "KeyError: 'DATABASE_URL'"
    knowledge = Library.load(FIXTURES / "rules", FIXTURES / "actions")
    sql = SqlStore(url)
    service = ResolveService(
        sql, rulebook=lambda: knowledge.book, actions=lambda: knowledge.actions
    )
    payload = build_payload({"log": "\n".join(lines) + "\n"}, failure_id="cut-1")
    assert service.resolve(SubmitRequest.from_wire(payload), "cut-1").status is Status.UNMATCHED
    sql.dispose()
    settings = Settings.load(env={
        "THEOW_DATABASE_URL": url, "THEOW_RULES_DIR": str(FIXTURES / "rules"),
        "THEOW_ACTIONS_DIR": str(FIXTURES / "actions"), "THEOW_HOME": str(root / "home"),
        "THEOW_WEB_PASSWORD": PASSWORD, "THEOW_REDIS_URL": "redis://127.0.0.1:1/0",
    })  # fmt: skip
    with Server(settings) as server:
        yield {"url": server.url}


def test_an_unmatched_failure_page_says_which_line_to_look_at_numbered_as_the_build_log(
    cut_log_console, browser
):
    page = logged_in(browser, cut_log_console["url"])
    answer = page.goto("/failures/cut-1")
    assert answer.status == 200
    look_at = page.locator("ol.where li").first.inner_text()
    assert look_at == "log line 399,990 KeyError: 'DATABASE_URL'"
    # The log shown is what was kept; its lines carry the build log's numbers.
    row = page.locator(".log tr", has_text="KeyError: 'DATABASE_URL'")
    assert row.locator("td.n").inner_text() == str(KEY_ERROR_AT)
    assert (
        page.locator(".log tr", has_text="characters omitted").first.locator("td.n").inner_text()
        == ""
    )
    page.context.close()
