"""``theow rules``: check the rules, list them, score them on a corpus, dry-run one failure, index them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from theow_client.jsontypes import JsonObject
from theow_workers.cli.output import JsonFlag, err, fail, load_settings, out, print_json, waiting
from theow_workers.config import layer_name
from theow_workers.core.actions import ActionLoadError

if TYPE_CHECKING:
    from theow_workers.config import Settings
    from theow_workers.core.resolve.library import Library
    from theow_workers.core.rules.schema import RuleError

rules_app = typer.Typer(no_args_is_help=True, help="Check, test and index rules.")

RulesDir = Annotated[
    Path | None, typer.Option("--rules", help="Only this rules directory [default: every layer].")
]
ActionsDir = Annotated[
    Path | None,
    typer.Option("--actions", help="Only this actions directory [default: every layer]."),
]


@rules_app.command("check")
def rules_check(
    directory: Annotated[
        Path | None,
        typer.Argument(
            help="Only this rules directory [default: every layer: the shipped rules "
            "and THEOW_RULES_DIRS, or THEOW_RULES_DIR alone]"
        ),
    ] = None,
    actions: ActionsDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Validate every rule file; report each problem with file, line and reason.

    Beyond the schema: each rule's examples must match it (through the scanner
    too), its counter-examples must not, each must read the same whatever the
    default regex flags, and no other specific rule may win them (``supersedes``
    says a rule is meant to).
    """
    rule_dirs, action_dirs = _layers(load_settings(), directory, actions)
    knowledge = _knowledge(rule_dirs, action_dirs)
    count = len(knowledge.rules.rules)
    with waiting(f"checking the examples of {count} rules (first run only, cached afterwards)"):
        errors = [
            *knowledge.rules.errors,
            *_example_errors(knowledge),
            *_confusion_errors(knowledge),
        ]
    if as_json:
        print_json(
            {
                "rules": len(knowledge.rules.rules),
                "actions": len(knowledge.actions),
                "layers": [str(d) for d in rule_dirs],
                "errors": [{"file": e.path, "line": e.line, "reason": e.reason} for e in errors],
            }
        )
    else:
        for e in errors:
            err.print(Text(str(e), style="red"))
        verdict = "[red]invalid[/red]" if errors else "[green]ok[/green]"
        out.print(
            f"{verdict}: {len(knowledge.rules.rules)} rules, {len(knowledge.actions)} actions, "
            f"{len(errors)} problem(s) in {', '.join(map(str, rule_dirs))}",
            highlight=False,
        )
    if errors:
        raise typer.Exit(1)


def _layers(
    s: Settings, rules: Path | None, actions: Path | None
) -> tuple[Sequence[Path], Sequence[Path]]:
    """A directory named on the command line alone, else every configured layer."""
    return ([rules] if rules else s.rule_layers), ([actions] if actions else s.action_layers)


def _knowledge(rule_dirs: Sequence[Path], action_dirs: Sequence[Path]) -> Library:
    """The rules and actions of these directories; actions that do not load exit 1."""
    from theow_workers.core.resolve.library import Library

    try:
        return Library.load(rule_dirs, action_dirs)
    except ActionLoadError as exc:
        raise fail(str(exc)) from None


def _example_errors(knowledge: Library) -> list[RuleError]:
    """Examples that do not match their condition, counter-examples that do."""
    from theow_workers.core.rules.examples import check_examples

    files = sorted(origin.file for origin in knowledge.rules.origins.values())
    return [problem for path in files for problem in check_examples(path)]


def _confusion_errors(knowledge: Library) -> list[RuleError]:
    """Examples another specific rule wins, with the resolver's structural ranking."""
    from theow_workers.core.resolve.confusion import confusion_errors

    files = {name: origin.file for name, origin in knowledge.rules.origins.items()}
    return confusion_errors(knowledge.rules.rules, files, knowledge.book)


@rules_app.command("list")
def rules_list(
    directory: Annotated[Path | None, typer.Argument(help="Rules directory.")] = None,
    actions: ActionsDir = None,
    as_json: JsonFlag = False,
    as_markdown: Annotated[
        bool,
        typer.Option("--markdown", help="Print the catalogue: rules per family and ecosystem."),
    ] = False,
) -> None:
    """List the rules with their layer, mode, tags and actions.

    A rule of a later layer replaces the one of the same name in an earlier
    layer: it is listed once, with the layers it overrides.
    """
    knowledge = _knowledge(*_layers(load_settings(), directory, actions))
    origins = knowledge.rules.origins
    rows: list[JsonObject] = [
        {
            "name": r.name,
            "layer": str(origins[r.name].layer),
            "overrides": [str(d) for d in origins[r.name].overrides],
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
        print_json(rows)
        return
    table = Table("rule", "layer", "mode", "tags", "actions", "description")
    table.columns[1].overflow = "fold"  # a directory is shown whole, never cut short
    for row in rows:
        layer = layer_name(Path(row["layer"]))
        if row["overrides"]:
            layer += f" (overrides {', '.join(layer_name(Path(d)) for d in row['overrides'])})"
        table.add_row(
            row["name"],
            layer,
            row["mode"],
            ", ".join(row["tags"]),
            ", ".join(row["actions"]),
            row["description"],
        )
    out.print(table)
    for e in knowledge.rules.errors:
        err.print(Text(str(e), style="red"))


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
    rules: RulesDir = None,
    actions: ActionsDir = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write one JSON object per input line here.")
    ] = None,
    learn: Annotated[
        bool,
        typer.Option(
            "--learn",
            help="With --labels: a simulated reviewer teaches each failure that is not grounded "
            "from its label (theow teach's synthesizer) and approves the rule for what follows.",
        ),
    ] = False,
    learned: Annotated[
        Path | None,
        typer.Option(help="With --learn: write each learned rule here, as approving writes it."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Score the rules on a corpus: found, grounded, precision, located, false alarms, logs/s.

    No server needed: each log is bounded as theow-client bounds it and
    matched by the same code a resolver worker runs. With --learn, also how
    many teachings it took and how the learned rules did (the learning curve).
    """
    if learn and labels is None:
        raise fail("--learn needs --labels: the reviewer teaches from the labelled lines", 2)
    if learned is not None:
        learned.mkdir(parents=True, exist_ok=True)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from theow_workers import evaluation
    from theow_workers.replay.reader import HistoryError, check

    s = load_settings()
    for path in filter(None, (failures, passing, labels, baseline)):
        try:
            check(path)  # read as `theow replay` reads it: a file that is not JSON Lines stops here
        except HistoryError as exc:
            raise fail(str(exc), 2) from None
    knowledge = _knowledge(*_layers(s, rules, actions))
    for e in knowledge.rules.errors:
        err.print(Text.assemble(("skipped:", "yellow"), f" {e}"))
    label_map = evaluation.read_labels(labels) if labels is not None else None
    sink = out_file.open("w", encoding="utf-8") if out_file is not None else None

    def emit(outcome: evaluation.Outcome) -> None:
        if sink is not None:
            sink.write(json.dumps(outcome.row()) + "\n")

    count = len(knowledge.rules.rules)
    with waiting(f"compiling the patterns of {count} rules (first run only, cached afterwards)"):
        knowledge.book.scanner  # noqa: B018 - built here, where the wait is told
    total = evaluation.count_lines(failures) + (
        evaluation.count_lines(passing) if passing is not None else 0
    )
    # The bar on a terminal; in a pipe, one line if the matching takes over a second.
    told = nullcontext() if err.is_terminal else waiting(f"matching {total:,} logs")
    with (
        told,
        Progress(
            TextColumn("matching"),
            BarColumn(),
            MofNCompleteColumn(),
            console=err,
            transient=True,
            disable=not err.is_terminal,
        ) as bar,
    ):
        task = bar.add_task("logs", total=total)
        summary = evaluation.run(
            knowledge.book,
            failures,
            passing=passing,
            labels=label_map,
            emit=emit,
            progress=lambda: bar.advance(task),
            baseline=baseline,
            learn=learn,
            learned_to=learned,
        )
    if sink is not None:
        sink.close()
    report = summary.to_dict()
    if as_json:
        print_json(report)
        return
    _print_eval(report)


def _print_eval(report: JsonObject) -> None:
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
    summary.add_row("unexplained (only a wrapper matched)", str(report["unexplained"]))
    if report["grounded"] is not None:
        summary.add_row("grounded", f"{report['grounded']} ({report['grounded_rate']:.1%})")
        summary.add_row("precision", f"{report['precision']:.2f}")
        summary.add_row("located", f"{report['located']} ({report['located_rate']:.1%})")
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
    if "taught" in report:
        summary.add_row(
            "taught (not grounded, taught from the label)",
            f"{report['taught']} ({report['taught_rate']:.1%})",
        )
        summary.add_row("rules learned", str(len(report["learned_rules"])))
        summary.add_row(
            "matches by learned rules, grounded",
            f"{report['learned_found']}, {report['learned_grounded']} "
            f"(precision {report['learned_precision']:.2f})",
        )
        if report["passing"]:
            summary.add_row("learned rules on passing logs", str(report["learned_on_passing"]))
        curve = " ".join("-" if v is None else f"{v:.0%}" for v in report["learning_curve"])
        summary.add_row("grounded per tenth (learning curve)", curve)
    summary.add_row("errors", str(report["errors"]))
    summary.add_row("logs/s", str(report["logs_per_s"]))
    out.print(summary)
    for problem in report["error_ids"]:
        err.print(Text.assemble(("error:", "red"), f" {problem}"))


@rules_app.command("test")
def rules_test(
    facts: Annotated[
        Path, typer.Option("--facts", help="JSON file: one object, the failure's facts.")
    ],
    rules: RulesDir = None,
    actions: ActionsDir = None,
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
    from theow_workers.rule_trial import trial

    s = load_settings()
    try:
        data = json.loads(facts.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise fail(f"{facts}: cannot read: {exc.strerror}", 2) from None
    except json.JSONDecodeError as exc:
        raise fail(f"{facts}:{exc.lineno}: not JSON: {exc.msg}", 2) from None
    if not isinstance(data, dict):
        raise fail(f"{facts}: facts must be a JSON object, got {type(data).__name__}", 2)
    try:
        report = trial(data, *_layers(s, rules, actions), rule or [], tag or [], waiting=waiting)
    except (ActionLoadError, ValueError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json(report)
    else:
        _print_explanation(report, limit)
    if not report["matched"]:
        raise typer.Exit(1)


def _print_explanation(report: JsonObject, limit: int) -> None:
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
    elif report.get("wrapper"):
        out.print(
            f"[yellow]unexplained[/yellow]: only the wrapper [bold]{report['wrapper']}[/bold] "
            "matched (a step failed; no rule knows why)"
        )
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
    from theow_workers.core.resolve.library import Library
    from theow_workers.runtime import build, sync_index

    rt = build(load_settings(), "cli")
    try:
        knowledge = Library.configured(rt.settings)
    except ActionLoadError as exc:
        raise fail(str(exc)) from None
    if knowledge.rules.errors:
        raise fail(f"{len(knowledge.rules.errors)} invalid rule(s); run `theow rules check`")
    index, redis = rt.index, rt.redis  # connected first: an unreachable one is not a wait
    with waiting("syncing the index (MiniLM embeds new and changed rules)"):
        report = sync_index(knowledge, index, rt.embedder, redis)
    out.print(
        f"index synced: {report.added} added, {report.updated} updated, "
        f"{report.removed} removed, {report.unchanged} unchanged"
    )
