"""Secrets are masked on the build agent, before a failure is spooled or sent.

A build log leaks what the build had in hand: ``export GITHUB_TOKEN=…``,
``mysql -pX``, ``-H "Authorization: Bearer …"``, a private key printed by a
debugging step. Masking them here means no spool file, Redis message, AOF file
or Flower view ever holds them in clear; the worker masks again on arrival
(``theow_workers.core.logs.redact``), so an old client is covered too.

Why two layers. ``theow_client`` may depend on celery and redis only, so this
pass is the standard library's ``re`` with the detectors of
``theow_client.secret_rules``: named values (``password=…``, ``"token": "…"``,
``--password X``, ``mysql -pX``, ``docker login -p X``), private-key blocks,
``Authorization`` headers, webhook URLs, URL credentials and the token shapes
providers publish (``ghp_…``, ``npm_…``, ``AKIA…``, ``xoxb-…``). The worker
adds the maintained plugins of detect-secrets (Yelp) on top, installed from
PyPI. The other way, shipping a maintained ruleset as data inside the client
(gitleaks' published rules), would copy a third-party rule file into this
repository; we keep such files out, so the client's token shapes are a short
list with a test per shape (``benchmarks/secret_corpus.py``), and the
maintained ruleset runs in the worker's second pass.

A masked value keeps its name and says what it was, so a person can still
read the log:

>>> redact_text("PGPASSWORD='hunter two' psql -h db && git push https://bob:s3cret@git.example")
"PGPASSWORD='***' psql -h db && git push https://bob:***@git.example"
>>> redact_text("GITHUB_TOKEN=ghp_" + "a1B2" * 9)
'GITHUB_TOKEN=[masked:github-token]'

Masking is idempotent (a masked text is left as it is) and every detector runs
only when one of its literal keywords occurs in the text, which keeps a 64 KB
log to a few milliseconds. Text is masked after bounding (a 50 MB log is cut
to 64 KB first); a private key cut in half by the bound is still masked from
its END line back.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterable, Sequence

from theow_client.jsontypes import Json, JsonObject
from theow_client.secret_rules import DETECTORS, Detector, Group

MASK = "***"
LABELLED = "[masked:{}]"
# A fact whose own name says it is a secret is masked whole, whatever it holds.
SECRET_NAME = re.compile(
    r"token|secret|passw(or)?d|api_?key|access_?key|private_?key|credential", re.I
)


Span = tuple[int, int, str]


# Which of a set of lowercase keywords occur in a lowercased text.
KeywordFinder = Callable[[str], set[str]]
# Past this many windows around a detector's keywords, one pass over the whole text is cheaper.
MAX_WINDOWS = 1000


class Redactor:
    """Masks whatever its detectors find; ``redact_text`` is its whole job.

    ``finder`` says which keywords occur in a text; the default tests each with
    ``in`` (about 35 µs per keyword on 64 KB), the worker passes a one-pass
    Hyperscan finder.
    """

    def __init__(
        self,
        detectors: Iterable[Detector],
        finder: Callable[[frozenset[str]], KeywordFinder] | None = None,
    ) -> None:
        self.detectors = tuple(detectors)
        self.keywords = frozenset(k for d in self.detectors for k in d.keywords)
        self._present: KeywordFinder = (finder or _finder)(self.keywords)
        # Which detectors a keyword wakes (by position, so they run in their order), and
        # those that always run: a text wakes a few of a hundred, not all of them.
        self._always = tuple(i for i, d in enumerate(self.detectors) if not d.keywords)
        self._woken: dict[str, tuple[int, ...]] = {}
        for i, detector in enumerate(self.detectors):
            for keyword in detector.keywords:
                self._woken[keyword] = (*self._woken.get(keyword, ()), i)

    def spans(self, text: str) -> list[Span]:
        """Where the secrets are: ``(start, end, label)``, sorted, overlaps merged."""
        lowered = text.lower()
        if len(lowered) != len(text):  # a few Unicode letters grow when lowered
            lowered = text.encode("ascii", "replace").decode().lower()
        present = self._present(lowered)
        found: list[Span] = []
        whole = [(0, len(text))]
        woken = {i for keyword in present for i in self._woken.get(keyword, ())}
        for i in sorted(woken.union(self._always)):
            detector = self.detectors[i]
            windows = whole
            if detector.keywords:
                hits = [k for k in detector.keywords if k in present]
                if not hits:
                    continue
                if not detector.multiline:
                    windows = _windows(text, lowered, hits, detector.reach) or whole
            for window_start, window_end in windows:
                for match in detector.pattern.finditer(text, window_start, window_end):
                    start, end = _span(match, detector.group)
                    if start < 0 or start == end or _is_mask(text[start:end]):
                        continue
                    if detector.check is not None and not detector.check(text[start:end]):
                        continue
                    found.append((start, end, detector.label))
        return _merged(found)

    def redact_text(self, text: str) -> str:
        spans = self.spans(text)
        if not spans:
            return text
        parts: list[str] = []
        position = 0
        for start, end, label in spans:
            parts += [text[position:start], LABELLED.format(label) if label else MASK]
            position = end
        parts.append(text[position:])
        return "".join(parts)

    def redact(self, facts: JsonObject) -> JsonObject:
        """A copy of ``facts`` with secret-named facts and secrets in text (names too) masked."""
        return {
            self.redact_text(key) if isinstance(key, str) else key: self._value(key, value)
            for key, value in facts.items()
        }

    def _value(self, key: str, value: Json) -> Json:
        if isinstance(key, str) and SECRET_NAME.search(key) and value not in (None, ""):
            return MASK
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            return self.redact(value)
        if isinstance(value, list):
            return [self._value("", item) for item in value]
        return value


def _finder(keywords: frozenset[str]) -> KeywordFinder:
    return lambda lowered: {keyword for keyword in keywords if keyword in lowered}


def _windows(
    text: str, lowered: str, keywords: list[str], reach: tuple[int, int] | None
) -> list[tuple[int, int]]:
    """Where a detector must look: merged ``(start, end)`` ranges around every keyword.

    The lines holding one, or ``reach`` characters around it; [] past MAX_WINDOWS.
    """
    windows: list[tuple[int, int]] = []
    for keyword in keywords:
        found = lowered.find(keyword)
        while found >= 0:
            if len(windows) > MAX_WINDOWS:
                return []
            if reach is None:
                start = text.rfind("\n", 0, found) + 1
                end = text.find("\n", found + len(keyword))
                end = len(text) if end < 0 else end
                found = lowered.find(keyword, end)
            else:
                start = max(0, found - reach[0])
                end = min(len(text), found + len(keyword) + reach[1])
                found = lowered.find(keyword, found + len(keyword))
            windows.append((start, end))
    windows.sort()
    merged: list[tuple[int, int]] = []
    for start, end in windows:
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _span(match: re.Match[str], group: Group) -> tuple[int, int]:
    if not isinstance(group, tuple):
        return match.span(group)
    for name in group:
        if match.start(name) >= 0:
            return match.span(name)
    return -1, -1


def _is_mask(value: str) -> bool:
    # What an earlier pass wrote, or a value holding it (a private key masked inside
    # a JSON string): masking twice must change nothing.
    return value.startswith(MASK) or value.strip("*") == "" or "[masked:" in value


def _merged(spans: list[Span]) -> list[Span]:
    """Overlapping spans become one, named after the first labelled one in it."""
    spans.sort(key=lambda span: (span[0], -span[1]))
    merged: list[Span] = []
    for start, end, label in spans:
        if merged and start < merged[-1][1]:
            last_start, last_end, last_label = merged[-1]
            merged[-1] = (last_start, max(last_end, end), last_label or label)
        else:
            merged.append((start, end, label))
    return merged


def _default() -> Redactor:
    return Redactor(DETECTORS)


_REDACTOR: Redactor | None = None


def default_redactor() -> Redactor:
    """The client's redactor, its patterns compiled on first use."""
    global _REDACTOR
    if _REDACTOR is None:
        _REDACTOR = _default()
    return _REDACTOR


def redact_text(text: str) -> str:
    return default_redactor().redact_text(text)


def redact(facts: JsonObject) -> JsonObject:
    return default_redactor().redact(facts)


def summary(values: Sequence[object]) -> str:
    """What Flower may show of a task's arguments: ids and sizes, never the facts.

    >>> summary([{"failure_id": "f-1", "facts": {"stderr": "x" * 10, "problem_type": "oom"}}])
    "failure f-1 problem_type=oom facts={'stderr': 10, 'problem_type': 3}"
    """
    described: list[str] = []
    for value in values:
        if not isinstance(value, dict):
            described.append(type(value).__name__)
            continue
        words = [f"{name} {value[key]}" for key, name in _IDS if isinstance(value.get(key), str)]
        facts = value.get("facts")
        if isinstance(value.get("facts_json"), str):  # the wire form: our own output, safe to read
            with contextlib.suppress(ValueError, RecursionError):
                facts = json.loads(value["facts_json"])
        if isinstance(facts, dict):
            problem = facts.get("problem_type")
            if isinstance(problem, str) and len(problem) <= 64:
                words.append(f"problem_type={redact_text(problem)}")
            sizes = {str(k)[:64]: _size(v) for k, v in list(facts.items())[:20]}
            words.append(f"facts={sizes}")
        for sized in ("items", "outputs"):  # a replay chunk's failures; an outcome's outputs
            if isinstance(value.get(sized), list):
                words.append(f"{sized}={len(value[sized])}")
        described.append(" ".join(words) or "{...}")
    return "; ".join(described)


_IDS = (("failure_id", "failure"), ("job_id", "replay job"))


def _size(value: object) -> int:
    if isinstance(value, (str, list, dict)):
        return len(value)
    return len(str(value))
