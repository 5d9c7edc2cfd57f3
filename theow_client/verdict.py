"""What a resolver worker decided about one failure.

A Verdict travels as a plain dict through the Celery result backend and is
stored in SQL by the workers; both sides use this one definition.

Agents upgrade after workers, so a client reads verdicts from newer workers:
a status it does not know stays the plain text the worker sent, and fields it
does not know are kept in ``extra``, shown as they came. Neither is an error.

>>> v = Verdict.from_dict({"failure_id": "f1", "status": "pondering", "mood": "calm"})
>>> v.status, v.extra
('pondering', {'mood': 'calm'})
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum

from theow_client.jsontypes import Json, JsonObject
from theow_client.origin import Origin
from theow_client.redact import redact_text


class Status(StrEnum):
    # A `fix` rule's fix ran and worked; a client-side one: the agent ran it and the re-run passed.
    RESOLVED = "resolved"
    # A `fix` rule's fix was offered, not (yet) run: waiting for the agent, advice only, a dry run.
    SUGGESTED = "suggested"
    RETRY = "retry"  # a `retry` rule matched: the failure is transient, run the step again
    TRACKED = "tracked"  # a `track` rule matched: known cause, nothing to run
    UNMATCHED = "unmatched"  # no rule validated against the facts
    # Only wrapper rules (``generic: true``, e.g. ``make: *** Error 1``) validated: no cause known.
    UNEXPLAINED = "unexplained"
    FAILED = "failed"  # every attempt's actions failed, or the agent's fix did not cure the step
    REJECTED = "rejected"  # the submission itself was malformed
    ERROR = "error"  # the worker could not decide (e.g. redelivered too often)
    EXPLORING = "exploring"  # sent to an explorer worker
    SPOOLED = "spooled"  # client side only: broker unreachable, kept on local disk

    def __str__(self) -> str:
        return self.value


def parse_status(value: object) -> Status | str:
    """``value`` as a Status when this client knows it, else as the text a newer worker sent."""
    text = str(value)
    try:
        return Status(text)
    except ValueError:
        return text


# Statuses after which the client may run the step again (``suggested``: once it ran the
# verdict's client-side fix; a suggestion with nothing for the agent to run changes nothing).
RETRYABLE = frozenset({Status.RESOLVED, Status.SUGGESTED, Status.RETRY})


@dataclass(frozen=True)
class Where:
    """A line to look at: the fact it is in, its 1-based line number in the original log, its text.

    >>> Where.from_dict({"fact": "log", "line": "12", "text": "E   assert 1 == 2"})
    Where(fact='log', line=12, text='E   assert 1 == 2')
    """

    fact: str
    line: int
    text: str

    def to_dict(self) -> JsonObject:
        return {"fact": self.fact, "line": self.line, "text": self.text}

    @classmethod
    def from_dict(cls, data: JsonObject) -> Where:
        return cls(fact=str(data["fact"]), line=int(data["line"]), text=str(data["text"]))


@dataclass(frozen=True)
class FailedTest:
    """A test that failed, as the failure's ``tests`` fact (a JUnit report) named it.

    ``name`` is ``classname::name`` (the name alone when it already says the class);
    ``file`` and ``line`` say where it failed when the report did. Read from a worker, so
    a client shows it only made safe (``theow_client.ci_output.safe``).

    >>> FailedTest.from_dict({"name": "t::a", "file": "t.py", "line": "5", "message": "x"})
    FailedTest(name='t::a', file='t.py', line=5, message='x')
    """

    __test__ = False  # pytest: not a test class

    name: str
    file: str | None = None
    line: int | None = None
    message: str = ""

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "file": self.file, "line": self.line, "message": self.message}

    @classmethod
    def from_dict(cls, data: JsonObject) -> FailedTest:
        file, line = data.get("file"), data.get("line")
        return cls(
            name=str(data["name"]),
            file=str(file) if file else None,
            line=int(line) if line is not None else None,
            message=str(data.get("message") or ""),
        )


@dataclass(frozen=True)
class BoundAction:
    """An action of the matched rule with its placeholders already filled in."""

    action: str
    params: JsonObject = field(default_factory=dict)
    client_side: bool = False


@dataclass(frozen=True)
class Verdict:
    failure_id: str
    status: Status | str  # a plain str: a status from a newer worker that this client does not know
    rule: str | None = None
    mode: str | None = None
    actions: tuple[BoundAction, ...] = ()
    # One entry per worker-side action that ran: {"action": name, "output": ...}
    outputs: tuple[JsonObject, ...] = ()
    reason: str = ""
    attempts: int = 0
    # Why: the fact, line and text the rule matched ({"fact", "line", "text", "context"}).
    evidence: JsonObject | None = None
    also: tuple[str, ...] = ()  # other rules that validated: a job may fail for two reasons
    # Rules that validated on lines the job's passing runs print too: ranked last.
    seen_in_passing: tuple[str, ...] = ()
    # The matched rule's named regex groups (a test's name, a file:line), as the rule captured them.
    captures: dict[str, str] = field(default_factory=dict)
    # The lines to look at, most telling first (up to three), for every failure, matched or not.
    where: tuple[Where, ...] = ()
    # The tests that failed, when the failure came with a test report (the ``tests`` fact).
    tests: tuple[FailedTest, ...] = ()
    # The wrapper rule that matched when no specific rule did (status ``unexplained``).
    wrapper: str | None = None
    # A plain-language explanation of a failure no specific rule explains (explain, when the
    # workers run it): {state, text, cause, next_step, model, reason}; ``state`` is
    # ``pending`` until it arrives, ``explained`` with an answer, else why there is none.
    explanation: JsonObject | None = None
    # Whose failure it is (this change, a broken main, flaky, infrastructure), decided from the
    # job's history; None when the run came without CI metadata (``theow_client.origin``).
    origin: Origin | None = None
    # Fields from a newer worker that this client does not know, kept as they came.
    extra: JsonObject = field(default_factory=dict)

    @property
    def client_actions(self) -> tuple[BoundAction, ...]:
        return tuple(a for a in self.actions if a.client_side)

    @property
    def fixes(self) -> tuple[str, ...]:
        """The commands or changes the actions suggest or made: :func:`fixes_in` ``outputs``."""
        return fixes_in(self.outputs)

    def to_dict(self) -> JsonObject:
        data = asdict(self)
        extra = data.pop("extra")
        data["status"] = str(self.status)
        data["actions"] = [asdict(a) for a in self.actions]
        data["outputs"] = list(self.outputs)
        data["also"] = list(self.also)
        data["seen_in_passing"] = list(self.seen_in_passing)
        data["where"] = [w.to_dict() for w in self.where]
        data["tests"] = [t.to_dict() for t in self.tests]
        if not self.tests:  # an older client would print "tests: []"
            del data["tests"]
        if data["explanation"] is None:  # an older client would print "explanation: null"
            del data["explanation"]
        if self.origin is None:
            del data["origin"]
        else:
            data["origin"] = self.origin.to_dict()
        return {**extra, **data}

    @classmethod
    def from_dict(cls, data: JsonObject) -> Verdict:
        return cls(
            failure_id=str(data["failure_id"]),
            status=parse_status(data["status"]),
            rule=data.get("rule"),
            mode=data.get("mode"),
            actions=tuple(
                BoundAction(
                    action=a["action"],
                    params=dict(a.get("params") or {}),
                    client_side=bool(a.get("client_side", False)),
                )
                for a in data.get("actions") or ()
            ),
            outputs=tuple(data.get("outputs") or ()),
            reason=str(data.get("reason") or ""),
            attempts=int(data.get("attempts") or 0),
            evidence=dict(data["evidence"]) if data.get("evidence") else None,
            also=tuple(str(n) for n in data.get("also") or ()),
            seen_in_passing=tuple(str(n) for n in data.get("seen_in_passing") or ()),
            captures={str(k): str(v) for k, v in dict(data.get("captures") or {}).items()},
            where=tuple(_wheres(data.get("where"))),
            tests=tuple(_failed_tests(data.get("tests"))),
            wrapper=str(data["wrapper"]) if data.get("wrapper") else None,
            explanation=_explanation(data.get("explanation")),
            origin=Origin.from_dict(data.get("origin")),
            extra={k: v for k, v in data.items() if k not in _FIELDS},
        )


_FIELDS = frozenset(f.name for f in fields(Verdict))

# The most failed tests a verdict lists (the worker lists no more; a newer one might).
MAX_FAILED_TESTS = 50
# A fix is one command or change; a longer text is cut (it was built from a log's captures).
MAX_FIX_CHARS = 500


def fixes_in(outputs: object) -> tuple[str, ...]:
    """The ``fix`` each action's output names, in order, once each: one bounded, masked line.

    Actions that know the remedy return it as ``fix`` (``pip install pyyaml``); the rest
    of an output is the action's own detail. It is built from a log's captures, so a
    secret there is masked; not yet printable: the caller makes it so.

    >>> fixes_in([{"action": "suggest_pip_install",
    ...            "output": {"status": "ok", "fix": "pip install pyyaml\\n"}},
    ...           {"action": "note", "output": "done"}])
    ('pip install pyyaml',)
    """
    if not isinstance(outputs, list | tuple):
        return ()
    found: dict[str, None] = {}
    for entry in outputs:
        output = entry.get("output") if isinstance(entry, dict) else None
        fix = output.get("fix") if isinstance(output, dict) else None
        if isinstance(fix, str) and fix.strip():
            line = " ".join(redact_text(fix[: MAX_FIX_CHARS * 4]).split())
            found[line if len(line) <= MAX_FIX_CHARS else line[: MAX_FIX_CHARS - 1] + "…"] = None
    return tuple(found)


def _wheres(value: object) -> list[Where]:
    """The ``where`` lines a worker sent; one that is not ``{fact, line, text}`` is left out."""
    if not isinstance(value, list):
        return []
    kept = []
    for item in value:
        try:
            kept.append(Where.from_dict(item))
        except (KeyError, TypeError, ValueError):
            continue
    return kept


def _failed_tests(value: object) -> list[FailedTest]:
    """The failed tests a worker sent; one that is not ``{name, file, line, message}`` is left out."""
    if not isinstance(value, list):
        return []
    kept = []
    for item in value[:MAX_FAILED_TESTS]:
        if not isinstance(item, dict):
            continue
        try:
            kept.append(FailedTest.from_dict(item))
        except (KeyError, TypeError, ValueError):
            continue
    return kept


def _explanation(value: object) -> JsonObject | None:
    """The explanation a worker sent, its fields as text; None when it is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("state"), str):
        return None
    return {str(k): str(v) for k, v in value.items() if isinstance(v, str | int | float)}


def jsonable(value: object) -> Json:
    """``value`` if it travels as JSON, else its ``repr``: an action may return anything."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)
