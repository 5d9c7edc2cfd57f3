"""``theow up`` keeps its children running: one that exits is started again, with back-off.

What a fleet operator expects of Docker's ``restart: unless-stopped`` or of
Kubernetes, on one machine: never give up on a child, slow down when it keeps
dying, and say so every time.

- A child that exits (a worker, the console, Flower, Valkey, Milvus Lite),
  whatever its exit code, is started again after ``FIRST_DELAY`` (0.5 s),
  doubling up to ``MAX_DELAY`` (30 s); one that then stays up ``STEADY``
  (60 s) starts from 0.5 s again the next time.
- Each exit is one line: the child, its pid, its exit code or signal, the
  restart number and the delay; each start again is one line with its new pid.
- ``CRASH_LOOP`` restarts (5) within ``CRASH_WINDOW`` (300 s) is a crash loop:
  one loud line naming the child's log. It goes on being restarted every
  ``MAX_DELAY``: a broker or disk that comes back heals it without an operator.
- Nothing is restarted once stopping has begun (Ctrl-C, SIGTERM): the loop
  that restarts is the loop the signal ends.

The other children go on meanwhile: a worker's death never stops Valkey,
Milvus Lite or the console. Starting Valkey or Milvus Lite again waits for its
port (up to a minute for Milvus Lite), and the others are looked at after.

The counts are kept in ``$THEOW_HOME/restarts.json`` (``RESTARTS_FILE``),
rewritten on every exit and start, and read by ``theow doctor``
(``theow_workers.ops.restarts``).

>>> supervisor = Supervisor([Child("worker resolver", start)], home, say)  # doctest: +SKIP
>>> supervisor.watch()      # until KeyboardInterrupt                      # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from theow_workers.stack import StackError

FIRST_DELAY, MAX_DELAY = 0.5, 30.0  # seconds before a start again
STEADY = 60.0  # seconds up after which the back-off starts over
CRASH_LOOP, CRASH_WINDOW = 5, 300.0  # this many restarts within this many seconds
POLL = 0.2  # seconds between looks at the children
RESTARTS_FILE = "restarts.json"


def exit_reason(code: int) -> str:
    """``-9`` -> ``killed by SIGKILL``; ``1`` -> ``exited with code 1``."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class Child:
    """One process ``theow up`` keeps running; ``start`` starts it and returns it."""

    name: str
    start: Callable[[], subprocess.Popen[bytes]]
    log: Path | None = None  # named in the crash-loop line
    while_down: str = ""  # what stops while it is down, said when it exits
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restarts: int = 0
    recent: deque[float] = field(default_factory=deque)  # when it exited, within CRASH_WINDOW
    delay: float = FIRST_DELAY
    due: float | None = None  # when it starts again; None while it runs
    last_exit: str = ""
    last_exit_at: float | None = None  # wall clock
    looping: bool = False


class Supervisor:
    """Watches ``children`` (each already started: ``proc`` set) and starts again any that exits."""

    def __init__(
        self,
        children: list[Child],
        home: Path,
        say: Callable[[str, bool], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.children = children
        self.file = home / RESTARTS_FILE
        self.say = say  # (line, loud)
        self.clock = clock
        self.since = time.time()
        self.unwritable = False  # said once, until it can be written again
        now = clock()
        for child in children:
            child.started = now
        self.record()

    def watch(self) -> None:
        """Look at the children every ``POLL`` seconds, until interrupted (KeyboardInterrupt)."""
        while True:
            self.tick()
            time.sleep(POLL)

    def tick(self) -> None:
        """One look: note what exited, start again what is due, reset what stayed up."""
        changed = False
        for child in self.children:
            now = self.clock()
            if child.due is not None:
                if now >= child.due:
                    self._start_again(child)
                    changed = True
                continue
            code = child.proc.poll() if child.proc is not None else None
            if code is None:
                if child.delay > FIRST_DELAY and now - child.started >= STEADY:
                    self._steady(child)
                continue
            self._exited(child, code, now)
            changed = True
        if changed:
            self.record()

    def _exited(self, child: Child, code: int, now: float) -> None:
        pid = child.proc.pid if child.proc is not None else "?"
        child.restarts += 1
        child.last_exit, child.last_exit_at = exit_reason(code), time.time()
        child.recent.append(now)
        while child.recent and now - child.recent[0] > CRASH_WINDOW:
            child.recent.popleft()
        child.due = now + child.delay
        while_down = f" ({child.while_down})" if child.while_down else ""
        self.say(
            f"{child.name} (pid {pid}) {child.last_exit}{while_down}; "
            f"restart {child.restarts} in {child.delay:g} s",
            False,
        )
        if len(child.recent) >= CRASH_LOOP and not child.looping:
            child.looping = True
            log = f"; its log: {child.log}" if child.log else ""
            self.say(
                f"{child.name} is crash-looping: {len(child.recent)} restarts in "
                f"{CRASH_WINDOW:g} s; still restarting it, up to {MAX_DELAY:g} s apart{log}",
                True,
            )
        child.delay = min(child.delay * 2, MAX_DELAY)

    def _start_again(self, child: Child) -> None:
        try:
            child.proc = child.start()
        except (StackError, OSError) as exc:
            child.due = self.clock() + child.delay
            self.say(f"{child.name} did not start: {exc}; next try in {child.delay:g} s", True)
            child.delay = min(child.delay * 2, MAX_DELAY)
            return
        child.started, child.due = self.clock(), None
        self.say(
            f"{child.name} started again (pid {child.proc.pid}, restart {child.restarts})", False
        )

    def _steady(self, child: Child) -> None:
        child.delay = FIRST_DELAY
        if child.looping:
            child.looping = False
            self.say(f"{child.name} has stayed up {STEADY:g} s: no longer crash-looping", False)
            self.record()

    def record(self) -> None:
        """Rewrite ``restarts.json`` whole (a reader never sees half of it)."""
        now = self.clock()
        status = UpStatus(
            pid=os.getpid(),
            since=self.since,
            children=[
                ChildStatus(
                    name=child.name,
                    pid=child.proc.pid if child.proc is not None and child.due is None else None,
                    restarts=child.restarts,
                    last_exit=child.last_exit,
                    last_exit_at=child.last_exit_at,
                    recent=sum(now - at <= CRASH_WINDOW for at in child.recent),
                    crash_loop=child.looping,
                    log=str(child.log) if child.log else None,
                )
                for child in self.children
            ],
        )
        partial = self.file.with_suffix(".json.partial")
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(asdict(status), indent=1) + "\n")
            os.replace(partial, self.file)
        except OSError as exc:  # a full disk costs the count, never the supervision
            if not self.unwritable:
                self.say(
                    f"cannot write {self.file}: {exc}; `theow doctor` will not see restarts", True
                )
            self.unwritable = True
        else:
            self.unwritable = False


@dataclass(frozen=True)
class ChildStatus:
    """One child as ``restarts.json`` has it; ``pid`` is None while it waits to start again."""

    name: str
    pid: int | None
    restarts: int
    last_exit: str
    last_exit_at: float | None
    recent: int  # restarts within CRASH_WINDOW
    crash_loop: bool
    log: str | None


@dataclass(frozen=True)
class UpStatus:
    """``restarts.json``: the ``theow up`` that writes it, since when, and its children."""

    pid: int
    since: float
    children: list[ChildStatus]


def read_status(home: Path) -> UpStatus | None:
    """``home``'s ``restarts.json``, None if no ``theow up`` ran there; ValueError naming the file."""
    file = home / RESTARTS_FILE
    try:
        data = json.loads(file.read_text())
        return UpStatus(
            pid=int(data["pid"]),
            since=float(data["since"]),
            children=[ChildStatus(**child) for child in data["children"]],
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{file} is unreadable ({type(exc).__name__}: {exc})") from None
