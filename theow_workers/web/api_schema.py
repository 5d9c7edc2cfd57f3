"""The JSON API's OpenAPI 3.1 description, written from the pydantic models of its answers.

Starlette generates none, so the document is built here: every answer is a
pydantic model whose JSON Schema (2020-12, which OpenAPI 3.1 uses as is)
goes under ``components.schemas``, and each route names its model. The
routes (``api.py``, ``intake.py``) serialize through the same models, so the
document cannot drift from what is served without a test noticing
(``tests/integration/test_api.py`` validates it with openapi-spec-validator
and checks answers against it).

>>> doc = openapi()
>>> doc["openapi"], sorted(doc["paths"])[:2]
('3.1.0', ['/api/v1/failures', '/api/v1/failures/{id}'])
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from theow_client.jsontypes import Json, JsonObject

API = "/api/v1"
VERSION = "1"


class Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Problem(Model):
    error: str = Field(description="What was wrong, in one line.")


class FailureSummary(Model):
    id: str
    received_at: str = Field(description="ISO 8601, UTC.")
    source: str
    problem_type: str | None = None
    repo: str = ""
    job: str = ""
    status: str | None = Field(None, description="The verdict's status; null before one.")
    rule: str | None = None
    mode: str | None = None
    reason: str | None = None
    wrapper: str | None = None
    origin: str | None = Field(
        None,
        description="Whose failure it is, as it stands: change, main, flaky, infra or unknown; "
        "null when it came without its run's metadata.",
    )


class FailurePage(Model):
    failures: list[FailureSummary]
    next: str | None = Field(
        description="Opaque cursor of the next page (pass as ?cursor=); null on the last page."
    )


class WhereLine(Model):
    fact: str | None = None
    line: int | None = None
    text: str | None = None


class Explanation(Model):
    state: str = Field(
        description="explained, pending, or why there is none (malformed, failed, budget, ...)."
    )
    cause: str | None = Field(None, description="code, test, dependency, infrastructure or flaky.")
    text: str | None = Field(None, description="The explanation: plain text, masked.")
    next_step: str | None = None
    model: str | None = None
    reason: str | None = None


class VerdictView(Model):
    status: str
    rule: str | None = None
    mode: str | None = None
    reason: str = ""
    evidence: JsonObject | None = None
    also: list[str] = []
    where: list[WhereLine] = []
    wrapper: str | None = None
    explanation: Explanation | None = Field(
        None, description="explain's answer for a failure no specific rule explains."
    )
    actions: list[JsonObject] = []
    outputs: list[JsonObject] = []
    fixes: list[str] = Field(
        [], description="The commands or changes the actions suggest or made, one line each."
    )


class OriginView(Model):
    origin: str | None = Field(
        None,
        description="As it stands (revised as later runs arrived): change, main, flaky, "
        "infra or unknown.",
    )
    origin_then: str | None = Field(None, description="As decided when the verdict was made.")
    culprit: str | None = Field(
        None, description="Origin main: the first default-branch commit failing this way."
    )
    fixed_by: str | None = Field(
        None, description="Origin main: the first default-branch commit passing again."
    )
    reason: str | None = Field(None, description="Why, in one line.")
    repo: str
    branch: str
    sha: str
    pr: str | None = None
    attempt: int = 1


class FailureDetail(Model):
    id: str
    received_at: str
    source: str
    fingerprint: str | None = None
    facts: JsonObject = Field(description="The stored facts: bounded and masked.")
    error_lines: list[str] = []
    verdict: VerdictView | None = None
    attempts: list[JsonObject] = []
    explorations: list[JsonObject] = []
    origin: OriginView | None = Field(
        None, description="Whose failure it is; null when it came without its run's metadata."
    )


class RuleFigures(Model):
    name: str
    mode: str
    tags: list[str] = []
    generic: bool = False
    hits: int = Field(description="Verdicts naming the rule.")
    last_match: str | None = None
    success_ratio: float | None = None
    attempts: int = 0


class RuleList(Model):
    rules: list[RuleFigures]
    stopped: list[str] = Field(description="Rules that matched before and not lately.")
    never: int = Field(description="Rules that never matched.")
    gone: list[str] = Field(description="Rules verdicts name that the library no longer has.")
    errors: list[str]
    as_of: str


class Insight(Model):
    stats: JsonObject = Field(description="The figures of `theow meow`.")
    days: JsonObject = Field(description="Per-day series over the last 30 days.")
    groups: list[JsonObject] = Field(description="The largest groups of unknown failures.")
    as_of: str


class ReplayJob(Model):
    id: str
    kind: str
    status: str
    source: str
    total: int | None = None
    processed: int
    matched: int
    hit_rate: float
    created_at: str
    finished_at: str | None = None


class ReplayList(Model):
    replays: list[ReplayJob]


class Incident(Model):
    """One incident (``core.history.incident``): a broken default branch, an infrastructure
    cause across repositories, or a flaky cause. Times are seconds since the epoch."""

    id: str
    kind: str = Field(description="main, infra or flaky.")
    state: str = Field(description="open or closed.")
    cause: str
    repo: str = Field(description="Empty for infra (see repos).")
    job: str
    repos: list[str]
    opened_by: str = Field(description="The id of the run that opened it.")
    first_seen: float
    last_seen: float
    closed_at: float | None = None
    runs_affected: int
    failed_runs: int
    minutes_lost: float
    culprit: str | None = Field(None, description="main: the first failing default-branch commit.")
    fixed_by: str | None = Field(None, description="main: the first passing one after it.")
    flip_rate: float | None = Field(None, description="flaky: share of recent runs that flipped.")
    confirmed: bool


class IncidentList(Model):
    incidents: list[Incident]
    state: str | None = None
    kind: str | None = None
    window_days: int


class Moment(Model):
    at: float
    what: str = Field(description="opened, failed, inherited, passed, fixed or closed.")
    run: str
    repo: str
    sha: str
    branch: str


class IncidentDetail(Incident):
    timeline: list[Moment] = Field(description="The first moments and the last ones.")
    omitted: int = Field(description="Moments left out between the first and the last.")


class FlakyTest(Model):
    """One flaky test in one job (``core.testcases.flakiness``). Times are seconds since the
    epoch."""

    repo: str
    job: str
    test: str = Field(description="classname::name, as the JUnit report names it.")
    flaky: bool
    reason: str = Field(description="Why it is flaky: within a run, on one commit, or alone.")
    failed: int = Field(description="Runs it failed.")
    flaky_runs: int = Field(description="Runs it failed, then passed on a rerun within.")
    passed: int = Field(description="Runs it is known to have passed.")
    flip_rate: float | None = Field(None, description="Share of recent outcomes that flipped.")
    minutes_lost: float = Field(description="The runs it failed, started to finished.")
    first_seen: float
    last_seen: float


class FlakyTestList(Model):
    tests: list[FlakyTest] = Field(description="The costliest first: runs failed, then minutes.")
    repo: str | None = None
    job: str | None = None
    window_days: int


class Accepted(Model):
    failure_id: str = Field(description="Where the verdict will be: GET .../{id}/verdict.")
    verdict: str = Field(description="The URL path of the verdict.")


class Pending(Model):
    failure_id: str
    status: str = "pending"


class Verdict(Model):
    """The client's Verdict (``theow_client.verdict``), as the resolve task returns it."""

    failure_id: str
    status: str
    rule: str | None = None
    reason: str = ""


MODELS: tuple[type[BaseModel], ...] = (
    Problem,
    FailurePage,
    FailureDetail,
    RuleList,
    Insight,
    ReplayList,
    IncidentList,
    IncidentDetail,
    FlakyTestList,
    Accepted,
    Pending,
    Verdict,
)


def _ref(model: type[BaseModel]) -> JsonObject:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _answer(model: type[BaseModel], what: str) -> JsonObject:
    return {"description": what, "content": {"application/json": {"schema": _ref(model)}}}


def _object(what: str) -> JsonObject:
    return {"description": what, "content": {"application/json": {"schema": {"type": "object"}}}}


def _problem(what: str) -> JsonObject:
    return _answer(Problem, what)


READ_ERRORS = {
    "401": _problem("No token, or not a live one."),
    "403": _problem("A token of another scope."),
    "429": _problem("Too many requests for this token; see Retry-After."),
}


def _query(name: str, what: str, fmt: str | None = None) -> JsonObject:
    schema: JsonObject = {"type": "string"}
    if fmt:
        schema["format"] = fmt
    return {"name": name, "in": "query", "required": False, "description": what, "schema": schema}


ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}


def _get(summary: str, model: type[BaseModel], **extra: Json) -> JsonObject:
    return {
        "summary": summary,
        "security": [{"token": []}],
        "responses": {"200": _answer(model, summary), **READ_ERRORS},
        **extra,
    }


def openapi() -> JsonObject:
    """The OpenAPI 3.1 document of ``/api/v1``."""
    _, top = models_json_schema(
        [(m, "serialization") for m in MODELS], ref_template="#/components/schemas/{model}"
    )
    schemas = top.get("$defs", {})
    filters = [
        _query("job", "Only failures of this job (the `job` fact)."),
        _query("repo", "Only failures of this repository (the `repo` fact)."),
        _query("rule", "Only failures whose verdict names this rule."),
        _query("status", "Only failures whose verdict has this status."),
        _query("mode", "Only failures whose rule has this mode (fix, retry, track)."),
        _query("origin", "Only failures of this origin: change, main, flaky, infra, unknown."),
        _query("source", "live (default), replay, demo or all."),
        _query("since", "Received at or after (ISO 8601).", "date-time"),
        _query("until", "Received before (ISO 8601).", "date-time"),
        {
            "name": "limit",
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
        },
        _query("cursor", "The `next` of the previous page."),
    ]
    submit = {
        "summary": "Submit a failure (agent tokens): the payload theow-client sends over Redis.",
        "security": [{"token": []}],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
        "responses": {
            "202": _answer(Accepted, "Queued for the resolvers."),
            "400": _problem("Not a submission."),
            "401": READ_ERRORS["401"],
            "403": _problem("Not an agent token."),
            "413": _problem("The body is over the intake's size cap."),
            "429": READ_ERRORS["429"],
            "503": _problem("The broker cannot be reached; the client spools and retries."),
        },
    }
    verdict = {
        "summary": "The verdict of a failure this agent submitted.",
        "security": [{"token": []}],
        "parameters": [ID],
        "responses": {
            "200": _answer(Verdict, "The verdict."),
            "202": _answer(Pending, "Submitted, no verdict yet."),
            "401": READ_ERRORS["401"],
            "403": _problem("Not an agent token."),
            "404": _problem("No failure of this agent's with this id."),
            "429": READ_ERRORS["429"],
        },
    }
    outcome = {
        "summary": "What a verdict's client-side actions did (agent tokens): `outcome` "
        "(success, error), `rerun_passed`, `error`, `outputs`; counted for the agent's own "
        "failure only.",
        "security": [{"token": []}],
        "parameters": [ID],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
        "responses": {
            "202": _object("Queued to be counted: `{failure_id, queued}`."),
            "400": _problem("Not an outcome."),
            "401": READ_ERRORS["401"],
            "403": _problem("Not an agent token."),
            "429": READ_ERRORS["429"],
            "503": _problem("The broker cannot be reached."),
        },
    }
    passing = {
        "summary": "A passing run of a job (agent tokens): `job`, `facts_json`; it teaches the "
        "agent's own job its normal, one run per job per interval.",
        "security": [{"token": []}],
        "requestBody": outcome["requestBody"],
        "responses": {
            "200": _object("`{sent: false, reason}`: a run of this job was learned this interval."),
            "202": _object("`{sent: true}`: queued for the passing workers."),
            "400": _problem("Not a passing run."),
            "401": READ_ERRORS["401"],
            "403": _problem("Not an agent token."),
            "413": _problem("The body is over the intake's size cap."),
            "429": READ_ERRORS["429"],
            "503": _problem("The broker cannot be reached."),
        },
    }
    runs = {
        "summary": "One run of a job for the ledger (agent tokens): `{job, outcome: passed|failed, "
        "run: {id, repo, branch, sha, pr, base_sha, attempt, started_at, finished_at}}`; no log. "
        "Recorded under the agent, in its token's repositories or its own scope.",
        "security": [{"token": []}],
        "requestBody": outcome["requestBody"],
        "responses": {
            "202": _object("`{queued: true}`: queued to be recorded."),
            "400": _problem("Not a run: the first field that is wrong."),
            "401": READ_ERRORS["401"],
            "403": _problem("Not an agent token."),
            "413": _problem("The body is over the intake's size cap."),
            "429": READ_ERRORS["429"],
            "503": _problem("The broker cannot be reached."),
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Theow API",
            "version": VERSION,
            "description": "Read-only views of failures, verdicts, rules, insight, replays, incidents and "
            "flaky tests "
            "(api-read tokens), and an HTTP intake for build agents (agent tokens). "
            "Every request carries `Authorization: Bearer <token>` "
            "(`theow tokens add NAME --scope api-read|agent`).",
        },
        "paths": {
            f"{API}/failures": {
                "get": _get("Failures, newest first, one page.", FailurePage, parameters=filters),
                "post": submit,
            },
            f"{API}/failures/{{id}}": {
                "get": _get("One failure, its verdict and lines.", FailureDetail, parameters=[ID])
            },
            f"{API}/failures/{{id}}/verdict": {"get": verdict},
            f"{API}/failures/{{id}}/outcome": {"post": outcome},
            f"{API}/passing": {"post": passing},
            f"{API}/runs": {"post": runs},
            f"{API}/rules": {"get": _get("Rules with their figures.", RuleList)},
            f"{API}/insight": {"get": _get("The insight figures.", Insight)},
            f"{API}/replays": {"get": _get("Recent replay jobs.", ReplayList)},
            f"{API}/incidents": {
                "get": _get(
                    "Incidents of the last 30 days, newest news first.",
                    IncidentList,
                    parameters=[
                        _query("state", "open or closed."),
                        _query("kind", "main, infra or flaky."),
                    ],
                )
            },
            f"{API}/incidents/{{id}}": {
                "get": _get("One incident with its timeline.", IncidentDetail, parameters=[ID])
            },
            f"{API}/tests/flaky": {
                "get": _get(
                    "Flaky tests of the last 30 days, the costliest first.",
                    FlakyTestList,
                    parameters=[
                        _query("repo", "Only tests of this repository."),
                        _query("job", "Only tests of this job."),
                        _query("limit", "At most this many (1 to 200, default 50)."),
                    ],
                )
            },
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        },
    }
