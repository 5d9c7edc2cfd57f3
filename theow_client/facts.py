"""Shaping a failure's facts before they cross the broker.

Build logs can be any size and any encoding. Both the client (before sending)
and the worker (before matching) keep a bounded head and tail of every text
fact, replace invalid UTF-8, and note what they cut, so a 50 MB log never
reaches the broker or the database whole and nothing is silently lost.

>>> text, note = bound_text("x" * 100, limit=40)
>>> len(text) < 100 and note["original_chars"] == 100
True
"""

from __future__ import annotations

from typing import Any

# Errors sit near the end of a log, so most of the budget goes to the tail.
DEFAULT_FACT_LIMIT = 64 * 1024
HEAD_SHARE = 0.25
CUT_MARKER = "\n[... theow: {omitted} characters omitted ...]\n"


class FactsError(ValueError):
    """The submitted facts cannot be used; the message says why and where."""


def decode(data: bytes | str) -> str:
    """Text from bytes that may not be UTF-8 (invalid sequences become U+FFFD)."""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


def bound_text(text: str, limit: int = DEFAULT_FACT_LIMIT) -> tuple[str, dict[str, int] | None]:
    """Keep a head and a tail of ``text`` totalling at most about ``limit`` characters.

    Returns the text and, when something was cut, a note with the sizes.
    """
    if len(text) <= limit:
        return text, None
    head = int(limit * HEAD_SHARE)
    tail = limit - head
    omitted = len(text) - head - tail
    kept = text[:head] + CUT_MARKER.format(omitted=omitted) + text[-tail:]
    return kept, {"original_chars": len(text), "kept_chars": head + tail, "omitted_chars": omitted}


def bound_facts(
    facts: Any, limit: int = DEFAULT_FACT_LIMIT
) -> tuple[dict[str, Any], dict[str, dict[str, int]]]:
    """Validate and bound a facts object; return the facts and truncation notes.

    Facts must be a JSON object with string keys. Text values (and bytes,
    decoded) longer than ``limit`` keep a head and tail; other JSON values
    pass through unchanged.
    """
    if not isinstance(facts, dict):
        raise FactsError(f"facts must be a JSON object, got {type(facts).__name__}")
    bounded: dict[str, Any] = {}
    notes: dict[str, dict[str, int]] = {}
    for key, value in facts.items():
        if not isinstance(key, str) or not key:
            raise FactsError(f"fact names must be non-empty strings, got {key!r}")
        if isinstance(value, (bytes, bytearray)):
            value = decode(bytes(value))
        if isinstance(value, str):
            value, note = bound_text(value, limit)
            if note:
                notes[key] = note
        elif value is not None and not isinstance(value, (int, float, bool, list, dict)):
            raise FactsError(f"fact {key!r} has a value of type {type(value).__name__}, not JSON")
        bounded[key] = value
    return bounded, notes
