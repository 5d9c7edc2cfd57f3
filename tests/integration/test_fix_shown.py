"""The fix a rule's action suggests, said in plain words wherever a failure is read.

A Python build fails on a missing module; the shipped rule and action resolve it
as a worker does, and ``theow failures show`` (as a user runs it, in a subprocess)
and the console's failure page both give a ``fix`` line, not only the action's JSON.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from theow_client.client import build_payload
from theow_client.messages import SubmitRequest
from theow_client.verdict import Status
from theow_workers.config import Settings
from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.service import ResolveService
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import migrate

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "reviewer-fix-pw"
LOG = (
    "ImportError while importing test module '/src/tests/test_render.py'.\n"
    "tests/test_render.py:3: in <module>\n"
    "    import yaml\n"
    "E   ModuleNotFoundError: No module named 'yaml'\n"
)
FIX = "pip install PyYAML (and declare PyYAML in the project's dependencies)"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Theow home whose database holds one failure the shipped rule resolved (the tests read it)."""
    tmp_path = tmp_path_factory.mktemp("fix-shown")
    home, rules = tmp_path / "home", tmp_path / "rules"
    home.mkdir()
    rules.mkdir()
    shutil.copy(ROOT / "rules" / "python_module_not_found.rule.yaml", rules)
    url = f"sqlite:///{home / 'theow.db'}"
    migrate(url)
    library = Library.load(rules, ROOT / "actions")
    sql = SqlStore(url)
    service = ResolveService(sql, rulebook=lambda: library.book, actions=lambda: library.actions)
    payload = build_payload({"log": LOG}, failure_id="py-1")
    assert service.resolve(SubmitRequest.from_wire(payload), "py-1").status is Status.SUGGESTED
    sql.dispose()
    return home


def theow(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "THEOW_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


def test_failures_show_says_the_fix_the_action_suggests_and_the_whole_evidence_line(
    home: Path,
) -> None:
    shown = theow("failures", "show", "py-1", home=home)
    assert shown.returncode == 0, shown.stderr
    assert f"fix:     {FIX}" in shown.stdout.splitlines()
    as_json = json.loads(theow("failures", "show", "py-1", "--json", home=home).stdout)
    assert as_json["verdict"]["fixes"] == [FIX]
    assert (
        as_json["verdict"]["evidence"]["text"] == "E   ModuleNotFoundError: No module named 'yaml'"
    )


def test_the_console_failure_page_says_the_fix(home: Path) -> None:
    from starlette.testclient import TestClient

    from theow_workers.web.app import create_app

    settings = Settings.load(env={
        "THEOW_DATABASE_URL": f"sqlite:///{home / 'theow.db'}", "THEOW_HOME": str(home),
        "THEOW_RULES_DIR": str(ROOT / "rules"), "THEOW_ACTIONS_DIR": str(ROOT / "actions"),
        "THEOW_WEB_PASSWORD": PASSWORD, "THEOW_REDIS_URL": "redis://127.0.0.1:1/0",
    })  # fmt: skip
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as http:
        login = http.post(
            "/login",
            data={"name": "ada", "password": PASSWORD, "next": "/"},
            headers={"origin": "http://127.0.0.1"},
            follow_redirects=False,
        )
        assert login.status_code == 303, login.text
        page = http.get("/failures/py-1", headers={"accept": "text/html"})
    assert page.status_code == 200
    assert (
        '<dt>fix</dt><dd><ul class="fixes" id="fixes"><li><code>'
        "pip install PyYAML (and declare PyYAML in the project&#39;s dependencies)"
        "</code></li></ul></dd>"
    ) in page.text
