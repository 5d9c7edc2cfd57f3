"""A stored proposal's risk flags: reads what ``risk.assess`` needs, imports nothing proposed.

The CLI (``theow review show``) and the console's proposal page both call
``proposal_flags``, so they show the same flags. Existing actions are read
from their syntax trees too (which run on the build agents), not imported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from theow_client.jsontypes import Json
from theow_workers.core.explore.patching import PatchError, apply_diff
from theow_workers.core.rules.schema import RULE_SUFFIX, RuleError, parse_rule
from theow_workers.review.proposals import ReviewError, action_target
from theow_workers.review.risk import ActionFile, Flag, actions_in, assess
from theow_workers.store.explore import Proposal


def proposal_flags(
    proposal: Proposal,
    facts: Mapping[str, Json],
    rule_layers: Sequence[Path],
    action_layers: Sequence[Path],
) -> list[Flag]:
    """Every flag of ``proposal`` against the failure's ``facts`` and today's layers."""
    try:
        steps = [(s.action, s.params) for s in parse_rule(proposal.rule_yaml).then]
    except RuleError:
        steps = []  # the page and `review show` say the rule is invalid
    refused = []
    for change in proposal.diffs:
        try:
            action_target(change.get("path", ""), action_layers)
        except ReviewError as exc:
            refused.append(Flag("refused file", change.get("path", ""), str(exc)))
    files = [_action_file(change, action_layers) for change in proposal.diffs]
    client_side = {name for name, client in _existing(action_layers).items() if client}
    known = "\n".join(
        _text(path) for layer in rule_layers for path in sorted(layer.rglob(f"*{RULE_SUFFIX}"))
    )
    return refused + assess(proposal.rule_yaml, steps, files, facts, client_side, known)


def called_actions(proposal: Proposal, action_layers: Sequence[Path]) -> list[tuple[str, str]]:
    """Each action the rule calls with where it runs: "build agent", "worker" or "unknown"."""
    try:
        names = list(dict.fromkeys(s.action for s in parse_rule(proposal.rule_yaml).then))
    except RuleError:
        return []
    known = _existing(action_layers)
    for change in proposal.diffs:
        known.update(
            {n: c for n, (c, _, _) in actions_in(_action_file(change, action_layers).after).items()}
        )
    runs = {True: "build agent", False: "worker"}
    return [(name, runs[known[name]] if name in known else "unknown") for name in names]


def _existing(action_layers: Sequence[Path]) -> dict[str, bool]:
    """Action name → runs on the build agent, read from the syntax of every layer's files."""
    return {
        name: client
        for layer in action_layers
        for path in sorted(layer.glob("*.py"))
        for name, (client, _, _) in actions_in(_text(path)).items()
    }


def _action_file(change: Mapping[str, str], action_layers: Sequence[Path]) -> ActionFile:
    """The file before and after the diff; a diff that does not apply counts as all new lines."""
    path = change.get("path", "")
    try:
        target = action_target(path, action_layers)
    except ReviewError:
        target = None
    before = _text(target) if target is not None and not target.is_symlink() else ""
    try:
        after = apply_diff(before, change.get("diff", ""))
    except PatchError:
        before = ""
        after = "".join(
            line[1:]
            for line in change.get("diff", "").splitlines(keepends=True)
            if line.startswith("+") and not line.startswith("+++")
        )
    return ActionFile(path, before, after)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
