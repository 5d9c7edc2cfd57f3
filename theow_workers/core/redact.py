"""Secrets in facts are masked before anything is matched, stored or logged.

Build logs leak tokens: ``export GITHUB_TOKEN=…``, URLs with credentials,
``Authorization: Bearer …``. They are replaced by ``***`` on arrival, so no
SQL row, log line or LLM prompt ever holds them in clear.

>>> redact_text("curl https://bob:hunter2@example.com -H 'Authorization: Bearer abc.def.ghi123'")
"curl https://***@example.com -H 'Authorization: Bearer ***'"
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
SECRET_NAME = re.compile(
    r"token|secret|passw(or)?d|api_?key|access_?key|private_?key|credential", re.I
)

_ASSIGNMENT = re.compile(
    r"(?P<name>\b[A-Za-z0-9_.-]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY)"
    r"[A-Za-z0-9_]*)(?P<sep>\s*[=:]\s*)(?P<quote>['\"]?)[^\s'\"]{4,}",
    re.I,
)
_TOKENS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}|glpat-[A-Za-z0-9_-]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,})"
)
_BEARER = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}", re.I)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^\s/@:]+:[^\s/@]+@", re.I)


_ASSIGNMENT_WORDS = ("token", "secret", "passw", "api_key", "apikey", "access_key", "accesskey",
                     "private_key", "privatekey", "api-key", "access-key", "private-key")  # fmt: skip
_TOKEN_PREFIXES = ("gh", "github_pat_", "AKIA", "xox", "AIza", "glpat-", "sk-")


def redact_text(text: str) -> str:
    # Each pattern runs only when its keywords occur: on a 64 KB log that is the
    # difference between ~13 ms and well under 1 ms.
    lowered = text.lower()
    if "://" in text:
        text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    if any(word in lowered for word in _ASSIGNMENT_WORDS):
        text = _ASSIGNMENT.sub(lambda m: f"{m['name']}{m['sep']}{m['quote']}{MASK}", text)
    if "bearer" in lowered or "basic" in lowered:
        text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    if any(prefix in text for prefix in _TOKEN_PREFIXES):
        text = _TOKENS.sub(MASK, text)
    return text


def redact(facts: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``facts`` with secret-named facts and secrets in text masked."""
    return {key: _redact_value(key, value) for key, value in facts.items()}


def _redact_value(key: str, value: Any) -> Any:
    if SECRET_NAME.search(key) and value not in (None, ""):
        return MASK
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return redact(value)
    if isinstance(value, list):
        return [_redact_value("", v) for v in value]
    return value
