"""The agent token goes to THEOW_INTAKE_URL and nowhere else.

Real HTTP on loopback: an intake answering 302 to a second server on another
port, which records whether an ``Authorization`` header reached it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from theow_client import signing
from theow_client.intake import HttpIntake, IntakeUnavailable

ROOT = Path(__file__).resolve().parents[2]


def serve(answer: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def redirected() -> Iterator[tuple[str, list[str | None]]]:
    """An intake whose every answer is a 302 to another port; what that port was sent."""
    seen: list[str | None] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"status": "resolved"}')

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    other, other_url = serve(Elsewhere)

    class Moved(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"{other_url}{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    intake, url = serve(Moved)
    yield url, seen
    for server in (intake, other):
        server.shutdown()
        server.server_close()


def test_a_redirect_is_not_followed_and_the_token_reaches_no_other_host(redirected):
    url, seen = redirected
    intake = HttpIntake(url, signing.AgentToken.generate("agent-a"))
    with pytest.raises(IntakeUnavailable, match=r"answered a redirect \(302") as raised:
        intake.verdict("f-1")
    assert url in str(raised.value) and "THEOW_INTAKE_URL" in str(raised.value)
    with pytest.raises(IntakeUnavailable, match="redirect"):
        intake.submit({"failure_id": "f-2", "facts": {}})
    assert seen == []  # nothing reached the other port, let alone the token


@pytest.mark.parametrize("url", ["http://localhost:8000", "http://127.0.0.2:80/", "http://[::1]:9"])
def test_plain_http_is_taken_for_this_machine(url):
    assert HttpIntake(url, None).submit_url.startswith(url.rstrip("/"))


@pytest.mark.parametrize(
    "url", ["http://theow.example", "http://127.0.0.1.example.com/", "http://10.0.0.5"]
)
def test_plain_http_to_another_host_is_refused_naming_the_variable(url):
    with pytest.raises(ValueError, match=r"THEOW_INTAKE_URL .* plain http to another host"):
        HttpIntake(url, None)


def test_theow_client_submit_says_so_in_one_line_and_keeps_the_failure(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "THEOW_INTAKE_URL": "http://theow.example:8000",
        "THEOW_AGENT_TOKEN": str(signing.AgentToken.generate("agent-a")),
        "THEOW_SPOOL_DIR": str(tmp_path),
    }
    process = subprocess.run(
        [sys.executable, "-m", "theow_client.cli", "submit", "--fact", "stderr=boom"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    lines = [line for line in process.stderr.splitlines() if "THEOW_INTAKE_URL" in line]
    assert len(lines) == 1 and "plain http to another host" in lines[0], process.stderr
    assert list(tmp_path.glob("*.json")), "the failure was not kept"
