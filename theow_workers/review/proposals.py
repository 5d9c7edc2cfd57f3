"""Approving and rejecting proposals: the only way LLM output reaches the rules and actions.

Approve writes ``<name>.rule.yaml`` into the last rule layer, the user's
(refused if any layer defines the name: rules are immutable), applies each
action diff (refused outside the last rule and action layers, so never into
the shipped ones when a user layer exists, and refused when the target
changed since the diff was made),
re-validates the rule against the failure it came from, and records who
approved and when. Nothing is committed to git: the files change in the
working tree for the reviewer to commit. Either every file is written or none.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from theow_workers.core.matching import evaluate
from theow_workers.core.patching import PatchError, apply_diff, sha256
from theow_workers.core.rules import RULE_SUFFIX, RuleError, parse_rule
from theow_workers.runtime import Knowledge
from theow_workers.store.explore import ExplorationRecord, ExploreStore, Proposal


class ReviewError(Exception):
    """Why a proposal cannot be approved or rejected; one line for the reviewer."""


@dataclass(frozen=True)
class Approval:
    proposal_id: str
    rule_name: str
    written: tuple[str, ...]
    already: bool = False  # approved before: nothing was done


def reviewer() -> str:
    return os.environ.get("THEOW_REVIEWER") or getpass.getuser()


def _inside(path: Path, roots: tuple[Path, ...]) -> bool:
    resolved = path.resolve()
    return any(resolved.is_relative_to(root.resolve()) for root in roots)


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
    proposal: Proposal, rule_yaml: str, rule_layers: Sequence[Path], action_layers: Sequence[Path]
) -> dict[Path, str]:
    """Every file the approval writes with its new content; raises ReviewError.

    Files go to the last layers; a name any layer defines is refused, as a
    rule overriding a shipped one is a choice for a person, not an approval.
    """
    rules_dir, actions_dir = rule_layers[-1], action_layers[-1]
    try:
        rule = parse_rule(rule_yaml)
    except RuleError as exc:
        raise ReviewError(f"the rule is invalid: line {exc.line}: {exc.reason}") from None
    rule_path = rules_dir / f"{rule.name}{RULE_SUFFIX}"
    if rule_path.exists():
        raise ReviewError(f"{rule_path} already exists: rules are immutable, choose another name")
    for layer in rule_layers:
        taken = defined_names(layer).get(rule.name)
        if taken is not None:
            raise ReviewError(
                f"rule name {rule.name!r} is already defined in {taken}: choose another name"
            )
    files = {rule_path: rule_yaml if rule_yaml.endswith("\n") else rule_yaml + "\n"}
    root = actions_dir.resolve().parent
    for change in proposal.diffs:
        target = root / change["path"]
        if not _inside(target, (rules_dir, actions_dir)):
            raise ReviewError(f"{change['path']}: outside {rules_dir}/ and {actions_dir}/, refused")
        current = target.read_text(encoding="utf-8") if target.exists() else None
        base = change.get("base_sha256", "")
        if (current is None) != (base == "") or (current is not None and sha256(current) != base):
            raise ReviewError(
                f"{change['path']} changed since the proposal was made; "
                "reject it, or re-explore the failure against the current file"
            )
        try:
            files[target] = apply_diff(current or "", change["diff"])
        except PatchError as exc:
            raise ReviewError(f"{change['path']}: the diff does not apply: {exc}") from None
    return files


def approve(
    store: ExploreStore,
    proposal_id: str,
    rule_layers: Sequence[Path],
    action_layers: Sequence[Path],
    rule_yaml: str | None = None,
    by: str | None = None,
) -> Approval:
    """Apply a pending proposal to the last layers; a second approval does nothing."""
    proposal = store.proposal(proposal_id)
    if proposal is None:
        raise ReviewError(f"no proposal {proposal_id!r} (see `theow review list`)")
    if proposal.status == "approved":
        return Approval(proposal.id, proposal.rule_name, (), already=True)
    if proposal.status != "pending":
        raise ReviewError(f"proposal {proposal_id} is {proposal.status}, not pending")
    text = rule_yaml if rule_yaml is not None else proposal.rule_yaml
    files = planned_files(proposal, text, rule_layers, action_layers)
    failure = store.failure(proposal.failure_id)
    rule = parse_rule(text)
    if failure is not None:
        match = evaluate(rule, failure.facts)
        if not match.ok:
            raise ReviewError(
                f"the rule no longer matches the failure it came from: {match.reason}"
            )

    originals = {
        path: path.read_text(encoding="utf-8") if path.exists() else None for path in files
    }
    try:
        for path, content in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        loaded = Knowledge.load(rule_layers, action_layers)
        problems = [
            e for e in loaded.rules.errors if Path(e.path).resolve() in {p.resolve() for p in files}
        ]
        if problems or rule.name not in {r.name for r in loaded.rules.rules}:
            raise ReviewError(
                f"after applying, the rule does not load: {problems[0] if problems else 'missing'}"
            )
    except BaseException as exc:
        _restore(originals)
        if isinstance(exc, ReviewError):
            raise
        raise ReviewError(f"applying the proposal failed, nothing was changed: {exc}") from exc

    if not store.approve_proposal(proposal.id, by or reviewer(), text):
        _restore(originals)  # the other review stands: leave the rules as they were
        raise ReviewError(f"proposal {proposal_id} was reviewed by someone else meanwhile")
    return Approval(proposal.id, rule.name, tuple(str(p) for p in files))


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


def sync_after_approval(settings: Any, runtime: Any = None) -> tuple[bool, str]:
    """Sync the index now: (synced, one line saying what happened).

    When Milvus or Redis is down the files are written all the same and the
    workers sync on their next poll; the CLI and the web console say so. A
    long-lived caller (the web console) passes its own ``runtime``, so the
    model and the clients are built once, not per approval.
    """
    from theow_workers.runtime import Runtime, sync_index

    try:
        runtime = runtime or Runtime(settings)
        report = sync_index(
            Knowledge.configured(settings),
            runtime.index,
            runtime.embedder,
            runtime.redis,
        )
    except Exception as exc:  # the files are written; the index catches up on its own
        return False, (
            f"index not synced now ({type(exc).__name__}); workers will sync on their next poll"
        )
    return True, f"index synced ({report.added} added, {report.updated} updated)"


def _restore(originals: dict[Path, str | None]) -> None:
    for path, content in originals.items():
        if content is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(content, encoding="utf-8")


def summary(proposal: Proposal, exploration: ExplorationRecord | None) -> dict[str, Any]:
    return {
        "id": proposal.id,
        "rule": proposal.rule_name,
        "status": proposal.status,
        "failure_id": proposal.failure_id,
        "created_at": proposal.created_at.isoformat() if proposal.created_at else None,
        "files": [d["path"] for d in proposal.diffs],
        "tokens_in": exploration.tokens_in if exploration else 0,
        "tokens_out": exploration.tokens_out if exploration else 0,
        "cost": round(exploration.cost, 6) if exploration else 0.0,
        "reviewed_by": proposal.reviewed_by,
        "reviewed_at": proposal.reviewed_at.isoformat() if proposal.reviewed_at else None,
        "review_reason": proposal.review_reason,
    }
