"""Text from logs, rules, diffs and LLM output, made safe to show.

Nothing stored is ever rendered as HTML: Jinja escapes every value
(autoescape), and highlighted code comes from Pygments, which escapes the
text it tokenizes. Secrets are masked again on the way out (``redact_text``),
as the SQL store masks them on the way in: a pattern added since a failure
was stored still hides it here.

>>> "&lt;script&gt;alert(1)&lt;/script&gt;" in code("<script>alert(1)</script>", "diff")
True
"""

from __future__ import annotations

from functools import lru_cache

from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, JsonLexer, YamlLexer

from theow_client.jsontypes import JsonObject
from theow_client.lines import LineMap, kept_line
from theow_workers.core.logs.redact import redact_text

LEXERS = {"diff": DiffLexer, "yaml": YamlLexer, "json": JsonLexer}
MAX_LOG_LINES = 20_000


@lru_cache(maxsize=1)
def _formatter() -> HtmlFormatter:
    return HtmlFormatter(cssclass="hl")


def stylesheet() -> str:
    """Pygments' colours for the ``hl`` blocks (served as /static/pygments.css)."""
    return str(_formatter().get_style_defs(".hl"))


def code(text: str, language: str) -> Markup:
    """Highlighted, escaped HTML for ``text`` (a diff, a rule's YAML, JSON)."""
    lexer = LEXERS[language]()
    return Markup(highlight(redact_text(text), lexer, _formatter()))  # Pygments escapes the text


def log_lines(text: str, marks: dict[int, list[str]], kept: LineMap = ()) -> list[JsonObject]:
    """The log as numbered lines; ``marks`` maps a 1-based line to the rules it is evidence for.

    Lines are numbered as in the build's own log: for a log that bounding cut,
    through ``kept`` (``theow_client.lines``), so they agree with the verdict;
    a cut marker has no number. ``i`` is the line's place in ``text`` (1-based).
    """
    lines = redact_text(text).split("\n")[:MAX_LOG_LINES]
    numbered = [(kept_line(kept, i) if kept else i, line) for i, line in enumerate(lines, 1)]
    return [
        {"n": n, "i": i, "text": line, "rules": marks.get(n, []) if n is not None else []}
        for i, (n, line) in enumerate(numbered, 1)
    ]
