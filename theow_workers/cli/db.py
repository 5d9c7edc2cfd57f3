"""``theow db``: the SQL schema."""

from __future__ import annotations

import typer

from theow_workers.cli.output import load_settings, out

db_app = typer.Typer(no_args_is_help=True, help="The SQL schema.")


@db_app.command("upgrade")
def db_upgrade(revision: str = "head") -> None:
    """Apply the Alembic migrations to THEOW_DATABASE_URL (SQLite by default)."""
    from theow_workers.store import migrate

    s = load_settings()
    migrate(s.store_url, revision)
    out.print(f"database at revision {revision}")
