"""The console's door, tried as an attacker would: guessing, weak passwords, old cookies, origins.

The console is the real ``theow web`` process (uvicorn, as deployed, with its
proxy headers setting) on a loopback port. Each client is a real HTTP client
bound to its own loopback source address (127.0.0.2, 127.0.0.3, …: Linux
routes all of 127/8 to lo), so the console tells them apart exactly as it
tells machines apart; no X-Forwarded-For is believed without
THEOW_WEB_TRUSTED_PROXIES, so a forged header changes nothing
(tests/security/test_web_edge.py forges it from 127.0.0.1 too).
"""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.conftest import free_port, wait_port
from theow_workers.web.throttle import BUSY_DELAY, BUSY_FAILURES, FREE_FAILURES

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PASSWORD, READONLY = "a-reviewer-console-secret", "a-reader-console-secret"


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: str

    @property
    def cookie(self) -> str:
        found = re.search(r"theow_session=([^;]+)", self.headers.get("set-cookie", ""))
        return found.group(1) if found else ""


class Client:
    """One machine: HTTP/1.1 from its own loopback address, a connection per request."""

    def __init__(self, port: int, address: str) -> None:
        self.port, self.address = port, address

    def send(self, method: str, path: str, form: dict[str, str] | None = None,
             headers: dict[str, str] | None = None, cookie: str = "") -> Answer:  # fmt: skip
        headers = {"Accept": "text/html", **(headers or {})}
        body = urlencode(form).encode() if form is not None else None
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        if cookie:
            headers["Cookie"] = f"theow_session={cookie}"
        # Not kept alive: on loopback, delayed ACKs cost a kept-alive request 40 ms.
        conn = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=60, source_address=(self.address, 0)
        )
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            return Answer(response.status, response.headers, response.read().decode())
        finally:
            conn.close()

    def login(self, password: str, name: str = "ada", **headers: str) -> Answer:
        return self.send("POST", "/login", {"name": name, "password": password, "next": "/queue"},
                         headers)  # fmt: skip


@dataclass
class Console:
    port: int
    log: Path

    def client(self, address: str) -> Client:
        return Client(self.port, address)

    def log_lines(self) -> list[str]:
        return self.log.read_text().splitlines()


def environment(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THEOW_")}
    env.update(
        THEOW_HOME=str(home), THEOW_RULES_DIR=str(FIXTURES / "rules"),
        THEOW_ACTIONS_DIR=str(FIXTURES / "actions"), THEOW_WEB_PASSWORD=PASSWORD,
        THEOW_WEB_READONLY_PASSWORD=READONLY, THEOW_REDIS_URL="redis://127.0.0.1:1/0",
    )  # fmt: skip
    env.update(extra)
    return env


def start_console(root: Path) -> Iterator[Console]:
    port = free_port()
    log = root / "web.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "theow_workers.cli", "web", "--port", str(port)],
            env=environment(root / "home"), stdout=out, stderr=subprocess.STDOUT, cwd=root,
        )  # fmt: skip
    try:
        wait_port(port, proc)
        yield Console(port, log)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    yield from start_console(tmp_path_factory.mktemp("door"))


@pytest.fixture
def own_console(tmp_path: Path) -> Iterator[Console]:
    """A console of this test's alone: its overall failure count is the test's."""
    yield from start_console(tmp_path)


def test_two_thousand_guesses_from_one_client_are_refused_after_a_few_and_logged(console):
    attacker = console.client("127.0.0.2")
    statuses: list[int] = []
    waits: list[int] = []
    # Generous on a loaded machine, and short enough that the doubling delay (1, 2, 4 … s after
    # the free failures) lets at most 8 more guesses reach a password check meanwhile.
    deadline = time.monotonic() + 200
    for i in range(2000):
        assert time.monotonic() < deadline, f"2,000 guesses not answered in 200 s ({i} were)"
        # A forged X-Forwarded-For per guess: not a proxy's, so not another client.
        answer = attacker.login(f"guess-{i:04d}", name="mallory",
                                **{"X-Forwarded-For": f"198.51.100.{i % 250}"})  # fmt: skip
        statuses.append(answer.status)
        assert not answer.cookie
        if answer.status == 429:
            waits.append(int(answer.headers["Retry-After"]))
            assert "too many failed logins" in answer.body

    checked = statuses.count(401)
    assert FREE_FAILURES <= checked <= FREE_FAILURES + 8  # the rest never reached a password
    assert statuses.count(429) == 2000 - checked
    assert statuses[:FREE_FAILURES] == [401] * FREE_FAILURES
    assert min(waits) >= 1
    if checked >= FREE_FAILURES + 2:  # the delay doubles with each checked failure past the free
        # ones; how many were checked depends on how long the guesses took, not the other way
        assert max(waits) >= 2 ** (checked - FREE_FAILURES - 2) and len(set(waits)) >= 2

    failed = [line for line in console.log_lines() if "failed login from 127.0.0.2" in line]
    assert len(failed) == checked  # every password checked and wrong: one line each
    assert all("'mallory'" in line for line in failed)
    assert any("login refused" in line and "127.0.0.2" in line for line in console.log_lines())
    assert "guess-" not in console.log.read_text()  # names, never passwords


def test_a_reviewer_on_another_machine_logs_in_while_one_client_guesses(console):
    attacker, reviewer = console.client("127.0.0.3"), console.client("127.0.0.4")
    stop = threading.Event()

    def guess() -> None:
        i = 0
        while not stop.is_set():
            attacker.login(f"wrong-{i}", name="mallory")
            i += 1

    thread = threading.Thread(target=guess, daemon=True)
    thread.start()
    try:
        time.sleep(FREE_FAILURES * 0.5 + 1)  # the attacker is being refused by now
        assert attacker.login("one-more-wrong").status == 429
        answer = reviewer.login(PASSWORD)  # let in while the attacker is refused
    finally:
        stop.set()
        thread.join(timeout=30)
    assert answer.status == 303 and answer.headers["location"] == "/queue"
    assert reviewer.send("GET", "/queue", cookie=answer.cookie).status == 200


def test_guesses_from_many_addresses_are_slowed_but_never_lock_the_reviewers_out(own_console):
    guessers = [own_console.client(f"127.0.1.{n}") for n in range(1, BUSY_FAILURES + 2)]
    results: list[float] = []

    def guess(client: Client) -> None:
        started = time.monotonic()
        assert client.login("not-the-password").status == 401
        results.append(time.monotonic() - started)

    threads = [threading.Thread(target=guess, args=(c,)) for c in guessers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == len(guessers)
    started = time.monotonic()
    late = own_console.client("127.0.2.1").login("still-not-it")
    assert late.status == 401 and time.monotonic() - started >= BUSY_DELAY  # busy: slower

    # A correct password is never delayed: sent together with a wrong one, it is answered
    # while the wrong one is still held for its BUSY_DELAY.
    with ThreadPoolExecutor(2) as pool:
        wrong = pool.submit(own_console.client("127.0.2.3").login, "again-not-it")
        answer = pool.submit(own_console.client("127.0.2.2").login, PASSWORD).result()
        assert not wrong.done()
        assert wrong.result().status == 401
    assert answer.status == 303


def test_a_cookie_kept_after_logout_opens_nothing(console):
    reviewer = console.client("127.0.0.5")
    cookie = reviewer.login(PASSWORD).cookie
    page = reviewer.send("GET", "/queue", cookie=cookie)
    assert page.status == 200
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.body)
    assert csrf, "the page has no logout form with a CSRF token"
    assert reviewer.send("POST", "/logout", {"csrf": csrf.group(1)}, cookie=cookie).status == 303

    again = reviewer.send("GET", "/queue", cookie=cookie)  # the cookie, copied before logout
    assert again.status == 303 and again.headers["location"].startswith("/login")


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Host": "evil.example"},
        {"Host": "evil.example", "Origin": "http://evil.example"},  # DNS rebinding
    ],
    ids=["foreign origin", "opaque origin", "foreign host", "rebound name"],
)
def test_a_login_with_a_foreign_origin_or_host_is_refused_and_logged(console, headers):
    answer = console.client("127.0.0.6").login(PASSWORD, name="visitor", **headers)
    assert answer.status == 403 and not answer.cookie
    shown = headers.get("Host") or headers["Origin"]
    assert any("refused POST /login from 127.0.0.6" in line and shown in line
               for line in console.log_lines())  # fmt: skip


def test_the_consoles_own_origin_and_the_allowed_names_still_log_in(console):
    client = console.client("127.0.0.7")
    own = f"127.0.0.1:{console.port}"
    assert client.login(PASSWORD, Origin=f"http://{own}").status == 303
    assert client.login(PASSWORD, Host=f"localhost:{console.port}",
                        Origin=f"http://localhost:{console.port}").status == 303  # fmt: skip
    assert client.send("GET", "/login", headers={"Host": "evil.example"}).status == 403


def test_a_review_post_from_a_foreign_origin_is_refused(console):
    reviewer = console.client("127.0.0.8")
    cookie = reviewer.login(PASSWORD).cookie
    page = reviewer.send("GET", "/queue", cookie=cookie)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.body)
    assert csrf
    answer = reviewer.send("POST", "/logout", {"csrf": csrf.group(1)}, cookie=cookie,
                           headers={"Origin": "http://evil.example"})  # fmt: skip
    assert answer.status == 403
    assert reviewer.send("GET", "/queue", cookie=cookie).status == 200  # still logged in


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("THEOW_WEB_PASSWORD", "x", "is 1 character long; use 12 or more"),
        ("THEOW_WEB_PASSWORD", "Password1234", "is a common password"),
        ("THEOW_WEB_PASSWORD", "aaaaaaaaaaaaaaaa", "fewer than 5 different characters"),
        ("THEOW_WEB_READONLY_PASSWORD", "read", "is 4 characters long"),
    ],
)
@pytest.mark.parametrize("command", ["web", "up"])
def test_a_weak_console_password_stops_the_console_with_one_line(
    tmp_path, command, variable, value, reason
):
    env = environment(tmp_path / "home", **{variable: value})
    result = subprocess.run([sys.executable, "-m", "theow_workers.cli", command,
                             "--web-port" if command == "up" else "--port", str(free_port())],
                            env=env, capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {variable} ")
    assert reason in lines[0] and "Password1234" not in lines[0]  # the value is never shown
    assert result.stdout == ""  # nothing started, no URL
    assert not (tmp_path / "home" / "web-secret").exists()
