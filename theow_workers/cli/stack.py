"""``theow worker``, ``web``, ``up`` and ``demo``: the processes this machine runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from theow_workers.cli.output import err, fail, load_settings, out, waiting
from theow_workers.config import Settings

if TYPE_CHECKING:
    from theow_workers.ops.flower import FlowerCommand
    from theow_workers.stack import EmbeddedStack
    from theow_workers.stack.supervisor import Child
    from theow_workers.web.server import WebCommand


def refuse_to_explore_without(s: Settings) -> None:
    """Exit 2 with the reason when an explorer could not explore anything."""
    from theow_workers.explorer.run import explorer_problem

    problem = explorer_problem(s)
    if problem is not None:
        raise fail(f"not starting an explorer: {problem}", 2)


def refuse_to_explain_without(s: Settings) -> None:
    """Exit 2 when THEOW_EXPLAIN is on but the configured model cannot be built."""
    from theow_workers.adapters.providers import configured_models
    from theow_workers.config import ConfigError

    try:
        configured_models(s)
    except ConfigError as exc:
        raise fail(f"not starting an explainer: {exc}", 2) from None


def worker(
    queues: Annotated[
        str,
        typer.Option(help="Comma-separated queues: resolve, explore, replay, passing, explain."),
    ] = "resolve",
    concurrency: Annotated[int | None, typer.Option(help="Worker processes.")] = None,
    loglevel: str = "INFO",
) -> None:
    """Run a Celery worker for the given queues (against the configured services)."""
    from theow_client.names import QUEUE_EXPLORE, QUEUES

    wanted = [q.strip() for q in queues.split(",") if q.strip()]
    unknown = [q for q in wanted if q not in QUEUES]
    if unknown or not wanted:
        raise fail(f"unknown queue(s) {unknown or queues!r}; choose from {', '.join(QUEUES)}", 2)
    s = load_settings()
    if QUEUE_EXPLORE in wanted:
        refuse_to_explore_without(s)
    if "explain" in wanted:
        refuse_to_explain_without(s)
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "theow_workers.celery_app",
        "worker",
        "--queues",
        ",".join(wanted),
        "--concurrency",
        str(concurrency or s.worker_concurrency),
        "--loglevel",
        loglevel,
    ]
    os.execv(sys.executable, argv)


def web(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int | None, typer.Option(help="[default: THEOW_WEB_PORT, 8808]")] = None,
) -> None:
    """Serve the web console: review queue, failures, rules, insight, replays.

    Refused unless THEOW_WEB_PASSWORD is set, 12 characters or more and not a common
    password (THEOW_WEB_READONLY_PASSWORD, held to the same rule, adds
    read-only logins).
    """
    from theow_workers.stack import PortInUse, StackError, bind
    from theow_workers.web.auth import WebAuthError
    from theow_workers.web.server import serve, web_command

    s = load_settings()
    try:
        command = web_command(s, host, port)
    except WebAuthError as exc:
        raise fail(str(exc), 2) from None
    try:
        sock = bind(host, port if port is not None else s.web_port)
    except PortInUse as exc:
        raise fail(f"{exc}: choose another with --port") from None
    except StackError as exc:
        raise fail(str(exc)) from None
    out.print(f"theow web console: {command.url} (password: THEOW_WEB_PASSWORD)")
    serve(s, sock)


def up(
    workers: Annotated[int, typer.Option(help="Resolver worker processes.")] = 2,
    flower: Annotated[
        bool, typer.Option("--flower", help="Also start Flower (needs THEOW_FLOWER_PASSWORD).")
    ] = False,
    redis_port: Annotated[
        int | None,
        typer.Option(help="Valkey's port [default: THEOW_REDIS_URL's]", min=1, max=65535),
    ] = None,
    milvus_port: Annotated[
        int | None,
        typer.Option(help="Milvus Lite's port [default: THEOW_MILVUS_URI's]", min=1, max=65535),
    ] = None,
    web_port: Annotated[
        int | None,
        typer.Option(help="The console's port [default: THEOW_WEB_PORT]", min=1, max=65535),
    ] = None,
    flower_port: Annotated[
        int | None,
        typer.Option(help="Flower's port [default: THEOW_FLOWER_PORT]", min=1, max=65535),
    ] = None,
) -> None:
    """Start the embedded stack (Valkey, Milvus Lite, SQLite, resolver and replay workers,
    an explorer with THEOW_EXPLORE=1) until Ctrl-C.

    Every port is checked before anything starts; clients reach Valkey at the
    broker URL printed (THEOW_REDIS_URL).
    """
    from urllib.parse import urlsplit, urlunsplit

    from theow_client.stack import STACK_FILE, user_home
    from theow_workers.client_env import LOCAL_AGENT, client_env_file, grant_broker_access
    from theow_workers.config import VALKEY_PASSWORD_FILE
    from theow_workers.ops.flower import FlowerError, flower_command
    from theow_workers.stack import EmbeddedStack, StackError, with_port
    from theow_workers.stack.record import StackRunning, claim, running, write_stack_file
    from theow_workers.stack.supervisor import Supervisor
    from theow_workers.web.auth import WebAuthError
    from theow_workers.web.server import web_command

    s = _settings_of_up()
    home = s.home.resolve()
    already = running(home)
    if already is not None:  # before anything: no token, no env file, no server touched
        raise fail(str(StackRunning(home, already)))
    given = Settings.given() | {"redis_url", "milvus_uri"}
    if redis_port is not None:
        s = s.model_copy(update={"redis_url": with_port(s.redis_url, redis_port)})
    if milvus_port is not None:
        s = s.model_copy(update={"milvus_uri": with_port(s.milvus_uri, milvus_port)})
    for name, port in (("web_port", web_port), ("flower_port", flower_port)):
        if port is not None:
            s = s.model_copy(update={name: port})
            given.add(name)
    if s.explore:
        refuse_to_explore_without(s)
    if s.explain:
        refuse_to_explain_without(s)
    try:
        flower_cmd = flower_command(s, port=flower_port) if flower else None
    except FlowerError as exc:
        raise fail(str(exc), 2) from None
    try:  # the console only with a password, as Flower; a weak one is an error, not a skip
        web_cmd = web_command(s, port=web_port)
    except WebAuthError as exc:
        if s.web_password.get_secret_value():
            raise fail(str(exc), 2) from None
        web_cmd = None
    stack = EmbeddedStack(s)
    ports = [(*stack.valkey_address, "--redis-port"), (*stack.milvus_address, "--milvus-port")]
    if web_cmd is not None:
        ports.append(("127.0.0.1", web_port or s.web_port, "--web-port"))
    if flower_cmd is not None:
        ports.append(("127.0.0.1", flower_port or s.flower_port, "--flower-port"))
    refuse_taken_ports(ports)
    try:
        lock = claim(home)  # held until this process ends, however it ends
    except StackRunning as exc:  # another `theow up` on this home started meanwhile
        raise fail(str(exc)) from None
    try:
        env_file = client_env_file(s)
        write_stack_file(s, given, env_file, {flag[2:-5]: port for _, port, flag in ports})
        # First: a client started with the stack finds its token as soon as Valkey listens.
        token = _local_client(s, env_file, web_cmd.url if web_cmd is not None else None)
        with waiting("starting Valkey, Milvus Lite and SQLite", after=0):
            stack.start()
        grant_broker_access(stack.settings, LOCAL_AGENT, token)
        _sync_agent_users(stack.settings)
        children = _children(stack, workers, flower_cmd, web_cmd)
        for child in children:
            child.proc = child.proc or child.start()
    except (StackError, OSError) as exc:
        stack.stop()
        os.close(lock)
        raise fail(str(exc)) from None
    parts = urlsplit(s.redis_url)  # the address only: the password is never printed
    broker = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    out.print(f"theow is up: broker {broker}, milvus {s.milvus_uri}, db {s.store_url}")
    if (stack.home / VALKEY_PASSWORD_FILE).exists():  # else it is THEOW_REDIS_URL's own
        out.print(f"the broker's password is in {stack.home / VALKEY_PASSWORD_FILE}")
    out.print(f"theow-client on this machine: its broker user and agent token are in {env_file}")
    where = (
        "any directory without a .theow/ of its own"
        if home == user_home()
        else f"{home.parent} and below (elsewhere: THEOW_HOME={home})"
    )
    out.print(f"stack recorded in {home / STACK_FILE}: theow and theow-client find it from {where}")
    if flower_cmd is not None:
        out.print(f"flower: {flower_cmd.url} (user {s.flower_user}, THEOW_FLOWER_PASSWORD)")
    if web_cmd is not None:
        out.print(f"web console: {web_cmd.url} (password THEOW_WEB_PASSWORD)")
    else:
        out.print("web console: not started; set THEOW_WEB_PASSWORD to serve it")
    out.print(
        f"logs in {stack.home}; a process that exits is started again; Ctrl-C stops everything"
    )
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        Supervisor(children, stack.home, _say).watch()
    except KeyboardInterrupt:
        pass
    finally:
        # Stopping is not interrupted: a second Ctrl-C would leave servers half stopped.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        out.print("stopping…")
        stack.stop()
        os.close(lock)


def _children(
    stack: EmbeddedStack,
    workers: int,
    flower_cmd: FlowerCommand | None,
    web_cmd: WebCommand | None,
) -> list[Child]:
    """What `theow up` runs and keeps running: the servers (already started), then the rest."""
    from theow_workers.stack import SERVER_MILVUS, SERVER_VALKEY
    from theow_workers.stack.supervisor import Child

    s, home = stack.settings, stack.home
    running = dict(stack.processes)
    children = [
        Child(
            SERVER_VALKEY,
            stack.start_valkey,
            home / "valkey" / "valkey.log",
            "the broker is down: agents spool their failures, workers wait for it",
            running[SERVER_VALKEY],
        ),
        Child(
            SERVER_MILVUS,
            stack.start_milvus,
            home / "milvus.log",
            "the rule index is down: failures wait for it",
            running[SERVER_MILVUS],
        ),
    ]

    def worker(name: str, queues: list[str], concurrency: int, nice: int = 0) -> Child:
        def start() -> subprocess.Popen[bytes]:
            return stack.start_worker(queues, concurrency, name, nice)

        queued = f"nothing takes from {', '.join(queues)} meanwhile"
        return Child(f"worker {name}", start, home / f"worker-{name}.log", queued)

    children.append(worker("resolver", ["resolve"], workers))
    # A separate, lower-priority worker: a replay (or learning a passing run)
    # never occupies the resolvers.
    children.append(worker("replay", ["replay", "passing"], s.replay_concurrency, s.replay_nice))
    if s.explore:  # THEOW_EXPLORE=1: one explorer process (prefetch 1, LLM-bound)
        children.append(worker("explorer", ["explore"], 1))
    if s.explain:  # THEOW_EXPLAIN=on: its model calls never occupy the resolvers
        children.append(worker("explainer", ["explain"], 2))
    if flower_cmd is not None:
        flower_log = home / "flower.log"

        def start_flower() -> subprocess.Popen[bytes]:
            return stack.keep("flower", flower_cmd.start(stack.environment(), flower_log))

        children.append(Child("flower", start_flower, flower_log))
    if web_cmd is not None:
        web_log = home / "web.log"

        def start_web() -> subprocess.Popen[bytes]:
            return stack.keep("web", web_cmd.start(stack.environment(), web_log))

        children.append(Child("web", start_web, web_log, "the console is down"))
    return children


def _say(line: str, loud: bool) -> None:
    """A supervisor's line: an exit in yellow, a crash loop (or a failed start) in red."""
    err.print(line, style="bold red" if loud else "yellow", markup=False, highlight=False)


def _settings_of_up() -> Settings:
    """``theow up``'s settings: its line, environment and theow.yaml, never an earlier run's record."""
    from theow_workers.config import ConfigError

    try:
        return Settings.load(stack=False)
    except ConfigError as exc:
        raise fail(str(exc), 2) from None


def _sync_agent_users(s: Settings) -> None:
    """Agents' broker users made (if lost) or given today's profile; revoked ones go."""
    from theow_workers.ops.acl import AclError, sync_agent_users
    from theow_workers.store.tokens import TokenStore

    tokens = TokenStore.at(s.store_url)
    try:
        closed = sync_agent_users(s, tokens).closed
    except AclError as exc:  # the stack runs; the agents keep the profile they had
        out.print(f"[yellow]warning:[/] agents' broker users not brought up to date: {exc}")
        return
    finally:
        tokens.close()
    if closed:
        out.print(f"revoked tokens' broker users deleted: {', '.join(closed)}")


def _local_client(s: Settings, env_file: Path, console_url: str | None) -> str:
    """A local agent token, written with the broker URL to ``env_file``, where ``theow-client`` finds them."""
    from theow_workers.client_env import LOCAL_AGENT, local_agent_token, write_client_env
    from theow_workers.ops.acl import agent_url
    from theow_workers.store.tokens import TokenStore

    tokens = TokenStore.at(s.store_url)
    token = local_agent_token(tokens, env_file)
    tokens.close()
    # The agent's own broker user, never the workers' (admin) credentials.
    write_client_env(env_file, agent_url(s.redis_url, LOCAL_AGENT, token), token, console_url)
    return token


def refuse_taken_ports(ports: list[tuple[str, int, str]]) -> None:
    """Exit 1 naming the first port another process has, and the flag that picks another."""
    from theow_workers.stack import PortInUse, StackError, check_port

    flags: dict[int, str] = {}
    for host, port, flag in ports:
        if port in flags:
            raise fail(f"port {port} is both {flags[port]} and {flag}: choose another for one")
        flags[port] = flag
        try:
            check_port(host, port)
        except PortInUse as exc:
            raise fail(f"{exc}: choose another with {flag}") from None
        except StackError as exc:
            raise fail(str(exc)) from None


def demo(
    failures: Annotated[Path, typer.Option(help="JSON Lines of failure facts.")] = Path(
        "examples/failures.jsonl"
    ),
    timeout: Annotated[float, typer.Option(help="Seconds to wait for all verdicts.")] = 300.0,
) -> None:
    """Start the embedded stack, submit example failures, print what was resolved, stop."""
    from theow_workers.demo import run_demo
    from theow_workers.stack.record import StackRunning, claim

    settings = load_settings()
    try:  # the demo starts its own servers on the home: never beside a running stack's
        lock = claim(settings.home.resolve())
    except StackRunning as exc:
        raise fail(str(exc)) from None
    try:
        code = run_demo(settings, failures, timeout, out)
    finally:
        os.close(lock)
    raise typer.Exit(code)
