"""Driving a replay from the command line: chunks out, progress in, nothing lost.

The driver reads the source, skips what the job already decided, records bad
input itself, and sends the rest as ``theow.replay`` chunks with at most
``in_flight`` of them queued or running. Progress, the job's counters and the
cancel flag all come from the job row in SQL, the one truth shared with the
workers.

Nothing is lost on the way: Ctrl-C marks the job ``interrupted`` (chunks
already queued are still decided by the workers), a chunk that failed or hit
its time budget leaves its items undecided, and another pass (until
``PASSES`` passes in a row decide nothing) or ``theow replay resume`` sends
exactly the items still without an item row. Each item's failure id is fixed by job and key, so sending an
item twice decides and counts it once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from theow_client import names
from theow_client.jsontypes import JsonObject
from theow_client.redact import summary
from theow_workers.replay.sources import Source
from theow_workers.store.replay import (
    CANCELLED,
    DONE,
    INCOMPLETE,
    INTERRUPTED,
    RUNNING,
    ItemRecord,
    Job,
    ReplayStore,
)

if TYPE_CHECKING:
    from celery.result import AsyncResult

PASSES = 3
HEARTBEAT = timedelta(seconds=5)
STALE = timedelta(seconds=30)  # a running job whose driver is silent this long is orphaned
STALL_HINT_SECONDS = 30.0
LOST_SECONDS = 300.0  # longer than any healthy chunk (its time budget is ~100 s)


class Cancelled(Exception):
    pass


class BrokerLost(Exception):
    """The broker went away mid-replay; the job is left ``interrupted`` (resumable)."""


def _broker_errors() -> tuple[type[BaseException], ...]:
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError

    return (OperationalError, RedisConnectionError, ConnectionError)


class _Lost(Exception):
    """No progress for ``LOST_SECONDS`` with chunks queued."""


class RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} failures/s" if speed else "- failures/s", style="cyan")


def progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        RateColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def celery_sender() -> Callable[[JsonObject], AsyncResult]:
    """Send a chunk; a broker that went away raises one of ``_broker_errors()``.

    The result backend (the same Redis) is pinged first, as ``theow-client``
    does: it fails at once, where Celery's own reconnect would log twenty
    retries and then raise ``RuntimeError`` with the job still ``running``.
    """
    from theow_workers.celery_app import app, settings
    from theow_workers.tokens import signed_internal

    def send(chunk: JsonObject) -> AsyncResult:
        try:
            app.backend.client.ping()
            # Flower shows the job id and the chunk's size, never the failures' facts.
            return app.send_task(
                names.TASK_REPLAY,
                # Signed as the workers: the replay task takes no other credential.
                args=[signed_internal(settings, names.TASK_REPLAY, chunk)],
                queue=names.QUEUE_REPLAY,
                argsrepr=summary([chunk]),
                kwargsrepr="{}",
                retry=False,
            )
        except RuntimeError as exc:  # the backend gave up reconnecting: a lost broker
            if isinstance(exc.__cause__, _broker_errors()):
                raise exc.__cause__ from None
            raise

    return send


def orphaned(job: Job, now: datetime | None = None) -> bool:
    """A ``running`` job whose driver stopped beating: it may be resumed."""
    now = now or datetime.now(UTC)
    return job.status != RUNNING or job.heartbeat_at is None or now - job.heartbeat_at > STALE


class Driver:
    def __init__(
        self,
        store: ReplayStore,
        send: Callable[[JsonObject], AsyncResult],
        console: Console,
        chunk_size: int = 200,
        in_flight: int = 8,
        poll: float = 0.05,
        show_progress: bool = True,
        chunk_bytes: int = 1024 * 1024,
    ) -> None:
        """A chunk closes at ``chunk_bytes`` of facts sent or ``chunk_size`` items.

        A worker's time per item grows with its log, so chunks sized by bytes
        take about as long whether the logs are 10 KB or 64 KB: a chunk is
        long enough that its transaction and its round trip through the broker
        cost little per item, short enough that a cancel or a killed worker
        costs a fraction of a second.
        """
        self.store, self.send, self.console = store, send, console
        self.chunk_size, self.in_flight, self.poll = max(1, chunk_size), max(1, in_flight), poll
        self.chunk_bytes = max(1, chunk_bytes)
        self.show_progress = show_progress
        self._pending: JsonObject = {}
        self.chunk_errors: list[str] = []

    def run(self, job: Job, source: Source) -> Job:
        """Replay what ``job`` has not decided yet; returns the job as it ends."""
        self.store.update(
            job.id, status=RUNNING, heartbeat_at=datetime.now(UTC), finished_at=None, message=""
        )
        self._job = self.store.get(job.id)
        self._beat = self._polled = datetime.now(UTC)
        self._last_change, self._last_seen, self._hinted = time.monotonic(), -1, False
        progress = progress_bar(self.console)
        self._bar = progress.add_task("replaying", total=job.total, completed=job.processed)
        self._progress = progress
        try:
            with progress if self.show_progress else _Quiet():
                stalled = 0
                while stalled < PASSES:
                    before = self._job.processed
                    try:
                        sent = self._pass(source)
                        self._drain()
                    except _Lost:  # the chunks went down with their worker: send again
                        self._pending.clear()
                        sent = -1
                    if self._job.remaining == 0 or sent == 0:
                        break
                    stalled = 0 if self._job.processed > before else stalled + 1
        except Cancelled:
            self.store.update(job.id, finished_at=datetime.now(UTC))
            return self.store.get(job.id)
        except _broker_errors() as exc:
            # Often because the whole stack went down with a killed worker (`theow up`).
            why = " ".join(str(exc).split())[:300] or type(exc).__name__
            for result in self._pending.values():
                result.backend = None  # else each one's __del__ reaches for the lost broker
            self._pending.clear()
            self.store.update(
                job.id, status=INTERRUPTED, message=f"lost the broker: {why}; resume to finish"
            )
            raise BrokerLost(why) from None
        except KeyboardInterrupt:
            queued = len(self._pending)
            self.store.update(
                job.id,
                status=INTERRUPTED,
                message=f"interrupted; {queued} chunk(s) already queued are still decided by workers",
            )
            raise
        return self._finish()

    def _finish(self) -> Job:
        job = self.store.get(self._job.id)
        now = datetime.now(UTC)
        if job.status == CANCELLED:
            self.store.update(job.id, finished_at=now)
        elif job.remaining == 0:
            self.store.update(job.id, status=DONE, finished_at=now, heartbeat_at=now)
        else:
            why = "; ".join(dict.fromkeys(self.chunk_errors)) or "items left undecided"
            self.store.update(
                job.id,
                status=INCOMPLETE,
                heartbeat_at=now,
                message=f"{job.remaining} item(s) still undecided after {PASSES} passes without progress: {why[:1000]}",
            )
        return self.store.get(job.id)

    def _pass(self, source: Source) -> int:
        sent = 0
        chunk: list[JsonObject] = []
        size = 0
        for batch in source.batches():
            self._tick()
            decided = self.store.decided(self._job.id, [p.key for p in batch])
            local: list[ItemRecord] = []
            for pending in batch:
                if pending.key in decided:
                    continue
                item = pending.load()
                if isinstance(item, ItemRecord):
                    local.append(item)
                    continue
                chunk.append(item)
                size += len(item.get("facts_json", "")) or pending.size
                if len(chunk) >= self.chunk_size or size >= self.chunk_bytes:
                    sent += self._send(chunk)
                    chunk, size = [], 0
            self.store.record(self._job.id, local)
        if chunk:
            sent += self._send(chunk)
        return sent

    def _send(self, items: list[JsonObject]) -> int:
        while len(self._pending) >= self.in_flight:
            time.sleep(self.poll)
            self._tick()
        result = self.send({"job_id": self._job.id, "items": items})
        self._pending[str(result.id)] = result
        return len(items)

    def _drain(self) -> None:
        while self._pending:
            time.sleep(self.poll)
            self._tick()
        self._tick(force=True)

    def _tick(self, force: bool = False) -> None:
        for task_id, result in list(self._pending.items()):
            if not result.ready():
                continue
            del self._pending[task_id]
            if result.failed():
                self.chunk_errors.append(f"{type(result.result).__name__}: {result.result}")
            result.forget()
        now = datetime.now(UTC)
        if not force and now - self._polled < timedelta(seconds=0.2):
            return
        self._polled = now
        self._job = self.store.get(self._job.id)
        if now - self._beat >= HEARTBEAT or force:
            self.store.update(self._job.id, heartbeat_at=now)
            self._beat = now
        self._progress.update(self._bar, completed=self._job.processed, total=self._job.total)
        self._stall_hint()
        if self._job.status == CANCELLED:
            raise Cancelled

    def _stall_hint(self) -> None:
        """Say when nothing moves; past ``LOST_SECONDS`` presume queued chunks lost.

        A worker killed whole (not just a pool process) leaves its chunks unacked
        until the visibility timeout (an hour). Sending the undecided items again
        is safe: a chunk that shows up later finds them decided.
        """
        stuck = time.monotonic() - self._last_change
        if self._job.processed != self._last_seen:
            self._last_seen, self._last_change, self._hinted = (
                self._job.processed,
                time.monotonic(),
                False,
            )
        elif self._pending and stuck > LOST_SECONDS:
            self.console.print(
                f"[yellow]no progress for {stuck:.0f}s: sending the undecided items again[/yellow]"
            )
            self._last_change = time.monotonic()
            raise _Lost
        elif self._pending and not self._hinted and stuck > STALL_HINT_SECONDS:
            self._hinted = True
            self.console.print(
                f"[yellow]no progress for {STALL_HINT_SECONDS:.0f}s: is a replay worker running? "
                "(`theow up`, or `theow worker --queues replay`)[/yellow]"
            )


class _Quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None
