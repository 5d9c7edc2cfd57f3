"""Whose failure it is, as a verdict carries it: this change, a broken main, a flaky test, the infrastructure.

The workers decide a failure's origin from the history of its job's runs and put
it in the verdict as ``{"origin", "culprit", "fixed_by", "flip_rate", "reason"}``
(absent when the run came without CI metadata). It crossed a trust boundary, so
it is read tolerantly and made safe here, once, for every place that shows it:
an origin this client does not know stays the text the worker sent (as a
:class:`~theow_client.verdict.Status` does); a culprit or fix that is not a
commit id is dropped (it is linked and shown as a short sha); a flip rate that
is not a share between 0 and 1 is dropped; the reason is one masked, printable,
bounded line.

>>> o = Origin.from_dict({"origin": "main", "culprit": "ABC1234DEF", "reason": "fails on main"})
>>> origin_text(o)
'main is broken since abc1234 (not this change)'
>>> origin_text(Origin.from_dict({"origin": "flaky", "flip_rate": 0.18,
...                               "reason": "passed on retry of the same commit"}))
'flaky (passed on retry of the same commit; flips 18% of runs)'
>>> origin_text(Origin.from_dict({"origin": "sunspots", "reason": "x"}))
'sunspots (x)'
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

from theow_client.jsontypes import JsonObject
from theow_client.redact import redact_text
from theow_client.terminal import printable

# A reason is one line a person reads next to the verdict; the console has the rest.
MAX_REASON_CHARS = 300
# An origin value from a newer worker, kept as text: a word, not a paragraph.
MAX_ORIGIN_CHARS = 32
SHORT_SHA = 7
COMMIT = re.compile(r"[0-9a-f]{7,64}")


class OriginKind(StrEnum):
    CHANGE = "change"  # probably caused by this change
    MAIN = "main"  # the default branch fails the same way: not this change
    FLAKY = "flaky"  # passed on the same commit, or fails now and then: retry it
    INFRA = "infra"  # the infrastructure failed
    UNKNOWN = "unknown"  # too little history to say

    def __str__(self) -> str:
        return self.value


# What each origin says when the worker sent no reason.
_NO_REASON = {OriginKind.UNKNOWN: "no history of this job yet"}
_LABELS = {
    OriginKind.CHANGE: "probably this change",
    OriginKind.MAIN: "main is broken",
    OriginKind.FLAKY: "flaky",
    OriginKind.INFRA: "infrastructure",
    OriginKind.UNKNOWN: "unknown",
}


@dataclass(frozen=True)
class Origin:
    """A failure's origin, every part already validated (see the module's note)."""

    origin: OriginKind | str  # a plain str: an origin from a newer worker
    culprit: str | None = None  # main: the first default-branch commit failing this way
    fixed_by: str | None = None  # main: the first default-branch commit passing again
    flip_rate: float | None = None  # flaky: the share of the cause's recent runs that flipped
    reason: str = ""

    def to_dict(self) -> JsonObject:
        return {
            "origin": str(self.origin),
            "culprit": self.culprit,
            "fixed_by": self.fixed_by,
            "flip_rate": self.flip_rate,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: object) -> Origin | None:
        """The origin a worker sent, made safe; None when ``data`` names none."""
        if not isinstance(data, dict):
            return None
        kind = _kind(data.get("origin"))
        if kind is None:
            return None
        return cls(
            origin=kind,
            culprit=commit_id(data.get("culprit")),
            fixed_by=commit_id(data.get("fixed_by")),
            flip_rate=_share(data.get("flip_rate")),
            reason=one_line(data.get("reason"), MAX_REASON_CHARS),
        )


def one_line(value: object, limit: int) -> str:
    """Untrusted text as one masked, printable line of at most ``limit`` characters."""
    if not isinstance(value, str):
        return ""
    line = " ".join(redact_text(printable(value[: limit * 4])).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def commit_id(value: object) -> str | None:
    """A commit id (7 to 64 hex digits), lower-cased; None for anything else.

    >>> commit_id("ABCDEF1"), commit_id("main;rm -rf"), commit_id(1234567)
    ('abcdef1', None, None)
    """
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    return text if COMMIT.fullmatch(text) else None


def short_sha(sha: str) -> str:
    return sha[:SHORT_SHA]


def _kind(value: object) -> OriginKind | str | None:
    if not isinstance(value, str):
        return None
    text = one_line(value, MAX_ORIGIN_CHARS)
    if not text:
        return None
    try:
        return OriginKind(text)
    except ValueError:
        return text


def _share(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    rate = float(value)
    return rate if math.isfinite(rate) and 0.0 <= rate <= 1.0 else None


def percent(rate: float) -> str:
    """``18%``; a rate that rounds to nothing is ``<1%``, not ``0%``.

    >>> percent(0.18), percent(0.001), percent(0.0)
    ('18%', '<1%', '0%')
    """
    shown = round(rate * 100)
    return "<1%" if shown == 0 and rate > 0 else f"{shown}%"


def origin_label(origin: Origin) -> str:
    """A few words for a title: ``flaky``, ``main is broken``, ``probably this change``."""
    if isinstance(origin.origin, OriginKind):
        return _LABELS[origin.origin]
    return origin.origin


def origin_text(origin: Origin) -> str:
    """The origin in one line, what a person asks first of a red build: is it mine?

    >>> origin_text(Origin(OriginKind.MAIN, culprit="abc1234ff", fixed_by="def5678aa"))
    'main was broken by abc1234, fixed by def5678 (not this change; update your branch)'
    >>> origin_text(Origin(OriginKind.UNKNOWN))
    'unknown (no history of this job yet)'
    >>> origin_text(Origin(OriginKind.INFRA))
    'infrastructure'
    """
    kind = origin.origin
    if kind is OriginKind.MAIN:
        if origin.fixed_by:
            broken = f"by {short_sha(origin.culprit)}, " if origin.culprit else ""
            fixed = f"fixed by {short_sha(origin.fixed_by)}"
            return f"main was broken {broken}{fixed} (not this change; update your branch)"
        since = f" since {short_sha(origin.culprit)}" if origin.culprit else ""
        return f"main is broken{since} (not this change)"
    said = [origin.reason or (_NO_REASON.get(kind, "") if isinstance(kind, OriginKind) else "")]
    if kind is OriginKind.FLAKY and origin.flip_rate is not None:
        said.append(f"flips {percent(origin.flip_rate)} of runs")
    said = [part for part in said if part]
    return origin_label(origin) + (f" ({'; '.join(said)})" if said else "")
