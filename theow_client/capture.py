"""Run a build command, show its output live, and keep a bounded copy for Theow.

By default the command gets one pipe for both stdout and stderr, as a CI
runner gives its steps (GitHub Actions, GitLab's runner): the kernel appends
each write in the order the command made it, so the ``log`` fact is the output
in the command's own order, line N the line it wrote Nth, and the client
passes it through on its own stdout. ``separate=True`` keeps two pipes, for a
caller that needs the command's stderr on stderr; their order is then read
from outside (``theow_client.streams``) and can only be guessed where the two
are written within microseconds.

The client keeps the first ``head`` and the last ``tail`` bytes of what it
read: a command printing gigabytes costs a few megabytes of memory.
``bound_facts`` then cuts that to the facts limit, keeping windows around the
error lines in the middle.

>>> result = capture(["sh", "-c", "echo out; echo err >&2; exit 3"])  # doctest: +SKIP
out
err
>>> result.exit_code, result.log, result.stderr                        # doctest: +SKIP
(3, 'out\\nerr\\n', '')
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import BinaryIO, TextIO, cast

from theow_client.facts import CUT_MARKER, decode
from theow_client.streams import Interleaved, Stream

# Far more than the facts limit: bound_facts picks the error windows from this,
# and the cause of a failure is often megabytes before the end of the output.
DEFAULT_HEAD_BYTES = 1024 * 1024
DEFAULT_TAIL_BYTES = 7 * 1024 * 1024
DRAIN_AFTER_EXIT = 2.0
# Shell conventions, so `run` reports what a shell would have.
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127


class HeadTail:
    """Keeps the first ``head`` and the last ``tail`` bytes written to it."""

    def __init__(self, head: int = DEFAULT_HEAD_BYTES, tail: int = DEFAULT_TAIL_BYTES) -> None:
        self.head_limit = head
        self.tail_limit = tail
        self.head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self.total = 0
        self._lock = threading.Lock()

    def write(self, chunk: bytes) -> None:
        with self._lock:
            self._write(chunk)

    def _write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk or self.tail_limit <= 0:
            return
        self._tail.append(chunk)
        self._tail_size += len(chunk)
        # Drop whole chunks that lie entirely before the last `tail` bytes.
        while self._tail_size - len(self._tail[0]) >= self.tail_limit:
            self._tail_size -= len(self._tail.popleft())

    @property
    def omitted(self) -> int:
        return max(0, self.total - len(self.head) - min(self._tail_size, self.tail_limit))

    def text(self) -> str:
        """What was kept, decoded, with a marker saying how much was cut."""
        with self._lock:
            head = bytes(self.head)
            tail = b"".join(self._tail)[-self.tail_limit :] if self.tail_limit > 0 else b""
            omitted = self.omitted
        if not omitted:
            return decode(head + tail)
        return decode(head) + CUT_MARKER.format(omitted=omitted) + decode(tail)


# Theow's own variables (the agent's token, the broker URL, ...): the build
# command, which runs whatever a pull request asks it to, gets none of them.
THEOW_PREFIX = "THEOW_"
PR_SET_DUMPABLE = 4  # linux/prctl.h


def build_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without Theow's variables: what the build command runs with.

    >>> build_environment({"PATH": "/bin", "THEOW_AGENT_TOKEN": "tw1.ci.s", "THEOW_REDIS_URL": "r"})
    {'PATH': '/bin'}
    """
    return {k: v for k, v in environ.items() if not k.startswith(THEOW_PREFIX)}


def make_undumpable() -> None:
    """Make this process non-dumpable: no core file, and no other process of the
    same (non-root) user may ptrace it or read its ``/proc/<pid>/environ`` and
    memory, where the token and broker URL are. Linux only; a no-op elsewhere.

    Root can still read them: an agent's token is only as safe as the user
    that runs the build, which is why the token may do so little.
    """
    if not sys.platform.startswith("linux"):
        return
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # no prctl in this libc: nothing to do
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


@dataclass(frozen=True)
class Captured:
    """What the command printed. With one pipe (``separate`` off), ``stdout`` is
    both streams as written and ``stderr`` only the client's own message when
    the command could not start: which stream a line came from is not known."""

    exit_code: int
    stdout: str
    stderr: str
    duration: float
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    log: str = ""  # stdout and stderr in the order they were written, as whole lines
    interrupted: int = 0  # the signal (SIGINT, SIGTERM) the client was sent while it ran, if any
    separate: bool = False  # read from two pipes: ``stderr`` is the command's stderr alone


class _TextSink:
    """Bytes written to a text-only stream (one without ``.buffer``), decoded."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        return self.stream.write(decode(data))

    def flush(self) -> None:
        self.stream.flush()


def _terminal(stream: TextIO) -> BinaryIO:
    buffer = getattr(stream, "buffer", None)
    return buffer if buffer is not None else cast(BinaryIO, _TextSink(stream))


def capture(
    command: Sequence[str],
    *,
    head: int = DEFAULT_HEAD_BYTES,
    tail: int = DEFAULT_TAIL_BYTES,
    cwd: str | None = None,
    stdout_sink: BinaryIO | None = None,
    stderr_sink: BinaryIO | None = None,
    passthrough: bool = True,
    separate: bool = False,
) -> Captured:
    """Run ``command`` to completion; return its exit code and bounded output.

    Output goes to ``stdout_sink`` (default: this process's stdout) as it
    arrives; with ``separate``, the command's stderr goes to ``stderr_sink``
    (default: this process's stderr). The client's own message when the
    command cannot start goes to ``stderr_sink`` either way. The exit code
    follows shell conventions: 127 when the program does not exist, 126 when
    it cannot be executed, and 128+N when it was killed by signal N.
    """
    out_sink = stdout_sink or (_terminal(sys.stdout) if passthrough else None)
    err_sink = stderr_sink or (_terminal(sys.stderr) if passthrough else None)
    make_undumpable()
    with _passed_on() as signals:
        return _run(command, head, tail, cwd, out_sink, err_sink, signals, separate)


def _run(
    command: Sequence[str],
    head: int,
    tail: int,
    cwd: str | None,
    out_sink: BinaryIO | None,
    err_sink: BinaryIO | None,
    signals: _Signals,
    separate: bool,
) -> Captured:
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            stdout=subprocess.PIPE,
            # One pipe for both, as CI runners do: the kernel keeps the order of the writes.
            stderr=subprocess.PIPE if separate else subprocess.STDOUT,
            env=build_environment(os.environ),
        )
    except OSError as exc:
        code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
        message = f"theow-client: cannot run {command[0] if command else '(nothing)'}: {exc}\n"
        if err_sink is not None:
            err_sink.write(message.encode())
            err_sink.flush()
        return Captured(
            code, "", message, time.monotonic() - started, 0, len(message), message, 0, separate
        )

    signals.now_for(process)
    assert process.stdout is not None
    both = HeadTail(head, tail)
    if separate:
        assert process.stderr is not None
        outputs = (HeadTail(head, tail), HeadTail(head, tail))
        streams = [
            Stream(process.stdout, out_sink, outputs[0]),
            Stream(process.stderr, err_sink, outputs[1]),
        ]
    else:  # the one pipe is the log, as written
        outputs = (both, HeadTail(0, 0))
        streams = [Stream(process.stdout, out_sink, both)]
    reader = Interleaved(streams, both if separate else _Nowhere())
    reader.start()
    returncode = process.wait()
    reader.finish(timeout=DRAIN_AFTER_EXIT)
    exit_code = 128 - returncode if returncode < 0 else returncode
    return Captured(
        exit_code=exit_code,
        stdout=outputs[0].text(),
        stderr=outputs[1].text(),
        duration=time.monotonic() - started,
        stdout_bytes=outputs[0].total,
        stderr_bytes=outputs[1].total,
        log=both.text(),
        interrupted=signals.received[0] if signals.received else 0,
        separate=separate,
    )


class _Nowhere:
    """A log that keeps nothing: with one pipe, the stream's own copy is the log."""

    def write(self, chunk: bytes) -> None:
        pass


PASSED_ON = (signal.SIGINT, signal.SIGTERM)


class _Signals:
    """The Ctrl-C and SIGTERM the client received, passed on to the command once it runs."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.process: subprocess.Popen[bytes] | None = None

    def now_for(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        if self.received:  # one that came while the command was being started
            self._send(self.received[-1])

    def pass_on(self, signum: int, _frame: object) -> None:
        self.received.append(signum)
        if self.process is not None:
            self._send(signum)

    def _send(self, signum: int) -> None:
        if signum == signal.SIGINT and _terminal_sent_it_to_the_group():
            return
        with suppress(OSError):  # the command has just exited
            assert self.process is not None
            self.process.send_signal(signum)


@contextmanager
def _passed_on() -> Iterator[_Signals]:
    """While the command runs, Ctrl-C and SIGTERM are its to answer, not the client's.

    The client does not die of them: it passes them on and waits, so that it
    exits with the command's own status and still reports the failure. A
    Ctrl-C typed at the terminal already reached the command (the terminal
    signals its whole foreground group), so that one is not sent twice. Only
    the main thread may set handlers: elsewhere the signals act as before.
    """
    signals = _Signals()
    if threading.current_thread() is not threading.main_thread():
        yield signals
        return
    previous = {sig: signal.signal(sig, signals.pass_on) for sig in PASSED_ON}
    try:
        yield signals
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _terminal_sent_it_to_the_group() -> bool:
    """Whether this process runs in its terminal's foreground group, where a Ctrl-C reaches all."""
    try:
        with open("/dev/tty", "rb", buffering=0) as tty:
            return os.tcgetpgrp(tty.fileno()) == os.getpgrp()
    except OSError:  # no controlling terminal: a signal came from kill, for us alone
        return False


def shell_join(command: Sequence[str]) -> str:
    """The command as one line a person could paste into a shell."""
    return shlex.join(command)
