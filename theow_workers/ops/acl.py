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

The password is the agent's token itself; the server keeps only its SHA-256,
and so does the token store, so a broker that lost its users (one restarted
without its ACL file) is given them again by :func:`sync_agent_users`
(``theow tokens sync``) without any token. Revoking the token
(:func:`revoke_agent_user`) logs the user out and deletes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

from theow_client import names
from theow_workers.config import Settings
from theow_workers.store.tokens import broker_hash

if TYPE_CHECKING:
    from theow_workers.store.tokens import TokenStore

USER_PREFIX = "agent-"
# Read commands on the agent's own verdict keys: a verdict may be a string
# (GET, EXISTS, polled) or a list (BLPOP awaited, LRANGE/LINDEX peeked).
VERDICT_COMMANDS = ("get", "exists", "blpop", "lrange", "lindex")
CONNECT_COMMANDS = ("hello", "ping")


class AclError(RuntimeError):
    """The broker refused or cannot hold the agent's user; the message says which and why."""


class AclNotSaved(AclError):
    """The broker changed its users in memory but did not write them to an ACL file."""


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


def setuser_command(name: str, password_hash: str, db: int = 0) -> list[str]:
    """``ACL SETUSER`` of agent ``name`` whose password's SHA-256 is ``password_hash``, as words.

    ``shlex.join`` of it is what an operator types into redis-cli on a broker
    whose users Theow's workers may not manage; it holds no secret.
    """
    return ["ACL", "SETUSER", agent_user(name), *agent_acl_rules(name, db), f"#{password_hash}"]


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

    Uses the workers' own (admin) credentials. The user lives in the broker's
    memory until :func:`save_agent_users`.
    """
    command = setuser_command(name, broker_hash(token), database(settings.redis_url))
    _admin(settings, "create", name, command)


def delete_agent_user(settings: Settings, name: str) -> None:
    """Delete agent ``name``'s user: its open connections are closed by the broker at once."""
    _admin(settings, "delete", name, ["ACL", "DELUSER", agent_user(name)])


def save_agent_users(settings: Settings) -> None:
    """``ACL SAVE``: the broker's users written to its ACL file, so a restart keeps them.

    Raises :class:`AclNotSaved` when the broker has no ACL file or cannot write it.
    """
    import redis

    from theow_client.config import safe_url

    client: Any = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
    try:
        client.execute_command("ACL", "SAVE")
    except redis.RedisError as exc:
        said = str(exc).split(". ")[0]  # Redis explains at length how to do without a file
        raise AclNotSaved(
            f"the broker at {safe_url(settings.redis_url)} did not save its users ({said}): "
            "they live in its memory and a restart drops them; run it with --aclfile "
            "(then `theow tokens sync`)"
        ) from None
    finally:
        client.close()


@dataclass
class Sync:
    """What :func:`sync_agent_users` did, by agent name."""

    made: list[str] = field(default_factory=list)  # missing, made again from the store
    changed: list[str] = field(default_factory=list)  # existing, given this profile
    closed: list[str] = field(default_factory=list)  # revoked tokens' users, deleted
    lost: list[str] = field(default_factory=list)  # missing, and no hash to make them from


def sync_agent_users(settings: Settings, store: TokenStore) -> Sync:
    """Every live agent's broker user made or given this profile, revoked ones closed; saved.

    ``theow tokens sync`` after a broker lost its users or after an upgrade, and
    ``theow up`` each time it starts. A user is made from the hash the token
    store keeps (the broker's password hash): no token is needed.
    """
    import redis

    from theow_client.config import safe_url
    from theow_workers.store.tokens import revocation

    done, db = Sync(), database(settings.redis_url)
    client: Any = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
    try:
        for agent in store.agents():
            user = agent_user(agent.name)
            if agent.revoked:
                if revoke_agent_user(settings, agent.name, revocation(agent.name, agent.key)):
                    done.closed.append(agent.name)
                continue
            exists = client.execute_command("ACL", "GETUSER", user) is not None
            if agent.broker_hash is not None:  # the whole user, password included
                client.execute_command(*setuser_command(agent.name, agent.broker_hash, db))
            elif exists:  # made before the store kept its hash: its password kept
                rules = ["resetkeys", "clearselectors", *_permissions(agent.name, db)]
                client.execute_command("ACL", "SETUSER", user, *rules)
            else:
                done.lost.append(agent.name)
                continue
            (done.changed if exists else done.made).append(agent.name)
    except redis.RedisError as exc:
        raise AclError(
            f"cannot sync the agents' broker users at {safe_url(settings.redis_url)}: {exc}"
        ) from None
    finally:
        client.close()
    if done.made or done.changed or done.closed:
        save_agent_users(settings)
    return done


def agent_user_problems(settings: Settings, store: TokenStore) -> dict[str, list[str]]:
    """The live agent tokens whose broker user is ``missing``, has another ``password`` or ``rules``.

    What ``theow doctor`` reports; ``theow tokens sync`` mends each. Raises
    :class:`AclError` when the broker's users cannot be read.
    """
    import redis

    from theow_client.config import safe_url

    problems: dict[str, list[str]] = {"missing": [], "password": [], "rules": []}
    db = database(settings.redis_url)
    client: Any = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
    try:
        for agent in store.agents():
            if agent.revoked:
                continue
            found = client.execute_command("ACL", "GETUSER", agent_user(agent.name))
            if found is None:
                problems["missing"].append(agent.name)
                continue
            user = {_text(k): v for k, v in found.items()}
            passwords = {_text(p) for p in user.get("passwords", [])}
            if agent.broker_hash is not None and agent.broker_hash not in passwords:
                problems["password"].append(agent.name)
            if _shape(user) != _profile_shape(agent.name, db):
                problems["rules"].append(agent.name)
    except redis.RedisError as exc:
        raise AclError(
            f"cannot read the agents' broker users at {safe_url(settings.redis_url)}: {exc}"
        ) from None
    finally:
        client.close()
    return problems


def revoke_agent_user(settings: Settings, name: str, revoked: str) -> bool:
    """Close agent ``name``'s broker door now; whether it had a broker user.

    ``revoked`` (``store.tokens.revocation``) joins ``names.KEY_REVOKED``, so
    workers refuse the token's messages already queued. The user is switched
    off (no new login), its open connections are killed (``CLIENT KILL USER``)
    and it is deleted, in that order: it cannot log in again in between. The
    caller saves (:func:`save_agent_users`).
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
        return True
    except redis.RedisError as exc:
        raise AclError(
            f"cannot revoke the broker user {user} at {safe_url(settings.redis_url)}: {exc} "
            f"(run `ACL DELUSER {user}` as the broker's admin, or `theow tokens revoke {name}` "
            "again once it answers)"
        ) from None
    finally:
        client.close()


# A user's rules as ``ACL GETUSER`` gives them: (commands, keys, channels) of the
# root and of each selector, as sets of words (servers order and spell them their way).
Shape = tuple[tuple[frozenset[str], ...], frozenset[tuple[frozenset[str], ...]]]


def _shape(user: dict[str, Any]) -> Shape:
    def part(rules: dict[str, Any]) -> tuple[frozenset[str], ...]:
        return tuple(frozenset(_text(rules.get(k, b"")).split()) for k in PARTS)

    selectors = [{_text(k): v for k, v in s.items()} for s in user.get("selectors", [])]
    return part(user), frozenset(part(s) for s in selectors)


def _profile_shape(name: str, db: int) -> Shape:
    """What ``ACL GETUSER`` shows of a user given this profile."""
    root: dict[str, list[str]] = {k: [] for k in PARTS}
    selectors: list[tuple[frozenset[str], ...]] = []
    for rule in _permissions(name, db):
        if rule.startswith("("):
            words = rule.strip("()").split()
            selectors.append(
                (
                    frozenset(["-@all", *(w for w in words if w[0] in "+-")]),
                    frozenset(w for w in words if "~" in w),
                    frozenset(),
                )
            )
        elif rule[0] in "+-":
            root["commands"].append(rule)
        elif "~" in rule:
            root["keys"].append(rule)
    return tuple(frozenset(root[k]) for k in PARTS), frozenset(selectors)


PARTS = ("commands", "keys", "channels")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _admin(settings: Settings, verb: str, name: str, command: list[str]) -> None:
    import redis

    from theow_client.config import safe_url

    where = safe_url(settings.redis_url)
    client: Any = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
    try:
        client.execute_command(*command)
    except redis.RedisError as exc:
        raise AclError(
            f"cannot {verb} the broker user {agent_user(name)} at {where}: {exc} "
            "(the profile needs Redis 7.0+ or Valkey 7.2+ and an admin in THEOW_REDIS_URL)"
        ) from None
    finally:
        client.close()
