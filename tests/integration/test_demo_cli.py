"""``theow demo`` beside a user's own failures: its rows are the demo's, not the user's traffic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "failures.jsonl"

pytestmark = pytest.mark.integration


def theow(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", *args],
        cwd=cwd, capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def after_the_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path, int]:
    """A fresh home on free ports after ``theow demo`` ran some of the examples."""
    work = tmp_path_factory.mktemp("demo")
    failures = work / "failures.jsonl"
    sample = EXAMPLES.read_text().splitlines()[:12]
    failures.write_text("\n".join(sample) + "\n")
    cache = Path.home() / ".cache" / "theow"
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(Path.home()),
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "COLUMNS": "200",
        "THEOW_HOME": str(work / ".theow"),
        "THEOW_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "THEOW_MILVUS_URI": f"http://127.0.0.1:{free_port()}",
        "THEOW_RULES_DIR": str(ROOT / "rules"),
        "THEOW_ACTIONS_DIR": str(ROOT / "actions"),
        "THEOW_SCANNER_CACHE": os.environ.get("THEOW_SCANNER_CACHE", str(cache / "scanner")),
        "THEOW_EMBEDDING_CACHE": os.environ.get("THEOW_EMBEDDING_CACHE", str(cache / "embeddings")),
    }
    ran = theow("demo", "--failures", str(failures), env=env, cwd=work)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return env, work, len(sample)


def test_the_demos_failures_are_not_listed_as_the_users_own(after_the_demo):
    env, work, submitted = after_the_demo

    live = theow("failures", "list", "--json", env=env, cwd=work)
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout) == []

    demo = theow("failures", "list", "--source", "demo", "--json", env=env, cwd=work)
    rows = json.loads(demo.stdout)
    assert len(rows) == submitted and {r["source"] for r in rows} == {"demo"}
    every = theow("failures", "list", "--source", "all", "--json", env=env, cwd=work)
    assert len(json.loads(every.stdout)) == submitted


def test_meow_counts_the_demo_only_when_asked_to(after_the_demo):
    env, work, submitted = after_the_demo

    mine = json.loads(theow("meow", "--json", env=env, cwd=work).stdout)
    assert (mine["failures"], mine["resolves"], mine["client_pending"]) == (0, 0, 0)
    assert mine["top_rules"] == [] and mine["pending_rules"] == []

    with_demo = json.loads(theow("meow", "--demo", "--json", env=env, cwd=work).stdout)
    assert with_demo["failures"] == submitted and with_demo["resolves"] > 0
