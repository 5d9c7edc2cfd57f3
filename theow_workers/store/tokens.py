"""The token store: who may talk to Theow, and as what (``theow tokens``).

One store for every door: agents sign their task messages with an ``agent``
token (``theow_client.signing``), and later doors (the HTTP intake, the JSON
API, the console) take ``api-read`` and ``operator`` tokens from here too.

A token is shown once, when it is made, and never stored: the store keeps
its name, scope, dates, a lookup hash of its secret and the signing key
derived from it. The signing key is what a worker needs to verify a
signature, so the database (in the workers' trust zone) holds it: a leak of
the database lets one forge submissions, not log into the broker, whose ACL
password for an agent is the token itself. Of that password the store keeps
what the broker keeps, its SHA-256 (``broker_hash``), so a broker that lost
its users can be given them again (``theow tokens sync``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from theow_client import names
from theow_client.jsontypes import JsonObject
from theow_client.signing import AgentToken, TokenError
from theow_workers.store.schema import TokenRow, make_engine, migrate

SCOPES = ("agent", "api-read", "operator")
# The hook agents' names: a token so named would read (and submit as) the hooked failures.
RESERVED = frozenset(names.HOOK_AGENTS.values())
# Seconds a worker trusts what it read of a token: a revocation takes effect within this.
CACHE_SECONDS = 5.0
# A repository an agent token may speak for: ``owner/name`` (GitLab: ``group/subgroup/name``).
REPO = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+\Z")
MAX_REPO = 200


class TokenProblem(ValueError):
    """A token that cannot be added, found or revoked; the message names it."""


@dataclass(frozen=True)
class TokenInfo:
    name: str
    scope: str
    created_at: datetime
    revoked_at: datetime | None
    repos: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        return {
            "name": self.name,
            "scope": self.scope,
            "repos": list(self.repos),
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }


@dataclass(frozen=True)
class Known:
    """What a worker needs of a token to verify a signature."""

    scope: str
    key: bytes
    revoked: bool
    repos: frozenset[str] = frozenset()  # casefolded ``owner/name``: see ``repos_of``


@dataclass(frozen=True)
class AgentLogin:
    """An agent token as its broker user needs it (never the token)."""

    name: str
    broker_hash: str | None  # None: made before the store kept it (its user cannot be remade)
    key: bytes  # the signing key: names its ``revocation``
    revoked: bool


class TokenStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._cache: dict[str, tuple[float, Known | None]] = {}

    @classmethod
    def at(cls, url: str) -> TokenStore:
        """The token store of the database at ``url``, its schema brought up to date first."""
        engine = make_engine(url)  # makes a SQLite file's directory, which migrating needs
        migrate(url)
        return cls(engine)

    @classmethod
    def reading(cls, url: str) -> TokenStore:
        """The token store at ``url`` as it is, never migrated (``theow doctor`` looks, never changes)."""
        return cls(make_engine(url))

    def close(self) -> None:
        self.engine.dispose()

    def add(self, name: str, scope: str, repos: Sequence[str] = ()) -> AgentToken:
        """A new token; the only time its secret is seen.

        ``repos``: the repositories an agent token may speak for (``repos_of``).
        """
        if scope not in SCOPES:
            raise TokenProblem(f"scope {scope!r} is not one of {', '.join(SCOPES)}")
        allowed = repos_of(repos)
        if allowed and scope != "agent":
            raise TokenProblem(f"--repo is for agent tokens, not {scope} {name!r}")
        if name.casefold() in RESERVED:
            raise TokenProblem(
                f"{name!r} is reserved for the webhook intake's failures: pick another name"
            )
        try:
            token = AgentToken.generate(name)
        except TokenError as exc:
            raise TokenProblem(str(exc)) from None
        row = TokenRow(
            name=name,
            scope=scope,
            lookup_hash=token.lookup_hash,
            signing_key=token.signing_key.hex(),
            created_at=datetime.now(UTC),
            repos=sorted(allowed),
            broker_hash=broker_hash(str(token)) if scope == "agent" else None,
        )
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(TokenRow).values(_values(row)))
        except IntegrityError:
            revoked = any(t.name == name and t.revoked_at for t in self.list())
            raise TokenProblem(
                f"token {name!r} was revoked, and a name is never reused: pick another"
                if revoked
                else f"a token named {name!r} exists already (revoke it, or pick another name)"
            ) from None
        return token

    def replace(self, name: str, scope: str) -> AgentToken:
        """A new secret for token ``name`` (made if missing); the old secret stops working."""
        with self.engine.begin() as conn:
            conn.execute(delete(TokenRow).where(TokenRow.name == name))
        self._cache.pop(name, None)
        return self.add(name, scope)

    def agents(self) -> list[AgentLogin]:
        """Every agent token, revoked ones too: what its broker user should be."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(
                    TokenRow.name, TokenRow.signing_key, TokenRow.revoked_at, TokenRow.broker_hash
                )
                .where(TokenRow.scope == "agent")
                .order_by(TokenRow.name)
            ).all()
        return [
            AgentLogin(
                r.name, r.broker_hash, bytes.fromhex(r.signing_key), r.revoked_at is not None
            )
            for r in rows
        ]

    def list(self) -> list[TokenInfo]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(TokenRow).order_by(TokenRow.name)).all()
        return [
            TokenInfo(r.name, r.scope, r.created_at, r.revoked_at, tuple(r.repos or ()))
            for r in rows
        ]

    def revoke(self, name: str) -> Known:
        """Revoke token ``name``; what it was (its scope and key name its ``revocation``)."""
        self._cache.pop(name, None)
        before = self.known(name)
        with self.engine.begin() as conn:
            done = conn.execute(
                update(TokenRow)
                .where(TokenRow.name == name, TokenRow.revoked_at.is_(None))
                .values(revoked_at=datetime.now(UTC))
            )
        if done.rowcount != 1:
            known = any(t.name == name for t in self.list())
            raise TokenProblem(
                f"token {name!r} is revoked already" if known else f"no token named {name!r}"
            )
        self._cache.pop(name, None)
        assert before is not None  # a row was revoked
        return before

    def find(self, presented: str) -> TokenInfo | None:
        """The live token whose full text is ``presented`` (for doors that take a token as is)."""
        try:
            token = AgentToken.parse(presented)
        except TokenError:
            return None
        with self.engine.connect() as conn:
            row = conn.execute(select(TokenRow).where(TokenRow.name == token.name)).first()
        if row is None or row.revoked_at is not None:
            return None
        if not hmac.compare_digest(row.lookup_hash, token.lookup_hash):
            return None
        return TokenInfo(
            row.name, row.scope, row.created_at, row.revoked_at, tuple(row.repos or ())
        )

    def known(self, name: str) -> Known | None:
        """The scope and signing key of token ``name`` (cached a few seconds), None if unknown."""
        now = time.monotonic()
        cached = self._cache.get(name)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        with self.engine.connect() as conn:
            row = conn.execute(
                select(
                    TokenRow.scope, TokenRow.signing_key, TokenRow.revoked_at, TokenRow.repos
                ).where(TokenRow.name == name)
            ).first()
        found = (
            None
            if row is None
            else Known(
                row.scope,
                bytes.fromhex(row.signing_key),
                row.revoked_at is not None,
                frozenset(row.repos or ()),
            )
        )
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[name] = (now, found)
        return found


def broker_hash(token: str) -> str:
    """The broker's hash of an agent's ACL password, the token: ``ACL SETUSER ... #<it>``."""
    return hashlib.sha256(token.encode()).hexdigest()


def revocation(name: str, key: bytes) -> str:
    """What ``names.KEY_REVOKED`` holds of a revoked token: its name and key's hash.

    The key's, not only the name: a name made again (``replace``) is a new token.
    """
    return f"{name}:{hashlib.sha256(key).hexdigest()[:32]}"


def repos_of(given: Iterable[str]) -> frozenset[str]:
    """``given`` as the repositories a token may speak for: ``owner/name``, casefolded.

    >>> sorted(repos_of(["Acme/API", "acme/api", "group/sub/web"]))
    ['acme/api', 'group/sub/web']
    """
    repos = set()
    for repo in given:
        text = repo.strip().strip("/")
        dots = any(part in (".", "..") for part in text.split("/"))
        if len(text) > MAX_REPO or not REPO.match(text) or dots:
            raise TokenProblem(f"--repo {repo[:MAX_REPO]!r}: give a repository as owner/name")
        repos.add(text.casefold())
    return frozenset(repos)


def _values(row: TokenRow) -> JsonObject:
    return {c.name: getattr(row, c.name) for c in TokenRow.__table__.c}
