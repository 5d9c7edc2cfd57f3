"""Text from a model or a log, made safe to print on a terminal.

A build log is written by whoever controls the build (a pull request), and a
model's answer can be steered by that log. A terminal acts on escape
sequences in what it prints: ``ESC]52;c;…`` writes the clipboard, ``ESC[2J``
clears the screen, ``ESC]0;…`` sets the window title, a lone carriage return
lets a later text hide an earlier one. So everything untrusted is printed
through :func:`printable`, which drops every escape sequence and control
character but the newline and the tab. Theow's own output (its CI section
markers, its colours) is not passed through it.

The one function for both sides: ``theow_client`` may import nothing of the
workers, so the workers' log reading (``theow_workers.core.logs.text``) uses it.

>>> printable("\\x1b]52;c;ZWNobyBoaQ==\\x07error: \\x1b[31mit broke\\x1b[0m\\x1b[2J\\rdone")
'error: it broke\\ndone'
"""

from __future__ import annotations

import re

# CSI (colours, cursor moves, erase: ESC [ … final byte); OSC, DCS, SOS, PM and
# APC strings (title, clipboard, hyperlinks) up to their terminator or the end of
# the line; every other escape (ESC ( B, ESC 7, ESC c); and the 8-bit C1 forms.
ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
# Control characters left once the sequences are gone, but the tab and newline.
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
CARRIAGE_RETURN = re.compile(r"\r\n?")


def printable(text: str) -> str:
    """``text`` without escape sequences or control characters; a carriage return
    becomes a line break, so no line can overwrite another."""
    text = ESCAPES.sub("", text)
    return CONTROLS.sub("", CARRIAGE_RETURN.sub("\n", text))
