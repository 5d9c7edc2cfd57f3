"""Alerts through real HTTP to a receiver on loopback, with real Redis: signed, sent once per
incident and event, retried after a 500, masked."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from theow_workers.config import ConfigError, Settings
from theow_workers.core.history.incidents import incidents
from theow_workers.core.history.model import Outcome, Run
from theow_workers.integrations import alerts

pytestmark = pytest.mark.integration

SECRET = "alert-secret-for-tests"
TOKEN = "ghp_" + "a1B2" * 9


class Receiver:
    """A webhook receiver on loopback: keeps every request; answers ``statuses`` first, then 200."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.statuses: list[int] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer.lock:
                    outer.received.append((dict(self.headers.items()), body))
                    status = outer.statuses.pop(0) if outer.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/theow"

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[dict[str, object]]:
        return [json.loads(body) for _, body in self.received]


def settings(url: str, **more: str) -> Settings:
    env = {"THEOW_ALERT_URL": url, "THEOW_ALERT_SECRET": SECRET, **more}
    return Settings.load(env=env, path=Path("-"), stack=False)


def broken_main(cause: str = "pytest|E   assert <n> == <n>", fixed: bool = False) -> list[Run]:
    def run(i: int, outcome: Outcome) -> Run:
        return Run(id=f"r{i}", repo="acme/app", job="test", branch="main", sha=f"sha{i}",
                   outcome=outcome, finished_at=1000.0 + i,
                   cause=cause if outcome is Outcome.FAILED else None)  # fmt: skip

    runs = [run(1, Outcome.PASSED), run(2, Outcome.FAILED), run(3, Outcome.FAILED)]
    return [*runs, run(4, Outcome.PASSED)] if fixed else runs


def test_an_alert_arrives_signed_with_the_culprit_in_a_slack_text(redis_client):
    with Receiver() as receiver:
        given = settings(receiver.url)
        sent = alerts.raise_events(
            redis_client, incidents(broken_main()), 1003.0,
            lambda body: alerts.deliver(given, redis_client, body) and None,
        )  # fmt: skip
        assert len(sent) == 1
        [(headers, raw)] = receiver.received
        assert alerts.verify(SECRET.encode(), raw, headers["X-Theow-Signature"])
        assert not alerts.verify(b"another secret", raw, headers["X-Theow-Signature"])
        body = json.loads(raw)
        assert body["event"] == headers["X-Theow-Event"] == "main_broken"
        assert "broken on the default branch since `sha2`" in body["text"]
        assert body["incident"]["culprit"] == "sha2" and body["incident"]["state"] == "open"


def test_the_same_incident_raised_twice_is_delivered_once_and_its_fix_once_more(redis_client):
    with Receiver() as receiver:
        given = settings(receiver.url)

        def send(body):
            alerts.deliver(given, redis_client, body)

        found = incidents(broken_main())
        alerts.raise_events(redis_client, found, 1003.0, send)
        alerts.raise_events(redis_client, found, 1003.0, send)  # another worker, same news
        # Derived again from more history: the same incident (same id), now fixed.
        alerts.raise_events(redis_client, incidents(broken_main(fixed=True)), 1004.0, send)
        alerts.raise_events(redis_client, incidents(broken_main(fixed=True)), 1004.0, send)
        events = [body["event"] for body in receiver.bodies()]
        assert events == ["main_broken", "main_fixed"]
        assert "fixed on the default branch by `sha4`" in receiver.bodies()[1]["text"]


def test_a_500_is_retried_and_the_alert_arrives(redis_client):
    with Receiver() as receiver:
        receiver.statuses = [500]
        result = alerts.deliver(settings(receiver.url), redis_client, {"text": "x", "event": "flaky",
                                "delivery": "i1:flaky"})  # fmt: skip
        assert result == {"outcome": "delivered", "status": 200}
        assert [h["X-Theow-Delivery"] for h, _ in receiver.received] == ["i1:flaky", "i1:flaky"]


def test_a_receiver_that_keeps_failing_leaves_the_alert_to_the_tasks_retry(redis_client):
    with Receiver() as receiver:
        receiver.statuses = [503] * 10
        with pytest.raises(alerts.AlertUnavailable):
            alerts.deliver(settings(receiver.url), redis_client, {"text": "x", "delivery": "i2:x"})
        assert len(receiver.received) == alerts.RETRIES + 1


def test_a_refusal_is_not_retried(redis_client):
    with Receiver() as receiver:
        receiver.statuses = [404]
        result = alerts.deliver(settings(receiver.url), redis_client, {"text": "x"})
        assert result["outcome"] == "refused" and len(receiver.received) == 1


def test_secrets_and_chat_mentions_in_a_cause_never_leave_theow(redis_client):
    cause = f"deploy|export GITHUB_TOKEN={TOKEN} <!channel> failed"
    with Receiver() as receiver:
        given = settings(receiver.url)
        alerts.raise_events(redis_client, incidents(broken_main(cause)), 1003.0,
                            lambda body: alerts.deliver(given, redis_client, body) and None)  # fmt: skip
        [(_, raw)] = receiver.received
        assert TOKEN not in raw.decode()
        body = json.loads(raw)
        assert "[masked:github-token]" in body["text"]
        assert "<!channel>" not in body["text"] and "&lt;!channel&gt;" in body["text"]
        assert TOKEN not in body["incident"]["cause"]


def test_an_old_incident_raises_nothing_when_history_is_backfilled(redis_client):
    sent = alerts.raise_events(
        redis_client, incidents(broken_main()), 1003.0 + 2 * alerts.FRESH, lambda _: None
    )
    assert sent == []


def test_the_alert_url_goes_over_https_or_to_loopback_and_needs_a_secret():
    with pytest.raises(ConfigError, match="only over https"):
        settings("http://chat.example/hook")
    with pytest.raises(ConfigError, match="THEOW_ALERT_SECRET"):
        Settings.load(env={"THEOW_ALERT_URL": "https://chat.example/hook"}, path=Path("-"),
                      stack=False)  # fmt: skip
    assert settings("https://chat.example/hook").alert_url == "https://chat.example/hook"


def test_alerts_past_the_rate_limit_wait_for_the_tasks_retry(redis_client):
    with Receiver() as receiver:
        given = settings(receiver.url, THEOW_ALERTS_PER_MINUTE="1")
        assert alerts.deliver(given, redis_client, {"text": "a"})["outcome"] == "delivered"
        with pytest.raises(alerts.AlertUnavailable, match="rate limit") as waiting:
            alerts.deliver(given, redis_client, {"text": "b"})
        assert waiting.value.wait > alerts.MAX_WAIT and len(receiver.received) == 1


def test_runs_recorded_in_the_ledger_raise_main_broken_on_the_second_failure_then_fixed(
    redis_client, tmp_path
):
    from theow_workers.core.history.incident import Rules
    from theow_workers.store.runs import LedgerRun, SqlRuns
    from theow_workers.store.schema import make_engine, migrate

    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    ledger = SqlRuns(make_engine(url))
    now = time.time()
    cause = "pytest_failed|e assert <n> == <n>"
    history = [
        ("a", Outcome.PASSED, []),
        ("b", Outcome.FAILED, []),  # one failure may yet prove flaky: nothing yet
        ("c", Outcome.FAILED, ["main_broken"]),
        ("d", Outcome.FAILED, []),  # the same incident: said once
        ("e", Outcome.PASSED, ["main_fixed"]),
    ]
    with Receiver() as receiver:
        given = settings(receiver.url)
        for n, (sha, outcome, expected) in enumerate(history):
            run = Run(id=f"run-{n}", repo="acme/app", job="test", branch="trunk", sha=sha,
                      outcome=outcome, finished_at=now - 600 + n * 60,
                      cause=cause if outcome is Outcome.FAILED else None)  # fmt: skip
            ledger.record(LedgerRun(run, agent="ci-1", source="client"))
            before = len(receiver.received)
            alerts.after_run(given, redis_client, ledger, run,
                             Rules(default_branches={"acme/app": "trunk"}),
                             send=lambda body: alerts.deliver(given, redis_client, body) and None)  # fmt: skip
            assert [b["event"] for b in receiver.bodies()[before:]] == expected, sha
        broken, fixed = receiver.bodies()
        assert broken["incident"]["culprit"] == "b" and fixed["incident"]["fixed_by"] == "e"
        assert broken["incident"]["id"] == fixed["incident"]["id"]


def test_without_an_alert_url_nothing_is_read_or_sent(redis_client):
    class NoHistory:
        def job_runs(self, *_, **__):
            raise AssertionError("read the ledger with alerts off")

        cause_failures = job_runs

    run = Run(id="r", repo="o/r", job="j", branch="main", sha="s", outcome=Outcome.FAILED,
              finished_at=time.time(), cause="c")  # fmt: skip
    off = Settings.load(env={}, path=Path("-"), stack=False)
    assert alerts.after_run(off, redis_client, NoHistory(), run) == []
