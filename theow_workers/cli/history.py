"""``theow history``: whose failure it is, measured on a history file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from theow_client.jsontypes import JsonObject
from theow_workers.cli.output import JsonFlag, err, fail, out, print_json

history_app = typer.Typer(no_args_is_help=True, help=__doc__)
PROGRESS_EVERY = 10_000  # rows, in a pipe: one line on stderr each time


@history_app.command("eval")
def history_eval(
    history: Annotated[
        Path, typer.Argument(help="Job runs, passed and failed: JSON Lines (.jsonl or .jsonl.gz).")
    ],
    out_file: Annotated[
        Path, typer.Option("--out", help="Write one JSON object per failed run here.")
    ],
    truth: Annotated[
        Path | None,
        typer.Option(help="Truth: {id, origin, culprit} lines, to score the origins against."),
    ] = None,
    default_branch: Annotated[str, typer.Option(help="The repositories' default branch.")] = "main",
    as_json: JsonFlag = False,
) -> None:
    """Decide every failed run's origin (change, main, flaky, infra, unknown) in time order.

    No server needed: the same classification the workers run, over the file's
    runs in the order they finished; each failed run's origin as it stands at
    the end, and as it stood when it finished (origin_then).
    """
    from theow_workers.core.history.evaluation import (
        RowError,
        evaluate,
        run_from_row,
        summary,
        truth_from_row,
    )
    from theow_workers.core.history.model import Origin, Run
    from theow_workers.replay.reader import HistoryError, check, json_object, raw_lines

    started = time.perf_counter()
    for path in filter(None, (history, truth)):
        try:
            check(path)
        except HistoryError as exc:
            raise fail(str(exc), 2) from None

    def rows(path: Path) -> list[tuple[int, JsonObject]]:
        found = []
        try:
            for raw in raw_lines(path, duplicates=False):
                if raw.data is None:
                    raise fail(f"{path}:{raw.number}: line too long ({raw.size} bytes)", 2)
                value, problem = json_object(raw.data)
                if value is None:
                    raise fail(f"{path}:{raw.number}: {problem}", 2)
                found.append((raw.number, value))
                if len(found) % PROGRESS_EVERY == 0:
                    err.print(f"theow: read {len(found):,} rows of {path}", highlight=False)
        except HistoryError as exc:
            raise fail(str(exc), 2) from None
        return found

    runs: list[Run] = []
    for number, row in rows(history):
        try:
            runs.append(run_from_row(row))
        except RowError as exc:
            raise fail(f"{history}:{number}: {exc}", 2) from None
    known: dict[str, tuple[Origin, str | None]] | None = None
    if truth is not None:
        known = {}
        for number, row in rows(truth):
            try:
                key, origin, culprit = truth_from_row(row)
            except RowError as exc:
                raise fail(f"{truth}:{number}: {exc}", 2) from None
            known[key] = (origin, culprit)
    done = 0

    def advanced() -> None:
        nonlocal done
        done += 1
        if done % PROGRESS_EVERY == 0:
            err.print(f"theow: decided {done:,} failed runs", highlight=False)

    results = evaluate(runs, default_branch=default_branch, progress=advanced)
    try:
        with out_file.open("w", encoding="utf-8") as sink:
            for result in results:
                sink.write(json.dumps(result.row()) + "\n")
    except OSError as exc:
        raise fail(f"{out_file}: cannot write: {exc.strerror}", 2) from None
    report = summary(results, known)
    seconds = time.perf_counter() - started
    report = {"runs": len(runs), **report, "seconds": round(seconds, 2)}
    if as_json:
        print_json(report)
        return
    _print(report)


def _print(report: JsonObject) -> None:
    table = Table("origin", "final", "at the verdict", title=f"{report['failed']} failed runs")
    for origin, count in report["origins"].items():
        table.add_row(origin, str(count), str(report["origins_then"][origin]))
    out.print(table)
    scored = report.get("truth")
    if scored is None:
        out.print(f"{report['runs']} runs in {report['seconds']} s")
        return
    per = Table("origin", "support", "precision", "recall", title="against the truth")
    for origin, row in scored["per_origin"].items():
        per.add_row(origin, str(row["support"]), _share(row["precision"]), _share(row["recall"]))
    out.print(per)
    out.print(
        f"accuracy {_share(scored['accuracy'])}, at the verdict {_share(scored['accuracy_then'])}, "
        f"culprits right {_share(scored['culprit_accuracy'])} of {scored['culprits']}; "
        f"{report['runs']} runs in {report['seconds']} s"
    )
    if scored["without_truth"]:
        err.print(f"warning: {scored['without_truth']} failed runs have no truth row")


def _share(value: object) -> str:
    return "-" if value is None else f"{float(str(value)):.3f}"
