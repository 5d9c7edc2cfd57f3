"""A command's stdout and stderr from two pipes, read by one loop that keeps their order
as far as it can be known from outside.

``theow-client run`` gives a command one pipe for both streams (the kernel
keeps the order of its writes: ``theow_client.capture``). This loop is for
``--separate-stderr``, where the command's stderr stays on stderr, and the
kernel keeps no order between two pipes. What the client can do about that, it does:

- One loop reads both pipes and passes each chunk to the terminal and to the
  log in the same step: no reader thread that the scheduler wakes late, and
  the log's order is the order the terminal showed.
- On Linux the pipes are watched edge-triggered (epoll), which reports them in
  the order they became readable: between two reads of the client, the stream
  written to first comes first.
- Each line of the log is a whole line of one stream, placed when its newline
  arrives: a stderr line written while a stdout line is half printed comes
  before it instead of cutting it in two (the terminal still shows it live).

What cannot be fixed from outside the command: lines written to both streams
within one read of the client (microseconds apart; more on a busy machine),
switching stream more than once, may land out of order. With one pipe or
two, a command whose stdout is block-buffered (C stdio, Python, when writing
to a pipe) writes its stdout late, when a buffer fills or it exits, so its
stdout lines come after stderr lines it printed later. Unbuffered output
(``python -u``, ``PYTHONUNBUFFERED=1``, ``stdbuf -oL CMD``) puts them where
they belong.

How often lines land out of place, either way: ``benchmarks/log_order.py``.
"""

from __future__ import annotations

import os
import select
import selectors
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, BinaryIO, Protocol

READ_CHUNK = 64 * 1024  # a default pipe's whole capacity
# A line longer than this (or a progress bar that never ends its line) goes to
# the log as it stands rather than holding the other stream back.
LINE_HOLD = 64 * 1024
POLL_SECONDS = 0.1  # how soon a stop is noticed


class Keep(Protocol):
    """What keeps a bounded copy (``capture.HeadTail``)."""

    def write(self, chunk: bytes) -> None: ...


@dataclass
class Stream:
    """One output pipe: where its chunks go as they arrive, and its unfinished line."""

    pipe: IO[bytes]
    sink: BinaryIO | None
    keep: Keep
    partial: bytearray = field(default_factory=bytearray)  # its unfinished line
    since: int = 0  # when that line began, in chunks read

    def show(self, chunk: bytes) -> None:
        if self.sink is None:
            return
        try:
            self.sink.write(chunk)
            self.sink.flush()
        except (OSError, ValueError):  # terminal gone: keep capturing anyway
            self.sink = None


class _Poller:
    """The pipes that became readable, in the order they did where the OS says (epoll)."""

    def __init__(self, fds: Sequence[int]) -> None:
        self._epoll: select.epoll | None = None
        self._selector: selectors.BaseSelector | None = None
        if hasattr(select, "epoll"):
            self._epoll = select.epoll()
            for fd in fds:
                self._epoll.register(fd, select.EPOLLIN | select.EPOLLET)
        else:  # level-triggered: the order within one wake-up is the selector's
            self._selector = selectors.DefaultSelector()
            for fd in fds:
                self._selector.register(fd, selectors.EVENT_READ)

    def ready(self, timeout: float) -> list[int]:
        if self._epoll is not None:
            return [fd for fd, _ in self._epoll.poll(timeout)]
        assert self._selector is not None
        return [key.fd for key, _ in self._selector.select(timeout)]

    def forget(self, fd: int) -> None:
        if self._epoll is not None:
            self._epoll.unregister(fd)
        elif self._selector is not None:
            self._selector.unregister(fd)

    def close(self) -> None:
        if self._epoll is not None:
            self._epoll.close()
        if self._selector is not None:
            self._selector.close()


class Interleaved:
    """Reads ``streams`` until they end, building ``log`` from whole lines in arrival order.

    Run it in a thread (``start``); ``finish`` waits for the end of the
    output, or stops capturing after ``timeout`` (a daemon the command left
    behind may hold the pipes open forever: its later output still reaches
    the terminal, but is not the command's).
    """

    def __init__(self, streams: Sequence[Stream], log: Keep) -> None:
        self.streams = {stream.pipe.fileno(): stream for stream in streams}
        self.log = log
        self._everyone = list(streams)
        self._chunks = 0  # read so far: the clock of ``Stream.since``
        self._last: Stream | None = None  # whose bytes the log ends with
        self._line_open = False  # the log does not end with a newline
        self._stop = threading.Event()
        self._captured = threading.Event()
        self._thread = threading.Thread(target=self._run, name="theow-output", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self, timeout: float) -> None:
        self._thread.join(timeout)
        self._stop.set()
        self._captured.wait(timeout)

    def _run(self) -> None:
        for fd in self.streams:
            os.set_blocking(fd, False)
        poller = _Poller(list(self.streams))
        ready: deque[int] = deque()
        try:
            while self.streams:
                # Pipes already known to hold more are read first; a new one joins the end.
                wait = 0.0 if ready else POLL_SECONDS
                found = poller.ready(wait)
                if not found and not ready:  # a quiet spell: look at every pipe, just in case
                    found = list(self.streams)
                ready.extend(fd for fd in found if fd not in ready and fd in self.streams)
                if self._stop.is_set() and not self._captured.is_set():
                    self._end_capture()
                if ready:
                    fd = ready.popleft()
                    if self._read(fd, poller):
                        ready.append(fd)  # a full chunk: there may be more
        finally:
            poller.close()
            self._end_capture()

    def _read(self, fd: int, poller: _Poller) -> bool:
        """Read one chunk of ``fd``; whether the pipe may hold more."""
        stream = self.streams[fd]
        try:
            chunk = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return False
        if not chunk:  # the command (and whatever it left behind) closed it
            poller.forget(fd)
            del self.streams[fd]
            if not self._captured.is_set():  # the end of the output: unfinished lines too
                self._finish_lines()
            stream.pipe.close()
            return False
        stream.show(chunk)
        if not self._captured.is_set():
            stream.keep.write(chunk)
            self._add(stream, chunk)
        return len(chunk) == READ_CHUNK

    def _add(self, stream: Stream, chunk: bytes) -> None:
        """Whole lines of ``chunk`` go to the log; the unfinished end waits for its newline."""
        self._chunks += 1
        if not stream.partial:
            stream.since = self._chunks
        stream.partial += chunk
        end = stream.partial.rfind(b"\n") + 1
        if end:
            self._log(stream, bytes(stream.partial[:end]))
            del stream.partial[:end]
        if len(stream.partial) > LINE_HOLD:
            self._finish_line(stream)

    def _finish_lines(self) -> None:
        """Every stream's unfinished line, in the order they began."""
        for stream in sorted(self._everyone, key=lambda stream: stream.since):
            self._finish_line(stream)

    def _finish_line(self, stream: Stream) -> None:
        if stream.partial:
            self._log(stream, bytes(stream.partial))
            stream.partial.clear()

    def _log(self, stream: Stream, text: bytes) -> None:
        if self._line_open and self._last is not stream:
            self.log.write(b"\n")  # never continue the other stream's unfinished line
        self.log.write(text)
        self._last, self._line_open = stream, not text.endswith(b"\n")

    def _end_capture(self) -> None:
        if self._captured.is_set():
            return
        self._finish_lines()
        self._captured.set()
