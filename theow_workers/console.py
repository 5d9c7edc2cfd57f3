"""Rich consoles that lay out for a terminal only when there is one.

Piped into ``grep``, a file or a CI log, rich would assume 80 columns and wrap
``file:line: reason`` over two lines or cut ids in tables. Here a console
whose stream is not a terminal is as wide as its longest line instead.

>>> import io
>>> console = make_console(file=io.StringIO())
>>> console.print("x" * 200)
>>> len(console.file.getvalue().splitlines()[0])
200
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, ConsoleDimensions

# Wide enough for any line a command prints; rich never pads plain text to it.
PIPE_WIDTH = 100_000


class PipeConsole(Console):
    """A Console that does not wrap or truncate when its stream is not a terminal."""

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
    return PipeConsole(stderr=stderr, soft_wrap=False, **kwargs)
