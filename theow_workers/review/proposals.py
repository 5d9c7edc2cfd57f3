"""Approving and rejecting proposals: the only way LLM output reaches the rules and actions.

Approve writes ``<name>.rule.yaml`` into the last rule layer, the user's
(refused if any layer defines the name: rules are immutable), applies each
action diff (refused outside the last rule and action layers, so never into
the shipped ones when a user layer exists, and refused when the target
changed since the diff was made; a file defining a shipped action's name,
in whatever layer, needs ``replace_shipped`` as editing the shipped file does),
re-validates the rule against the failure it came from, and records who
approved and when. Nothing is committed to git: the files change in the
working tree for the reviewer to commit. Either every file is written or none.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import yaml

from theow_workers.core.explore.patching import PatchError, apply_diff, sha256
from theow_workers.core.resolve.library import Library
from theow_workers.core.rules.matching import evaluate
from theow_workers.core.rules.schema import RULE_SUFFIX, RuleError, load_rules, parse_rule
from theow_workers.review.risk import actions_in
from theow_workers.review.validation import ActionCheckFailed, LoadedAction, load_in_child
from theow_workers.store.explore import ExploreStore, Proposal

if TYPE_CHECKING:
    from theow_workers.config import Settings
    from theow_workers.runtime import Runtime

ACTION_FILE = re.compile(r"^[a-z][a-z0-9_]{0,63}\.py$")
NOT_ACTIONS = frozenset({"conftest.py", "setup.py", "sitecustomize.py", "usercustomize.py"})
# An approval that died midway (its process killed) leaves the proposal claimed this long.
STALE_CLAIM = timedelta(minutes=10)


class ReviewError(Exception):
    """Why a proposal cannot be approved or rejected; one line for the reviewer."""


@dataclass(frozen=True)
class Approval:
    proposal_id: str
    rule_name: str
    written: tuple[str, ...]
    already: bool = False  # approved before: nothing was done
    by: str | None = None  # who approved it


def reviewer() -> str:
    return os.environ.get("THEOW_REVIEWER") or getpass.getuser()


def defined_names(rules_dir: Path) -> dict[str, Path]:
    """Every rule name defined under ``rules_dir``, subdirectories included, with its file.

    Read leniently (a file that is not valid YAML defines no name): an invalid
    file must not hide a name that the rules loader would still see.
    """
    found: dict[str, Path] = {}
    for path in sorted(rules_dir.rglob(f"*{RULE_SUFFIX}")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        name = data.get("name") if isinstance(data, dict) else None
        if isinstance(name, str):
            found.setdefault(name, path)
    return found


def planned_files(
    proposal: Proposal,
    rule_yaml: str,
    rule_layers: Sequence[Path],
    action_layers: Sequence[Path],
    replace_shipped: bool = False,
) -> dict[Path, str]:
    """Every file the approval writes with its new content; raises ReviewError.

    Files go to the last layers; a name any layer defines is refused, as a
    rule overriding a shipped one is a choice for a person, not an approval.
    Only ``<rules>/<name>.rule.yaml`` and ``<actions>/<name>.py`` are written,
    never through a symlink; changing a file of the first action layer (the
    shipped actions) needs ``replace_shipped``.
    """
    rules_dir = rule_layers[-1].resolve()
    try:
        rule = parse_rule(rule_yaml)
    except RuleError as exc:
        raise ReviewError(f"the rule is invalid: line {exc.line}: {exc.reason}") from None
    rule_path = rules_dir / f"{rule.name}{RULE_SUFFIX}"
    if rule_path.is_symlink():
        raise ReviewError(f"{rule_path} is a symlink: refused, nothing is written through one")
    if rule_path.exists():
        raise ReviewError(f"{rule_path} already exists: rules are immutable, choose another name")
    for layer in rule_layers:
        taken = defined_names(layer).get(rule.name)
        if taken is not None:
            raise ReviewError(
                f"rule name {rule.name!r} is already defined in {taken}: choose another name"
            )
    files = {rule_path: rule_yaml if rule_yaml.endswith("\n") else rule_yaml + "\n"}
    for change in proposal.diffs:
        target = action_target(change["path"], action_layers)
        if target.is_symlink():
            raise ReviewError(f"{change['path']}: {target} is a symlink: refused")
        current = _read(target)
        base = change.get("base_sha256", "")
        if (current is None) != (base == "") or (current is not None and sha256(current) != base):
            raise ReviewError(
                f"{change['path']} changed since the proposal was made; "
                "reject it, or re-explore the failure against the current file"
            )
        shipped = action_layers[0].resolve() / target.name
        if current is not None and target == shipped and not replace_shipped:
            raise ReviewError(
                f"{change['path']} is a shipped action: approving replaces it; read the diff and "
                "approve with `theow review approve --replace-shipped` if you mean it"
            )
        try:
            files[target] = apply_diff(current or "", change["diff"])
        except PatchError as exc:
            raise ReviewError(f"{change['path']}: the diff does not apply: {exc}") from None
    return files


def action_target(path: str, action_layers: Sequence[Path]) -> Path:
    """Where ``actions/<name>.py`` of a diff is written: the last action layer; or ReviewError."""
    actions_dir = action_layers[-1].resolve()
    parts = PurePosixPath(path).parts
    if ".." in parts or len(parts) != 2 or parts[0] != "actions":
        raise ReviewError(
            f"{path}: outside {actions_dir}/, refused: a proposal writes only actions/<name>.py"
        )
    if not ACTION_FILE.match(parts[1]) or parts[1] in NOT_ACTIONS:
        raise ReviewError(
            f"{path}: refused: an action file is named <name>.py in lowercase snake_case, "
            "not private (_x.py), a package (__init__.py) or a test hook (conftest.py)"
        )
    return actions_dir / parts[1]


def _read(path: Path) -> str | None:
    """The file's text, never through a symlink; None when there is none."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ReviewError(f"{path}: cannot be read ({exc.strerror}): refused") from None
    with os.fdopen(descriptor, encoding="utf-8") as handle:
        return handle.read()


def _write(path: Path, content: str) -> None:
    """Write through a temporary file renamed over ``path``: a symlink there is replaced, not followed."""
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def approve(
    store: ExploreStore,
    proposal_id: str,
    rule_layers: Sequence[Path],
    action_layers: Sequence[Path],
    rule_yaml: str | None = None,
    by: str | None = None,
    replace_shipped: bool = False,
) -> Approval:
    """Apply a pending proposal to the last layers; a second approval does nothing.

    The proposal is claimed first (``approving``), so of approvals at once one
    writes and the others are told who is approving it. Proposed action code
    is loaded only in a child process without secrets (``validation``).
    """
    by = by or reviewer()
    proposal = store.proposal(proposal_id)
    if proposal is None:
        raise ReviewError(f"no proposal {proposal_id!r} (see `theow review list`)")
    if proposal.status == "pending" and store.claim_proposal(proposal.id, by, STALE_CLAIM):
        try:
            written, rule_name = _apply(
                store, proposal, rule_layers, action_layers, rule_yaml, by, replace_shipped
            )
        except BaseException:
            store.release_proposal(proposal.id, by)
            raise
        return Approval(proposal.id, rule_name, written, by=by)
    current = store.proposal(proposal_id) or proposal
    if current.status == "approved":
        return Approval(current.id, current.rule_name, (), already=True, by=current.reviewed_by)
    if current.status == "approving":
        raise ReviewError(
            f"proposal {proposal_id} is already being approved by {current.reviewed_by}"
        )
    if current.status == "pending":  # another approval claimed it and failed meanwhile
        raise ReviewError(f"proposal {proposal_id}: another approval just failed; try again")
    raise ReviewError(f"proposal {proposal_id} is {current.status}, not pending")


def _apply(
    store: ExploreStore,
    proposal: Proposal,
    rule_layers: Sequence[Path],
    action_layers: Sequence[Path],
    rule_yaml: str | None,
    by: str,
    replace_shipped: bool,
) -> tuple[tuple[str, ...], str]:
    text = rule_yaml if rule_yaml is not None else proposal.rule_yaml
    files = planned_files(proposal, text, rule_layers, action_layers, replace_shipped)
    failure = store.failure(proposal.failure_id)
    rule = parse_rule(text)
    if failure is not None:
        match = evaluate(rule, failure.facts)
        if not match.ok:
            raise ReviewError(
                f"the rule no longer matches the failure it came from: {match.reason}"
            )
    proposed = {p.name: content for p, content in files.items() if p.suffix == ".py"}
    try:
        loaded = load_in_child(action_layers, proposed)
    except ActionCheckFailed as exc:
        raise ReviewError(str(exc)) from None
    _check_defined(proposed, action_layers, loaded, replace_shipped)

    originals = {path: _read(path) for path in files}
    try:
        for path, content in files.items():
            _write(path, content)
        rules = load_rules(
            rule_layers,
            known_actions=frozenset(a.name for a in loaded),
            signatures={a.name: a.signature() for a in loaded},
        )
        problems = [e for e in rules.errors if Path(e.path).resolve() in files]
        if problems or rule.name not in {r.name for r in rules.rules}:
            raise ReviewError(
                f"after applying, the rule does not load: {problems[0] if problems else 'missing'}"
            )
    except BaseException as exc:
        _restore(originals)
        if isinstance(exc, ReviewError):
            raise
        raise ReviewError(f"applying the proposal failed, nothing was changed: {exc}") from exc

    if not store.approve_proposal(proposal.id, by, text):
        _restore(originals)  # the other review stands: leave the rules as they were
        raise ReviewError(f"proposal {proposal.id} was reviewed by someone else meanwhile")
    return tuple(str(p) for p in files), rule.name


def _check_defined(
    proposed: dict[str, str],
    action_layers: Sequence[Path],
    loaded: Sequence[LoadedAction],
    replace_shipped: bool,
) -> None:
    """Each proposed file registers an action, keeps every action it registered before,
    and takes no shipped action's name unless ``replace_shipped``.

    A later layer wins on an action's name, so a new file of the user's layer
    defining a shipped name replaces the shipped action as surely as editing
    its file would. A name the file already defined was chosen before: no flag.
    """
    actions_dir = action_layers[-1].resolve()
    for name in proposed:
        path = actions_dir / name
        registered = {a.name for a in loaded if Path(a.file).resolve() == path}
        if not registered:
            raise ReviewError(f"actions/{name}: defines no @action: refused")
        before = set(actions_in(_read(path) or ""))
        dropped = before - registered
        if dropped:
            raise ReviewError(
                f"actions/{name}: no longer defines {', '.join(sorted(dropped))}: refused"
            )
        shipped = shipped_actions(action_layers[0], besides=path)
        taken = sorted((registered - before) & shipped.keys())
        if taken and not replace_shipped:
            where = ", ".join(f"{n!r} ({shipped[n]})" for n in taken)
            raise ReviewError(
                f"actions/{name} defines the shipped action {where}: approving replaces it; "
                "read the diff and approve with `theow review approve --replace-shipped` "
                "if you mean it"
            )


def shipped_actions(shipped_dir: Path, besides: Path) -> dict[str, Path]:
    """Every action name the shipped layer's files define, with its file, but ``besides``'s.

    Read from the source, never imported: the shipped files are the reference,
    and a name they define is one a proposal may not take silently.
    """
    found: dict[str, Path] = {}
    for file in sorted(shipped_dir.resolve().glob("*.py")):
        if file == besides:
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for action_name in actions_in(text):
            found.setdefault(action_name, file)
    return found


def reject(store: ExploreStore, proposal_id: str, reason: str, by: str | None = None) -> Proposal:
    if not reason.strip():
        raise ReviewError("a rejection needs a reason (--reason)")
    proposal = store.proposal(proposal_id)
    if proposal is None:
        raise ReviewError(f"no proposal {proposal_id!r} (see `theow review list`)")
    if proposal.status != "pending":
        raise ReviewError(f"proposal {proposal_id} is {proposal.status}, not pending")
    if not store.reject_proposal(proposal.id, by or reviewer(), reason):
        raise ReviewError(f"proposal {proposal_id} was reviewed by someone else meanwhile")
    return proposal


def sync_after_approval(
    settings: Settings, runtime: Runtime | None = None, library: Library | None = None
) -> tuple[bool, str]:
    """Sync the index now: (synced, one line saying what happened).

    When Milvus or Redis is down the files are written all the same and the
    workers sync on their next poll; the CLI and the web console say so. A
    long-lived caller (the web console) passes its own ``runtime``, so the
    model and the clients are built once, not per approval; ``library``, the
    rules as written, when the caller loaded them already.
    """
    from theow_workers.runtime import build, sync_index

    try:
        runtime = runtime or build(settings, "cli")
        report = sync_index(
            library or Library.configured(settings),
            runtime.index,
            runtime.embedder,
            runtime.redis,
        )
    except Exception as exc:  # the files are written; the index catches up on its own
        return False, (
            f"index not synced now ({type(exc).__name__}); workers will sync on their next poll"
        )
    if not report.added and not report.updated:  # a worker noticed the file first
        return True, "index up to date (the workers synced it already)"
    return True, f"index synced ({report.added} added, {report.updated} updated)"


def _restore(originals: dict[Path, str | None]) -> None:
    for path, content in originals.items():
        if content is None:
            path.unlink(missing_ok=True)
        else:
            _write(path, content)
