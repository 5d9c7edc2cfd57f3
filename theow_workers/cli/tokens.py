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
    broker's ACL profile installed it is also the agent's broker password, and
    its broker user is made here when THEOW_REDIS_URL is an ACL admin. Where it
    cannot be, the token is kept and the ``ACL SETUSER`` an admin runs is printed.
    """
    from theow_workers.ops.acl import AclError, AclNotSaved
    from theow_workers.store.tokens import TokenProblem, repos_of

    store = _store()
    try:
        token = store.add(name, scope, repo or ())
    except TokenProblem as exc:
        raise fail(str(exc), 2) from None
    made, problem = _broker_user(name, str(token)) if scope == "agent" else (False, None)
    if as_json:
        repos = sorted(repos_of(repo or ()))
        print_json(
            {"name": name, "scope": scope, "repos": repos, "token": str(token), "broker_user": made}
        )
    else:
        out.print(f"token {name} ({scope}); shown once, keep it secret:")
        print(str(token), flush=True)  # plain: no wrapping or markup in what gets copied
        if scope == "agent":
            make_console(stderr=True).print(
                "on the agent: export THEOW_AGENT_TOKEN=<the token above>"
            )
    if isinstance(problem, AclNotSaved):  # the user works until the broker restarts
        raise fail(f"token {name} made, and its broker user, but {problem}")
    if isinstance(problem, AclError):  # the token is good: an admin (or `sync`) makes the user
        _say_setuser(name, str(token), problem)


def _broker_user(name: str, token: str) -> tuple[bool, Exception | None]:
    """Make agent ``name``'s broker user and save it: (made, what went wrong)."""
    from theow_workers.ops.acl import AclError, create_agent_user, save_agent_users

    settings = load_settings()
    try:
        create_agent_user(settings, name, token)
    except AclError as exc:
        return False, exc
    try:
        save_agent_users(settings)
    except AclError as exc:
        return True, exc
    return True, None


def _say_setuser(name: str, token: str, problem: Exception) -> None:
    """One line saying the broker user was not made, then the command that makes it."""
    import shlex

    from theow_workers.ops.acl import database, setuser_command
    from theow_workers.store.tokens import broker_hash

    db = database(load_settings().redis_url)
    command = shlex.join(setuser_command(name, broker_hash(token), db))
    err = make_console(stderr=True)
    err.print(
        f"warning: token {name} kept, without its broker user: {problem}; once the broker "
        "answers run `theow tokens sync`, or have a broker admin run (then ACL SAVE):",
        markup=False, highlight=False, soft_wrap=True,
    )  # fmt: skip
    err.print(f'redis-cli -u "$ADMIN_URL" {command}', markup=False, highlight=False, soft_wrap=True)


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
    from theow_workers.ops.acl import AclError, revoke_agent_user, save_agent_users
    from theow_workers.store.tokens import TokenProblem, revocation

    store = _store()
    try:
        known = store.revoke(name)
    except TokenProblem as exc:
        raise fail(str(exc), 2) from None
    if known.scope != "agent":
        out.print(f"token {name} revoked")
        return
    settings = load_settings()
    try:
        logged_out = revoke_agent_user(settings, name, revocation(name, known.key))
    except AclError as exc:  # revoked in the store: workers refuse it once their cache expires
        raise fail(f"token {name} revoked, but {exc}") from None
    try:
        if logged_out:
            save_agent_users(settings)
    except AclError as exc:  # deleted now; an ACL file that still holds it would bring it back
        raise fail(f"token {name} revoked and its broker user deleted, but {exc}") from None
    out.print(
        f"token {name} revoked"
        + ("; its broker user is logged out and deleted" if logged_out else "")
    )


@tokens_app.command("sync")
def tokens_sync() -> None:
    """Give every agent token its broker user, with this version's ACL profile; close revoked ones.

    Run after the broker lost its users (restarted without its ACL file) and
    after an upgrade: a missing user is made again from the token store (no
    token needed), an existing one gets the current rules, its password kept;
    a revoked token's user is deleted. The users are then saved to the ACL file.
    """
    from theow_workers.ops.acl import AclError, sync_agent_users

    settings, store = load_settings(), _store()
    try:
        done = sync_agent_users(settings, store)
    except AclError as exc:
        raise fail(str(exc)) from None
    parts = [f"{len(done.made) + len(done.changed)} broker user(s) given the current profile"]
    if done.made or done.changed:
        parts[0] += ": " + ", ".join(sorted(done.made + done.changed))
    if done.made:
        parts.append(f"made again: {', '.join(done.made)}")
    if done.closed:
        parts.append(f"revoked and deleted: {', '.join(done.closed)}")
    out.print("; ".join(parts))
    if done.lost:
        raise fail(
            f"no broker user, and no hash to make one from (tokens made by an older "
            f"version): {', '.join(done.lost)}; make each a new token and revoke the old one"
        )


tokens_app.command("broker-sync", help="The same as `theow tokens sync`.", hidden=True)(tokens_sync)
