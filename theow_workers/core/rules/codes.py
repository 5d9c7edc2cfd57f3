"""What names a cause in a message and must survive any masking of what varies between runs.

Error codes (``TS2322``, ``error[E0308]``, ``CS1002``, ``ORA-00942``,
``E-CAUSE-31``, ``npm ERR! code E404``, ``SQLSTATE 42P01``), exit codes,
signals, errnos and HTTP statuses: ``TS2322`` and ``TS2345`` are two causes,
``exit code 137`` (killed) is not ``exit code 1``. Found on the line as
printed (codes are upper case); a code inside a path, an anchor (``#L12``) or
a hash in upper case is not one, nor ``L296`` (how a line number is written). The volatile-part normalizer
(:func:`~theow_workers.core.logs.text.mask_volatile`) and the pattern a
teaching drafts (:mod:`~theow_workers.core.rules.generalize`) both keep them.

>>> [m.group() for m in KEPT.finditer("a.ts(3,5): error TS2322: x; exit code 137; /tmp/AB12/x")]
['TS2322', 'exit code 137']
"""

from __future__ import annotations

import re

_HTTP_REASONS = (
    "bad request|unauthori[sz]ed|payment required|forbidden|not found|method not allowed|"
    "not acceptable|request timeout|conflict|gone|precondition failed|payload too large|"
    "unprocessable entity|too many requests|internal server error|not implemented|bad gateway|"
    "service unavailable|gateway time-?out"
)
KEPT = re.compile(
    r"(?<![\w/\\.#@$-])(?!L\d+\b)[A-Z][A-Z0-9]*(?:[-_][A-Z]+)*[-_]?\d{1,6}[A-Z0-9]*(?![\w/\\]|[.-]\w)"
    r"|(?i:\bsqlstate\W{0,2}[0-9a-z]{5}\b"
    r"|\b(?:exit(?:ed)?(?: with)?[ _](?:code|status)|exit status|return code|returncode|"
    r"exited with|killed by signal|signal|errno|(?<=\] )error)[ :=\[]{0,3}-?\d{1,3}\b"
    r"|\b(?:http(?:/\d(?:\.\d)?)?(?: error| code| status(?: code)?)?|status(?: code)?|"
    r"response code)[ :=]{0,3}[1-5]\d\d\b"
    rf"|\b[1-5]\d\d[ :-]{{1,3}}(?:{_HTTP_REASONS})\b)"
)
_ALL_HEX = re.compile(r"[0-9A-F]{7,}")


def is_code(text: str) -> bool:
    """Whether ``text``, found by :data:`KEPT`, names a cause (not a hash in upper case)."""
    return _ALL_HEX.fullmatch(text) is None
