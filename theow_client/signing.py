"""Who sent a task: tokens, and the signature every task message carries.

An agent token is one string, ``tw1.<name>.<secret>``: the name says who, the
secret (32 random bytes, urlsafe base64) proves it. The client signs each
message it sends with a key derived from the secret; a worker holds the same
key (the token store keeps it) and checks the signature at the task's edge.
An ACL can keep an agent off queues and keys, but not stop it from pushing a
forged task name onto a queue it may write to: only this check can.

What is signed is the task's name, the payload without its signature, the
signer's name and the time, as canonical JSON (sorted keys, no spaces): a
signature for one task cannot be replayed as another, nor a payload changed.

>>> token = AgentToken.parse("tw1.ci-7." + "A" * 43)
>>> signed = sign("theow.passing", {"job": "j"}, token.name, token.signing_key)
>>> signed_by(signed).name
'ci-7'
>>> check("theow.passing", signed, token.signing_key)
True
>>> check("theow.resolve", signed, token.signing_key)
False
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
import uuid
from dataclasses import dataclass

from theow_client.jsontypes import JsonObject

PREFIX = "tw1"
# A token's name: lowercase, digits and dashes, as in an ACL user name.
NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}\Z")
# The signer of internal tasks (explore, replay): the fleet's shared worker secret.
# Not a valid token name, so no token can ever sign as the workers.
WORKER = "@worker"
# The key of a payload holding its signature: {"v", "name", "ts", "sig"}.
AUTH = "theow_auth"
SECRET_BYTES = 32


class TokenError(ValueError):
    """A token that cannot be a token; the message says what is wrong, never the secret."""


@dataclass(frozen=True)
class AgentToken:
    name: str
    secret: str

    @classmethod
    def parse(cls, text: str, where: str = "the token") -> AgentToken:
        prefix, _, rest = text.strip().partition(".")
        name, _, secret = rest.partition(".")
        if prefix != PREFIX or not secret:
            raise TokenError(f"{where} is not a Theow token (expected {PREFIX}.<name>.<secret>)")
        if not NAME.match(name):
            raise TokenError(f"{where} has an invalid name {name!r}")
        return cls(name, secret)

    @classmethod
    def generate(cls, name: str) -> AgentToken:
        if not NAME.match(name):
            raise TokenError(
                f"token name {name!r} must be lowercase letters, digits and dashes "
                "(at most 63, starting with a letter or digit)"
            )
        return cls(name, secrets.token_urlsafe(SECRET_BYTES))

    def __str__(self) -> str:
        return f"{PREFIX}.{self.name}.{self.secret}"

    def __repr__(self) -> str:  # never the secret, in a log or a traceback
        return f"AgentToken(name={self.name!r}, secret=***)"

    @property
    def signing_key(self) -> bytes:
        return signing_key(self.secret)

    @property
    def lookup_hash(self) -> str:
        """What the token store keeps to recognise the token (the secret itself is never kept)."""
        return hashlib.sha256(self.secret.encode()).hexdigest()


def signing_key(secret: str) -> bytes:
    """The HMAC key of a secret: the store keeps it to verify, and it opens no broker login."""
    return hashlib.sha256(b"theow-sign:" + secret.encode()).digest()


# Fixed forever: the same submission must give the same failure id on every agent
# and every release, or a duplicate submit would count twice.
FAILURE_ID_NAMESPACE = uuid.UUID("f4547d6e-1de0-417c-914f-d8a155c80a85")


def failure_id(
    agent: str, job: str | None, idempotency_key: str | None, facts_json: str, nonce: str = ""
) -> str:
    """A failure's id, from who sent it: never from what a submission says alone.

    With an idempotency key: the agent, the job, the key and the facts' digest,
    so a duplicate submit is the same failure, another agent's (or another
    job's) use of the same key is another failure, and the same key sent with
    different facts is a new failure too (noted as a conflict by the worker).
    Without one: the agent and the submission's random ``nonce``.

    >>> a = failure_id("ci-1", "build", "run-81/build", "{}")
    >>> a == failure_id("ci-1", "build", "run-81/build", "{}") != failure_id("ci-2", "build", "run-81/build", "{}")
    True
    """
    if idempotency_key is None:
        parts = [agent, "nonce", nonce]
    else:
        digest = hashlib.sha256(facts_json.encode()).hexdigest()
        parts = [agent, job or "", idempotency_key, digest]
    return str(uuid.uuid5(FAILURE_ID_NAMESPACE, json.dumps(parts)))


@dataclass(frozen=True)
class Signature:
    name: str
    ts: int
    sig: str


def canonical(task: str, payload: JsonObject, name: str, ts: int) -> bytes:
    body = {k: v for k, v in payload.items() if k != AUTH}
    blob = {"task": task, "payload": body, "name": name, "ts": ts}
    return json.dumps(blob, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign(
    task: str, payload: JsonObject, name: str, key: bytes, now: float | None = None
) -> JsonObject:
    """``payload`` with its signature under ``AUTH`` (a new dict; ``payload`` is not changed)."""
    ts = int(time.time() if now is None else now)
    digest = hmac.new(key, canonical(task, payload, name, ts), hashlib.sha256).hexdigest()
    body = {k: v for k, v in payload.items() if k != AUTH}
    return {**body, AUTH: {"v": 1, "name": name, "ts": ts, "sig": digest}}


def signed_by(payload: object) -> Signature | None:
    """The signature a payload carries, or None when it has none that could be one."""
    auth = payload.get(AUTH) if isinstance(payload, dict) else None
    if not isinstance(auth, dict):
        return None
    name, ts, sig = auth.get("name"), auth.get("ts"), auth.get("sig")
    if not isinstance(name, str) or not isinstance(ts, int) or not isinstance(sig, str):
        return None
    return Signature(name[:80], ts, sig[:128])


def check(task: str, payload: JsonObject, key: bytes) -> bool:
    """Whether ``payload`` was signed for ``task`` with ``key`` (constant time)."""
    found = signed_by(payload)
    if found is None:
        return False
    try:
        text = canonical(task, payload, found.name, found.ts)
    except (TypeError, ValueError, RecursionError):  # not JSON the client could have signed
        return False
    expected = hmac.new(key, text, hashlib.sha256)
    return hmac.compare_digest(expected.hexdigest(), found.sig)


def unsigned(payload: JsonObject) -> JsonObject:
    """``payload`` without its signature (what the task itself reads)."""
    return {k: v for k, v in payload.items() if k != AUTH}
