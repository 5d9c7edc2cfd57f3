"""``theow tokens``: who may talk to Theow, and as what."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from theow_workers.cli.output import fail, load_settings, make_console, out, print_json

if TYPE_CHECKING:
    from theow_workers.store.tokens import TokenStore

tokens_app = typer.Typer(
    no_args_is_help=True,
    help="Tokens: an agent's to submit failures and read its own verdicts, and more.",
)


def _store() -> TokenStore:
    """The token store, its database brought up to date first (a fresh install has none)."""
    from theow_workers.store.tokens import TokenStore

    return TokenStore.at(load_settings().store_url)


@tokens_app.command("add")
def tokens_add(
    name: Annotated[str, typer.Argument(help="Lowercase letters, digits and dashes.")],
    scope: Annotated[str, typer.Option(help="agent, api-read or operator.")] = "agent",
    repo: Annotated[
        list[str] | None,
        typer.Option(
            help="A repository (owner/name) this agent builds; repeat for more. Its failures "
            "share explanations with other tokens of that repository; others stay the agent's own."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Make a token and print it, once: it is stored hashed and cannot be shown again.

    An agent's token goes in THEOW_AGENT_TOKEN on the build agent; with the
    broker's ACL profile installed it is also the agent's broker password.
    """
    from theow_workers.client_env import grant_broker_access
    from theow_workers.ops.acl import AclError
    from theow_workers.store.tokens import TokenProblem, repos_of

    store = _store()
    try:
        token = store.add(name, scope, repo or ())
    except TokenProblem as exc:
        raise fail(str(exc), 2) from None
    try:
        acl = scope == "agent" and grant_broker_access(load_settings(), name, str(token))
    except AclError as exc:  # a token whose broker user does not exist would only be refused
        store.forget(name)
        raise fail(
            f"{exc}; no token was made: start the broker (`theow up`), then run this again"
        ) from None
    if as_json:
        repos = sorted(repos_of(repo or ()))
        print_json(
            {"name": name, "scope": scope, "repos": repos, "token": str(token), "broker_user": acl}
        )
        return
    out.print(f"token {name} ({scope}); shown once, keep it secret:")
    print(str(token))  # plain: no wrapping or markup in what gets copied
    if scope == "agent":
        make_console(stderr=True).print("on the agent: export THEOW_AGENT_TOKEN=<the token above>")


@tokens_app.command("list")
def tokens_list(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array on stdout.")] = False,
) -> None:
    """The tokens, their scopes and dates (never a secret)."""
    from rich.table import Table

    store = _store()
    tokens = store.list()
    if as_json:
        print_json([t.to_dict() for t in tokens])
        return
    table = Table("name", "scope", "repos", "created", "revoked", title=f"{len(tokens)} token(s)")
    for t in tokens:
        revoked = f"{t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else ""
        created = f"{t.created_at:%Y-%m-%d %H:%M}"
        table.add_row(t.name, t.scope, " ".join(t.repos), created, revoked)
    out.print(table)


@tokens_app.command("revoke")
def tokens_revoke(name: str) -> None:
    """Stop accepting token NAME, at once.

    An agent's broker user is logged out and deleted, and the workers refuse
    its messages, those already queued included.
    """
    from theow_workers.ops.acl import AclError, revoke_agent_user
    from theow_workers.store.tokens import TokenProblem, revocation

    store = _store()
    try:
        known = store.revoke(name)
    except TokenProblem as exc:
        raise fail(str(exc), 2) from None
    if known.scope != "agent":
        out.print(f"token {name} revoked")
        return
    try:
        logged_out = revoke_agent_user(load_settings(), name, revocation(name, known.key))
    except AclError as exc:  # revoked in the store: workers refuse it once their cache expires
        raise fail(f"token {name} revoked, but {exc}") from None
    out.print(
        f"token {name} revoked"
        + ("; its broker user is logged out and deleted" if logged_out else "")
    )


@tokens_app.command("broker-sync")
def tokens_broker_sync() -> None:
    """Bring every agent's broker user to this version's ACL profile, and close revoked ones.

    Run after an upgrade: a broker user keeps the rules it was made with. Its
    password (the agent's token) is kept; a revoked token's user is deleted.
    """
    from theow_workers.ops.acl import AclError, sync_agent_users

    settings, store = load_settings(), _store()
    try:
        changed, closed = sync_agent_users(settings, store)
    except AclError as exc:
        raise fail(str(exc)) from None
    out.print(
        f"{len(changed)} broker user(s) given the current profile"
        + (f": {', '.join(changed)}" if changed else "")
        + (f"; revoked and deleted: {', '.join(closed)}" if closed else "")
    )
