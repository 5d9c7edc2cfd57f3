"""The ``theow`` command: rules, workers, the embedded stack, the demo."""

from __future__ import annotations

import os

import typer

from theow_workers.cli.db import db_app
from theow_workers.cli.history import history_app
from theow_workers.cli.incidents import incidents_app
from theow_workers.cli.ops import dead_letters, doctor, metrics
from theow_workers.cli.output import run
from theow_workers.cli.replay import replay_app
from theow_workers.cli.review import failures_app, meow_command, review_app
from theow_workers.cli.rules import rules_app
from theow_workers.cli.runs import runs_app
from theow_workers.cli.stack import demo, up, web, worker
from theow_workers.cli.teach import teach
from theow_workers.cli.tests import tests_app
from theow_workers.cli.tokens import tokens_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
app.add_typer(rules_app, name="rules")
app.add_typer(db_app, name="db")
app.add_typer(replay_app, name="replay")
app.add_typer(history_app, name="history")
app.add_typer(review_app, name="review")
app.add_typer(failures_app, name="failures")
app.add_typer(runs_app, name="runs")
app.add_typer(tokens_app, name="tokens")
app.add_typer(incidents_app, name="incidents")
app.add_typer(tests_app, name="tests")
app.command("meow")(meow_command)
app.command("teach")(teach)
app.command("doctor")(doctor)
app.command("metrics")(metrics)
app.command("dead-letters")(dead_letters)
app.command()(worker)
app.command()(web)
app.command()(up)
app.command()(demo)


def main() -> None:
    from theow_workers.logs import setup_cli_logging

    # THEOW_LOG_FORMAT=json: one JSON object per line; secrets masked either way.
    setup_cli_logging(os.environ.get("THEOW_LOG_LEVEL", "WARNING"))
    run(app)
