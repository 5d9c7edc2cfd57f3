"""The web process's edge, tried as an attacker on the network (or on the console's machine) would.

The console is the real ``theow web`` process on a loopback port, as deployed;
each client is a real HTTP client bound to its own loopback source address
(127.0.0.1 is "this machine": a build agent beside the console, or a proxy).
What is tried: forged X-Forwarded-For from loopback, guessing tokens, bodies
past their bound, and a body that is slow to parse.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_port
from tests.integration.conftest import add_token
from tests.security.test_console_door import PASSWORD, environment
from theow_workers.web.bodies import FORM_MAX_BYTES
from theow_workers.web.throttle import FREE_FAILURES, TOKEN_FREE_FAILURES

pytestmark = pytest.mark.integration

API = "/api/v1"
# How many more checks than the free ones a doubling delay lets through while the
# rest of a burst is answered 429 (as tests/security/test_console_door.py allows).
SLACK = 8


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: str

    def json(self) -> dict[str, str]:
        found: dict[str, str] = json.loads(self.body)
        return found


@dataclass
class Edge:
    port: int
    log: Path
    store_url: str

    def send(
        self,
        address: str,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """One request from ``address`` on a connection of its own."""
        conn = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=120, source_address=(address, 0)
        )
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return Answer(response.status, response.headers, response.read().decode())
        finally:
            conn.close()

    def login(self, address: str, password: str, **headers: str) -> Answer:
        form = f"name=mallory&password={password}&next=/queue".encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
        return self.send(address, "POST", "/login", form, headers)

    def log_lines(self) -> list[str]:
        return self.log.read_text().splitlines()


def start(root: Path, **env: str) -> Iterator[Edge]:
    port, home = free_port(), root / "home"
    log = root / "web.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "theow_workers.cli", "web", "--port", str(port)],
            env=environment(home, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=root,
        )
    try:
        wait_port(port, proc)  # serving: the store is migrated
        yield Edge(port, log, f"sqlite:///{(home / 'theow.db').resolve()}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def edge(tmp_path: Path) -> Iterator[Edge]:
    yield from start(tmp_path)


# -- forwarding headers ---------------------------------------------------------------------


def test_guesses_from_this_machine_with_forged_forwarded_addresses_are_one_client(edge):
    statuses: list[int] = []
    for i in range(90):
        # Each guess claims another address; none comes from a proxy the console was told of.
        answer = edge.login("127.0.0.1", f"guess-{i:02d}", **{"X-Forwarded-For": f"203.0.113.{i}"})
        statuses.append(answer.status)
        checked = statuses.count(401)
        assert checked <= FREE_FAILURES + SLACK, f"{checked} passwords checked in {i + 1} guesses"
    assert statuses[:FREE_FAILURES] == [401] * FREE_FAILURES
    assert statuses.count(429) == 90 - statuses.count(401)
    failed = [line for line in edge.log_lines() if "failed login from" in line]
    assert failed and all("failed login from 127.0.0.1 " in line for line in failed)
    assert "203.0.113." not in edge.log.read_text()  # the forged addresses count for nothing


def test_a_named_proxy_is_believed_and_no_one_else(tmp_path):
    for edge in start(tmp_path, THEOW_WEB_TRUSTED_PROXIES="127.0.0.1"):
        for _ in range(FREE_FAILURES + 1):  # through the proxy, for one client behind it
            edge.login("127.0.0.1", "wrong-password", **{"X-Forwarded-For": "198.51.100.7"})
        refused = edge.login("127.0.0.1", "wrong-password", **{"X-Forwarded-For": "198.51.100.7"})
        assert refused.status == 429
        # Another client behind the same proxy is not held up by the first one's guesses.
        other = edge.login("127.0.0.1", PASSWORD, **{"X-Forwarded-For": "198.51.100.8"})
        assert other.status == 303
        # A client that is not the proxy names itself in vain.
        edge.login("127.0.0.2", "wrong-password", **{"X-Forwarded-For": "198.51.100.9"})
        lines = edge.log_lines()
        assert any("failed login from 198.51.100.7 " in line for line in lines)
        assert any("failed login from 127.0.0.2 " in line for line in lines)
        assert not any("198.51.100.9" in line for line in lines)


@pytest.mark.parametrize("value", ["proxy.internal", "*", "10.0.0.0/33"])
def test_a_trusted_proxy_that_is_no_address_stops_the_console_with_one_line(tmp_path, value):
    env = environment(tmp_path / "home", THEOW_WEB_TRUSTED_PROXIES=f"10.0.0.5,{value}")
    result = subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "web", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: bad THEOW_WEB_TRUSTED_PROXIES entry")
    assert repr(value) in lines[0] and result.stdout == ""


# -- tokens ---------------------------------------------------------------------------------


def test_unknown_tokens_from_one_address_are_refused_after_a_few_and_a_live_one_elsewhere_is_not(
    edge,
):
    reader = add_token(edge.store_url, "dashboard", "api-read")
    agent = add_token(edge.store_url, "ci-1", "agent")
    statuses: list[int] = []
    for i in range(60):
        guess = f"tw1.dashboard.{i:043d}"
        if i % 2:  # the API's reads and the agents' intake count as one door
            answer = edge.send(
                "127.0.0.21", "GET", f"{API}/replays", headers={"Authorization": f"Bearer {guess}"}
            )
        else:
            answer = edge.send(
                "127.0.0.21", "POST", f"{API}/failures", b"{}", {"Authorization": f"Bearer {guess}"}
            )
        statuses.append(answer.status)
        if answer.status == 429:
            assert int(answer.headers["Retry-After"]) >= 1
            assert "too many unknown or revoked tokens" in answer.json()["error"]
    looked_up = statuses.count(401)
    assert statuses[:TOKEN_FREE_FAILURES] == [401] * TOKEN_FREE_FAILURES
    assert looked_up <= TOKEN_FREE_FAILURES + SLACK
    assert statuses.count(429) == 60 - looked_up

    # Live tokens from other addresses are served as before.
    assert (
        edge.send(
            "127.0.0.22", "GET", f"{API}/replays", headers={"Authorization": f"Bearer {reader}"}
        ).status
        == 200
    )
    submitted = edge.send(
        "127.0.0.23", "POST", f"{API}/failures", b"not json", {"Authorization": f"Bearer {agent}"}
    )
    assert submitted.status == 400  # past the token: the body is read and refused for itself

    lines = edge.log_lines()
    unknown = [line for line in lines if "unknown or revoked token from 127.0.0.21" in line]
    assert len(unknown) == looked_up  # each lookup that failed: one line
    assert any("token checks refused" in line and "127.0.0.21" in line for line in lines)
    assert "tw1.dashboard.0" not in edge.log.read_text()  # never a token


# -- bodies ---------------------------------------------------------------------------------


def chunked(body: bytes, size: int = 64 * 1024) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def raw_request(edge: Edge, head: str, body: bytes = b"") -> tuple[int, str]:
    """Status and body of a request written by hand: a chunked body, or headers alone
    (``Expect: 100-continue``: the body is sent only if the server asks for it)."""
    with socket.create_connection(("127.0.0.1", edge.port), timeout=120) as conn:
        conn.sendall(head.encode() + body)
        response = http.client.HTTPResponse(conn)
        response.begin()
        return response.status, response.read().decode()


def post(path: str, port: int, *headers: str) -> str:
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *headers, "Connection: close"]
    return "\r\n".join(lines) + "\r\n\r\n"


@pytest.mark.parametrize("sent", ["declared", "chunked"])
def test_a_login_form_past_its_bound_is_413_and_never_read(edge, sent):
    form = b"name=mallory&password=" + b"x" * (FORM_MAX_BYTES + 1)
    kind = "Content-Type: application/x-www-form-urlencoded"
    if sent == "declared":  # a client that waits to be asked for the body is never asked
        head = post(
            "/login", edge.port, kind, f"Content-Length: {len(form)}", "Expect: 100-continue"
        )
        status, text = raw_request(edge, head)
    else:  # no length said: the bound is counted as the body arrives
        head = post("/login", edge.port, kind, "Transfer-Encoding: chunked")
        status, text = raw_request(edge, head, chunked(form))
    assert status == 413 and "at most" in text
    assert any("refused POST /login" in line and "at most" in line for line in edge.log_lines())
    assert not any("failed login" in line for line in edge.log_lines())  # no password checked


def test_an_intake_body_past_its_bound_is_413_before_the_token_is_looked_up(edge):
    head = post(
        f"{API}/failures",
        edge.port,
        "Authorization: Bearer tw1.nobody." + "x" * 43,
        f"Content-Length: {4 * 1024 * 1024 + 1}",
        "Expect: 100-continue",
    )
    status, text = raw_request(edge, head)
    assert status == 413
    assert "THEOW_INTAKE_MAX_BYTES" in json.loads(text)["error"]
    assert not any("unknown or revoked token" in line for line in edge.log_lines())


def queued(server_port: int, client_port: int) -> int | None:
    """Bytes of one connection not yet read by the server process: the client's unsent or
    unacknowledged ones and the server's unread ones (Linux's /proc/net/tcp); None: not found."""
    found = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(f.rpartition(":")[2], 16) for f in fields[1:3])
        tx, rx = (int(n, 16) for n in fields[4].split(":"))
        if (local, remote) == (client_port, server_port):
            found = (found or 0) + tx
        elif (local, remote) == (server_port, client_port):
            found = (found or 0) + rx
    return found


def test_the_console_answers_while_a_four_megabyte_list_is_parsed(edge):
    if not Path("/proc/net/tcp").exists():
        pytest.skip("needs Linux's /proc/net/tcp to see when the body has been read")
    agent = add_token(edge.store_url, "ci-slow", "agent")
    # A million empty objects, just under the intake's 4 MiB: seconds of parsing.
    slow = b"[" + b"{}," * 1_390_000 + b"{}]"
    conn = http.client.HTTPConnection(
        "127.0.0.1", edge.port, timeout=120, source_address=("127.0.0.41", 0)
    )
    conn.connect()
    assert conn.sock is not None
    client_port = conn.sock.getsockname()[1]
    sent, order, answers = threading.Event(), [], []

    def submit() -> None:
        conn.request("POST", f"{API}/failures", slow, {"Authorization": f"Bearer {agent}"})
        sent.set()
        response = conn.getresponse()
        answers.append(Answer(response.status, response.headers, response.read().decode()))
        order.append("list answered")

    thread = threading.Thread(target=submit)
    thread.start()
    try:
        assert sent.wait(120), "the body was not sent in 120 s"
        deadline = time.monotonic() + 120
        while queued(edge.port, client_port) != 0:  # the server has read the whole body:
            assert time.monotonic() < deadline, "the body was not read in 120 s"
            time.sleep(0.01)
        # it is being parsed now, for seconds; the console must answer meanwhile.
        assert edge.send("127.0.0.42", "GET", "/healthz").body == "ok"
        order.append("health answered")
        thread.join(timeout=120)
    finally:
        conn.close()
    assert not thread.is_alive(), "the list was not answered in 120 s"
    assert order == ["health answered", "list answered"]
    assert answers[0].status == 400 and "JSON object" in answers[0].json()["error"]
