"""Where the client finds the broker, its spool and the client-side actions.

This is also the one place that builds the client's Celery app.

Build agents configure the client through the environment. An explicit
argument always wins over the environment, and the environment over the
client's env file (``client.env``, written by ``theow up`` into its home: the
broker URL and a local agent token; found through the home's stack file,
``theow_client.stack``), and that over the defaults.

>>> import os
>>> os.environ["THEOW_REDIS_URL"] = "redis://theow.internal:6379/0"
>>> redis_url()
'redis://theow.internal:6379/0'
>>> redis_url("redis://elsewhere:6379/1")
'redis://elsewhere:6379/1'
>>> del os.environ["THEOW_REDIS_URL"]
"""

from __future__ import annotations

import ipaddress
import math
import os
import tempfile
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

from celery import Celery
from kombu.entity import Queue

from theow_client import names, stack

ENV_REDIS_URL = "THEOW_REDIS_URL"
ENV_SPOOL_DIR = "THEOW_SPOOL_DIR"
ENV_ACTIONS_DIR = "THEOW_ACTIONS_DIR"
# Seconds `theow-client run` waits for a failure's verdict; 0 turns waiting off fleet-wide.
ENV_CLIENT_WAIT = "THEOW_CLIENT_WAIT"
# The agent's token (``tw1.<name>.<secret>``, from ``theow tokens add NAME --scope agent``).
ENV_AGENT_TOKEN = "THEOW_AGENT_TOKEN"
# Where the client's env file is, when not the one of the found home's stack (or, with no
# stack, $XDG_CONFIG_HOME/theow/client.env).
ENV_CLIENT_ENV = "THEOW_CLIENT_ENV"
# How `theow-client run` shows a verdict: ``auto`` (the CI's own forms, chosen from its
# variables), ``plain`` (the plain block only), or one of ``github``, ``gitlab``, ``buildkite``.
ENV_CI_OUTPUT = "THEOW_CI_OUTPUT"
# The web console's address (``https://theow.internal``): CI summaries link a failure's page.
ENV_CONSOLE_URL = "THEOW_CONSOLE_URL"
# The web intake's base URL (``https://theow.example/``): when set, failures, outcomes and
# passing runs go over HTTPS with the agent token, never through the broker
# (``theow_client.intake``).
ENV_INTAKE_URL = "THEOW_INTAKE_URL"
# The test reports `theow-client run` reads when no --junit is given (a glob).
ENV_JUNIT = "THEOW_JUNIT"

DEFAULT_SPOOL_DIR = "~/.cache/theow/spool"
DEFAULT_ACTIONS_DIR = "actions"

# Short: the verdict is worth a few seconds of a failed build, not a minute.
DEFAULT_RUN_WAIT = 10.0

# Seconds to connect to, or hear back from, the broker before spooling instead:
# a build agent must not stall on a dead Theow.
DEFAULT_CONNECT_TIMEOUT = 2.0


# What Celery's result backend and kombu's Redis transport both read: a Unix
# socket is ``redis+socket:///path`` to them (``unix://`` is redis-py's spelling only).
REDIS_SCHEMES = ("redis", "rediss", "redis+socket")
_SSL_CERT_REQS = ("required", "optional", "none", "CERT_REQUIRED", "CERT_OPTIONAL", "CERT_NONE")


class RedisURLError(ValueError):
    """A broker URL that cannot work; the message names where it came from and what is wrong."""


def redis_url(explicit: str | None = None) -> str:
    """The Redis URL used as both Celery broker and result backend.

    A URL given without credentials takes the agent's broker user from the
    env file ``theow up`` wrote, when that file names the same server: a shell
    that set THEOW_REDIS_URL to choose the stack's port still reaches it.
    """
    written = client_env().get(ENV_REDIS_URL)
    given = explicit or os.environ.get(ENV_REDIS_URL)
    if not given:
        return written or names.DEFAULT_REDIS_URL
    return with_credentials_of(given, written) if written else given


def with_credentials_of(url: str, other: str) -> str:
    """``url`` with ``other``'s user and password when ``url`` has none and both name one server.

    >>> with_credentials_of("redis://127.0.0.1:6479/0", "redis://agent-a:tw1.a.s@127.0.0.1:6479/0")
    'redis://agent-a:tw1.a.s@127.0.0.1:6479/0'
    >>> with_credentials_of("redis://cache:6379/0", "redis://agent-a:tw1.a.s@127.0.0.1:6479/0")
    'redis://cache:6379/0'
    """
    try:
        mine, theirs = urlsplit(url), urlsplit(other)
        same = (mine.hostname, mine.port) == (theirs.hostname, theirs.port)
    except ValueError:  # a malformed URL is named later, by its own check
        return url
    if "@" in mine.netloc or "@" not in theirs.netloc or not same:
        return url
    return urlunsplit(mine._replace(netloc=theirs.netloc))


def redis_url_source(explicit: str | None = None, explicit_name: str = "redis_url") -> str:
    """Where ``redis_url(explicit)`` came from, for messages: an argument, the variable, the default."""
    if explicit:
        return explicit_name
    if os.environ.get(ENV_REDIS_URL):
        return ENV_REDIS_URL
    if client_env().get(ENV_REDIS_URL):
        return f"{ENV_REDIS_URL} in {client_env_path()}"
    return "the default broker URL"


def client_env_path() -> Path:
    """The client's env file: $THEOW_CLIENT_ENV, else the one the found home's ``theow up``
    wrote (its stack file says where), else $XDG_CONFIG_HOME (or ~/.config)/theow/client.env."""
    explicit = os.environ.get(ENV_CLIENT_ENV)
    if explicit:
        return Path(explicit).expanduser()
    recorded = stack.recorded_client_env()
    if recorded is not None:
        return recorded
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    try:
        return Path(base).expanduser() / "theow" / "client.env"
    except RuntimeError:  # no home directory: no env file
        return Path(tempfile.gettempdir()) / "theow-client.env"


def client_env(path: Path | None = None) -> dict[str, str]:
    """The ``NAME=value`` lines of the client's env file (or ``path``); empty when there is none."""
    try:
        text = (path or client_env_path()).read_text()
    except (OSError, UnicodeError):
        return {}
    pairs = (line.partition("=") for line in text.splitlines() if not line.startswith("#"))
    return {name.strip(): value.strip() for name, sep, value in pairs if sep}


def agent_token(explicit: str | None = None) -> str | None:
    """The agent's token: ``explicit``, else $THEOW_AGENT_TOKEN, else the env file's; None if none.

    Without one the client still sends, unsigned: the worker answers ``rejected``
    and says why, rather than the build losing its failure.
    """
    return explicit or os.environ.get(ENV_AGENT_TOKEN) or client_env().get(ENV_AGENT_TOKEN) or None


def console_url(explicit: str | None = None) -> str | None:
    """The console's base URL: ``explicit``, else $THEOW_CONSOLE_URL, else the env file's; None if none.

    Only an ``http(s)://`` URL counts: it becomes a link in a CI page.

    >>> console_url("https://theow.internal/"), console_url("javascript:alert(1)")
    ('https://theow.internal', None)
    """
    raw = explicit or os.environ.get(ENV_CONSOLE_URL) or client_env().get(ENV_CONSOLE_URL) or ""
    raw = raw.strip()
    try:
        parts = urlsplit(raw)
    except ValueError:  # e.g. an unclosed [ of an IPv6 address: no link rather than a broken one
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return raw.rstrip("/")


def intake_url(explicit: str | None = None) -> str | None:
    """The HTTP intake's base URL: ``explicit``, else $THEOW_INTAKE_URL, else the env file's."""
    return explicit or os.environ.get(ENV_INTAKE_URL) or client_env().get(ENV_INTAKE_URL) or None


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` is this machine: ``localhost``, ``127.0.0.0/8`` or ``::1``."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def safe_url(url: str) -> str:
    """``url`` with its password masked, even when the URL is malformed.

    Not ``redact.redact_text``: that finds credentials in free text by their
    scheme, and a mistyped URL may have none.

    >>> safe_url("redis://:s3cret@cache:99999/0"), safe_url("user:pw@host:6379")
    ('redis://:***@cache:99999/0', 'user:***@host:6379')
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at, hostpart = rest.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user}{':***' if colon else ''}@{hostpart}"


def check_redis_url(
    url: str, source: str = ENV_REDIS_URL, schemes: tuple[str, ...] = REDIS_SCHEMES
) -> str:
    """``url`` if Celery can use it as broker and backend, else RedisURLError in one line.

    Checked when read, so a typo is named as such instead of surfacing as
    Celery's "Unknown result backend" or "No module named '127'".

    >>> check_redis_url("redis://cache:6379/0")
    'redis://cache:6379/0'
    >>> check_redis_url("127.0.0.1:6379", "--redis-url")
    Traceback (most recent call last):
    ...
    theow_client.config.RedisURLError: bad --redis-url '127.0.0.1:6379': no scheme; write redis://127.0.0.1:6379
    """
    problem = redis_url_problem(url, schemes)
    if problem:
        raise RedisURLError(f"bad {source} {safe_url(url)!r}: {problem}")
    return url


def redis_url_problem(url: str, schemes: tuple[str, ...] = REDIS_SCHEMES) -> str | None:
    """What is wrong with ``url`` as a broker URL, or None."""
    if "://" not in url:
        return f"no scheme; write {schemes[0]}://{safe_url(url)}"
    scheme = url.partition("://")[0].lower()
    if scheme not in schemes:
        spelled = ", ".join(f"{s}://" for s in schemes)
        hint = {
            "unix": " (a Unix socket is redis+socket:///path/to/redis.sock)",
            "valkey": " (Valkey speaks the Redis protocol: write redis://)",
            "valkeys": " (Valkey speaks the Redis protocol: write rediss://)",
        }.get(scheme, "")
        return f"scheme {scheme!r} is not one of {spelled}{hint}"
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed [ of an IPv6 address
        return str(exc)
    if scheme == "redis+socket":
        return None if parts.path.strip("/") else "no socket path (redis+socket:///path/to/sock)"
    if not parts.hostname:
        return "no host"
    problem = port_problem(parts.netloc)
    if problem:
        return problem
    database = parts.path.strip("/")
    if database and not database.isdigit():
        return f"database {database!r} is not a number"
    if scheme == "rediss":
        reqs = parse_qs(parts.query).get("ssl_cert_reqs", [""])[0]
        if reqs not in _SSL_CERT_REQS:
            return "a rediss:// URL needs ?ssl_cert_reqs=required (or optional, none)"
    return None


def port_problem(netloc: str) -> str | None:
    """What is wrong with the port of ``netloc`` (``user:pw@host:port``), or None when absent or valid."""
    hostport = netloc.rpartition("@")[2]
    port = hostport.partition("]")[2] if hostport.startswith("[") else hostport
    text = port.partition(":")[2]
    if not port.count(":") or (text.isdigit() and 0 < int(text) < 65536):
        return None
    return f"port {text!r} is not a number from 1 to 65535"


def run_wait(explicit: float | None = None) -> float:
    """Seconds ``theow-client run`` waits for a verdict: ``explicit``, else $THEOW_CLIENT_WAIT, else 10.

    0 means do not wait. Raises ValueError naming the variable when it is not a number.

    >>> os.environ["THEOW_CLIENT_WAIT"] = "0"
    >>> run_wait(), run_wait(30)
    (0.0, 30.0)
    >>> del os.environ["THEOW_CLIENT_WAIT"]
    """
    if explicit is not None:
        return max(float(explicit), 0.0)
    raw = os.environ.get(ENV_CLIENT_WAIT, "").strip()
    if not raw:
        return DEFAULT_RUN_WAIT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds < math.inf:
        raise ValueError(f"{ENV_CLIENT_WAIT}={raw!r} is not a number of seconds (0 = do not wait)")
    return seconds


def spool_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding failures that could not be sent yet."""
    raw = explicit or os.environ.get(ENV_SPOOL_DIR) or DEFAULT_SPOOL_DIR
    try:
        return Path(raw).expanduser()
    except RuntimeError:  # no home directory, as in some CI containers
        return Path(tempfile.gettempdir()) / "theow-spool"


def actions_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The directory whose ``*.py`` files define the client-side actions.

    Relative to the current directory by default: a build usually runs from
    the checkout that carries its ``actions/``.
    """
    raw = explicit or os.environ.get(ENV_ACTIONS_DIR) or DEFAULT_ACTIONS_DIR
    return Path(raw).expanduser()


def celery_app(url: str, timeout: float = DEFAULT_CONNECT_TIMEOUT) -> Celery:
    """A minimal Celery app that sends tasks by name and reads their results.

    ``url`` is both broker and result backend. Every connection attempt and
    round trip is bounded by ``timeout`` and nothing is retried: the caller
    spools instead of waiting for a broker that may never come back.
    """
    app = Celery("theow-client", broker=url, backend=url)
    app.conf.update(
        task_routes=names.TASK_ROUTES,
        # Publish only (one LPUSH): queues and their bindings are the workers' to
        # declare, and an agent's broker user may not write them (theow_workers.ops.acl).
        task_queues=[Queue(q, no_declare=True) for q in names.QUEUES],  # type: ignore[no-untyped-call]
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        broker_connection_retry_on_startup=False,
        broker_connection_timeout=timeout,
        broker_transport_options={
            "max_retries": 0,
            "socket_connect_timeout": timeout,
            "socket_timeout": timeout,
        },
        redis_socket_connect_timeout=timeout,
        redis_socket_timeout=timeout,
        # Without this the result backend retries a dead Redis for ~20 s.
        result_backend_transport_options={"retry_policy": {"max_retries": 0}},
    )
    return app
