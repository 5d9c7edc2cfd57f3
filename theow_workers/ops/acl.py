"""The broker ACL profile of a build agent: it may push a failure and read its own verdict.

A build agent runs whatever a pull request asks it to, so anything it holds
may be stolen by that code. Its Redis/Valkey user is therefore allowed only:

==========================================  ======================================
``LPUSH`` onto ``resolve`` and ``passing``   submit a failure, an outcome, a passing
                                             run (write-only: it cannot read or pop
                                             another agent's queued facts)
``GET EXISTS BLPOP LRANGE LINDEX`` on        its own verdicts, delivered as a string
``theow:verdict:<name>:*``                   or a list, polled or awaited
``EXISTS`` on                                whether a worker sampled a passing run
``theow:passing:sample:<name>/*``            of its job this interval (read-only)
``HELLO PING``, ``SELECT <db>``              what a client says when it connects, and
                                             only the fleet's database
==========================================  ======================================

and nothing else: no key it can write (every key an agent's work leaves
behind is the workers', with a TTL: a passing run's sample is taken by the
worker that learns it), no other database (whose queues another stack's
workers may read), no Pub/Sub channel (Celery's remote control, ``*.pidbox``,
and the result backend's notifications), no other key (no other agent's
verdicts, no ``_kombu.binding.*``: queues and bindings are the workers' to
declare), no ``KEYS``, ``FLUSHDB``, ``CONFIG`` or ``ACL``. Key permissions are
per command through selectors, which needs Redis 7.0+ or Valkey 7.2+: Redis 6
cannot tell a command which keys it may touch.

The password is the agent's token itself; the server keeps only its SHA-256.
Revoking the token (:func:`revoke_agent_user`) logs the user out and deletes it.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

from theow_client import names
from theow_workers.config import Settings

if TYPE_CHECKING:
    from theow_workers.store.tokens import TokenStore

USER_PREFIX = "agent-"
# Read commands on the agent's own verdict keys: a verdict may be a string
# (GET, EXISTS, polled) or a list (BLPOP awaited, LRANGE/LINDEX peeked).
VERDICT_COMMANDS = ("get", "exists", "blpop", "lrange", "lindex")
CONNECT_COMMANDS = ("hello", "ping")


class AclError(RuntimeError):
    """The broker refused or cannot hold the agent's user; the message says which and why."""


def agent_user(name: str) -> str:
    """The broker user of agent ``name``."""
    return USER_PREFIX + name


def agent_acl_rules(name: str, db: int = 0) -> list[str]:
    """The ``ACL SETUSER`` rules of agent ``name`` on database ``db``, without its password.

    >>> " ".join(agent_acl_rules("ci-7"))  # doctest: +NORMALIZE_WHITESPACE
    'reset on resetchannels -@all +hello +ping +select|0 +lpush
     %W~resolve %W~passing
     (~theow:verdict:ci-7:* +get +exists +blpop +lrange +lindex)
     (%R~theow:passing:sample:ci-7/* +exists)'
    """
    if not name or any(c in name for c in " *?[]()\\\"'~%&:/"):
        raise ValueError(f"agent name {name!r}: letters, digits, '-', '_' and '.' only")
    return ["reset", "on", *_permissions(name, db)]


def _permissions(name: str, db: int) -> list[str]:
    """The profile's rules after ``reset on``: what a user keeps its password and state through."""
    verdicts = names.KEY_PREFIX + f"verdict:{name}:*"
    samples = names.key_passing_sample(names.agent_job(name, "*"))
    return [
        "resetchannels",
        "-@all",
        *(f"+{c}" for c in CONNECT_COMMANDS),
        # SELECT of the fleet's database only: a client whose URL names it sends it.
        f"+select|{int(db)}",
        "+lpush",
        f"%W~{names.QUEUE_RESOLVE}",
        f"%W~{names.QUEUE_PASSING}",
        f"(~{verdicts} {' '.join('+' + c for c in VERDICT_COMMANDS)})",
        f"(%R~{samples} +exists)",
    ]


def setuser_command(name: str, token: str, db: int = 0) -> list[str]:
    """``ACL SETUSER`` of agent ``name`` with ``token``'s SHA-256 as its password, as words.

    ``" ".join(...)`` of it is what an operator types into redis-cli on a broker
    whose users Theow's workers may not manage.
    """
    rules = agent_acl_rules(name, db)
    return ["ACL", "SETUSER", agent_user(name), *rules, f"#{_digest(token)}"]


def database(url: str) -> int:
    """The database number a Redis URL names (0 when it names none).

    >>> database("redis://:pw@127.0.0.1:6479/3"), database("redis://h:1")
    (3, 0)
    """
    path = urlsplit(url).path.strip("/")
    return int(path) if path.isdigit() else 0


def agent_url(broker_url: str, name: str, token: str) -> str:
    """``broker_url`` with the agent's user and token in place of the admin credentials.

    >>> agent_url("redis://:admin@127.0.0.1:6479/0", "ci-7", "tw1.ci-7.s3cret")
    'redis://agent-ci-7:tw1.ci-7.s3cret@127.0.0.1:6479/0'
    """
    parts = urlsplit(broker_url)
    host = parts.netloc.rpartition("@")[2]
    userinfo = f"{quote(agent_user(name), safe='')}:{quote(token, safe='')}"
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{host}"))


def create_agent_user(settings: Settings, name: str, token: str) -> None:
    """Create (or replace) agent ``name``'s user on the configured broker, with ``token`` as password.

    Uses the workers' own (admin) credentials. Saved to the server's ACL file
    when it has one (the embedded Valkey does), so it survives a restart.
    """
    _admin(settings, "create", name, setuser_command(name, token, database(settings.redis_url)))


def delete_agent_user(settings: Settings, name: str) -> None:
    """Delete agent ``name``'s user: its open connections are closed by the broker at once."""
    _admin(settings, "delete", name, ["ACL", "DELUSER", agent_user(name)])


def refresh_agent_user(settings: Settings, name: str) -> bool:
    """Give agent ``name``'s existing broker user this profile, its password kept; whether it had one.

    A user made by an earlier profile keeps its rules until an admin changes
    them: this is that change (``theow tokens broker-sync``).
    """
    import redis

    from theow_client.config import safe_url

    user = agent_user(name)
    rules = ["resetkeys", "clearselectors", *_permissions(name, database(settings.redis_url))]
    client: Any = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
    try:
        if client.execute_command("ACL", "GETUSER", user) is None:
            return False  # never made here (a broker without the profile): nothing to change
        client.execute_command("ACL", "SETUSER", user, *rules)
        with contextlib.suppress(redis.ResponseError):  # no ACL file: as in ``_admin``
            client.execute_command("ACL", "SAVE")
        return True
    except redis.RedisError as exc:
        raise AclError(
            f"cannot refresh the broker user {user} at {safe_url(settings.redis_url)}: {exc}"
        ) from None
    finally:
        client.close()


def sync_agent_users(settings: Settings, store: TokenStore) -> tuple[list[str], list[str]]:
    """Every agent's broker user given this profile, revoked ones closed: (changed, closed).

    ``theow tokens broker-sync`` after an upgrade, and ``theow up`` each time it
    starts, so users made by an earlier version lose what the profile no longer allows.
    """
    from theow_workers.store.tokens import revocation

    changed, closed = [], []
    for token in store.list():
        known = store.known(token.name)
        if token.scope != "agent" or known is None:
            continue
        if token.revoked_at is not None:
            if revoke_agent_user(settings, token.name, revocation(token.name, known.key)):
                closed.append(token.name)
        elif refresh_agent_user(settings, token.name):
            changed.append(token.name)
    return changed, closed


def revoke_agent_user(settings: Settings, name: str, revoked: str) -> bool:
    """Close agent ``name``'s broker door now; whether it had a broker user.

    ``revoked`` (``store.tokens.revocation``) joins ``names.KEY_REVOKED``, so
    workers refuse the token's messages already queued. The user is switched
    off (no new login), its open connections are killed (``CLIENT KILL USER``)
    and it is deleted, in that order: it cannot log in again in between.
    """
    import redis

    from theow_client.config import safe_url

    user = agent_user(name)
    client: Any = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
    try:
        client.sadd(names.KEY_REVOKED, revoked)
        if client.execute_command("ACL", "GETUSER", user) is None:
            return False  # a broker without the profile: nothing to log out
        client.execute_command("ACL", "SETUSER", user, "off")
        client.execute_command("CLIENT", "KILL", "USER", user)
        client.execute_command("ACL", "DELUSER", user)
        with contextlib.suppress(redis.ResponseError):  # no ACL file: as in ``_admin``
            client.execute_command("ACL", "SAVE")
        return True
    except redis.RedisError as exc:
        raise AclError(
            f"cannot revoke the broker user {user} at {safe_url(settings.redis_url)}: {exc} "
            f"(run `ACL DELUSER {user}` as the broker's admin, or `theow tokens revoke {name}` "
            "again once it answers)"
        ) from None
    finally:
        client.close()


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _admin(settings: Settings, verb: str, name: str, command: list[str]) -> None:
    import redis

    from theow_client.config import safe_url

    where = safe_url(settings.redis_url)
    client: Any = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
    try:
        client.execute_command(*command)
        # No ACL file configured: the operator persists users their own way.
        with contextlib.suppress(redis.ResponseError):
            client.execute_command("ACL", "SAVE")
    except redis.RedisError as exc:
        raise AclError(
            f"cannot {verb} the broker user {agent_user(name)} at {where}: {exc} "
            "(the profile needs Redis 7.0+ or Valkey 7.2+ and an admin in THEOW_REDIS_URL)"
        ) from None
    finally:
        client.close()
