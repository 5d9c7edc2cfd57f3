"""The build command `theow-client run` starts cannot read the agent's token or broker URL.

It runs whatever a pull request asks: its environment has none of Theow's
variables, and the client is non-dumpable, so a build running as the same
(non-root) user cannot read them from ``/proc/<client>/environ`` either.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "tw1.ci-7.the-agents-own-secret"
SYSTEM_PYTHON = Path("/usr/bin/python3.11")  # one a user other than root may run
# The build prints its own environment, then tries to read its parent's (the client's).
SHOW = "env; echo ---; tr '\\0' '\\n' < /proc/$PPID/environ; exit 0"


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory any user may write: the unprivileged client's spool and working directory."""
    path = Path(tempfile.mkdtemp(prefix="theow-agent-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def agent_environment(scratch: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(scratch),
        "THEOW_AGENT_TOKEN": TOKEN,
        "THEOW_REDIS_URL": f"redis://agent-ci-7:{TOKEN}@127.0.0.1:{free_port()}/0",
        "THEOW_SPOOL_DIR": str(scratch / "spool"),
        "THEOW_CLIENT_WAIT": "0",
        "CI_JOB_NAME": "build",
    }


def run_build(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    result = subprocess.run(
        [*argv, "-m", "theow_client.cli", "run", "--no-passing", "--", "sh", "-c", SHOW],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_build_command_gets_none_of_theows_variables(scratch):
    env = {**agent_environment(scratch), "PYTHONPATH": str(ROOT)}
    own, _ = run_build([sys.executable], env, scratch).split("---\n")
    assert "CI_JOB_NAME=build" in own  # the build's own variables are all there
    assert "THEOW_" not in own and TOKEN not in own


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_DUMPABLE is Linux's")
def test_a_build_of_the_same_user_cannot_read_the_token_from_the_client_process(scratch):
    if not SYSTEM_PYTHON.exists() or not shutil.which("setpriv") or os.geteuid() != 0:
        pytest.skip("needs root, setpriv and /usr/bin/python3.11 to run the client as nobody")
    import celery

    site = Path(celery.__file__).parents[1]
    # Debian's 3.11.2 predates redis-py's use of asyncio.timeout: its stand-in, as on 3.11.3+.
    (scratch / "async_timeout.py").write_text("from asyncio import timeout\n")
    path = os.pathsep.join([str(ROOT), str(site), str(scratch)])
    env = {**agent_environment(scratch), "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(SYSTEM_PYTHON)]
    own, parents = run_build(nobody, env, scratch).split("---\n")
    assert "CI_JOB_NAME=build" in own
    assert TOKEN not in parents, "the build read the token from the client's /proc/<pid>/environ"
