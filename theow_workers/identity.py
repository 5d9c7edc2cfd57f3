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
count; ``<task> rate_limited`` for an agent past its rate) and exported as
``theow_refused_messages_total``.

A revoked token is refused at once, even by a worker that read it a moment
ago: ``theow tokens revoke`` adds its name to ``names.KEY_REVOKED``, which
every message's check reads (the token store's answers are cached a few
seconds). What is shared between failures (an explanation) is shared within
a verified scope (:meth:`Verifier.scope`): the repository the agent's token
may speak for, else the agent itself, never what a fact says.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from theow_client import names, signing
from theow_client.jsontypes import Json
from theow_client.messages import SubmitRequest
from theow_workers.store.tokens import TokenStore, revocation

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger("theow.identity")

AGENT = frozenset({"agent"})
# Why a message was refused, as ``count_refused`` counts it.
UNVERIFIED, RATE_LIMITED = "unverified", "rate_limited"
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
    """Checks a message's signature, and says in which scope its sender's failures are kept.

    ``revoked``: whether a token was revoked since the store's cached answer
    (``names.KEY_REVOKED``); a token store alone is trusted up to its cache.
    """

    def __init__(
        self,
        tokens: TokenStore,
        worker_key: bytes,
        max_age: int,
        revoked: Callable[[str], bool] | None = None,
    ) -> None:
        self.tokens = tokens
        self.worker_key = worker_key
        self.max_age = max_age
        self.revoked = revoked or (lambda name: False)

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
            if known.revoked or self.revoked(revocation(name, known.key)):
                raise Refused(f"token {name!r} was revoked", name)
            key, scope = known.key, known.scope
        assert isinstance(payload, dict)  # signed_by found a signature in it
        if not signing.check(task, payload, key):
            raise Refused(f"bad signature for token {name!r} (a wrong or old token?)", name)
        if scope not in scopes:
            wanted = " or ".join(sorted(scopes))
            raise Refused(f"{task} takes a {wanted} credential, not {scope} {name!r}", name)
        return Identity(name, scope)

    def scope(self, agent: str | None, project: str) -> str:
        """The scope a failure of ``agent`` naming ``project`` shares what it learns in.

        ``repo:<owner/name>`` when the agent's token may speak for that
        repository (``theow tokens add --repo``), or when a forge's webhook
        named it (a hook agent's failures are made by the workers); otherwise
        ``agent:<name>``, the agent's own, whatever repository its facts name.

        >>> v = Verifier(TokenStore.__new__(TokenStore), b"", 60)
        >>> v.scope("github-hooks", "github:Acme/API"), v.scope(None, "acme/api")
        ('repo:acme/api', 'agent:')
        """
        repo = repo_of(project)
        if agent is None:  # a failure from before agents were verified
            return "agent:"
        if agent in HOOK_AGENT_NAMES:
            return f"repo:{repo}" if repo else f"agent:{agent}"
        known = self.tokens.known(agent)
        if repo and known is not None and repo in known.repos:
            return f"repo:{repo}"
        return f"agent:{agent}"


HOOK_AGENT_NAMES = frozenset(names.HOOK_AGENTS.values())


def repo_of(project: str) -> str:
    """A failure's project as a repository name a token lists: casefolded, no forge prefix.

    >>> repo_of("github:Acme/API"), repo_of("acme/web"), repo_of("")
    ('acme/api', 'acme/web', '')
    """
    head, colon, rest = project.partition(":")
    return (rest if colon and "/" not in head else project).strip().strip("/").casefold()


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


def refusals(counts: Mapping[bytes | str, bytes | str]) -> dict[tuple[str, str], int]:
    """``names.KEY_REFUSED``'s fields as (task, reason) -> count (see ``count_refused``).

    >>> refusals({b"theow.run": b"2", b"theow.run rate_limited": b"5"})
    {('theow.run', 'unverified'): 2, ('theow.run', 'rate_limited'): 5}
    """
    found: dict[tuple[str, str], int] = {}
    for field, count in counts.items():
        text = field.decode() if isinstance(field, bytes) else field
        task, _, reason = text.partition(" ")
        found[(task, reason or UNVERIFIED)] = int(count)
    return found


def refused_id(task_id: str) -> str:
    """The failure id of a refused submission: its own, from its task id, whatever it claims.

    Never another failure's, and one row however often the message is delivered.
    """
    return str(uuid.uuid5(signing.FAILURE_ID_NAMESPACE, json.dumps(["refused", task_id])))


def count_refused(redis: Redis, task: str, reason: str = UNVERIFIED) -> None:
    """One more refused message for ``task`` (best effort: a refusal never fails on this).

    ``reason``: ``unverified`` (its sender's signature), or ``rate_limited`` (an agent
    past its rate); the hash's field is the task, then the reason when it is not the first.
    """
    try:
        redis.hincrby(names.KEY_REFUSED, task if reason == UNVERIFIED else f"{task} {reason}", 1)
    except Exception as exc:  # the metric helps; the refusal itself is what matters
        log.warning("could not count a refused %s: %s", task, exc)
