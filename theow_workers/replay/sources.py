"""What a replay reads: a JSON Lines file, or failures already stored in SQL.

Both yield batches of ``Pending`` items in a fixed order, keyed the same way
on every pass (a file by line number, stored failures by their id), so a
resumed job can skip what is decided and a later replay of the same source
can be compared item by item. An item is only parsed once it is known to be
undecided: resuming a nearly finished 200 MB replay reads the file but parses
almost nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from theow_client.ci_run import RunValueError
from theow_client.facts import dumps_facts
from theow_client.jsontypes import JsonObject
from theow_client.lines import FIELD as KEPT_LINES
from theow_workers.ledger import replayed
from theow_workers.replay.reader import HistoryError, RawLine, parse_line, raw_lines, scan
from theow_workers.store.replay import (
    DUPLICATE,
    INVALID,
    PASSED,
    PASSING,
    ItemRecord,
    Job,
    ReplayStore,
)
from theow_workers.store.runs import LedgerRun

BATCH_ITEMS = 500
BATCH_BYTES = 8 * 1024 * 1024
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class SourceError(ValueError):
    """The source cannot be replayed (missing file, changed file, bad selection)."""


@dataclass(frozen=True)
class Pending:
    """An item not parsed yet: ``load`` gives either a worker item or a local record."""

    key: str
    size: int
    load: Callable[[], JsonObject | ItemRecord]


class Source(Protocol):
    kind: str
    description: str

    def identity(self) -> str: ...

    def total(self) -> int: ...

    def options(self) -> JsonObject: ...

    def batches(self) -> Iterator[list[Pending]]: ...


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class FileSource:
    """A JSON Lines file, plain or gzipped, one failure's facts per line (``reader``).

    A line with ``"outcome": "success"`` is a passing run: ``learn`` (when set)
    mines it into its job's normal as the line is read, so the failures after
    it in the file meet it; it is recorded as ``passing``, never resolved.

    A line with ``"outcome": "passed"`` or ``"failed"`` is a run of a history
    (``theow history eval``'s rows, ``ledger.replayed``): a passed one goes to
    the ledger (``record_run``) as it is read and is recorded ``passed``; a
    failed one is replayed as a failure carrying its ``run`` fact.
    """

    kind = "file"
    # facts -> what was learned, in a few words (``theow_workers.cli.replay``).
    learn: Callable[[JsonObject], str] | None = None
    # a passed run -> what was recorded, in a few words (the ledger; ``ledger.replayed``).
    record_run: Callable[[LedgerRun], str] | None = None

    def __init__(self, path: Path, fact_limit: int, max_line_bytes: int) -> None:
        """Raises ``SourceError`` for a file that cannot be read as JSON Lines (``reader.scan``)."""
        self.fact_limit, self.max_line_bytes = fact_limit, max_line_bytes
        try:
            self.info = scan(path, max_line_bytes)
        except HistoryError as exc:
            raise SourceError(str(exc)) from None
        self.path = path.resolve()
        self.description = str(self.path)

    @classmethod
    def for_job(cls, job: Job, fact_limit: int, max_line_bytes: int) -> FileSource:
        source = cls(Path(job.source), fact_limit, max_line_bytes)
        if source.info.sha256 != job.options.get("sha256"):
            raise SourceError(
                f"{job.source} changed since job {job.id} started; "
                "replay it as a new job instead of resuming"
            )
        return source

    def identity(self) -> str:
        return _sha(f"file\n{self.info.path}\n{self.info.sha256}")

    def total(self) -> int:
        return self.info.lines

    def options(self) -> JsonObject:
        return {"sha256": self.info.sha256, "bytes": self.info.size}

    def batches(self) -> Iterator[list[Pending]]:
        batch: list[Pending] = []
        size = 0
        for raw in raw_lines(self.path, self.max_line_bytes):
            batch.append(Pending(str(raw.number), raw.size, self._loader(raw)))
            size += raw.size
            if len(batch) >= BATCH_ITEMS or size >= BATCH_BYTES:
                yield batch
                batch, size = [], 0
        if batch:
            yield batch

    def _loader(self, raw: RawLine) -> Callable[[], JsonObject | ItemRecord]:
        def load() -> JsonObject | ItemRecord:
            line = parse_line(raw, self.fact_limit, self.max_line_bytes)
            if line.problem is not None:
                status = DUPLICATE if raw.duplicate_of is not None else INVALID
                return ItemRecord(str(line.number), status, line=line.number, sample=line.problem)
            facts, ran = line.facts or {}, False
            if facts.get("outcome") == "success":
                learned = self.learn(facts) if self.learn else "not learned"
                return ItemRecord(str(line.number), PASSING, line=line.number, sample=learned)
            if replayed.is_run_row(facts):
                found = self._run(line.number, facts)
                if isinstance(found, ItemRecord):
                    return found
                facts, ran = found, True
            # Facts travel as one JSON text: nothing deep is decoded before the task body.
            item = {
                "key": str(line.number),
                "line": line.number,
                "facts_json": dumps_facts(facts),
                "notes": line.notes,
            }
            if ran:
                item["run"] = True  # a history's failed run: the worker writes it to the ledger
            if line.kept_lines:  # line numbers then count in the history's own log
                item[KEPT_LINES] = line.kept_lines
            return item

        return load

    def _run(self, number: int, facts: JsonObject) -> JsonObject | ItemRecord:
        """A run row (``ledger.replayed``): a passed one recorded now, a failed one's facts
        with its ``run`` fact; a row whose run is wrong is bad input, said with its line."""
        try:
            entry = replayed.history_run(facts, time.time())
        except RunValueError as exc:
            return ItemRecord(str(number), INVALID, line=number, sample=f"not a run: {exc}")
        if not entry.run.failed:
            said = self.record_run(entry) if self.record_run else "not recorded"
            return ItemRecord(str(number), PASSED, line=number, sample=said)
        return replayed.run_fact(facts, entry)


def parse_since(text: str, now: datetime) -> datetime:
    """``24h``, ``7d``, ``90m``, ``2w`` before ``now``, or an ISO date/time."""
    found = _DURATION.match(text.strip().lower())
    if found:
        return now - timedelta(seconds=float(found[1]) * _UNITS[found[2]])
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise SourceError(
            f"--since {text!r}: use a duration (24h, 7d, 30m) or an ISO date (2026-11-01)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class StoredSource:
    """Failures already in SQL, selected by time, verdict and rule.

    Failures recorded by earlier replays are never selected, nor rejected
    submissions (they have no facts). The time window is fixed when the job
    is created, so a resume replays exactly the same selection.
    """

    kind = "db"

    def __init__(self, store: ReplayStore, selection: JsonObject) -> None:
        self.store = store
        self.selection = selection
        words = ["stored failures"]
        if selection.get("since"):
            words.append(f"since {selection['since']}")
        if selection.get("unmatched_only"):
            words.append("unmatched only")
        if selection.get("rule"):
            words.append(f"rule {selection['rule']}")
        self.description = ", ".join(words)

    @classmethod
    def select(
        cls, store: ReplayStore, since: str | None, unmatched_only: bool, rule: str | None
    ) -> StoredSource:
        now = datetime.now(UTC)
        selection = {
            "since": since,
            "unmatched_only": unmatched_only,
            "rule": rule,
            "from": parse_since(since, now).isoformat() if since else None,
            "until": now.isoformat(),
        }
        return cls(store, selection)

    @classmethod
    def for_job(cls, store: ReplayStore, job: Job) -> StoredSource:
        return cls(store, dict(job.options))

    def identity(self) -> str:
        sel = self.selection
        spec = {
            "since": sel.get("since"),
            "unmatched": sel.get("unmatched_only"),
            "rule": sel.get("rule"),
        }
        return _sha("db\n" + json.dumps(spec, sort_keys=True))

    def options(self) -> JsonObject:
        return dict(self.selection)

    def total(self) -> int:
        return self.store.selected_count(self.selection)

    def batches(self) -> Iterator[list[Pending]]:
        after = ""
        while True:
            ids = self.store.selected_ids(self.selection, after, BATCH_ITEMS)
            if not ids:
                return
            yield [Pending(i, 0, _ref(i)) for i in ids]
            after = ids[-1]


def _ref(failure_id: str) -> Callable[[], JsonObject]:
    return lambda: {"key": failure_id, "ref": failure_id}
