"""A forge token crosses the network only over https.

The fake forge (``tests/fakes/forge_server.py``) listens on plain http on one of
this machine's own addresses that is not loopback, as a GitLab reached by an
``http://`` URL would: whatever it receives, it records. Loopback stays allowed
(the fake forges of the other tests are on 127.0.0.1).
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.fakes.forge_server import FakeForge
from tests.security.test_console_door import environment
from theow_workers.adapters.forges import ForgeAPI, ForgeError
from theow_workers.integrations.hooks import github_job, gitlab_job

pytestmark = pytest.mark.integration


def own_address() -> str:
    """An address of this machine that is not loopback (none: the test is skipped)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
            address = str(probe.getsockname()[0])
        except OSError:
            address = ""
    if not address or address.startswith("127.") or address == "0.0.0.0":
        pytest.skip("this machine has no address but loopback")
    return address


def gitlab_failed_job():
    return gitlab_job(
        {
            "object_kind": "build",
            "build_id": 31,
            "build_name": "test",
            "build_status": "failed",
            "project_id": 5,
            "sha": "feed01",
            "ref": "main",
            "project": {"id": 5, "path_with_namespace": "acme/app", "default_branch": "main"},
        }
    )


def github_failed_job():
    return github_job(
        {
            "action": "completed",
            "repository": {"full_name": "acme/app"},
            "workflow_job": {
                "id": 32,
                "run_attempt": 1,
                "name": "test",
                "workflow_name": "CI",
                "conclusion": "failure",
                "head_sha": "feed01",
                "html_url": "https://github.com/acme/app/actions/runs/1/job/32",
            },
        }
    )


@pytest.mark.parametrize(
    ("forge", "job", "setting"),
    [
        ("gitlab", gitlab_failed_job, "THEOW_GITLAB_URL"),
        ("github", github_failed_job, "THEOW_GITHUB_API_URL"),
    ],
)
def test_a_forge_on_plain_http_elsewhere_never_receives_the_token(forge, job, setting):
    with FakeForge(token="glpat-secret-token", host=own_address()) as fake:
        fake.logs["31"] = fake.logs["32"] = "ECHO broken"
        api = ForgeAPI(forge, fake.url, fake.token)
        try:
            with pytest.raises(ForgeError) as refused:
                api.job_log(job())
        finally:
            api.close()
        assert fake.requests == [] and fake.tokens_seen == []  # not a byte reached it
    message = str(refused.value)
    assert setting in message and "https" in message and "not sent" in message
    assert "glpat-secret-token" not in message and "\n" not in message


def test_a_forge_on_loopback_is_still_spoken_to_over_http():
    with FakeForge(token="glpat-secret-token") as fake:
        fake.logs["31"] = "ECHO broken"
        api = ForgeAPI("gitlab", fake.url, fake.token)
        try:
            assert "ECHO broken" in api.job_log(gitlab_failed_job())
        finally:
            api.close()


@pytest.mark.parametrize("variable", ["THEOW_GITLAB_URL", "THEOW_GITHUB_API_URL"])
def test_a_forge_url_on_plain_http_stops_a_command_with_one_line(tmp_path, variable):
    env = environment(tmp_path / "home", **{variable: "http://gitlab.example.com:8080"})
    result = subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "tokens", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: bad {variable} ")
    assert "only over https" in lines[0]
