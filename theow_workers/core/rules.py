"""The rule model and its YAML schema.

A rule is a production rule: when every fact in ``when`` holds, the actions in
``then`` run in order. One file per rule, ``rules/<name>.rule.yaml``. Rule
files written for the single-process Theow library load unchanged.

Schema errors are loud and precise: each RuleError names the file, the line
and what is wrong, at load time and in ``theow rules check``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import regex
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

RULE_SUFFIX = ".rule.yaml"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
MATCH_OPERATORS = (
    "equals",
    "contains",
    "regex",
    "one_of",
    "not_equals",
    "not_contains",
    "not_regex",
)
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)?)\}")


class Mode(StrEnum):
    FIX = "fix"  # run the actions
    RETRY = "retry"  # transient: tell the client to run the step again
    TRACK = "track"  # known cause, nothing to run, the failure stands


class RuleError(ValueError):
    """A rule file is invalid. ``str()`` is one line: ``file:line: reason``."""

    def __init__(self, path: str | Path, reason: str, line: int | None = None) -> None:
        self.path = str(path)
        self.reason = reason
        self.line = line
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {reason}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FactCondition(_Strict):
    """One condition of ``when``: several operators on one fact are ANDed."""

    fact: str = Field(min_length=1)
    equals: str | int | float | bool | None = None
    contains: str | None = None
    regex: str | None = None
    one_of: list[str | int | float | bool] | None = None
    not_equals: str | int | float | bool | None = None
    not_contains: str | None = None
    not_regex: str | None = None
    examples: list[str] = Field(default_factory=list)

    @field_validator("regex", "not_regex")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                regex.compile(pattern)
            except regex.error as exc:
                raise ValueError(f"regex does not compile: {exc}") from exc
        return pattern

    @model_validator(mode="after")
    def _has_operator(self) -> FactCondition:
        if not self.operators():
            raise ValueError(
                f"fact {self.fact!r} has no operator (one of {', '.join(MATCH_OPERATORS)})"
            )
        return self

    def operators(self) -> list[str]:
        return [op for op in MATCH_OPERATORS if op in self.model_fields_set]


class ActionStep(_Strict):
    action: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)


class LLMConfig(_Strict):
    prompt_template: str
    tools: list[str] = Field(default_factory=list)
    constraints: dict[str, Any] = Field(default_factory=dict)
    use_secondary: bool = False


class Rule(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    mode: Mode = Mode.FIX
    when: list[FactCondition] = Field(min_length=1)
    then: list[ActionStep] = Field(default_factory=list)
    collection: str | None = None
    llm_config: LLMConfig | None = None
    notes: str | None = None

    @model_validator(mode="after")
    def _fix_has_actions(self) -> Rule:
        if self.mode is Mode.FIX and not self.then and self.llm_config is None:
            raise ValueError("a `fix` rule needs at least one action in `then` (or mode: track)")
        return self

    @property
    def type(self) -> str:
        return "probabilistic" if self.llm_config else "deterministic"

    def equals_facts(self) -> dict[str, str]:
        """Facts this rule pins to one value: scalar filter fields in the index."""
        return {c.fact: as_text(c.equals) for c in self.when if "equals" in c.model_fields_set}

    def embedding_text(self) -> str:
        """Description plus every fact example: what semantic search sees of a rule."""
        examples = [e.strip() for c in self.when for e in c.examples]
        return " ||| ".join([self.description.strip(), *examples])

    def canonical(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_unset=True), sort_keys=True)

    def content_hash(self, model_name: str) -> str:
        """Changes when the rule or the embedding model changes: the index key."""
        return hashlib.sha256(f"{model_name}\n{self.canonical()}".encode()).hexdigest()

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json", exclude_unset=True)
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def as_text(value: Any) -> str:
    """Facts and operands are compared as text; JSON spelling for non-strings."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


@dataclass(frozen=True)
class RuleSet:
    """Every rule of a directory, and its problems, loaded in one pass."""

    rules: tuple[Rule, ...]
    errors: tuple[RuleError, ...]

    @property
    def version(self) -> str:
        digest = hashlib.sha256()
        for rule in sorted(self.rules, key=lambda r: r.name):
            digest.update(rule.canonical().encode())
        return digest.hexdigest()[:16]

    def by_name(self) -> dict[str, Rule]:
        return {r.name: r for r in self.rules}


def parse_rule(
    text: str, path: str | Path = "<rule>", *, known_actions: frozenset[str] | None = None
) -> Rule:
    """Parse one rule from YAML text; raise RuleError with file and line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise RuleError(path, f"invalid YAML: {problem}", line) from exc
    if not isinstance(data, dict):
        raise RuleError(path, "a rule file must be a YAML mapping", 1)
    lines = _line_map(node)
    try:
        rule = Rule.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        raise RuleError(path, _describe(first), _line_for(lines, loc)) from None

    if isinstance(path, Path) or path != "<rule>":
        stem = Path(path).name.removesuffix(RULE_SUFFIX)
        if stem != rule.name:
            raise RuleError(
                path, f"name {rule.name!r} differs from file name {stem!r}", lines.get(("name",))
            )
    for i, step in enumerate(rule.then):
        if known_actions is not None and step.action not in known_actions:
            raise RuleError(
                path, f"unknown action {step.action!r}", lines.get(("then", i, "action"))
            )
        problem = _unbindable_extract(rule, step.params)
        if problem:
            raise RuleError(path, problem, lines.get(("then", i, "params")))
    return rule


def load_rule(path: Path, *, known_actions: frozenset[str] | None = None) -> Rule:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(path, f"cannot read: {exc}") from exc
    return parse_rule(text, path, known_actions=known_actions)


def load_rules(directory: str | Path, *, known_actions: frozenset[str] | None = None) -> RuleSet:
    """Load every ``*.rule.yaml`` under ``directory``; bad files go to ``errors``."""
    root = Path(directory)
    if not root.is_dir():
        return RuleSet((), (RuleError(root, "rules directory does not exist"),))
    rules: list[Rule] = []
    errors: list[RuleError] = []
    seen: dict[str, Path] = {}
    for path in sorted(root.rglob(f"*{RULE_SUFFIX}")):
        try:
            rule = load_rule(path, known_actions=known_actions)
        except RuleError as exc:
            errors.append(exc)
            continue
        if rule.name in seen:
            errors.append(
                RuleError(path, f"rule {rule.name!r} is also defined in {seen[rule.name]}")
            )
            continue
        seen[rule.name] = path
        rules.append(rule)
    return RuleSet(tuple(rules), tuple(errors))


def _unbindable_extract(rule: Rule, params: Any) -> str | None:
    """A static check: ``{extract.N}``/``{extract.NAME}`` must name a group that exists."""
    compiled = [regex.compile(c.regex) for c in rule.when if c.regex is not None]
    max_group = max((p.groups for p in compiled), default=0)
    names = {n for p in compiled for n in p.groupindex}
    for text in _strings(params):
        for key in PLACEHOLDER.findall(text):
            head, _, tail = key.partition(".")
            if head != "extract" or not tail:
                continue
            if tail.isdigit() and int(tail) > max_group:
                return f"placeholder {{{key}}}: the rule's regexes have {max_group} group(s)"
            if not tail.isdigit() and tail not in names:
                return f"placeholder {{{key}}}: no regex has a group named {tail!r}"
    return None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _describe(error: Any) -> str:
    loc = ".".join(str(p) for p in error["loc"]) or "rule"
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"unknown key {str(error['loc'][-1])!r} in {'.'.join(map(str, error['loc'][:-1])) or 'rule'}"
    if kind == "missing":
        return f"missing required key {loc!r}"
    if kind == "too_short" and error["loc"] == ("when",):
        return "`when` is empty: a rule needs at least one fact"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{loc}: {message}"


def _line_map(node: yaml.Node | None) -> dict[tuple[Any, ...], int]:
    """Path in the YAML document → 1-based line where that key or item starts."""
    lines: dict[tuple[Any, ...], int] = {}

    def walk(current: yaml.Node, path: tuple[Any, ...]) -> None:
        if isinstance(current, yaml.MappingNode):
            for key_node, value_node in current.value:
                key_path = (*path, key_node.value)
                lines[key_path] = key_node.start_mark.line + 1
                walk(value_node, key_path)
        elif isinstance(current, yaml.SequenceNode):
            for i, item in enumerate(current.value):
                lines[(*path, i)] = item.start_mark.line + 1
                walk(item, (*path, i))

    if node is not None:
        walk(node, ())
    return lines


def _line_for(lines: dict[tuple[Any, ...], int], loc: tuple[Any, ...]) -> int | None:
    """The line of the deepest part of ``loc`` present in the document."""
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1
