"""Commands the explorer runs for the model, inside bubblewrap.

A model steered by a build log can ask for anything, so a command sees only the
session's workspace (read-write, at ``/workspace``) and the system's programs
(read-only ``/usr`` and the few ``/etc`` files they need): never ``THEOW_HOME``,
a home directory or the worker's environment. It runs as ``nobody`` in new user,
pid, ipc and uts namespaces, and in a new network namespace (no network, not
even the host's loopback) unless the ``network`` permission is granted.

Two things bwrap does not do by itself: its own process keeps its caller's
environment (readable as ``/proc/1/environ`` inside), so it is started with an
empty one; and run as root it keeps every capability, so the command runs as an
unprivileged user of a user namespace. When the command exits, bwrap (pid 1 of
the sandbox) exits and the kernel kills whatever is left in its pid namespace:
nothing the model starts (``sleep 1000 &``, ``setsid``, ``nohup``) outlives the
tool call. ``--die-with-parent`` does the same when the worker dies.

>>> result = Sandbox("bwrap", Path("/tmp/ws"), network=False).run(["id", "-un"], 10)  # doctest: +SKIP
>>> result.stdout  # doctest: +SKIP
'nobody\\n'
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from functools import cache
from pathlib import Path
from typing import IO

WORKSPACE = "/workspace"
# The only environment a command gets.
ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORKSPACE, "LANG": "C.UTF-8"}
NOBODY = "65534"
# Top-level directories that merged-/usr systems make symlinks into /usr.
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# /etc entries programs need: the loader cache, alternatives' symlinks, time zone,
# TLS roots and name resolution (used only with the network). No passwd, no shadow.
ETC = (
    "alternatives",
    "ld.so.cache",
    "localtime",
    "ssl",
    "ca-certificates",
    "resolv.conf",
    "hosts",
    "nsswitch.conf",
    "gai.conf",
)
PROBE_TIMEOUT = 15.0
# /tmp inside is memory: bounded, so that a command cannot fill the worker's RAM through it.
TMP_BYTES = 256 * 1024 * 1024


class Sandbox:
    """Runs commands with ``root`` as ``/workspace``; ``network`` shares the host's network."""

    def __init__(self, bwrap: str, root: Path, network: bool) -> None:
        self.bwrap = bwrap
        self.root = root
        self.network = network

    def argv(self, command: list[str]) -> list[str]:
        isolation = [
            "--unshare-user",
            "--uid",
            NOBODY,
            "--gid",
            NOBODY,
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]
        if not self.network:
            isolation.append("--unshare-net")
        environment = ["--clearenv"]
        for name, value in ENVIRONMENT.items():
            environment += ["--setenv", name, value]
        mounts = ["--ro-bind", "/usr", "/usr"]
        for name in SYSTEM_DIRS:
            top = Path("/") / name
            if top.is_symlink():
                mounts += ["--symlink", os.readlink(top), str(top)]
            elif top.is_dir():
                mounts += ["--ro-bind", str(top), str(top)]
        for name in ETC:
            mounts += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        mounts += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(TMP_BYTES),
            "--tmpfs",
            "/tmp",
            "--bind",
            str(self.root),
            WORKSPACE,
            "--chdir",
            WORKSPACE,
        ]
        lifetime = ["--die-with-parent", "--new-session"]
        return [self.bwrap, *isolation, *lifetime, *environment, *mounts, "--", *command]

    def run(
        self, command: list[str], timeout: float, keep: int = 64 * 1024
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command``; on its time limit (or any interruption) the sandbox is killed.

        Only the last ``keep`` bytes of stdout and of stderr are kept: a command
        printing for a minute costs no memory. Raises ``subprocess.TimeoutExpired``
        once nothing of the sandbox is left.
        """
        info, info_out = os.pipe()  # bwrap writes the sandbox's pid 1 here
        argv = self.argv(command)
        argv[1:1] = ["--info-fd", str(info_out)]
        child: int | None = None
        # An empty environment for bwrap itself: see the module's docstring.
        with subprocess.Popen(
            argv,
            env={},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(info_out,),
        ) as proc:
            os.close(info_out)
            assert proc.stdout is not None and proc.stderr is not None
            stdout, stderr = _Tail(proc.stdout, keep), _Tail(proc.stderr, keep)
            try:
                with os.fdopen(info) as status:
                    child = json.loads(status.read() or "{}").get("child-pid")
                proc.wait(timeout=timeout)
            except BaseException:  # the time limit, or the task's own limit raised mid-call
                _kill(proc, child)
                raise
            finally:
                stdout.join(5)
                stderr.join(5)
        return subprocess.CompletedProcess(command, proc.returncode, stdout.text, stderr.text)


class _Tail(threading.Thread):
    """Reads a pipe to its end, keeping its last ``keep`` bytes."""

    def __init__(self, pipe: IO[bytes], keep: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.keep, self.tail = pipe, keep, b""
        self.start()

    def run(self) -> None:
        while chunk := self.pipe.read(64 * 1024):
            self.tail = (self.tail + chunk)[-self.keep :]

    @property
    def text(self) -> str:
        return self.tail.decode(errors="replace")


def _kill(proc: subprocess.Popen[bytes], child: int | None) -> None:
    """Kill the sandbox and wait until every process in it is gone.

    Killing pid 1 of a pid namespace kills the rest, and its parent (bwrap
    outside) sees it exit only once the namespace is empty; killing only the
    outer bwrap would leave that to ``--die-with-parent``, after we return.
    """
    if child is not None and proc.poll() is None:  # still unreaped: the pid is the sandbox's
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def bwrap_path(bwrap: str) -> str | None:
    """The program a ``bwrap`` setting names (a path, or a name looked up on PATH)."""
    if os.sep in bwrap:
        return bwrap if os.access(bwrap, os.X_OK) and Path(bwrap).is_file() else None
    return shutil.which(bwrap)


@cache
def sandbox_problem(bwrap: str) -> str | None:
    """Why no sandbox can be started with this ``bwrap``, or None: probed once per process."""
    path = bwrap_path(bwrap)
    if path is None:
        return f"bubblewrap is not installed: {bwrap!r} is not an executable program"
    with tempfile.TemporaryDirectory(prefix="theow-probe-") as root:
        try:
            done = Sandbox(path, Path(root), network=False).run(["true"], PROBE_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap ({path}) cannot start a sandbox: {exc}"
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        return (
            f"bubblewrap ({path}) cannot start a sandbox here (are user namespaces "
            f"available?): {said[0][:300]}"
        )
    return None


class SandboxUnavailable(RuntimeError):
    pass


def sandbox(bwrap: str, root: Path, network: bool) -> Sandbox:
    """A sandbox for ``root``; ``SandboxUnavailable`` (saying why) where none can start."""
    problem = sandbox_problem(bwrap)
    path = bwrap_path(bwrap)
    if problem is not None or path is None:  # the program is started with an empty PATH
        raise SandboxUnavailable(problem or f"{bwrap!r} is not an executable program")
    return Sandbox(path, root, network)
