"""Checking what an LLM submits, and turning it into a reviewable proposal.

LLM output is data: proposed action code is parsed with ``ast``, never
imported or run; every path stays inside ``actions/``; a rule whose name
exists is refused (rules are immutable to the machine). A failed check is a
SubmissionRejected whose message goes back to the LLM as the tool result, so
it can correct itself within its budget.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from theow_client.jsontypes import JsonObject
from theow_workers.core.rules.matching import evaluate
from theow_workers.core.rules.schema import Rule, RuleError, parse_rule

ACTION_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
MAX_CODE_CHARS = 20_000


class SubmissionRejected(ValueError):
    """What is wrong with a submission, worded for the LLM to fix it."""


@dataclass(frozen=True)
class ActionDiff:
    """One new or changed action file as a unified diff (new files diff against /dev/null)."""

    path: str  # relative to the repository root, e.g. "actions/fix_thing.py"
    diff: str
    action: str
    base_sha256: str = ""  # hash of the file the diff was made against ("" for a new file)

    def to_dict(self) -> dict[str, str]:
        return {
            "path": self.path,
            "diff": self.diff,
            "action": self.action,
            "base_sha256": self.base_sha256,
        }


@dataclass(frozen=True)
class ExploreResult:
    """A checked submission: the rule YAML plus one diff per new or changed action file."""

    rule: Rule
    rule_yaml: str
    actions: tuple[ActionDiff, ...] = ()
    bound: list[JsonObject] = field(default_factory=list)


@dataclass(frozen=True)
class Repository:
    """What a submission is checked against: existing rules, actions and their files."""

    rule_names: frozenset[str]
    action_files: dict[str, Path]  # action name -> the file that defines it
    actions_dir: Path
    root: Path  # paths in diffs are relative to this

    def relative(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(path)


def defined_actions(code: str, filename: str = "<proposal>") -> set[str]:
    """Names registered with ``@action("name")`` in ``code`` (parsed, not run)."""
    try:
        tree = ast.parse(code, filename=filename)
    except SyntaxError as exc:
        raise SubmissionRejected(
            f"{filename}: code does not parse: {exc.msg} (line {exc.lineno})"
        ) from None
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            if (
                isinstance(deco, ast.Call)
                and getattr(deco.func, "id", getattr(deco.func, "attr", "")) == "action"
                and deco.args
                and isinstance(deco.args[0], ast.Constant)
                and isinstance(deco.args[0].value, str)
            ):
                names.add(deco.args[0].value)
    return names


def _target(repo: Repository, name: str, path: str | None) -> Path:
    """Where an action's code goes: its existing file, the path given, or actions/<name>.py."""
    if path:
        candidate = (repo.root / path).resolve()
        if not candidate.is_relative_to(repo.actions_dir.resolve()) or candidate.suffix != ".py":
            raise SubmissionRejected(
                f"action {name!r}: path {path!r} is outside {repo.relative(repo.actions_dir)}/ "
                "or not a .py file; actions may only live there"
            )
        return candidate
    if name in repo.action_files:
        return repo.action_files[name]
    return repo.actions_dir / f"{name}.py"


def _diff(repo: Repository, target: Path, code: str, action: str) -> ActionDiff:
    import hashlib

    rel = repo.relative(target)
    old = target.read_text(encoding="utf-8") if target.is_file() else None
    new_lines = code.splitlines(keepends=True)
    if new_lines and not new_lines[-1].endswith("\n"):
        new_lines[-1] += "\n"
    old_lines = old.splitlines(keepends=True) if old is not None else []
    diff = "".join(
        difflib.unified_diff(
            old_lines, new_lines, "/dev/null" if old is None else f"a/{rel}", f"b/{rel}"
        )
    )
    base = hashlib.sha256(old.encode()).hexdigest() if old is not None else ""
    return ActionDiff(rel, diff, action, base)


def check_submission(
    rule_yaml: str,
    actions: list[JsonObject],
    facts: JsonObject,
    repo: Repository,
    *,
    regex_timeout: float = 0.05,
) -> ExploreResult:
    """Every check DESIGN §4 names; raise SubmissionRejected with the first problem."""
    if not isinstance(actions, list):
        raise SubmissionRejected("actions must be a list of {name, code} objects")
    submitted: dict[str, tuple[str, str | None]] = {}
    for i, entry in enumerate(actions):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise SubmissionRejected(
                f"actions[{i}] must be an object with a string 'name' and 'code'"
            )
        name, code = entry["name"], entry.get("code")
        if not ACTION_NAME.match(name):
            raise SubmissionRejected(
                f"actions[{i}]: {name!r} is not a valid action name (snake_case)"
            )
        if not isinstance(code, str) or not code.strip():
            raise SubmissionRejected(f"action {name!r}: 'code' must be the file's Python source")
        if len(code) > MAX_CODE_CHARS:
            raise SubmissionRejected(f"action {name!r}: code is over {MAX_CODE_CHARS} characters")
        submitted[name] = (code, entry.get("path"))

    known = frozenset(repo.action_files) | frozenset(submitted)
    try:
        rule = parse_rule(rule_yaml, known_actions=known)
    except RuleError as exc:
        raise SubmissionRejected(f"rule YAML is invalid: line {exc.line}: {exc.reason}") from None
    if rule.name in repo.rule_names:
        raise SubmissionRejected(
            f"a rule named {rule.name!r} already exists; rules are never changed by the explorer: "
            "choose a new name"
        )
    match = evaluate(rule, facts, regex_timeout=regex_timeout)
    if not match.ok:
        raise SubmissionRejected(f"the rule does not match this failure: {match.reason}")

    diffs = []
    for name, (code, path) in submitted.items():
        target = _target(repo, name, path)
        if name not in defined_actions(code, repo.relative(target)):
            raise SubmissionRejected(f"action {name!r}: the code does not define @action({name!r})")
        diffs.append(_diff(repo, target, code, name))
    bound = [{"action": a.action, "params": a.params} for a in match.actions]
    return ExploreResult(rule, rule_yaml, tuple(diffs), bound)
