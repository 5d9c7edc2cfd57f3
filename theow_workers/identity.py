"""Who sent a task message, checked at the task's edge before anything else reads it.

Whoever can write to the broker can push any task name onto a queue it may
write to: a broker ACL cannot tell a forged ``theow.explore`` from a real one.
So every task verifies its message's signature (``theow_client.signing``)
against a scope: agent tasks (resolve, client_outcome, passing) take an
``agent`` token from the token store; internal tasks (explore, replay) take
the fleet's worker secret, which the workers and the operator's CLI share.
What a message says about its sender (``source``, an agent name) is never
read: the worker sets both from the verified identity.

A refused message is counted in ``names.KEY_REFUSED`` (a hash, task name ->
count) and exported as ``theow_refused_messages_total``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from theow_client import names, signing
from theow_client.jsontypes import Json
from theow_client.messages import SubmitRequest
from theow_workers.store.tokens import TokenStore

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger("theow.identity")

AGENT = frozenset({"agent"})
WORKER = frozenset({"worker"})
# A clock this far ahead of the worker's is still believed (agents' clocks drift).
FUTURE_SKEW = 300

# What an agent without a token is told: the fix, in one line.
UNSIGNED = (
    "unsigned message: this agent has no Theow token; set THEOW_AGENT_TOKEN to one made with "
    "`theow tokens add NAME --scope agent`"
)


@dataclass(frozen=True)
class Identity:
    name: str  # the agent's token name, or signing.WORKER
    scope: str  # "agent", "operator", "api-read" or "worker"


class Refused(Exception):
    """A message whose sender could not be verified; ``str()`` is the reason, for the sender."""

    def __init__(self, reason: str, claimed: str | None = None) -> None:
        super().__init__(reason)
        self.claimed = claimed  # the token name the message claims, verified or not


class Verifier:
    def __init__(self, tokens: TokenStore, worker_key: bytes, max_age: int) -> None:
        self.tokens = tokens
        self.worker_key = worker_key
        self.max_age = max_age

    def verify(self, task: str, payload: Json, scopes: frozenset[str]) -> Identity:
        """The verified sender of ``payload`` for ``task``; Refused says why not."""
        found = signing.signed_by(payload)
        if found is None:
            raise Refused(UNSIGNED)
        name = found.name
        age = time.time() - found.ts
        if age < -FUTURE_SKEW:
            raise Refused(
                f"message signed {-age:.0f}s in the future (check this agent's clock)", name
            )
        if age > self.max_age:
            raise Refused(f"message signed {age:.0f}s ago, longer than {self.max_age}s", name)
        if name == signing.WORKER:
            key, scope = self.worker_key, "worker"
        else:
            known = self.tokens.known(name)
            if known is None:
                raise Refused(f"token {name!r} is not known to this Theow", name)
            if known.revoked:
                raise Refused(f"token {name!r} was revoked", name)
            key, scope = known.key, known.scope
        assert isinstance(payload, dict)  # signed_by found a signature in it
        if not signing.check(task, payload, key):
            raise Refused(f"bad signature for token {name!r} (a wrong or old token?)", name)
        if scope not in scopes:
            wanted = " or ".join(sorted(scopes))
            raise Refused(f"{task} takes a {wanted} credential, not {scope} {name!r}", name)
        return Identity(name, scope)


def submission_id(agent: str, request: SubmitRequest, requested: str) -> str:
    """A verified submission's failure id (``signing.failure_id``)."""
    raw = request.facts_json
    try:
        facts_json = raw if raw is not None else json.dumps(request.facts, default=str)
    except (ValueError, RecursionError):  # the resolve path refuses such facts, with the reason
        facts_json = ""
    nonce = (request.nonce or requested)[:200]
    key = request.idempotency_key
    return signing.failure_id(agent, request.job, key, facts_json, nonce)


def refused_id(task_id: str) -> str:
    """The failure id of a refused submission: its own, from its task id, whatever it claims.

    Never another failure's, and one row however often the message is delivered.
    """
    return str(uuid.uuid5(signing.FAILURE_ID_NAMESPACE, json.dumps(["refused", task_id])))


def count_refused(redis: Redis, task: str) -> None:
    """One more refused message for ``task`` (best effort: a refusal never fails on this)."""
    try:
        redis.hincrby(names.KEY_REFUSED, task, 1)
    except Exception as exc:  # the metric helps; the refusal itself is what matters
        log.warning("could not count a refused %s: %s", task, exc)
