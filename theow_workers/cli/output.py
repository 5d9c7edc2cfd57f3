"""What every ``theow`` command shares: its two consoles, ``--json``, and errors as exit codes.

A command prints what it found on ``out`` (stdout) and how it went on ``err``
(stderr); with ``--json`` it prints exactly one JSON document on stdout
instead. A command stops with ``raise fail(message, code)``: one line
``error: message`` on stderr, then that exit code (2 for bad usage or
configuration, 1 for everything else).

Piped into ``grep``, a file or a CI log, rich would assume 80 columns and wrap
``file:line: reason`` over two lines or cut ids in tables. Here a console
whose stream is not a terminal is as wide as its longest line instead.

>>> import io
>>> console = make_console(file=io.StringIO())
>>> console.print("x" * 200)
>>> len(console.file.getvalue().splitlines()[0])
200

A command that waits (MiniLM embedding the rules, Hyperscan compiling them,
the stack starting) says so once the wait passes a second: a spinner on a
terminal; in a pipe or CI log one plain line when the wait starts and no
animation (``theow: embedding 239 rules with MiniLM (first run only, cached
afterwards)…``).

The consoles replace no emoji codes (a log's ``:x:`` stays as it is); log
text and messages from elsewhere go out as ``rich.text.Text`` (or with
``markup=False``) so that a ``[red]`` in them is text, not markup.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, ConsoleDimensions
from rich.text import Text

if TYPE_CHECKING:
    from rich.status import Status

    from theow_workers.config import Settings

# Wide enough for any line a command prints; rich never pads plain text to it.
PIPE_WIDTH = 100_000


class PipeConsole(Console):
    """A Console that does not wrap or truncate when its stream is not a terminal.

    Not even when ``COLUMNS`` is set, as CI runners do: an error stays one line in a job's log.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "width" not in kwargs and not self.is_terminal:
            self._width = None  # rich took it from COLUMNS

    @property
    def size(self) -> ConsoleDimensions:
        dimensions = super().size
        if self.is_terminal or self._width is not None:
            return dimensions
        return ConsoleDimensions(PIPE_WIDTH, dimensions.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


def make_console(*, stderr: bool = False, **kwargs: Any) -> Console:
    """A console for a command's output (``stderr=True``: its diagnostics)."""
    return PipeConsole(stderr=stderr, soft_wrap=False, emoji=False, **kwargs)


out = make_console()
err = make_console(stderr=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]


def print_json(data: object) -> None:
    """The ``--json`` output: one JSON document on one line of stdout."""
    print(json.dumps(data))


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` on stderr; raise what this returns to exit with ``code``."""
    err.print(Text.assemble(("error:", "red"), " ", message))
    return typer.Exit(code)


@contextmanager
def waiting(message: str, after: float = 1.0) -> Iterator[None]:
    """Say on stderr what the block waits for, once it has lasted ``after`` seconds.

    A wait that ends sooner (a cache hit) says nothing. Only one at a time:
    rich draws one spinner.
    """
    lock = threading.Lock()
    shown: list[Status] = []
    ended = threading.Event()

    def show() -> None:
        with lock:
            if ended.is_set():
                return
            if err.is_terminal:
                shown.append(err.status(message))
                shown[0].start()
            else:
                err.print(f"theow: {message}…", markup=False, highlight=False)

    timer = threading.Timer(after, show)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            ended.set()
            timer.cancel()
            for status in shown:
                status.stop()


def load_settings() -> Settings:
    """The settings, or exit 2 naming what in theow.yaml or THEOW_* is wrong."""
    from theow_workers.config import ConfigError, Settings

    try:
        return Settings.load()
    except ConfigError as exc:
        raise fail(str(exc), 2) from None


# A service that cannot be reached is an expected condition, not a bug: one
# line naming it, exit 1, no traceback. Only modules already imported are
# consulted, so the check itself imports nothing heavy.
UNREACHABLE = (
    ("redis.exceptions", "ConnectionError"),
    ("redis.exceptions", "TimeoutError"),
    ("kombu.exceptions", "OperationalError"),
    ("theow_workers.store.schema", "StoreUnavailable"),
    ("pymilvus.exceptions", "MilvusException"),
)


def unreachable(exc: BaseException) -> bool:
    kinds: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, name in UNREACHABLE:
        loaded = sys.modules.get(module)
        if loaded is not None:
            kinds.append(getattr(loaded, name))
    return isinstance(exc, tuple(kinds))


def run(app: typer.Typer) -> None:
    """Run ``app`` as the process: an unreachable service is one error line and exit 1.

    Bad arguments are reported by Typer, framed by rich on a terminal. In a pipe
    or a CI log they are plain lines (``Error: No such option: --learn``): with
    no markup mode Typer prints them as click does, without box-drawing.
    """
    from theow_workers.core.logs.redact import redact_text

    if not err.is_terminal:
        app.rich_markup_mode = None
    try:
        app()
    except Exception as exc:
        if not unreachable(exc):
            raise
        message = redact_text(" ".join(str(exc).split()))
        stop = fail(f"a service is unreachable: {type(exc).__name__}: {message}")
        sys.exit(stop.exit_code)
