"""What the client and the workers send each other: the arguments of the tasks.

Each task takes one JSON object. These are their shapes, read once where a
message arrives (``from_wire``) and written in one place (``to_wire``), so the
code behind a task deals with typed values, never with a message's dict.

* :class:`SubmitRequest` — ``theow.resolve``: a failure's facts (one JSON text,
  ``facts_json``), its hints and notes. Older clients and in-process callers
  send the facts as an object (``facts``); both are still read.
* :class:`ExploreRequest` — ``theow.explore`` (internal): which failure to explore.
* :class:`PassingRun` — ``theow.passing``: a passing run of a job.
* :class:`RunReport` — ``theow.run``: one run of a job for the ledger, no log.

Reading checks the shape only; what the facts say (their limits, masking,
kept lines) is the workers' to judge. ``SubmitRequest.from_wire`` never
raises: a message that is no submission at all comes back with ``malformed``
saying why, so the worker can record it as rejected.

>>> req = SubmitRequest.from_wire({"failure_id": "f1", "facts_json": '{"log": "x"}', "mood": 1})
>>> req.failure_id, req.facts_json, req.extra
('f1', '{"log": "x"}', {'mood': 1})
>>> SubmitRequest.from_wire(["not", "an", "object"]).malformed
'submission must be a JSON object, got list'
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass, field

from theow_client import names
from theow_client.job import MAX_JOB_CHARS
from theow_client.jsontypes import JsonObject
from theow_client.lines import FIELD as KEPT_LINES

MAX_FAILURE_ID = 64
PREVIEW_CHARS = 2000

# A JSON value as a message carries it: judged by the workers, not by its shape.
Json = object

_SUBMIT_FIELDS = frozenset(
    {
        "failure_id",
        "facts_json",
        "facts",
        "explore",
        "source",
        "hints",
        "notes",
        "session_id",
        "idempotency_key",
        "job",
        "nonce",
        KEPT_LINES,
    }
)


def _failure_id(value: object) -> str | None:
    """A plausible failure id: text of 1 to 64 characters."""
    return value if isinstance(value, str) and 0 < len(value) <= MAX_FAILURE_ID else None


@dataclass(frozen=True)
class SubmitRequest:
    """The argument of ``theow.resolve``: one failure, as its client sent it."""

    failure_id: str | None = None  # as named by the sender; None when absent or implausible
    facts_json: str | None = None  # the facts as one JSON text (what clients send)
    facts: Json = None  # the facts as an object (older clients, in-process callers)
    explore: bool = False
    source: str | None = None
    hints: Json = None
    notes: Json = None
    session_id: str | None = None  # groups LLM sessions under one budget (a replay job)
    idempotency_key: str | None = None
    job: str | None = None
    nonce: str | None = None
    kept_lines: Json = None  # which lines of each cut log were kept (``theow_client.lines``)
    # Fields this reader does not know (``submitted_at``, a newer client's), kept as sent.
    extra: dict[str, Json] = field(default_factory=dict)
    # Why the message is no submission at all (not an object, unreadable); None when it is one.
    malformed: str | None = None
    # What a message that is no submission looked like, for a person (see ``preview``).
    sent_preview: str | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_wire(cls, payload: object) -> SubmitRequest:
        """The request a message carries; never raises (see ``malformed``)."""
        if not isinstance(payload, dict):
            kind = type(payload).__name__
            why = f"submission must be a JSON object, got {kind}"
            return cls(malformed=why, sent_preview=_preview(payload))
        if names.UNREADABLE in payload:
            why = str(payload[names.UNREADABLE])[:500]
            return cls(malformed=why, sent_preview=_preview(payload))
        get = payload.get
        key, source, session, nonce = (
            get("idempotency_key"),
            get("source"),
            get("session_id"),
            get("nonce"),
        )
        return cls(
            failure_id=_failure_id(get("failure_id")),
            facts_json=get("facts_json") if isinstance(get("facts_json"), str) else None,
            facts=get("facts_json") if _odd_facts_json(payload) else get("facts"),
            explore=bool(get("explore", False)),
            source=str(source) if source else None,
            hints=get("hints"),
            notes=get("notes"),
            session_id=str(session) if session else None,
            idempotency_key=str(key)[:200] if key is not None else None,
            job=get("job") if isinstance(get("job"), str) else None,
            nonce=str(nonce)[:200] if nonce else None,
            kept_lines=get(KEPT_LINES),
            extra={k: v for k, v in payload.items() if k not in _SUBMIT_FIELDS},
        )

    def to_wire(self) -> dict[str, Json]:
        """The message: the one place a submission's dict is written."""
        wire: dict[str, Json] = {"failure_id": self.failure_id}
        if self.job is not None or self.nonce is not None:
            wire.update(job=self.job, idempotency_key=self.idempotency_key, nonce=self.nonce)
        elif self.idempotency_key is not None:
            wire["idempotency_key"] = self.idempotency_key
        if self.facts_json is not None:
            wire["facts_json"] = self.facts_json
        elif self.facts is not None:
            wire["facts"] = self.facts
        wire["explore"] = self.explore
        for name, text in (("source", self.source), ("session_id", self.session_id)):
            if text is not None:
                wire[name] = text
        wire.update(self.extra)
        for name, value in (("hints", self.hints), ("notes", self.notes)):
            if value is not None:
                wire[name] = value
        if self.kept_lines is not None:
            wire[KEPT_LINES] = self.kept_lines
        return wire

    def failure_id_or(self, fallback: str) -> str:
        """The named failure id, else ``fallback`` (a task's id) cut to a failure id's length."""
        return self.failure_id or str(fallback)[:MAX_FAILURE_ID]

    def preview(self) -> str:
        """The start of the message for a person to look at (a rejected or dead-lettered
        failure): the facts' text, else a short repr; never fails, never large."""
        return self.sent_preview if self.sent_preview is not None else _preview(self.to_wire())


def _odd_facts_json(payload: JsonObject) -> bool:
    """``facts_json`` sent but not text: it is what the workers read (and reject)."""
    return "facts_json" in payload and not isinstance(payload["facts_json"], str)


@dataclass(frozen=True)
class ExploreRequest:
    """The argument of ``theow.explore``: explore this failure (its facts are in SQL).

    ``rule``: the probabilistic rule that matched, if any; ``session_limit``: the
    request's own budget of LLM sessions (a replay's), else the worker's.
    """

    failure_id: str
    rule: str | None = None
    session_id: str | None = None
    session_limit: int | None = None

    @classmethod
    def from_wire(cls, payload: object) -> ExploreRequest:
        """The request; KeyError or TypeError when the message names no failure."""
        if not isinstance(payload, dict):
            raise TypeError(f"explore request must be a JSON object, got {type(payload).__name__}")
        limit = payload.get("session_limit")
        rule, session = payload.get("rule"), payload.get("session_id")
        return cls(
            failure_id=str(payload["failure_id"]),
            rule=str(rule) if rule else None,
            session_id=str(session) if session else None,
            session_limit=limit if _sane_limit(limit) else None,
        )

    def to_wire(self) -> dict[str, Json]:
        wire: dict[str, Json] = {
            "failure_id": self.failure_id,
            "rule": self.rule,
            "session_id": self.session_id,
        }
        if self.session_limit is not None:
            wire["session_limit"] = self.session_limit
        return wire


def _sane_limit(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class PassingRun:
    """The argument of ``theow.passing``: a passing run of ``job``, its facts as one JSON text.

    >>> PassingRun.from_wire({"job": "ci/test", "facts_json": "{}"}).job
    'ci/test'
    """

    job: str
    facts_json: str | None = None
    facts: Json = None  # an object, from in-process callers
    run_id: str = ""
    submitted_at: str = ""

    @classmethod
    def from_wire(cls, payload: object) -> PassingRun:
        """The run; ValueError says what is wrong."""
        if not isinstance(payload, dict):
            raise ValueError(f"passing run must be a JSON object, got {type(payload).__name__}")
        job = payload.get("job")
        if not isinstance(job, str) or not job.strip() or len(job) > MAX_JOB_CHARS:
            raise ValueError(f"passing run without a usable job: {job!r}"[:300])
        raw = payload.get("facts_json", payload.get("facts"))
        return cls(
            job=job.strip(),
            facts_json=raw if isinstance(raw, str) else None,
            facts=None if isinstance(raw, str) else raw,
            run_id=str(payload.get("run_id") or ""),
            submitted_at=str(payload.get("submitted_at") or ""),
        )

    def to_wire(self) -> dict[str, Json]:
        wire: dict[str, Json] = {"job": self.job, "run_id": self.run_id}
        if self.facts_json is not None:
            wire["facts_json"] = self.facts_json
        else:
            wire["facts"] = self.facts
        wire["submitted_at"] = self.submitted_at
        return wire


OUTCOMES = ("passed", "failed")


@dataclass(frozen=True)
class RunReport:
    """The argument of ``theow.run``: one run of ``job``, passed (or failed without its log).

    ``run`` is the run's where-it-ran (``theow_client.ci_run``), checked by the
    worker. A failure's submission carries the same object as its ``run`` fact.
    ``tests``, when the run came with a JUnit report (``run --junit``): its counts
    and its flaky tests, in the shape of a failure's ``tests`` fact
    (``theow_client.ledger.passed_tests``), read by the worker as untrusted input.

    >>> RunReport.from_wire({"job": "ci/test", "outcome": "passed", "run": {}}).outcome
    'passed'
    """

    job: str
    outcome: str
    run: JsonObject
    tests: JsonObject | None = None

    @classmethod
    def from_wire(cls, payload: object) -> RunReport:
        """The report; ValueError says what is wrong."""
        if not isinstance(payload, dict):
            raise ValueError(f"a run report is a JSON object, not {type(payload).__name__}")
        job, outcome, run = payload.get("job"), payload.get("outcome"), payload.get("run")
        if not isinstance(job, str) or not job.strip() or len(job) > MAX_JOB_CHARS:
            raise ValueError(f"run report without a usable job: {job!r}"[:300])
        if outcome not in OUTCOMES:
            raise ValueError(
                f'a run report\'s "outcome" is "passed" or "failed", not {outcome!r}'[:300]
            )
        if not isinstance(run, dict):
            raise ValueError('a run report carries its "run" as a JSON object')
        tests = payload.get("tests")
        if tests is not None and not isinstance(tests, dict):
            raise ValueError('a run report carries its "tests" as a JSON object')
        return cls(job=job.strip(), outcome=str(outcome), run=run, tests=tests)

    def to_wire(self) -> dict[str, Json]:
        wire: dict[str, Json] = {"job": self.job, "outcome": self.outcome, "run": self.run}
        if self.tests is not None:
            wire["tests"] = self.tests
        return wire


def _preview(payload: object, limit: int = PREVIEW_CHARS) -> str:
    """The start of a message for a person to look at; never fails, never large."""
    if isinstance(payload, dict) and isinstance(payload.get("facts_json"), str):
        return str(payload["facts_json"])[:limit]
    shape = reprlib.Repr()
    shape.maxlevel, shape.maxstring, shape.maxother = 4, limit, 200
    try:
        return shape.repr(payload)[:limit]
    except Exception:  # a preview must never be the thing that fails
        return f"<{type(payload).__name__}>"
