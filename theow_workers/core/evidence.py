"""Evidence: the line of a fact that made a rule validate, so a person sees *why*.

>>> text = "compiling\\nsrc/a.c:3:1: error: expected ';'\\nmake: *** [all] Error 1\\n"
>>> found = evidence_at("log", text, text.index("src/"), text.index("\\nmake"))
>>> found.line, found.text
(2, "src/a.c:3:1: error: expected ';'")
>>> found.describe("c_compile_error")
"matched c_compile_error at log line 2: src/a.c:3:1: error: expected ';'"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from theow_client.facts import lines_around

CONTEXT_LINES = 3  # shown before and after the evidence line
MAX_CONTEXT_LINES = 15
MAX_LINE_CHARS = 500
MAX_MATCHED_CHARS = 2000


@dataclass(frozen=True)
class Evidence:
    fact: str
    line: int  # 1-based line of the fact where the matched text starts
    text: str  # the first non-empty line of the matched text
    position: float  # where in the fact, 0 (start) to 1 (end): later is nearer the failure
    matched: str = ""  # the whole matched text, bounded
    context: tuple[str, ...] = ()  # the lines around, the evidence line among them
    context_start: int = 0  # line number of context[0]
    # Whether the job's passing runs print this line too (None: the job's normal is unknown).
    normal: bool | None = None

    def describe(self, rule: str) -> str:
        seen = " (also seen in passing runs)" if self.normal else ""
        return f"matched {rule} at {self.fact} line {self.line:,}: {self.text}{seen}"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "fact": self.fact,
            "line": self.line,
            "text": self.text,
            "context": list(self.context),
            "context_start": self.context_start,
        }
        if self.normal is not None:
            data["normal"] = self.normal
        return data


def evidence_at(fact: str, text: str, start: int, end: int, at: int | None = None) -> Evidence:
    """Evidence for the match ``text[start:end]``, shown at its line that begins at ``at``.

    Without ``at``, the first non-empty line of the match is the one shown.
    """
    matched = text[start:end]
    if at is not None and start <= at < end:
        start = at
    # The first non-empty line of the match (a match may begin with a newline).
    shown = text[start:end]
    skipped = len(shown) - len(shown.lstrip("\r\n"))
    first = shown[skipped:].split("\n", 1)[0].strip()
    start += skipped
    line = text.count("\n", 0, start) + 1
    context_from = lines_around(text, start, CONTEXT_LINES, 0)[0]
    after = lines_around(text, end, 0, CONTEXT_LINES)[1]
    lines = text[context_from:after].split("\n")[:MAX_CONTEXT_LINES]
    context = tuple(ln[:MAX_LINE_CHARS] for ln in lines)
    return Evidence(
        fact=fact,
        line=line,
        text=first[:MAX_LINE_CHARS],
        position=start / max(len(text), 1),
        matched=matched[:MAX_MATCHED_CHARS],
        context=context,
        context_start=text.count("\n", 0, context_from) + 1,
    )
