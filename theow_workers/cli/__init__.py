"""The ``theow`` command: rules, workers, the embedded stack, the demo."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from theow_workers.cli.replay import replay_app
from theow_workers.cli.review import failures_app, meow_command, review_app
from theow_workers.config import ConfigError, Settings
from theow_workers.console import make_console
from theow_workers.core.actions import ActionLoadError
from theow_workers.ops.doctor import doctor_command
from theow_workers.ops.metrics import metrics_command

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
rules_app = typer.Typer(no_args_is_help=True, help="Check, test and index rules.")
db_app = typer.Typer(no_args_is_help=True, help="The SQL schema.")
app.add_typer(rules_app, name="rules")
app.add_typer(db_app, name="db")
app.add_typer(replay_app, name="replay")
app.add_typer(review_app, name="review")
app.add_typer(failures_app, name="failures")
app.command("meow")(meow_command)
app.command("doctor")(doctor_command)
app.command("metrics")(metrics_command)

out = make_console()
err = make_console(stderr=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(code)


def settings() -> Settings:
    try:
        return Settings.load()
    except ConfigError as exc:
        raise fail(str(exc), 2) from None


@rules_app.command("check")
def rules_check(
    directory: Annotated[
        Path | None, typer.Argument(help="Rules directory [default: THEOW_RULES_DIR or rules/]")
    ] = None,
    actions: Annotated[
        Path | None, typer.Option(help="Actions directory [default: THEOW_ACTIONS_DIR or actions/]")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Validate every rule file; report each problem with file, line and reason."""
    from theow_workers.runtime import Knowledge

    s = settings()
    rules_dir, actions_dir = directory or s.rules_dir, actions or s.actions_dir
    try:
        knowledge = Knowledge.load(rules_dir, actions_dir)
    except ActionLoadError as exc:
        raise fail(str(exc)) from None
    errors = [*knowledge.rules.errors, *_example_errors(rules_dir, knowledge)]
    if as_json:
        print(
            json.dumps(
                {
                    "rules": len(knowledge.rules.rules),
                    "actions": len(knowledge.actions),
                    "errors": [
                        {"file": e.path, "line": e.line, "reason": e.reason} for e in errors
                    ],
                }
            )
        )
    else:
        for e in errors:
            err.print(f"[red]{e}[/red]", highlight=False)
        verdict = "[red]invalid[/red]" if errors else "[green]ok[/green]"
        out.print(
            f"{verdict}: {len(knowledge.rules.rules)} rules, {len(knowledge.actions)} actions, "
            f"{len(errors)} problem(s) in {rules_dir}",
            highlight=False,
        )
    if errors:
        raise typer.Exit(1)


def _example_errors(rules_dir: Path, knowledge: Any) -> list[Any]:
    """Examples that do not match their condition, counter-examples that do."""
    from theow_workers.core.examples import check_examples
    from theow_workers.core.rules import RULE_SUFFIX

    loaded = {r.name for r in knowledge.rules.rules}
    problems = []
    for path in sorted(Path(rules_dir).rglob(f"*{RULE_SUFFIX}")):
        if path.name.removesuffix(RULE_SUFFIX) in loaded:
            problems.extend(check_examples(path))
    return problems


@rules_app.command("list")
def rules_list(
    directory: Annotated[Path | None, typer.Argument(help="Rules directory.")] = None,
    actions: Annotated[Path | None, typer.Option(help="Actions directory.")] = None,
    as_json: JsonFlag = False,
    as_markdown: Annotated[
        bool,
        typer.Option("--markdown", help="Print the catalogue: rules per family and ecosystem."),
    ] = False,
) -> None:
    """List the rules with their mode, tags and actions."""
    from theow_workers.runtime import Knowledge

    s = settings()
    try:
        knowledge = Knowledge.load(directory or s.rules_dir, actions or s.actions_dir)
    except ActionLoadError as exc:
        raise fail(str(exc)) from None
    rows: list[dict[str, Any]] = [
        {
            "name": r.name,
            "mode": r.mode.value,
            "type": r.type,
            "tags": r.tags,
            "actions": [step.action for step in r.then],
            "description": " ".join(r.description.split()),
        }
        for r in sorted(knowledge.rules.rules, key=lambda r: r.name)
    ]
    if as_markdown:
        from theow_workers.catalogue import markdown

        print(markdown(knowledge.rules.rules), end="")
        return
    if as_json:
        print(json.dumps(rows))
        return
    table = Table("rule", "mode", "tags", "actions", "description")
    for row in rows:
        table.add_row(
            row["name"], row["mode"], ", ".join(row["tags"]), ", ".join(row["actions"]),
            row["description"],
        )  # fmt: skip
    out.print(table)
    for e in knowledge.rules.errors:
        err.print(f"[red]{e}[/red]", highlight=False)


@rules_app.command("eval")
def rules_eval(
    failures: Annotated[
        Path, typer.Argument(help="Failed logs: JSON Lines (.jsonl or .jsonl.gz).")
    ],
    passing: Annotated[
        Path | None,
        typer.Option(help="Passing logs of the same jobs: rules firing there are false alarms."),
    ] = None,
    labels: Annotated[
        Path | None,
        typer.Option(help="Labels: {id, chunk} lines, the text stating each failure's cause."),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            help="Passing runs to learn each job's normal from (same id or job fact): "
            "lines they print too rank below new ones."
        ),
    ] = None,
    rules: Annotated[Path | None, typer.Option("--rules", help="Rules directory.")] = None,
    actions: Annotated[Path | None, typer.Option("--actions", help="Actions directory.")] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write one JSON object per input line here.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Score the rules on a corpus: found, grounded, precision, false alarms, logs/s.

    No server needed: each log is bounded as theow-client bounds it and
    matched by the same code a resolver worker runs.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from theow_workers import evaluation
    from theow_workers.runtime import Knowledge

    s = settings()
    for path in filter(None, (failures, passing, labels, baseline)):
        if not path.is_file():
            raise fail(f"{path}: no such file", 2)
    try:
        knowledge = Knowledge.load(rules or s.rules_dir, actions or s.actions_dir)
    except ActionLoadError as exc:
        raise fail(str(exc)) from None
    for e in knowledge.rules.errors:
        err.print(f"[yellow]skipped:[/yellow] {e}", highlight=False)
    label_map = evaluation.read_labels(labels) if labels is not None else None
    sink = out_file.open("w", encoding="utf-8") if out_file is not None else None

    def emit(outcome: evaluation.Outcome) -> None:
        if sink is not None:
            sink.write(json.dumps(outcome.row()) + "\n")

    total = evaluation.count_lines(failures) + (
        evaluation.count_lines(passing) if passing is not None else 0
    )
    with Progress(
        TextColumn("matching"), BarColumn(), MofNCompleteColumn(), console=err, transient=True,
        disable=not err.is_terminal,
    ) as bar:  # fmt: skip
        task = bar.add_task("logs", total=total)
        summary = evaluation.run(
            knowledge.book, failures, passing=passing, labels=label_map, emit=emit,
            progress=lambda: bar.advance(task), baseline=baseline,
        )  # fmt: skip
    if sink is not None:
        sink.close()
    report = summary.to_dict()
    if as_json:
        print(json.dumps(report))
        return
    _print_eval(report)


def _print_eval(report: dict[str, Any]) -> None:
    labelled = report["grounded"] is not None
    table = Table("rule", "found", *(["grounded"] if labelled else []), title="by rule")
    for name, row in report["by_rule"].items():
        table.add_row(name, str(row["found"]), *([str(row["grounded"])] if labelled else []))
    out.print(table)
    if report["false_alarms_by_rule"] or report["track_on_passing_by_rule"]:
        passing = Table("rule", "fired on passing logs", "counts as", title="on passing logs")
        for name, count in report["false_alarms_by_rule"].items():
            passing.add_row(name, str(count), "false alarm")
        for name, count in report["track_on_passing_by_rule"].items():
            passing.add_row(name, str(count), "track (not a false alarm)")
        out.print(passing)
    summary = Table("", "value", title="summary", show_header=False)
    n = report["failures"]
    summary.add_row("failures", str(n))
    summary.add_row("found", f"{report['found']} ({report['found_rate']:.1%})")
    if report["grounded"] is not None:
        summary.add_row("grounded", f"{report['grounded']} ({report['grounded_rate']:.1%})")
        summary.add_row("precision", f"{report['precision']:.2f}")
    if report["passing"]:
        summary.add_row("passing", str(report["passing"]))
        summary.add_row(
            "false alarms", f"{report['false_alarms']} ({report['false_alarm_rate']:.1%})"
        )
        summary.add_row("track rules on passing", str(report["track_on_passing"]))
    if report["baseline"]:
        summary.add_row("failures with a job normal", str(report["with_normal"]))
        summary.add_row("chosen on normal lines only", str(report["won_on_normal"]))
        summary.add_row(
            "... while another rule had new lines", str(report["won_on_normal_over_new"])
        )
    summary.add_row("errors", str(report["errors"]))
    summary.add_row("logs/s", str(report["logs_per_s"]))
    out.print(summary)
    for problem in report["error_ids"]:
        err.print(f"[red]error:[/red] {problem}", highlight=False)


@rules_app.command("test")
def rules_test(
    facts: Annotated[
        Path, typer.Option("--facts", help="JSON file: one object, the failure's facts.")
    ],
    rules: Annotated[Path | None, typer.Option("--rules", help="Rules directory.")] = None,
    actions: Annotated[Path | None, typer.Option("--actions", help="Actions directory.")] = None,
    rule: Annotated[
        list[str] | None, typer.Option("--rule", help="Try this rule first (repeatable).")
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="Try rules with this tag next.")
    ] = None,
    limit: Annotated[int, typer.Option(help="Other candidates to explain.")] = 10,
    as_json: JsonFlag = False,
) -> None:
    """Dry-run one failure: which rule would match, with which params, and why not the others.

    Runs no action and needs no server: the index is built in memory. Exit
    code 0 when a rule matched, 1 when none did, 2 for unreadable facts.
    """
    from theow_workers.explain import explain

    s = settings()
    try:
        data = json.loads(facts.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise fail(f"{facts}: cannot read: {exc.strerror}", 2) from None
    except json.JSONDecodeError as exc:
        raise fail(f"{facts}:{exc.lineno}: not JSON: {exc.msg}", 2) from None
    if not isinstance(data, dict):
        raise fail(f"{facts}: facts must be a JSON object, got {type(data).__name__}", 2)
    try:
        report = explain(
            data, rules or s.rules_dir, actions or s.actions_dir, rule or [], tag or []
        )
    except (ActionLoadError, ValueError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        print(json.dumps(report))
    else:
        _print_explanation(report, limit)
    if not report["matched"]:
        raise typer.Exit(1)


def _print_explanation(report: dict[str, Any], limit: int) -> None:
    if report["matched"]:
        out.print(f"[green]matched[/green] [bold]{report['rule']}[/bold] (mode {report['mode']})")
        evidence = report.get("evidence")
        if evidence:
            out.print(f"  at {evidence['fact']} line {evidence['line']:,}:", highlight=False)
            for offset, line in enumerate(evidence["context"]):
                number = evidence["context_start"] + offset
                marker = ">" if number == evidence["line"] else " "
                out.print(f"  {marker} {number:>6} | {line}", highlight=False, markup=False)
        if report.get("also"):
            out.print(f"  also: {', '.join(report['also'])}", highlight=False)
        for a in report["actions"]:
            out.print(f"  then {a['action']} {json.dumps(a['params'])}", highlight=False)
    else:
        out.print("[yellow]no rule matched[/yellow]")
    table = Table("rule", "similarity", "validated", "why", title="candidates")
    others = [c for c in report["candidates"] if c["rule"] != report["rule"]]
    for c in others[:limit]:
        sim = "-" if c["similarity"] is None else f"{c['similarity']:.3f}"
        table.add_row(c["rule"], sim, "yes" if c["validated"] else "no", c["reason"])
    if others:
        out.print(table)
    if len(others) > limit:
        out.print(f"[dim]{len(others) - limit} more candidates (use --limit or --json)[/dim]")


@rules_app.command("sync")
def rules_sync() -> None:
    """Sync the Milvus index with the rules and actions directories now."""
    from theow_workers.runtime import Knowledge, Runtime, sync_index

    rt = Runtime(settings())
    knowledge = Knowledge.load(rt.settings.rules_dir, rt.settings.actions_dir)
    if knowledge.rules.errors:
        raise fail(f"{len(knowledge.rules.errors)} invalid rule(s); run `theow rules check`")
    report = sync_index(knowledge, rt.index, rt.embedder, rt.redis)
    out.print(
        f"index synced: {report.added} added, {report.updated} updated, "
        f"{report.removed} removed, {report.unchanged} unchanged"
    )


@db_app.command("upgrade")
def db_upgrade(revision: str = "head") -> None:
    """Apply the Alembic migrations to THEOW_DATABASE_URL (SQLite by default)."""
    from theow_workers.store import migrate

    s = settings()
    migrate(s.store_url, revision)
    out.print(f"database at revision {revision}")


def refuse_to_explore_without(s: Settings) -> None:
    """Exit 2 with the reason when an explorer could not explore anything."""
    from theow_workers.explorer.run import explorer_problem

    problem = explorer_problem(s)
    if problem is not None:
        raise fail(f"not starting an explorer: {problem}", 2)


@app.command()
def worker(
    queues: Annotated[
        str, typer.Option(help="Comma-separated queues: resolve, explore, replay, passing.")
    ] = "resolve",
    concurrency: Annotated[int | None, typer.Option(help="Worker processes.")] = None,
    loglevel: str = "INFO",
) -> None:
    """Run a Celery worker for the given queues (against the configured services)."""
    from theow_client.names import QUEUE_EXPLORE, QUEUES

    wanted = [q.strip() for q in queues.split(",") if q.strip()]
    unknown = [q for q in wanted if q not in QUEUES]
    if unknown or not wanted:
        raise fail(f"unknown queue(s) {unknown or queues!r}; choose from {', '.join(QUEUES)}", 2)
    s = settings()
    if QUEUE_EXPLORE in wanted:
        refuse_to_explore_without(s)
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "theow_workers.celery_app",
        "worker",
        "--queues",
        ",".join(wanted),
        "--concurrency",
        str(concurrency or s.worker_concurrency),
        "--loglevel",
        loglevel,
    ]
    os.execv(sys.executable, argv)


@app.command()
def web(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int | None, typer.Option(help="[default: THEOW_WEB_PORT, 8808]")] = None,
) -> None:
    """Serve the web console: review queue, failures, rules, insight, replays.

    Refused unless THEOW_WEB_PASSWORD is set (THEOW_WEB_READONLY_PASSWORD adds
    read-only logins).
    """
    from theow_workers.web.auth import WebAuthError
    from theow_workers.web.server import serve, web_command

    s = settings()
    try:
        command = web_command(s, host, port)
    except WebAuthError as exc:
        raise fail(str(exc), 2) from None
    out.print(f"theow web console: {command.url} (password: THEOW_WEB_PASSWORD)")
    serve(s, host, port if port is not None else s.web_port)


@app.command()
def up(
    workers: Annotated[int, typer.Option(help="Resolver worker processes.")] = 2,
    flower: Annotated[
        bool, typer.Option("--flower", help="Also start Flower (needs THEOW_FLOWER_PASSWORD).")
    ] = False,
) -> None:
    """Start the embedded stack (Valkey, Milvus Lite, SQLite, resolver and replay workers,
    an explorer with THEOW_EXPLORE=1) until Ctrl-C."""
    from theow_workers.ops.flower import FlowerError, flower_command
    from theow_workers.stack import EmbeddedStack, StackError
    from theow_workers.web.auth import WebAuthError
    from theow_workers.web.server import web_command

    s = settings()
    if s.explore:
        refuse_to_explore_without(s)
    try:
        flower_cmd = flower_command(s) if flower else None
    except FlowerError as exc:
        raise fail(str(exc), 2) from None
    try:  # the console only with a password, as Flower
        web_cmd = web_command(s)
    except WebAuthError:
        web_cmd = None
    stack = EmbeddedStack(s)
    try:
        stack.start()
        stack.start_worker(["resolve"], concurrency=workers)
        # A separate, lower-priority worker: a replay (or learning a passing run)
        # never occupies the resolvers.
        stack.start_worker(
            ["replay", "passing"], concurrency=s.replay_concurrency, name="replay",
            nice=s.replay_nice,
        )  # fmt: skip
        if s.explore:  # THEOW_EXPLORE=1: one explorer process (prefetch 1, LLM-bound)
            stack.start_worker(["explore"], concurrency=1, name="explorer")
        if flower_cmd is not None:
            log_path = stack.home / "flower.log"
            stack.processes.append(("flower", flower_cmd.start(stack.environment(), log_path)))
        if web_cmd is not None:
            web_log = stack.home / "web.log"
            stack.processes.append(("web", web_cmd.start(stack.environment(), web_log)))
    except StackError as exc:
        raise fail(str(exc)) from None
    out.print(f"theow is up: broker {s.redis_url}, milvus {s.milvus_uri}, db {s.store_url}")
    if flower_cmd is not None:
        out.print(f"flower: {flower_cmd.url} (user {s.flower_user}, THEOW_FLOWER_PASSWORD)")
    if web_cmd is not None:
        out.print(f"web console: {web_cmd.url} (password THEOW_WEB_PASSWORD)")
    else:
        out.print("web console: not started; set THEOW_WEB_PASSWORD to serve it")
    out.print(f"logs in {stack.home}; Ctrl-C stops everything")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        while all(p.poll() is None for _, p in stack.processes):
            time.sleep(0.5)
        dead = [w for w, p in stack.processes if p.poll() is not None]
        err.print(f"[red]{', '.join(dead)} exited; stopping[/red]")
    except KeyboardInterrupt:
        out.print("stopping…")
    finally:
        stack.stop()


@app.command()
def demo(
    failures: Annotated[Path, typer.Option(help="JSON Lines of failure facts.")] = Path(
        "examples/failures.jsonl"
    ),
    timeout: Annotated[float, typer.Option(help="Seconds to wait for all verdicts.")] = 300.0,
) -> None:
    """Start the embedded stack, submit example failures, print what was resolved, stop."""
    from theow_workers.demo import run_demo

    raise typer.Exit(run_demo(settings(), failures, timeout, out))


# A service that cannot be reached is an expected condition, not a bug: one
# line naming it, exit 1, no traceback. Only modules already imported are
# consulted, so the check itself imports nothing heavy.
UNREACHABLE = (
    ("redis.exceptions", "ConnectionError"),
    ("redis.exceptions", "TimeoutError"),
    ("kombu.exceptions", "OperationalError"),
    ("theow_workers.store.schema", "StoreUnavailable"),
    ("pymilvus.exceptions", "MilvusException"),
)


def unreachable(exc: BaseException) -> bool:
    kinds: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, name in UNREACHABLE:
        loaded = sys.modules.get(module)
        if loaded is not None:
            kinds.append(getattr(loaded, name))
    return isinstance(exc, tuple(kinds))


def main() -> None:
    from theow_workers.core.redact import redact_text
    from theow_workers.logs import setup_cli_logging

    # THEOW_LOG_FORMAT=json: one JSON object per line; secrets masked either way.
    setup_cli_logging(os.environ.get("THEOW_LOG_LEVEL", "WARNING"))
    try:
        app()
    except Exception as exc:
        if not unreachable(exc):
            raise
        message = redact_text(" ".join(str(exc).split()))
        err.print(f"[red]error:[/red] a service is unreachable: {type(exc).__name__}: {message}",
                  highlight=False)  # fmt: skip
        sys.exit(1)


if __name__ == "__main__":
    main()
