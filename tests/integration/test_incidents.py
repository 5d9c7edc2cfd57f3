"""Incidents over the SQL ledger: the twin reads as the in-memory one, and the CLI, the
console page and ``GET /api/v1/incidents`` show them from real runs in SQLite."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import add_token
from tests.integration.test_api import conforms
from theow_workers.config import Settings
from theow_workers.core.history.model import Decision, Origin, Outcome, Run
from theow_workers.store.run_reads import SqlRunReads
from theow_workers.store.runs import LedgerRun, SqlRuns
from theow_workers.store.schema import make_engine, migrate
from theow_workers.views.incidents import IncidentFilter, incident_list
from theow_workers.views.memory import MemoryRunReads

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "incident-console-pw"
HOUR = 3600.0
NOW = time.time()
CAUSE = "pytest_failed|e assert <n> == <n>"


def run(rid: str, sha: str, outcome: str, hours_ago: float, *, repo: str = "acme/app",
        branch: str = "main", pr: str | None = None, cause: str = CAUSE) -> Run:  # fmt: skip
    failed = outcome == "failed"
    at = NOW - hours_ago * HOUR
    return Run(id=rid, repo=repo, job="test", branch=branch, sha=sha, outcome=Outcome(outcome),
               finished_at=at, started_at=at - 300, cause=cause if failed else None,
               pr=pr)  # fmt: skip


RUNS = [
    # acme/app: main broke at b, a pull request based on it failed the same way, c fixed it.
    run("a1", "a", "passed", 50),
    run("a2", "b", "failed", 40),
    run("a3", "bb", "failed", 39),
    run("p1", "f1", "failed", 38, branch="feature", pr="12"),
    run("a4", "c", "passed", 30),
    # acme/lib (default branch trunk): broken now.
    run("l1", "x", "failed", 2, repo="acme/lib", branch="trunk", cause="cargo|error[E0308]"),
    run("l2", "y", "failed", 1, repo="acme/lib", branch="trunk", cause="cargo|error[E0308]"),
]
DECIDED = {"p1": Decision(Origin.MAIN, "main fails the same way", culprit="b")}


@pytest.fixture
def ledger(tmp_path: Path) -> tuple[str, Path]:
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    runs = SqlRuns(make_engine(url))
    for r in RUNS:
        runs.record(LedgerRun(r, agent="ci-1", source="client"))
        if r.id in DECIDED:
            runs.set_origin("ci-1", r.id, DECIDED[r.id], then=True)
    runs.learn_default_branch("acme/lib", "trunk", "webhook")
    return url, tmp_path


def test_the_sql_ledger_gives_the_incidents_the_memory_twin_gives(ledger):
    url, _ = ledger
    sql = SqlRunReads(make_engine(url))
    memory = MemoryRunReads(RUNS, DECIDED, {"acme/lib": "trunk"})
    for where in (IncidentFilter(), IncidentFilter(state="open"), IncidentFilter(kind="flaky")):
        assert incident_list(sql, where, NOW) == incident_list(memory, where, NOW)
    app, lib = incident_list(sql, IncidentFilter(), NOW)[::-1]
    assert (app.culprit, app.fixed_by, app.runs_affected) == ("b", "c", 3)
    assert (lib.repo, lib.state.value, lib.culprit) == ("acme/lib", "open", "x")


def theow(*args: str, home: Path, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", *args], cwd=home, capture_output=True,
        text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "200",
             "THEOW_HOME": str(home / "home"), "THEOW_DATABASE_URL": url},
    )  # fmt: skip


def test_theow_incidents_list_and_show(ledger):
    url, home = ledger
    listed = theow("incidents", "list", "--json", home=home, url=url)
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)["incidents"]
    assert [(i["repo"], i["state"]) for i in found] == [
        ("acme/lib", "open"),
        ("acme/app", "closed"),
    ]
    only_open = json.loads(theow("incidents", "list", "--json", "--state", "open", home=home,
                                 url=url).stdout)["incidents"]  # fmt: skip
    assert [i["repo"] for i in only_open] == ["acme/lib"]
    table = theow("incidents", "list", home=home, url=url)
    assert "2 incident(s)" in table.stdout and "acme/lib test" in table.stdout

    shown = theow("incidents", "show", found[1]["id"][:8], home=home, url=url)
    assert shown.returncode == 0, shown.stderr
    assert "culprit: b, fixed by c" in shown.stdout and "inherited" in shown.stdout
    as_json = json.loads(theow("incidents", "show", found[1]["id"], "--json", home=home,
                               url=url).stdout)  # fmt: skip
    assert [m["what"] for m in as_json["timeline"]] == ["opened", "failed", "inherited", "fixed"]


def test_a_wrong_filter_or_id_is_one_line_and_a_nonzero_exit(ledger):
    url, home = ledger
    bad = theow("incidents", "list", "--state", "shut", home=home, url=url)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: state 'shut': use open, closed"
    missing = theow("incidents", "show", "zzzzzzzz", home=home, url=url)
    assert missing.returncode == 1 and missing.stderr.startswith("error: no incident 'zzzzzzzz'")


def test_the_console_page_and_the_api_show_the_incidents(ledger):
    from starlette.testclient import TestClient

    from theow_workers.web.app import create_app

    url, home = ledger
    settings = Settings.load(env={
        "THEOW_DATABASE_URL": url, "THEOW_HOME": str(home / "home"),
        "THEOW_RULES_DIR": str(ROOT / "rules"), "THEOW_ACTIONS_DIR": str(ROOT / "actions"),
        "THEOW_WEB_PASSWORD": PASSWORD, "THEOW_REDIS_URL": "redis://127.0.0.1:1/0",
    })  # fmt: skip
    token = add_token(url, "dashboard", "api-read")
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as http:
        api = http.get("/api/v1/incidents?state=open", headers={"Authorization": f"Bearer {token}"})
        assert api.status_code == 200, api.text
        [lib] = api.json()["incidents"]
        assert lib["repo"] == "acme/lib" and lib["culprit"] == "x"
        document = http.get("/api/v1/openapi.json").json()
        conforms(document, "IncidentList", api.json())
        one = http.get(
            f"/api/v1/incidents/{lib['id']}", headers={"Authorization": f"Bearer {token}"}
        )
        assert one.status_code == 200 and one.json()["timeline"][0]["what"] == "opened"
        conforms(document, "IncidentDetail", one.json())
        bad = http.get("/api/v1/incidents?kind=x", headers={"Authorization": f"Bearer {token}"})
        assert bad.status_code == 400 and "kind 'x'" in bad.json()["error"]
        assert http.get("/api/v1/incidents").status_code == 401

        login = http.post("/login", data={"name": "ada", "password": PASSWORD, "next": "/"},
                          headers={"origin": "http://127.0.0.1"}, follow_redirects=False)  # fmt: skip
        assert login.status_code == 303, login.text
        page = http.get("/incidents", headers={"accept": "text/html"})
        assert page.status_code == 200
        assert f'<a href="/incidents/{lib["id"]}">' in page.text and "acme/lib" in page.text
        detail = http.get(f"/incidents/{lib['id']}", headers={"accept": "text/html"})
        assert detail.status_code == 200 and "cargo|error[E0308]" in detail.text
        assert http.get("/incidents/zzzzzzzz", headers={"accept": "text/html"}).status_code == 404
