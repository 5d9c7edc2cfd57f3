"""``theow replay``: history through the resolver in bulk, resumable, with a report.

    theow replay FILE.jsonl                    # = theow replay run FILE.jsonl (dry run)
    theow replay FILE.jsonl.gz                 # gzipped; `-` reads standard input
    theow replay --from-db --since 24h --unmatched-only
    theow replay status JOB | cancel JOB | resume JOB | report JOB | list

JOB is a job id, or ``last``. Exit codes: 0 done, 1 incomplete or cancelled (or no
broker), 2 bad usage or source, 130 interrupted (resume it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from theow_client.jsontypes import JsonObject
from theow_workers.cli.output import err, fail, out, print_json
from theow_workers.cli.output import load_settings as _settings
from theow_workers.config import Settings

if TYPE_CHECKING:
    from theow_workers.replay.sources import FileSource, Source
    from theow_workers.store.replay import Job, ReplayStore
    from theow_workers.store.runs import LedgerRun


class DefaultRunGroup(TyperGroup):
    """``theow replay FILE`` and ``theow replay --from-db`` mean ``theow replay run …``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


replay_app = typer.Typer(
    cls=DefaultRunGroup,
    no_args_is_help=True,
    help="Replay failures through the resolver in bulk: resumable, with a report. "
    "`theow replay FILE.jsonl` (one failure's facts per line) and `theow replay --from-db` "
    "are short for `theow replay run ...`. JOB is a job id or `last`. Exit codes: 0 done, "
    "1 incomplete or cancelled (or no broker), 2 bad usage or source, 130 interrupted "
    "(resume it).",
)
JobArg = Annotated[str, typer.Argument(help="Job id, or `last`.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")]
ReportDir = Annotated[
    Path | None, typer.Option("--report-dir", help="Where reports go [default: .theow/reports]")
]


# The rules' names and version, by their files' signature (``_rules``), in the home directory.
RULES_SUMMARY = "replay-rules.json"


def _fail(message: str, code: int = 2) -> typer.Exit:
    """What stops a replay command is mostly its usage or its source: exit 2."""
    return fail(message, code)


def _store(settings: Settings) -> ReplayStore:
    from theow_workers.store import make_engine
    from theow_workers.store.replay import ReplayStore

    store = ReplayStore(make_engine(settings.store_url))
    if not store.has_tables():
        raise _fail(f"{settings.store_url} has no replay tables: run `theow db upgrade`")
    return store


def _get(store: ReplayStore, job_id: str) -> Job:
    from theow_workers.store import AmbiguousId
    from theow_workers.store.replay import JobNotFound

    try:
        return store.get(job_id)
    except (JobNotFound, AmbiguousId) as exc:
        raise _fail(str(exc)) from None


def _broker(settings: Settings) -> None:
    """Stop before any job row exists when the broker does not answer.

    Celery would retry for twenty seconds, then leave a traceback and a job
    ``running`` with nothing sent; a ping says the same in a fraction of a second.
    """
    import redis

    from theow_client import names
    from theow_workers.core.logs.redact import redact_text
    from theow_workers.heartbeat import consumers

    client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=3, socket_timeout=3)
    try:
        client.ping()
        if not consumers(client, names.QUEUE_REPLAY):  # a heartbeat, not the remote control
            err.print(
                "[yellow]no worker consumes the replay queue: the replay waits until one "
                "starts (`theow up`, or a worker with --queues replay)[/yellow]"
            )
    except redis.RedisError as exc:
        why = " ".join(str(exc).split()).rstrip(".") or type(exc).__name__
        raise _fail(
            f"cannot reach the broker at {redact_text(settings.redis_url)} ({why}): start the "
            "stack with `theow up`, or set THEOW_REDIS_URL to the broker the workers use",
            1,
        ) from None
    finally:
        client.close()


def _history(file: Path, settings: Settings) -> Path:
    """``-`` is standard input, kept under the home directory so that a resume can read it again."""
    import sys

    from theow_workers.replay.reader import STDIN, spool

    if str(file) != STDIN:
        return file
    if sys.stdin.isatty():
        raise _fail("`-` reads the history from standard input: pipe or redirect it in")
    return spool(sys.stdin.buffer, settings.home / "replay-input")


def _open(job_id: str) -> tuple[Settings, ReplayStore, Job]:
    """The settings, the replay store and the job ``job_id`` names."""
    s = _settings()
    store = _store(s)
    return s, store, _get(store, job_id)


def _rules(settings: Settings) -> tuple[list[str], str]:
    """Rule names and version as this machine sees them ([] if they do not load).

    Loading and checking a few hundred rules takes about a second, as long as
    replaying hundreds of failures: the answer is kept in the home directory
    under the rule and action files' signature (names, sizes, mtimes, as the
    workers notice changes), so the next replay of unchanged rules starts at once.
    """
    from theow_workers.core.resolve.library import Library
    from theow_workers.runtime import directory_signature

    signature = [
        list(f) for f in directory_signature(*settings.rule_layers, *settings.action_layers)
    ]
    kept = settings.home / RULES_SUMMARY
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        summary = json.loads(kept.read_text())
        if summary["signature"] == signature:
            return list(summary["names"]), str(summary["version"])
    try:
        knowledge = Library.configured(settings)
    except Exception as exc:  # a broken actions dir must not stop a replay; workers decide
        err.print(f"[yellow]rules not loaded here ({exc}); 'matched nothing' is unknown[/yellow]")
        return [], ""
    if knowledge.rules.errors:  # the workers serve the last valid rules: ask again next time
        return sorted(r.name for r in knowledge.rules.rules), knowledge.book.version
    names = sorted(r.name for r in knowledge.rules.rules)
    summary = {"signature": signature, "names": names, "version": knowledge.book.version}
    with contextlib.suppress(OSError):
        kept.parent.mkdir(parents=True, exist_ok=True)
        draft = kept.with_name(f".{kept.name}.{os.getpid()}")
        draft.write_text(json.dumps(summary))
        draft.replace(kept)  # whole or not at all, whoever reads it at the same time
    return names, knowledge.book.version


@replay_app.command("run")
def run(
    file: Annotated[
        Path | None,
        typer.Argument(
            help="JSON Lines (.jsonl, .jsonl.gz, or - for standard input): one failure's facts "
            "per line."
        ),
    ] = None,
    from_db: Annotated[
        bool, typer.Option("--from-db", help="Replay failures stored in SQL.")
    ] = False,
    since: Annotated[
        str | None, typer.Option(help="With --from-db: 24h, 7d, or an ISO date.")
    ] = None,
    unmatched_only: Annotated[
        bool,
        typer.Option(
            "--unmatched-only",
            help="With --from-db: only failures no rule explains (unmatched or unexplained).",
        ),
    ] = False,
    rule: Annotated[
        str | None, typer.Option(help="With --from-db: failures this rule matched or tried.")
    ] = None,
    execute: Annotated[
        bool, typer.Option("--execute", help="Run the rules' actions (default: dry run).")
    ] = False,
    explore: Annotated[
        bool, typer.Option("--explore", help="Send unmatched groups to explorers.")
    ] = False,
    budget: Annotated[
        int | None, typer.Option(help="With --explore: at most N LLM sessions.")
    ] = None,
    again: Annotated[
        bool,
        typer.Option("--again", help="FILE is a JOB: replay its source again and compare with it."),
    ] = False,
    compare: Annotated[
        str | None, typer.Option(help="Compare with this JOB (default: the last of this source).")
    ] = None,
    wait: Annotated[
        bool, typer.Option(help="With --explore: wait for the explorations to finish.")
    ] = True,
    report_dir: ReportDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Replay FILE or stored failures through the resolver and report what matched."""
    if again:
        if file is None or from_db or since or unmatched_only or rule or compare:
            raise _fail("--again takes a JOB (`theow replay JOB --again`) and nothing to select")
        _again(str(file), execute, explore, budget, wait, report_dir, as_json)
        return
    if (file is None) == (not from_db):
        raise _fail("give either a FILE or --from-db")
    if file is not None and (since or unmatched_only or rule):
        raise _fail("--since, --unmatched-only and --rule select stored failures: add --from-db")
    if explore and (budget is None or budget < 1):
        raise _fail("--explore needs --budget N (at most N LLM sessions for this replay)")
    if budget is not None and not explore:
        raise _fail("--budget only applies with --explore")
    from theow_workers.replay.sources import FileSource, SourceError, StoredSource

    s = _settings()
    store = _store(s)
    try:
        if file is not None:
            history = FileSource(_history(file, s), s.fact_limit, s.replay_max_line_bytes)
            source: Source = _with_hooks(history, s, store)
        else:
            source = StoredSource.select(store, since, unmatched_only, rule)
    except (SourceError, OSError) as exc:
        raise _fail(str(exc)) from None
    _broker(s)
    names, version = _rules(s)
    compare_with = _get(store, compare).id if compare else None
    job = store.create(
        kind=source.kind,
        source=source.description,
        source_key=source.identity(),
        options={
            **source.options(),
            "execute": execute,
            **({"compare_with": compare_with} if compare_with else {}),
        },
        dry_run=not execute,
        explore=explore,
        explore_budget=budget,
        explore_status=f"requested (budget {budget}): sent when the replay is done"
        if explore
        else "",
        rules=names,
        rules_version=version,
        total=source.total(),
    )
    mode = "actions run" if execute else "dry run: rules are matched, no action runs"
    err.print(f"replay [bold]{job.id}[/bold]: {job.total} failure(s) from {job.source} ({mode})")
    if job.total == 0:
        err.print(f"[yellow]{job.source} has no failures to replay[/yellow]")
    _drive(s, store, job, source, report_dir, as_json, wait)


def _again(
    job_id: str,
    execute: bool,
    explore: bool,
    budget: int | None,
    wait: bool,
    report_dir: Path | None,
    as_json: bool,
) -> None:
    """Replay a finished job's source again, compared item by item with that job."""
    from theow_workers.replay.sources import FileSource, SourceError, StoredSource

    if explore and (budget is None or budget < 1):
        raise _fail("--explore needs --budget N (at most N LLM sessions for this replay)")
    s = _settings()
    store = _store(s)
    before = _get(store, job_id)
    try:
        if before.kind == "file":
            history = FileSource(Path(before.source), s.fact_limit, s.replay_max_line_bytes)
            source: Source = _with_hooks(history, s, store)
        else:
            source = StoredSource.for_job(store, before)
    except (SourceError, OSError) as exc:
        raise _fail(str(exc)) from None
    _broker(s)
    names, version = _rules(s)
    job = store.create(
        kind=source.kind,
        source=source.description,
        source_key=source.identity(),
        options={**source.options(), "execute": execute, "compare_with": before.id},
        dry_run=not execute,
        explore=explore,
        explore_budget=budget,
        explore_status=f"requested (budget {budget}): sent when the replay is done"
        if explore
        else "",
        rules=names,
        rules_version=version,
        total=source.total(),
    )
    err.print(
        f"replay [bold]{job.id}[/bold]: {job.source} again, compared with replay {before.id}",
        highlight=False,
    )
    _drive(s, store, job, source, report_dir, as_json, wait)


@replay_app.command("resume")
def resume(
    job_id: JobArg,
    force: Annotated[bool, typer.Option(help="Even if another command seems to drive it.")] = False,
    report_dir: ReportDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Finish a replay that was interrupted, cancelled or left incomplete."""
    from theow_workers.replay.driver import orphaned
    from theow_workers.replay.sources import FileSource, SourceError, StoredSource
    from theow_workers.store.replay import DONE

    s, store, job = _open(job_id)
    if job.status == DONE:
        err.print(f"replay {job.id} is already done ({job.processed}/{job.total})")
        if job.kind == "file":  # its origins, again: a settle cut short is finished here
            _settle(s, store, job)
        if job.explore and job.explore_budget:  # its exploration may have been cut short
            _broker(s)
            _explore(s, store, job, job.explore_budget, wait=True)
            _report(s, store, store.get(job.id), report_dir, as_json)
        raise typer.Exit(0)
    if not orphaned(job) and not force:
        raise _fail(f"replay {job.id} is running (its command beat recently); use --force")
    try:
        if job.kind == "file":
            history = FileSource.for_job(job, s.fact_limit, s.replay_max_line_bytes)
            source: Source = _with_hooks(history, s, store)
        else:
            source = StoredSource.for_job(store, job)
    except (SourceError, OSError) as exc:
        raise _fail(str(exc)) from None
    _broker(s)
    names, version = _rules(s)
    store.update(job.id, rules=names, rules_version=version)
    err.print(f"resuming replay [bold]{job.id}[/bold]: {job.remaining} of {job.total} left")
    _drive(s, store, store.get(job.id), source, report_dir, as_json)


def _drive(
    s: Settings,
    store: ReplayStore,
    job: Job,
    source: Source,
    report_dir: Path | None,
    as_json: bool,
    wait: bool = True,
) -> None:
    from theow_workers.replay.driver import BrokerLost, Driver, celery_sender
    from theow_workers.store.replay import CANCELLED, DONE

    driver = Driver(
        store,
        celery_sender(),
        err,
        s.replay_chunk_size,
        s.replay_in_flight,
        chunk_bytes=s.replay_chunk_bytes,
    )
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        job = driver.run(job, source)
    except KeyboardInterrupt:
        job = store.get(job.id)
        err.print(
            f"[yellow]interrupted at {job.processed}/{job.total}; nothing is lost: "
            f"`theow replay resume {job.id}` finishes it[/yellow]"
        )
        raise typer.Exit(130) from None
    except BrokerLost as exc:
        job = store.get(job.id)
        err.print(
            f"[red]lost the broker at {job.processed}/{job.total} ({exc}); job {job.id} is "
            f"interrupted: once the broker is back, `theow replay resume {job.id}` finishes it[/red]",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if job.kind == "file":
        _settle(s, store, job)
    if job.status == DONE and job.explore and job.explore_budget:
        _explore(s, store, job, job.explore_budget, wait)
        job = store.get(job.id)
    _report(s, store, job, report_dir, as_json)
    if job.status == CANCELLED:
        err.print(f"[yellow]replay {job.id} was cancelled at {job.processed}/{job.total}[/yellow]")
    elif job.status != DONE:
        err.print(f"[red]replay {job.id} is {job.status}: {job.message}[/red]")
    raise typer.Exit(0 if job.status == DONE else 1)


def _explore(s: Settings, store: ReplayStore, job: Job, budget: int, wait: bool) -> None:
    """Send the job's unmatched groups to the explorer (what is not sent yet) and follow them."""
    from theow_workers.replay.driver import progress_bar
    from theow_workers.replay.explore import ReplayExplorer, celery_explore_sender

    explorer = ReplayExplorer(store, celery_explore_sender())
    try:
        states = explorer.start(job, budget)
    except Exception as exc:  # the broker or the database: the job stays resumable
        raise _fail(f"cannot send explorations: {type(exc).__name__}: {exc}", 1) from None
    pending = [g for g in states if g.state in ("explored", "exploring")]
    err.print(
        f"exploring {len(pending)} of {len(states)} unmatched group(s) under session "
        f"replay:{job.id} (budget {budget} LLM sessions)",
        highlight=False,
    )
    if not wait or not pending:
        return
    if not _explorers_running(s):
        err.print(
            "[yellow]no worker consumes the explore queue (`theow worker --queues explore` with "
            f"THEOW_EXPLORE=1): the explorations wait there; `theow replay explore {job.id}` "
            "follows them[/yellow]"
        )
        return
    progress = progress_bar(err)
    bar = progress.add_task("exploring", total=len(pending))
    # Explorations run concurrently on the explorer workers; each is bounded by its time limit.
    timeout = s.explore_time_limit * max(1, len(pending))
    try:
        with progress:
            done = explorer.wait(
                job, timeout, tick=lambda d, t: progress.update(bar, completed=d, total=t)
            )
    except KeyboardInterrupt:
        err.print(
            f"[yellow]stopped waiting; the explorations go on: `theow replay explore {job.id}` "
            "follows them[/yellow]"
        )
        raise typer.Exit(130) from None
    if not done:
        err.print(
            f"[yellow]explorations still running after {timeout}s: is an explorer "
            f"worker running (`theow worker --queues explore`, THEOW_EXPLORE=1)?[/yellow]"
        )


def _explorers_running(settings: Settings) -> bool:
    """Whether a worker's heartbeat says it consumes the explore queue."""
    import redis

    from theow_client import names
    from theow_workers.heartbeat import consumers

    client = redis.Redis.from_url(settings.redis_url, socket_timeout=3)
    try:
        return bool(consumers(client, names.QUEUE_EXPLORE))
    except redis.RedisError:  # a broker that cannot answer: do not wait on it either
        return False
    finally:
        client.close()


@replay_app.command("explore")
def explore_job(
    job_id: JobArg,
    budget: Annotated[
        int | None, typer.Option(help="At most N LLM sessions in all [default: the job's].")
    ] = None,
    wait: Annotated[bool, typer.Option(help="Wait for the explorations to finish.")] = True,
    report_dir: ReportDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Explore a finished replay's unmatched groups, largest first (what is not sent yet)."""
    from theow_workers.store.replay import DONE

    s, store, job = _open(job_id)
    if job.status != DONE:
        raise _fail(f"replay {job.id} is {job.status}: finish it first (`theow replay resume`)")
    budget = budget if budget is not None else job.explore_budget
    if budget is None or budget < 1:
        raise _fail("give --budget N (at most N LLM sessions for this replay)")
    _broker(s)
    store.update(job.id, explore=True, explore_budget=budget)
    _explore(s, store, store.get(job.id), budget, wait)
    _report(s, store, store.get(job.id), report_dir, as_json)


def _report(
    s: Settings, store: ReplayStore, job: Job, report_dir: Path | None, as_json: bool
) -> None:
    from theow_workers.replay import report as reports
    from theow_workers.replay.show import show_report

    data = reports.build(store, job, reports.Pricing.from_settings(s))
    paths = reports.write(data, report_dir or s.home / "reports")
    if as_json:
        print_json(data)
    else:
        show_report(data, out)
    err.print(f"report: {paths[0]} and {paths[1]}", highlight=False)


@replay_app.command("report")
def report(job_id: JobArg, report_dir: ReportDir = None, as_json: JsonFlag = False) -> None:
    """Write and show the report of a replay (so far, if it is not done)."""
    s, store, job = _open(job_id)
    _report(s, store, job, report_dir, as_json)


@replay_app.command("status")
def status(job_id: JobArg, as_json: JsonFlag = False) -> None:
    """Counters and state of one replay."""
    from theow_workers.replay.driver import orphaned
    from theow_workers.replay.show import show_status

    _, store, job = _open(job_id)
    data = {**job.to_dict(), "orphaned": job.status == "running" and orphaned(job)}
    if job.explore and job.status == "done":
        from theow_workers.replay.explore import ReplayExplorer

        states = ReplayExplorer(store, lambda _: None).status(job)
        data["explorations"] = [g.to_dict() for g in states]
    if as_json:
        print_json(data)
    else:
        show_status(data, out)


@replay_app.command("cancel")
def cancel(job_id: JobArg) -> None:
    """Stop a replay: workers skip its queued chunks; what is decided stays."""
    from theow_workers.store.replay import CANCELLED, DONE

    _, store, job = _open(job_id)
    if job.status in (DONE, CANCELLED):
        err.print(f"replay {job.id} is already {job.status}")
        return
    store.update(job.id, status=CANCELLED, message="cancelled with `theow replay cancel`")
    out.print(f"replay {job.id} cancelled at {job.processed}/{job.total}; resume it to finish")


@replay_app.command("list")
def list_jobs(
    limit: Annotated[int, typer.Option(help="Most recent N jobs.")] = 20, as_json: JsonFlag = False
) -> None:
    """Recent replays, newest first."""
    from theow_workers.replay.show import show_jobs

    jobs = [j.to_dict() for j in _store(_settings()).recent(limit)]
    if as_json:
        print_json(jobs)
    else:
        show_jobs(jobs, out)


def _with_hooks(history: FileSource, s: Settings, store: ReplayStore) -> FileSource:
    """A history file whose passing runs teach their jobs' normals and whose passed runs go
    to the ledger, as the command reads them."""
    from theow_workers.store.runs import SqlRuns

    runs = SqlRuns(store.engine)
    history.learn = _learner(s)

    def record_run(entry: LedgerRun) -> str:
        done = runs.record(entry)
        said = "recorded before" if done == "duplicate" else "recorded"
        return f"passed run {entry.run.id} of {entry.run.job} {said}"

    history.record_run = record_run
    return history


def _settle(s: Settings, store: ReplayStore, job: Job) -> None:
    """Decide the origins of a history's replayed failures from its runs, in the order they
    finished (``ledger.replayed``); said in one line."""
    from theow_workers.ledger import replayed
    from theow_workers.store.runs import SqlRuns, configured_branches

    try:
        configured = configured_branches(s.default_branches)
    except ValueError as exc:
        err.print(f"{exc}; the default branches are learned or main instead", markup=False)
        configured = {}
    runs = SqlRuns(store.engine)
    ids = [i.failure_id for i in store.items(job.id) if i.failure_id]
    try:
        counted = replayed.settle(runs, ids, replayed.branches(runs, configured))
    except Exception as exc:  # the database went away: the failures are decided, not their origins
        why = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        said = f"origins not decided ({why}); `theow replay resume {job.id}` decides them"
        err.print(said, style="yellow", markup=False, highlight=False)
        return
    if counted:
        shown = ", ".join(f"{origin} {n}" for origin, n in counted.most_common())
        err.print(
            f"origins of {counted.total()} replayed failure(s), from the history in the order "
            f"it ran: {shown}",
            highlight=False,
        )


def _learner(s: Settings) -> Callable[[JsonObject], str]:
    """Learn a history's passing run into its job's normal (Redis), as a worker would."""
    import redis

    from theow_client.job import job_fact
    from theow_workers.adapters.normals import RedisNormals
    from theow_workers.core.logs.normal import run_lines

    normals = RedisNormals(redis.Redis.from_url(s.redis_url), s.normal_ttl)

    def learn(facts: JsonObject) -> str:
        job = job_fact(facts)
        if job is None:
            return "passing run without a job fact: not learned"
        kept = normals.learn(job, run_lines(facts))
        return f"passing run of {job} learned ({kept} templates)"

    return learn
