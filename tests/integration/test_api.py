"""The JSON API and the agents' HTTP intake, over real HTTP to the real app under uvicorn.

The store is SQLite seeded through the store code (the console tests' history,
plus failures of our own); tokens come from the token store as ``theow tokens
add`` makes them. Every answer is checked against the OpenAPI document the
API serves, and the document against the OpenAPI 3.1 specification.
"""

from __future__ import annotations

import json
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate as validate_spec

from tests.integration.conftest import add_token
from tests.integration.test_web_console import FIXTURES, PASSWORD, READONLY, Server, seed
from theow_client.verdict import Status, Verdict, Where
from theow_workers.config import Settings
from theow_workers.core.ports import FailureRecord
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import migrate
from theow_workers.store.tokens import TokenStore

pytestmark = pytest.mark.integration

API = "/api/v1"
READ_ROUTES = ("/failures", "/failures/hist-00", "/rules", "/insight", "/replays", "/incidents",
               "/tests/flaky")  # fmt: skip
# Ours: a job and a repository of their own, 30 of them received in one microsecond.
OURS, SAME_INSTANT = 90, 30


@dataclass
class Answer:
    status: int
    headers: Any
    body: Any


def call(url: str, method: str = "GET", token: str | None = None, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> Answer:  # fmt: skip
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, hdrs, raw = response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        status, hdrs, raw = exc.code, exc.headers, exc.read()
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode(errors="replace")
    return Answer(status, hdrs, parsed)


def settings_for(root: Path, url: str, **env: str) -> Settings:
    return Settings.load(env={
        "THEOW_HOME": str(root / "home"), "THEOW_DATABASE_URL": url,
        "THEOW_RULES_DIR": str(root / "rules"), "THEOW_ACTIONS_DIR": str(root / "actions"),
        "THEOW_WEB_PASSWORD": PASSWORD, "THEOW_WEB_READONLY_PASSWORD": READONLY,
        "THEOW_REDIS_URL": "redis://127.0.0.1:1/0", **env,
    })  # fmt: skip


def record(sql: SqlStore, fid: str, at: datetime, job: str, repo: str, status: Status,
           rule: str | None = None) -> None:  # fmt: skip
    facts = {"stderr": f"failure {fid}", "job": job, "repo": repo}
    sql.add_failure(FailureRecord(fid, f"fp-{fid}", facts, "build_failure", "ci", at))
    where = (Where("stderr", 1, f"failure {fid}"),)
    sql.add_verdict(Verdict(fid, status, rule=rule, reason="seeded", where=where))


def seed_tests(sql: SqlStore) -> None:
    """acme/api's `unit` job: three runs, test_upload flaky in the second, failing the third."""
    from theow_workers.core.history.model import Outcome, Run
    from theow_workers.core.testcases.fact import Counts, TestLine
    from theow_workers.store.runs import LedgerRun, SqlRuns
    from theow_workers.store.testcases import SqlTestcases

    runs, tests, now = SqlRuns(sql.engine), SqlTestcases(sql.engine), datetime.now(UTC)
    for n, outcome in enumerate(("passed", "flaky", "failed")):
        at = (now - timedelta(hours=3 - n)).timestamp()
        run = Run(f"unit-{n}", "acme/api", "unit", "main", f"{n}" * 40,
                  Outcome.FAILED if outcome == "failed" else Outcome.PASSED, at)  # fmt: skip
        runs.record(LedgerRun(run, agent="ci-7", source="client"))
        line = TestLine(1, "tests.test_io::test_upload", None, None, "reset", outcome, "failure")
        tests.record("ci-7", run, [line] if outcome != "passed" else [], Counts(tests=40))


@dataclass
class Deployment:
    url: str
    db: str
    read: str  # an api-read token
    agent: str  # an agent token
    sql: SqlStore

    def get(self, path: str, token: str | None = None) -> Answer:
        return call(self.url + API + path, token=token)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("api")
    shutil.copytree(FIXTURES / "rules", root / "rules")
    shutil.copytree(FIXTURES / "actions", root / "actions")
    url = f"sqlite:///{root / 'theow.db'}"
    migrate(url)
    seed(url)
    sql = SqlStore(url)
    base = datetime.now(UTC) - timedelta(days=40)
    instant = base + timedelta(hours=5)
    for n in range(OURS):
        at = instant if n < SAME_INSTANT else base + timedelta(minutes=n)
        status = (Status.RESOLVED, Status.UNMATCHED, Status.TRACKED)[n % 3]
        rule = {Status.RESOLVED: "tf_echo", Status.TRACKED: "tf_flaky_network"}.get(status)
        record(sql, f"ours-{n:03d}", at, f"job-{n % 2}", "acme/api", status, rule)
    seed_tests(sql)
    read, agent = add_token(url, "dashboard", "api-read"), add_token(url, "ci-7", "agent")
    # The module's tests read faster than a dashboard would; the limit has tests of its own.
    with Server(settings_for(root, url, THEOW_API_REQUESTS_PER_MINUTE="60000")) as server:
        yield Deployment(server.url, url, read, agent, sql)
    sql.dispose()


@pytest.fixture(scope="module")
def document(deployment: Deployment) -> dict[str, Any]:
    answer = deployment.get("/openapi.json")
    assert answer.status == 200
    return answer.body


def conforms(document: dict[str, Any], model: str, body: Any) -> None:
    """``body`` is what the document says ``model`` is (errors name the first difference)."""
    schema = {"$ref": f"#/components/schemas/{model}", "components": document["components"]}
    OAS31Validator(schema).validate(body)


def test_the_openapi_document_is_valid_openapi_3_1_and_needs_no_token(document):
    validate_spec(document)
    assert document["openapi"] == "3.1.0"
    assert set(document["paths"]) == {
        f"{API}/failures", f"{API}/failures/{{id}}", f"{API}/failures/{{id}}/verdict",
        f"{API}/failures/{{id}}/outcome", f"{API}/passing", f"{API}/runs",
        f"{API}/rules", f"{API}/insight", f"{API}/replays", f"{API}/incidents",
        f"{API}/incidents/{{id}}", f"{API}/tests/flaky",
    }  # fmt: skip


@pytest.mark.parametrize("path", READ_ROUTES)
def test_a_read_route_without_a_token_or_with_a_bad_one_is_401(deployment, path):
    bare = deployment.get(path)
    assert bare.status == 401
    assert bare.headers["WWW-Authenticate"].startswith("Bearer")
    assert "token" in bare.body["error"]
    assert deployment.get(path, "tw1.dashboard." + "x" * 43).status == 401  # a wrong secret
    assert deployment.get(path, "not-a-token").status == 401
    # The console's login is no way in either: a cookie opens nothing here.
    cookie = call(deployment.url + API + path, headers={"Cookie": "theow_session=forged"})
    assert cookie.status == 401


def test_a_revoked_read_token_is_refused_at_once(deployment):
    token = add_token(deployment.db, "old-dashboard", "api-read")
    assert deployment.get("/rules", token).status == 200
    TokenStore(deployment.sql.engine).revoke("old-dashboard")
    assert deployment.get("/rules", token).status == 401


@pytest.mark.parametrize(
    ("path", "model"),
    [("/failures", "FailurePage"), ("/failures/hist-00", "FailureDetail"), ("/rules", "RuleList"),
     ("/insight", "Insight"), ("/replays", "ReplayList"), ("/incidents", "IncidentList"),
     ("/tests/flaky", "FlakyTestList")],
)  # fmt: skip
def test_a_read_token_reads_every_route_and_each_answer_is_what_the_document_says(
    deployment, document, path, model
):
    answer = deployment.get(path, deployment.read)
    assert answer.status == 200, answer.body
    assert answer.headers["Content-Type"] == "application/json"
    conforms(document, model, answer.body)


def test_the_routes_answer_what_the_cli_and_the_console_show(deployment):
    one = deployment.get("/failures/ours-000", deployment.read).body
    assert one["verdict"]["status"] == "resolved"
    assert one["verdict"]["rule"] == "tf_echo"
    assert one["verdict"]["where"] == [{"fact": "stderr", "line": 1, "text": "failure ours-000"}]
    assert one["facts"]["job"] == "job-0"
    assert one["verdict"]["explanation"] is None  # a rule explained it: no model was asked
    assert deployment.get("/failures/nope", deployment.read).status == 404

    rules = {r["name"]: r for r in deployment.get("/rules", deployment.read).body["rules"]}
    # The console's catalogue: hits are verdicts naming the rule (ours and the seeded history).
    assert rules["tf_echo"]["hits"] >= OURS // 3
    assert rules["tf_flaky_network"]["hits"] == OURS // 3

    stats = deployment.get("/insight", deployment.read).body["stats"]
    assert stats["failures"] >= OURS
    replays = deployment.get("/replays", deployment.read).body["replays"]
    assert {j["id"] for j in replays} == {"replay-1", "replay-2"}

    (flaky,) = deployment.get("/tests/flaky?repo=acme/api", deployment.read).body["tests"]
    assert (flaky["test"], flaky["job"], flaky["failed"], flaky["flaky_runs"]) == (
        "tests.test_io::test_upload", "unit", 1, 1,
    )  # fmt: skip
    assert deployment.get("/tests/flaky?job=build", deployment.read).body["tests"] == []
    assert deployment.get("/tests/flaky?limit=0", deployment.read).status == 400


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize("path", ["/rules", "/insight", "/replays", "/failures/ours-000"])
def test_no_read_route_takes_a_write(deployment, method, path):
    answer = call(deployment.url + API + path, method, deployment.read, b"{}")
    assert answer.status == 405


def test_a_read_token_cannot_submit_a_failure(deployment):
    answer = call(deployment.url + API + "/failures", "POST", deployment.read,
                  json.dumps({"facts_json": "{}"}).encode())  # fmt: skip
    assert answer.status == 403
    assert "read-only" in answer.body["error"]
    assert call(deployment.url + API + "/failures", "DELETE", deployment.read).status == 405


@pytest.mark.parametrize("path", READ_ROUTES)
def test_an_agent_token_cannot_read_the_api(deployment, path):
    answer = deployment.get(path, deployment.agent)
    assert answer.status == 403
    assert "agent" in answer.body["error"]


def test_a_read_token_cannot_read_an_agents_verdict(deployment):
    assert deployment.get("/failures/ours-000/verdict", deployment.read).status == 403


def walk(deployment: Deployment, query: str, between=None) -> tuple[list[str], int]:
    ids, pages, cursor = [], 0, ""
    while True:
        sep = "&" if query else ""
        page = deployment.get(f"/failures?{query}{sep}cursor={cursor}", deployment.read)
        assert page.status == 200, page.body
        ids += [f["id"] for f in page.body["failures"]]
        pages += 1
        cursor = page.body["next"]
        if cursor is None:
            return ids, pages
        if between is not None:
            between(pages)


def test_walking_every_page_gives_each_failure_once_even_thirty_in_one_instant(deployment):
    ids, pages = walk(deployment, "repo=acme/api&limit=7")
    assert len(ids) == len(set(ids)) == OURS
    assert pages == -(-OURS // 7)
    # The newest (the thirty of one instant, after the others' minutes), by id among equals.
    assert ids[:SAME_INSTANT] == [f"ours-{n:03d}" for n in reversed(range(SAME_INSTANT))]


def test_failures_inserted_during_a_walk_neither_repeat_nor_hide_the_ones_there_before(
    deployment,
):
    before, _ = walk(deployment, "source=all&limit=200")
    inserted: list[str] = []

    def insert(page: int) -> None:
        # New ones now, and ones received (as a replay records them) amid what is walked.
        for n, at in enumerate([datetime.now(UTC), datetime.now(UTC) - timedelta(days=2)]):
            fid = f"late-{page:02d}-{n}"
            record(deployment.sql, fid, at, "job-late", "acme/late", Status.UNMATCHED)
            inserted.append(fid)

    stop = threading.Event()

    def keep_inserting() -> None:  # and others, truly at the same time as the walk
        n = 0
        while not stop.is_set():
            at = datetime.now(UTC) - timedelta(days=n % 30, seconds=n)
            record(deployment.sql, f"busy-{n:04d}", at, "job-busy", "acme/busy", Status.UNMATCHED)
            inserted.append(f"busy-{n:04d}")
            n += 1

    writer = threading.Thread(target=keep_inserting)
    writer.start()
    try:
        seen, pages = walk(deployment, "source=all&limit=9", between=insert)
    finally:
        stop.set()
        writer.join()
    assert pages > 5 and any(i.startswith("busy-") for i in inserted)
    assert len(seen) == len(set(seen)), "a failure came twice"
    assert set(before) <= set(seen), f"missed: {sorted(set(before) - set(seen))[:5]}"
    assert set(seen) - set(before) <= set(inserted)


def test_filters_keep_only_what_they_name(deployment):
    def listed(query: str) -> list[dict[str, Any]]:
        answer = deployment.get(f"/failures?limit=200&{query}", deployment.read)
        assert answer.status == 200, answer.body
        return answer.body["failures"]

    ours = listed("repo=acme/api")
    assert len(ours) == OURS and {f["repo"] for f in ours} == {"acme/api"}
    job = listed("repo=acme/api&job=job-1")
    assert len(job) == OURS // 2 and {f["job"] for f in job} == {"job-1"}
    tracked = listed("repo=acme/api&status=tracked")
    assert len(tracked) == OURS // 3 and {f["rule"] for f in tracked} == {"tf_flaky_network"}
    assert {f["status"] for f in listed("rule=tf_flaky_network")} == {"tracked"}
    instant = datetime.now(UTC) - timedelta(days=40) + timedelta(hours=5)
    window = "&".join([
        "repo=acme/api", f"since={(instant - timedelta(minutes=1)).isoformat()}".replace("+", "%2B"),
        f"until={(instant + timedelta(minutes=1)).isoformat()}".replace("+", "%2B"),
    ])  # fmt: skip
    assert len(listed(window)) == SAME_INSTANT
    assert listed("repo=acme/api&until=2000-01-01T00:00:00Z") == []


@pytest.mark.parametrize(
    ("query", "says"),
    [("since=yesterday", "since="), ("limit=0", "limit="), ("limit=1000", "limit="),
     ("source=elsewhere", "source"), ("cursor=bm90IGEgY3Vyc29y", "cursor")],
)  # fmt: skip
def test_a_bad_query_is_a_400_naming_the_parameter(deployment, query, says):
    answer = deployment.get(f"/failures?{query}", deployment.read)
    assert answer.status == 400
    assert says in answer.body["error"]


def test_each_token_is_rate_limited_on_its_own(tmp_path):
    shutil.copytree(FIXTURES / "rules", tmp_path / "rules")
    shutil.copytree(FIXTURES / "actions", tmp_path / "actions")
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    busy, calm = add_token(url, "busy", "api-read"), add_token(url, "calm", "api-read")
    settings = settings_for(tmp_path, url, THEOW_API_REQUESTS_PER_MINUTE="3")
    with Server(settings) as server:
        statuses = [call(f"{server.url}{API}/replays", token=busy).status for _ in range(5)]
        assert statuses == [200, 200, 200, 429, 429]
        refused = call(f"{server.url}{API}/replays", token=busy)
        assert 1 <= int(refused.headers["Retry-After"]) <= 20
        assert call(f"{server.url}{API}/replays", token=calm).status == 200


# The intake, without a broker: what it refuses before anything is queued.


@pytest.fixture
def intake(tmp_path: Path) -> Iterator[tuple[str, str]]:
    shutil.copytree(FIXTURES / "rules", tmp_path / "rules")
    shutil.copytree(FIXTURES / "actions", tmp_path / "actions")
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    token = add_token(url, "small-agent", "agent")
    settings = settings_for(tmp_path, url, THEOW_INTAKE_MAX_BYTES="2000",
                            THEOW_INTAKE_PER_MINUTE="2")  # fmt: skip
    with Server(settings) as server:
        yield server.url + API + "/failures", token


def test_a_body_over_the_cap_is_413_before_anything_is_queued(intake):
    url, token = intake
    big = json.dumps({"facts_json": json.dumps({"log": "x" * 5000})}).encode()
    answer = call(url, "POST", token, big, {"Content-Type": "application/json"})
    assert answer.status == 413
    assert "2,000" in answer.body["error"]


def test_a_chunked_body_over_the_cap_is_413_too(intake):
    url, token = intake
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    # No Content-Length: the cap counts as it reads. The body goes in one write, so the
    # server's early answer is not lost to a reset while the client is still sending.
    chunk = b"x" * 500
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(20)) + b"0\r\n\r\n"
    head = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
        f"Authorization: Bearer {token}\r\nTransfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as conn:
        conn.sendall(head + body)
        status_line = conn.makefile("rb").readline()
    assert status_line.split()[1] == b"413"


@pytest.mark.parametrize(
    ("body", "says"),
    [(b"not json", "not JSON"), (b"[1, 2]", "JSON object"), (b"[" * 100 + b"]" * 100, "deeper"),
     (b'{"job": "j"}', "facts_json")],
)  # fmt: skip
def test_a_body_that_is_no_submission_is_400(intake, body, says):
    url, token = intake
    answer = call(url, "POST", token, body)
    assert answer.status == 400
    assert says in answer.body["error"]


def test_an_agent_is_rate_limited_on_its_submissions(intake):
    url, token = intake
    statuses = [call(url, "POST", token, b"not json").status for _ in range(3)]
    assert statuses == [400, 400, 429]


def test_a_submission_the_broker_cannot_take_is_503_for_the_client_to_spool(intake):
    url, token = intake  # the web's broker is redis://127.0.0.1:1: nothing listens
    body = json.dumps({"failure_id": "f-1", "facts_json": json.dumps({"stderr": "x"})}).encode()
    answer = call(url, "POST", token, body)
    assert answer.status == 503
    assert answer.headers["Retry-After"]


def test_threads_of_one_agent_hitting_the_limit_get_exactly_the_burst(intake):
    url, token = intake
    statuses: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        status = call(url, "POST", token, b"not json").status
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [400, 400] + [429] * 6
