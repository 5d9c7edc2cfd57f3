"""The one configuration loader: defaults → ``theow.yaml`` → environment.

Every setting has an environment variable named ``THEOW_<FIELD>`` (upper
case), except the LLM key, which is ``GEMINI_API_KEY`` as Google names it.
``theow.yaml`` is read from the working directory, or from ``THEOW_CONFIG``.
Under both lie the settings the running (or last) ``theow up`` of the home
recorded in its stack file (``theow_client.stack``): a command run later, from
any directory, sees the stack that ``theow up`` started.

>>> Settings.load(env={"THEOW_REDIS_URL": "redis://cache:6379/0"}).redis_url
'redis://cache:6379/0'
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import yaml
from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from theow_client.config import is_loopback, port_problem, redis_url_problem, safe_url
from theow_client.jsontypes import Json, JsonObject
from theow_client.names import DEFAULT_MILVUS_URI, DEFAULT_REDIS_URL
from theow_client.stack import StackFileError, find_home, read_stack, stack_file

CONFIG_FILE = "theow.yaml"
# Variables whose names do not follow THEOW_<FIELD>.
ENV_ALIASES = {"gemini_api_key": "GEMINI_API_KEY"}
# Lists of directories, written as PATH is: separated by os.pathsep.
PATH_LISTS = frozenset({"rules_dirs", "actions_dirs"})
# The rules and actions shipped with Theow sit beside the packages in a checkout (and
# an editable install), found so from any working directory. A wheel carries neither:
# there they are looked for in the working directory, as ``rules/`` and ``actions/``.
_TOP = Path(__file__).resolve().parents[1]
SHIPPED_RULES = _TOP / "rules" if (_TOP / "rules").is_dir() else Path("rules")
SHIPPED_ACTIONS = _TOP / "actions" if (_TOP / "actions").is_dir() else Path("actions")


class ConfigError(ValueError):
    pass


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Where state lives for the embedded stack (Valkey data, Milvus data, SQLite).
    home: Path = Path(".theow")
    redis_url: str = DEFAULT_REDIS_URL
    # Empty: sqlite:///<home>/theow.db. On PostgreSQL a pooled connection is pinged only
    # after 10 s idle (store.schema.PING_AFTER_IDLE_S); one dropped sooner fails its
    # statement as StoreUnavailable, which the tasks retry.
    database_url: str = ""
    milvus_uri: str = DEFAULT_MILVUS_URI
    milvus_collection: str = "theow_index"
    # Rule directories are layers: the shipped rules, then each of ``rules_dirs``; a
    # later layer's rule replaces an earlier one of the same name. ``rules_dir`` is
    # "only this directory", no layers. Actions likewise. See ``rule_layers``.
    rules_dir: Path | None = None
    rules_dirs: list[Path] = []
    actions_dir: Path | None = None
    actions_dirs: list[Path] = []
    rules_poll_seconds: float = 0.5  # a worker thread stats the rule files this often

    explore: bool = False
    # Each model is provider/model: gemini/<id>, or openai/<id> for any OpenAI-compatible
    # chat-completions endpoint (vLLM, Ollama, llama.cpp's server, a hosted one). Each has
    # its own endpoint and key (adapters/providers.py); a Gemini model falls back to the
    # gemini_* settings. A price is [input, output] dollars per million tokens, 0 for a
    # model the team runs; unset, llm_prices has it or it counts as free.
    llm: str = "gemini/gemini-2.5-flash"
    llm_base_url: str = ""
    llm_api_key: SecretStr = SecretStr("")  # never printed: repr shows **********
    llm_price: list[float] = []
    llm_secondary: str = ""
    llm_secondary_base_url: str = ""
    llm_secondary_api_key: SecretStr = SecretStr("")  # never printed: repr shows **********
    llm_secondary_price: list[float] = []
    gemini_api_key: SecretStr = SecretStr("")  # never printed: repr shows **********
    gemini_base_url: str = ""
    # Global limits per model, shared by every explorer worker through Redis.
    llm_requests_per_minute: int = 60
    llm_tokens_per_minute: int = 1_000_000
    # One session: sized for real logs (tens of KB per turn), not 8k.
    llm_max_tool_calls: int = 30
    llm_max_tokens: int = 600_000
    llm_max_wait_seconds: float = 120.0
    # LLM sessions per session id (a replay job, else an hourly window).
    session_limit: int = 20
    explore_time_limit: int = 900
    # Permissions granted to deployment tools: fs-read, fs-write, shell, network (default: none).
    explore_permissions: list[str] = []
    # bubblewrap, which runs the shell and network tools' commands (a path or a name on
    # PATH); without a working one those two permissions are refused at start.
    explore_bwrap: str = "bwrap"
    # Python modules whose @tool functions are offered to the explorer.
    explore_tools: list[str] = []
    # Seconds one model request may take before it counts as failed (a local model on a CPU
    # answers slowly); the output tokens one explorer turn may write, which bound what the
    # turn reserves of the daily budget.
    llm_request_timeout: float = 300.0
    llm_max_output_tokens: int = 8192
    # Dollars every model call of the fleet may cost per UTC day, the explorer and explain
    # together; each call reserves its most before it is sent (adapters/redis_state.py). 0: no cap.
    llm_daily_budget: float = 0.0
    # explain (core/llm/explanation.py): for a failure no specific rule explains, one model call per
    # new cause, cached per cause and project for the fleet. Off unless set (THEOW_EXPLAIN=on).
    explain: bool = False
    explain_max_output_tokens: int = 400
    # How long a failure's explain task waits for another worker explaining the same cause.
    explain_wait_seconds: float = 30.0
    # A cause whose call failed (a 429, a timeout, a server error) rests this long, then its
    # failures' explain tasks ask again (twice at most); a reached budget waits for the next day.
    explain_retry_seconds: float = 300.0
    # Dollars per million tokens (input, output); estimates for cost reports.
    llm_prices: dict[str, tuple[float, float]] = {
        "gemini-2.5-flash": (0.30, 2.50),
        "gemini-2.5-flash-lite": (0.10, 0.40),
        "gemini-2.5-pro": (1.25, 10.00),
        "gemini-2.0-flash": (0.10, 0.40),
    }

    # Reliability (DESIGN §8): visibility timeout > every task time limit.
    visibility_timeout: int = 3600
    resolve_time_limit: int = 300
    max_deliveries: int = 3
    # A worker holds its failure's claim this long past its last refresh: a redelivery
    # of a failure whose worker was killed waits this long before taking it over.
    claim_ttl: float = 15.0
    # With no valid rules version ever loaded, a failure waits for one: retried this
    # often, this many seconds apart, before an error verdict (see theow_workers.tasks).
    rules_wait_seconds: int = 30
    rules_wait_retries: int = 60
    action_timeout: float = 30.0
    regex_timeout: float = 0.05
    fact_limit: int = 64 * 1024
    # A job's normal (theow_workers.core.logs.normal): kept this long after the job's last
    # learned passing run; a resolver re-reads a job's templates at most this often.
    normal_ttl: int = 14 * 24 * 3600
    normal_cache_seconds: float = 30.0
    worker_concurrency: int = 2
    # Signs internal tasks (explore, replay) and lets workers accept them; empty: a secret
    # generated into ``home`` (theow_workers.tokens.worker_key). Set alike on every worker.
    worker_secret: SecretStr = SecretStr("")  # never printed: repr shows **********
    # Seconds a signed task message stays acceptable after it was signed (a queue backlog).
    signature_max_age: int = 7 * 24 * 3600

    # Replay (theow_workers/replay): small chunks, a bounded number queued, a separate
    # worker at lower CPU priority so live resolves come first. A chunk closes at
    # replay_chunk_bytes of facts or replay_chunk_size failures, whichever comes first.
    replay_chunk_size: int = 200
    replay_chunk_bytes: int = 1024 * 1024
    replay_in_flight: int = 8
    replay_concurrency: int = 2
    replay_nice: int = 10
    replay_max_line_bytes: int = 16 * 1024 * 1024
    # Tokens one exploration session is estimated to use: replay reports price their
    # unmatched groups with these and llm_prices (estimates, not measurements).
    llm_session_input_tokens: int = 100_000
    llm_session_output_tokens: int = 5_000

    # Operations (theow_workers/ops): log lines as text or one JSON object per line;
    # Flower behind basic auth (refused without a password); the domain's Prometheus metrics.
    log_format: str = "text"
    flower_user: str = "theow"
    flower_password: SecretStr = SecretStr("")  # never printed: repr shows **********
    flower_port: int = 5555
    metrics_port: int = 9808
    # The web console (theow_workers/web): refused without a password or with a weak one
    # (web/auth.py); an optional second password logs in read-only (it sees everything,
    # approves nothing). Host names it answers to besides loopback and its bound address.
    web_password: SecretStr = SecretStr("")  # never printed: repr shows **********
    web_readonly_password: SecretStr = SecretStr("")
    web_port: int = 8808
    web_allowed_hosts: list[str] = []
    # The reverse proxies (addresses or networks) whose X-Forwarded-For and X-Forwarded-Proto
    # the console believes (web/proxies.py); empty: no forwarding header is believed.
    web_trusted_proxies: list[str] = []
    # The JSON API and the agents' HTTP intake on the web process (web/api.py, web/intake.py):
    # requests a minute per token, and the largest submission body accepted.
    api_requests_per_minute: int = 600
    intake_per_minute: int = 120
    # Runs an agent may report a minute (theow.run over the broker, POST /api/v1/runs), at most
    # 100 at once: one small record per job run, passed or failed, so more than failures.
    runs_per_minute: int = 600
    intake_max_bytes: int = 4 * 1024 * 1024
    # Webhook intake on the web process (theow_workers/web/hooks.py): each forge's hook
    # answers 404 until its secret is set; its token lets a worker read the job's log
    # (and, with pr_comments on, comment on the pull request). See integrations/.
    github_webhook_secret: SecretStr = SecretStr("")  # never printed: repr shows **********
    github_token: SecretStr = SecretStr("")
    github_api_url: str = "https://api.github.com"
    gitlab_webhook_token: SecretStr = SecretStr("")
    gitlab_token: SecretStr = SecretStr("")
    gitlab_url: str = "https://gitlab.com"
    pr_comments: bool = False
    # The repositories whose deliveries are read (o/r on GitHub, group/project on GitLab,
    # comma-separated); any other is answered 204 and dropped. Empty: every repository.
    hook_repos: list[str] = []
    # The ledger of job runs (theow_workers/ledger): each repository's default branch
    # (owner/name=branch, comma-separated; else what its forge's webhooks said, else main),
    # and how many days a run is kept.
    default_branches: list[str] = []
    run_retention_days: float = 90.0
    # Forge API calls per minute per repository, shared by every worker (GitHub allows a
    # token 5,000 an hour across all repositories).
    forge_calls_per_minute: int = 60
    # Alerts (integrations/alerts.py): a signed JSON webhook when main breaks or is fixed, an
    # infrastructure incident starts or a cause turns flaky. Off while the URL is empty; https
    # only (plain http to a loopback receiver); the secret signs every body.
    alert_url: str = ""
    alert_secret: SecretStr = SecretStr("")  # never printed: repr shows **********
    alerts_per_minute: int = 20

    @property
    def model_prices(self) -> dict[str, tuple[float, float]]:
        """Dollars per million tokens (input, output) by model id: ``llm_prices`` and the
        configured models' own prices (``llm_price``, ``llm_secondary_price``)."""
        prices = dict(self.llm_prices)
        for name, price in (
            (self.llm, self.llm_price),
            (self.llm_secondary, self.llm_secondary_price),
        ):
            if name and len(price) == 2:
                prices[name] = prices[name.partition("/")[2]] = (price[0], price[1])
        return prices

    @property
    def store_url(self) -> str:
        """The store's database: ``database_url``, else SQLite in ``home``."""
        return self.database_url or f"sqlite:///{(self.home / 'theow.db').resolve()}"

    @property
    def rule_layers(self) -> tuple[Path, ...]:
        """The rule directories, earliest first: the last one wins on a rule name."""
        return _layers(self.rules_dir, self.rules_dirs, SHIPPED_RULES)

    @property
    def action_layers(self) -> tuple[Path, ...]:
        """The action directories, earliest first: the last one wins on an action name."""
        return _layers(self.actions_dir, self.actions_dirs, SHIPPED_ACTIONS)

    @property
    def user_rules_dir(self) -> Path:
        """Where approved rules are written: the last layer (the shipped one only if alone)."""
        return self.rule_layers[-1]

    @property
    def user_actions_dir(self) -> Path:
        """Where approved actions are written: the last action layer."""
        return self.action_layers[-1]

    @classmethod
    def load(
        cls, env: Mapping[str, str] | None = None, path: Path | None = None, stack: bool = True
    ) -> Settings:
        """Defaults, then the found home's stack file (``stack=False``: not it), then
        theow.yaml, then the environment; ``home`` is found as ``theow_client.stack`` says."""
        env = os.environ if env is None else env
        data, origin, file = _gather(env, path)
        if data.get("home") in (None, ""):
            data["home"] = str(find_home(env))
        if stack:
            _under_recorded(data, origin, Path(str(data["home"])))
        _check_layers(data)
        try:
            settings = cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            where = origin.get(field, f"{file} or environment")
            raise ConfigError(f"setting {field!r}: {first['msg']} (from {where})") from None
        _check_urls(settings, origin)
        _check_prices(settings, origin)
        _check_budget(settings, origin)
        _check_proxies(settings, origin)
        _check_forge_urls(settings, origin)
        _check_alerts(settings, origin)
        return with_embedded_password(settings)

    @classmethod
    def given(cls, env: Mapping[str, str] | None = None, path: Path | None = None) -> set[str]:
        """The settings theow.yaml or the environment sets (what ``theow up`` records)."""
        return set(_gather(os.environ if env is None else env, path)[0])

    @classmethod
    def env_names(cls) -> list[str]:
        return [ENV_ALIASES.get(n, f"THEOW_{n.upper()}") for n in cls.model_fields]


def _gather(env: Mapping[str, str], path: Path | None) -> tuple[JsonObject, dict[str, str], Path]:
    """The settings theow.yaml and the environment give, where each was written, and the file."""
    data: JsonObject = {}
    origin: dict[str, str] = {}  # setting -> where it was written, for messages
    file = path or Path(env.get("THEOW_CONFIG", CONFIG_FILE))
    if file.is_file():
        try:
            loaded = yaml.safe_load(file.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{file}: invalid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{file}: must be a mapping of settings")
        _check_keys(file, loaded)
        data.update(loaded)
        origin.update({key: f"{file} key {key}" for key in loaded})
    for name, info in Settings.model_fields.items():
        var = ENV_ALIASES.get(name, f"THEOW_{name.upper()}")
        if var in env:
            data[name] = _from_env(env[var], info.annotation, name)
            origin[name] = var
    return data, origin, file


def _under_recorded(data: JsonObject, origin: dict[str, str], home: Path) -> None:
    """Add the settings ``theow up`` recorded in ``home``'s stack file under those given here."""
    try:
        record = read_stack(home)
    except StackFileError as exc:
        raise ConfigError(str(exc)) from None
    if record is None:
        return
    for name, value in record.settings.items():
        if name in Settings.model_fields and name not in data and name != "home":
            # "only this directory" recorded, but layers given here (or the reverse): theirs, not both.
            kind = name.partition("_")[0]
            if name.endswith(("_dir", "_dirs")) and any(
                k in data for k in (f"{kind}_dir", f"{kind}_dirs")
            ):
                continue
            data[name] = value
            origin[name] = f"{stack_file(home)} setting {name}"


# The embedded Valkey's generated password (``theow up`` writes it, mode 0600).
VALKEY_PASSWORD_FILE = "valkey.password"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def with_embedded_password(settings: Settings) -> Settings:
    """``settings`` whose local broker URL without credentials gains the embedded Valkey's password.

    So every command run beside ``theow up`` (``theow doctor``, ``theow
    replay``...) reaches its Valkey with no configuration. Only for a loopback
    host: the password is never sent to another machine.
    """
    parts = urlsplit(settings.redis_url)
    file = settings.home / VALKEY_PASSWORD_FILE
    if "@" in parts.netloc or parts.hostname not in _LOOPBACK or not file.is_file():
        return settings
    password = file.read_text().strip()
    return settings.model_copy(update={"redis_url": with_password(settings.redis_url, password)})


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` for the default user (any credentials it had are replaced).

    >>> with_password("redis://127.0.0.1:6479/0", "p/w")
    'redis://:p%2Fw@127.0.0.1:6479/0'
    """
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f":{quote(password, safe='')}@{host}"))


# The workers reach Redis through Celery and through redis-py: only what both read.
# (A Unix socket is redis+socket:// to Celery and unix:// to redis-py: neither serves both.)
WORKER_REDIS_SCHEMES = ("redis", "rediss")
MILVUS_SCHEMES = ("http", "https", "tcp", "unix")


def _check_urls(settings: Settings, origin: Mapping[str, str]) -> None:
    """The service URLs, checked when read: a typo is one line naming where it was written.

    >>> Settings.load(env={"THEOW_REDIS_URL": "redis://:pw@cache:99999/0"}, path=Path("-"))
    Traceback (most recent call last):
    ...
    theow_workers.config.ConfigError: bad THEOW_REDIS_URL 'redis://:***@cache:99999/0': port '99999' is not a number from 1 to 65535
    """
    problems = {
        "redis_url": redis_url_problem(settings.redis_url, WORKER_REDIS_SCHEMES),
        "database_url": _database_url_problem(settings.database_url),
        "milvus_uri": _milvus_uri_problem(settings.milvus_uri),
    }
    for name, problem in problems.items():
        if problem:
            where = origin.get(name, f"default {name}")
            value = safe_url(str(getattr(settings, name)))
            raise ConfigError(f"bad {where} {value!r}: {problem}")


def _check_prices(settings: Settings, origin: Mapping[str, str]) -> None:
    """A model's own price is two non-negative numbers, input then output.

    >>> Settings.load(env={"THEOW_LLM_PRICE": "0.2"}, path=Path("-"))
    Traceback (most recent call last):
    ...
    theow_workers.config.ConfigError: bad THEOW_LLM_PRICE [0.2]: a price is two numbers, dollars per million input and output tokens (e.g. 0.15,0.60; 0,0 for a model you run)
    """
    for name in ("llm_price", "llm_secondary_price"):
        price = getattr(settings, name)
        if price and (len(price) != 2 or min(price) < 0):
            where = origin.get(name, name)
            raise ConfigError(
                f"bad {where} {price}: a price is two numbers, dollars per million input and"
                " output tokens (e.g. 0.15,0.60; 0,0 for a model you run)"
            )


def _check_budget(settings: Settings, origin: Mapping[str, str]) -> None:
    """The daily budget is dollars, not negative; output bounds are positive.

    >>> Settings.load(env={"THEOW_LLM_DAILY_BUDGET": "-1"}, path=Path("-"))
    Traceback (most recent call last):
    ...
    theow_workers.config.ConfigError: bad THEOW_LLM_DAILY_BUDGET -1.0: dollars per UTC day, 0 for no cap
    """
    if settings.llm_daily_budget < 0:
        where = origin.get("llm_daily_budget", "llm_daily_budget")
        raise ConfigError(
            f"bad {where} {settings.llm_daily_budget}: dollars per UTC day, 0 for no cap"
        )
    for name in ("llm_max_output_tokens", "explain_max_output_tokens", "llm_request_timeout"):
        if getattr(settings, name) <= 0:
            where = origin.get(name, name)
            raise ConfigError(f"bad {where} {getattr(settings, name)}: must be more than 0")


def _check_proxies(settings: Settings, origin: Mapping[str, str]) -> None:
    """Each trusted proxy is an address or a network: a typo never trusts a name by chance.

    >>> Settings.load(env={"THEOW_WEB_TRUSTED_PROXIES": "10.0.0.0/8,proxy"}, path=Path("-"))
    Traceback (most recent call last):
    ...
    theow_workers.config.ConfigError: bad THEOW_WEB_TRUSTED_PROXIES entry 'proxy': not an address or network (e.g. 10.0.0.5 or 10.0.0.0/24)
    """
    where = origin.get("web_trusted_proxies", "web_trusted_proxies")
    for entry in settings.web_trusted_proxies:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            hint = "e.g. 10.0.0.5 or 10.0.0.0/24"
            if entry == "*":
                hint = "'*' would let any client name its own address; list the proxies"
            raise ConfigError(
                f"bad {where} entry {entry[:60]!r}: not an address or network ({hint})"
            ) from None


def forge_url_problem(url: str) -> str | None:
    """Why a forge token must not be sent to ``url``, or None: https, or http to loopback.

    >>> forge_url_problem("http://127.0.0.1:8929"), forge_url_problem("https://gitlab.example")
    (None, None)
    >>> forge_url_problem("http://gitlab.example")
    'a forge token goes only over https (plain http only to a loopback test server)'
    """
    parts = urlsplit(url)
    if parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.hostname)):
        return None
    return "a forge token goes only over https (plain http only to a loopback test server)"


def _check_forge_urls(settings: Settings, origin: Mapping[str, str]) -> None:
    """The forges' URLs, checked when read: a token never crosses the network in clear.

    >>> Settings.load(env={"THEOW_GITLAB_URL": "http://gitlab.example"}, path=Path("-"))
    Traceback (most recent call last):
    ...
    theow_workers.config.ConfigError: bad THEOW_GITLAB_URL 'http://gitlab.example': a forge token goes only over https (plain http only to a loopback test server)
    """
    for name in ("github_api_url", "gitlab_url"):
        url = str(getattr(settings, name))
        problem = forge_url_problem(url)
        if problem:
            where = origin.get(name, f"default {name}")
            raise ConfigError(f"bad {where} {safe_url(url)!r}: {problem}")


def _check_alerts(settings: Settings, origin: Mapping[str, str]) -> None:
    """An alert goes over https (http only to loopback), signed, at a positive rate.

    >>> Settings.load(env={"THEOW_ALERT_URL": "http://chat.example/hook"}, path=Path("-"))
    Traceback (most recent call last):
    ...
    theow_workers.config.ConfigError: bad THEOW_ALERT_URL 'http://chat.example/hook': alerts go only over https (plain http only to a loopback test receiver)
    """
    url = settings.alert_url
    if not url:
        return
    where = origin.get("alert_url", "alert_url")
    parts = urlsplit(url)
    if not (parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.hostname))):
        problem = "alerts go only over https (plain http only to a loopback test receiver)"
        raise ConfigError(f"bad {where} {safe_url(url)[:200]!r}: {problem}")
    if not parts.hostname:
        raise ConfigError(f"bad {where} {safe_url(url)[:200]!r}: no host")
    if not settings.alert_secret.get_secret_value():
        raise ConfigError(f"{where} is set without THEOW_ALERT_SECRET: alerts are always signed")
    if settings.alerts_per_minute <= 0:
        got = origin.get("alerts_per_minute", "alerts_per_minute")
        raise ConfigError(f"bad {got} {settings.alerts_per_minute}: must be more than 0")


def _database_url_problem(url: str) -> str | None:
    if not url:  # SQLite in home
        return None
    # Only the store imports SQLAlchemy; imported here, when there is a URL to parse.
    # sqlite_file parses any URL with SQLAlchemy's make_url (its answer is not needed).
    from theow_workers.store import sqlite_file

    problem = port_problem(url.partition("://")[2].partition("/")[0])
    if problem:
        return problem
    try:
        sqlite_file(url)
    except Exception:  # SQLAlchemy's own message repeats the URL, password and all
        return (
            "not a database URL (dialect+driver://user:password@host:port/database, "
            "e.g. postgresql+psycopg://theow@db:5432/theow or sqlite:///theow.db)"
        )
    return None


def _milvus_uri_problem(uri: str) -> str | None:
    """pymilvus reads an http(s)/tcp/unix URI, or a Milvus Lite file ending in .db."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return (
            None
            if uri.endswith(".db")
            else ("neither a URI (http://HOST:PORT) nor a Milvus Lite file ending in .db")
        )
    if scheme.lower() not in MILVUS_SCHEMES:
        return f"scheme {scheme!r} is not one of {', '.join(s + '://' for s in MILVUS_SCHEMES)}"
    if scheme.lower() == "unix":
        return None
    authority = rest.partition("/")[0]
    if not authority.rpartition("@")[2].partition(":")[0] and "[" not in authority:
        return "no host"
    return port_problem(authority)


def _check_keys(file: Path, loaded: dict[object, object]) -> None:
    """theow.yaml keys are setting names (``redis_url``), not variable names."""
    by_variable = {v: n for n, v in zip(Settings.model_fields, Settings.env_names(), strict=True)}
    for key in loaded:
        if key in Settings.model_fields:
            continue
        hint = by_variable.get(str(key)) or by_variable.get(str(key).upper())
        if hint:
            raise ConfigError(
                f"{file}: key {key!r}: theow.yaml keys are setting names; write {hint}: "
                f"(the variable's name without THEOW_, lower case)"
            )
        raise ConfigError(
            f"{file}: unknown setting {key!r} (a setting is a THEOW_* variable's name "
            "without THEOW_, lower case; .env.example lists them all)"
        )


def _layers(only: Path | None, extra: list[Path], shipped: Path) -> tuple[Path, ...]:
    """``only`` alone, else the shipped directory first (unless listed) and then ``extra``.

    Without a checkout (a wheel) the shipped directory is ``./rules``: it is a
    layer when it exists, or when nothing else is set, so that the error then
    names it and how to point at rule directories.
    """
    if only is not None:
        return (only,)
    listed = {p.resolve() for p in extra}
    skip = shipped.resolve() in listed or (extra and not shipped.is_dir())
    return tuple(dict.fromkeys([*([] if skip else [shipped]), *extra]))


def layer_name(directory: Path) -> str:
    """How a rule's layer is shown: ``shipped``, or the directory as configured."""
    return "shipped" if directory.resolve() == SHIPPED_RULES.resolve() else str(directory)


def _check_layers(data: JsonObject) -> None:
    """``X_dir`` and ``X_dirs`` mean different things: one of them, not both (empty is unset)."""
    for kind in ("rules", "actions"):
        one, many = f"{kind}_dir", f"{kind}_dirs"
        if data.get(one) == "":
            del data[one]
        if data.get(one) is not None and data.get(many):
            raise ConfigError(
                f"both {one} and {many} are set (THEOW_{one.upper()}, THEOW_{many.upper()}): "
                f"{one} is the only directory, {many} adds to the shipped {kind}; keep one"
            )


def _from_env(value: str, annotation: object, name: str = "") -> Json:
    """Lists from comma-separated text (directories: os.pathsep), mappings from JSON."""
    if name in PATH_LISTS:
        return [v for v in value.split(os.pathsep) if v.strip()]
    origin = getattr(annotation, "__origin__", None)
    if origin is list:
        return [v.strip() for v in value.split(",") if v.strip()]
    if origin is dict:
        import json

        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"expected a JSON object, got {value[:80]!r}") from exc
    return value
