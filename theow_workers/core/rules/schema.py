"""The rule model and its YAML schema.

A rule is a production rule: when every fact in ``when`` holds, the actions in
``then`` run in order. One file per rule, ``rules/<name>.rule.yaml``. Rule
files written for the single-process Theow library load unchanged.

Schema errors are loud and precise: each RuleError names the file, the line
and what is wrong, at load time and in ``theow rules check``.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import regex
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from theow_client.jsontypes import Json, JsonObject
from theow_workers.core.actions import CONTEXT_PARAMS
from theow_workers.core.rules.operators import BY_COST, OPERATORS, Operand, Operator, Scalar
from theow_workers.core.rules.operators import REGEX_FLAGS as REGEX_FLAGS  # long read from here
from theow_workers.core.rules.operators import as_text as as_text  # long read from here

RULE_SUFFIX = ".rule.yaml"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
MATCH_OPERATORS = tuple(OPERATORS)
Location = tuple[str | int, ...]  # a path in a YAML document: keys and list indexes
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)?)\}")


class Mode(StrEnum):
    FIX = "fix"  # run the actions
    RETRY = "retry"  # transient: tell the client to run the step again
    TRACK = "track"  # known cause, nothing to run, the failure stands


class NoAliasLoader(yaml.SafeLoader):
    """YAML without anchors and aliases: a rule never needs them, and a few hundred
    bytes of nested aliases (a "billion laughs") expand to gigabytes. Refused while
    composing, before anything is expanded."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            what = (
                f"aliases (*{anchor})"
                if isinstance(event, yaml.AliasEvent)
                else f"anchors (&{anchor})"
            )
            mark = event.start_mark if isinstance(event.start_mark, yaml.Mark) else None
            raise yaml.composer.ComposerError(None, None, f"YAML {what} are not allowed", mark)
        return super().compose_node(parent, index)


def load_yaml(text: str) -> tuple[yaml.Node | None, Json]:
    """The document's node tree (for line numbers) and its value, parsed once.

    Raises yaml.YAMLError, aliases and anchors included (see NoAliasLoader).
    """
    loader = NoAliasLoader(text)
    try:
        node = loader.get_single_node()
        return node, loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


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


class _Condition(_Strict):
    """One condition of ``when``: several operators on one fact are ANDed.

    A condition with no operator holds when the fact is present (the library
    spec's behaviour). ``examples`` must match the condition and
    ``counter_examples`` (lines that look alike but are another thing) must
    not; ``theow rules check`` holds every rule to both.

    The operator fields come from ``core.rules.operators.OPERATORS`` (see FactCondition).
    """

    def operators(self) -> list[str]:
        """The operators this condition states, in table order (an explicit null included)."""
        return [op for op in MATCH_OPERATORS if op in self.model_fields_set]

    def operand(self, op: str) -> Operand:
        operand: Operand = getattr(self, op)
        return operand

    def active(self) -> tuple[tuple[Operator, Operand], ...]:
        """The operators that take part in matching, cheapest first, with their operands.

        An explicit null is as if the key were absent, but for ``equals``/``not_equals``
        (it compares with the text "null"). Worked out once per condition: the matcher asks often.
        """
        return self._active

    @cached_property
    def cost(self) -> int:
        """What checking the condition costs: its costliest operator's ``Cost``."""
        return max((op.cost for op, _ in self._active), default=0)

    @cached_property
    def _active(self) -> tuple[tuple[Operator, Operand], ...]:
        given, operands = self.model_fields_set, self.__dict__
        return tuple(
            (op, operands[op.name])
            for op in BY_COST
            if operands[op.name] is not None or (op.null_is_value and op.name in given)
        )


def _compiles(cls: type[BaseModel], pattern: str | None) -> str | None:
    if pattern is not None:
        try:
            regex.compile(pattern, REGEX_FLAGS)
        except regex.error as exc:
            raise ValueError(f"regex does not compile: {exc}") from exc
    return pattern


def _condition_model() -> type[_Condition]:
    """FactCondition's fields in the order rule files write them: fact, the operators, examples."""
    fields: dict[str, tuple[object, object]] = {"fact": (str, Field(min_length=1))}
    fields |= {op.name: (op.annotation, None) for op in OPERATORS.values()}
    fields["examples"] = (list[str], Field(default_factory=list))
    fields["counter_examples"] = (list[str], Field(default_factory=list))
    patterns = [op.name for op in OPERATORS.values() if op.pattern]
    return create_model(  # type: ignore[call-overload, no-any-return]
        "FactCondition",
        __base__=_Condition,
        __module__=__name__,
        __doc__=_Condition.__doc__,
        __validators__={"_compiles": field_validator(*patterns)(_compiles)},
        **fields,
    )


if TYPE_CHECKING:  # the operands other modules read by name, as mypy sees them

    class FactCondition(_Condition):
        fact: str
        equals: Scalar | None = None
        contains: str | None = None
        regex: str | None = None
        one_of: list[Scalar] | None = None
        not_equals: Scalar | None = None
        not_contains: str | None = None
        not_regex: str | None = None
        examples: list[str] = Field(default_factory=list)
        counter_examples: list[str] = Field(default_factory=list)

else:
    FactCondition = _condition_model()


class ActionStep(_Strict):
    action: str = Field(min_length=1)
    params: JsonObject = Field(default_factory=dict)


PROMPT_SCHEME = "file://"


def prompt_path(template: str) -> Path | None:
    """The relative path a ``file://`` prompt template names, None for an inline prompt.

    A prompt file lies in a rule directory or the ``prompts/`` folder beside it;
    an absolute path (``file:///proc/self/environ``) or ``..`` would send any file
    the worker can read to the model, so both raise ValueError.
    """
    if not template.startswith(PROMPT_SCHEME):
        return None
    relative = template.removeprefix(PROMPT_SCHEME)
    path = Path(relative)
    if not relative or path.is_absolute() or relative.startswith(("/", "\\")) or ".." in path.parts:
        raise ValueError(
            f"prompt template {template!r} must name a file in the rules directory or the"
            " prompts/ folder beside it (file://prompts/NAME.md): no absolute path, no '..'"
        )
    return path


class LLMConfig(_Strict):
    prompt_template: str
    tools: list[str] = Field(default_factory=list)
    constraints: JsonObject = Field(default_factory=dict)
    use_secondary: bool = False

    @field_validator("prompt_template")
    @classmethod
    def _confined(cls, template: str) -> str:
        prompt_path(template)
        return template


class Rule(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    mode: Mode = Mode.FIX
    # A wrapper message true of most failed logs ("BUILD FAILED", "exit code 1"):
    # it wins only when no specific rule validated.
    generic: bool = False
    # Rules this one is meant to win over when both apply to a log (its evidence
    # ranks above theirs): ``theow rules check`` then accepts it winning their examples.
    supersedes: list[str] = Field(default_factory=list)
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

    @field_validator("supersedes")
    @classmethod
    def _are_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.match(NAME_PATTERN, name):
                raise ValueError(f"{name!r} is not a rule name")
        return names

    @model_validator(mode="after")
    def _supersedes_others(self) -> Rule:
        if self.name in self.supersedes:
            raise ValueError("a rule cannot supersede itself")
        return self

    @property
    def type(self) -> str:
        return "probabilistic" if self.llm_config else "deterministic"

    def equals_facts(self) -> dict[str, str]:
        """Facts this rule pins to one value: scalar filter fields in the index."""
        return {
            c.fact: as_text(operand) for c in self.when for op, operand in c.active() if op.pins
        }

    def embedding_text(self) -> str:
        """Description plus every fact example: what semantic search sees of a rule."""
        examples = [e.strip() for c in self.when for e in c.examples]
        return " ||| ".join([self.description.strip(), *examples])

    def canonical(self) -> str:
        return self.canonical_text

    @functools.cached_property
    def canonical_text(self) -> str:
        """The rule as sorted JSON, made once: the rules version and the index key hash it."""
        return json.dumps(self.model_dump(mode="json", exclude_unset=True), sort_keys=True)

    def content_hash(self, model_name: str) -> str:
        """Changes when the rule or the embedding model changes: the index key."""
        return hashlib.sha256(f"{model_name}\n{self.canonical()}".encode()).hexdigest()

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json", exclude_unset=True)
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


@dataclass(frozen=True)
class Origin:
    """Where a loaded rule comes from: its file, its layer, and the layers it replaces there."""

    file: Path
    layer: Path
    overrides: tuple[Path, ...] = ()


@dataclass(frozen=True)
class RuleSet:
    """Every rule of the rule directories, and their problems, loaded in one pass."""

    rules: tuple[Rule, ...]
    errors: tuple[RuleError, ...]
    origins: Mapping[str, Origin] = field(default_factory=dict)  # rule name -> where from

    @property
    def version(self) -> str:
        digest = hashlib.sha256()
        for rule in sorted(self.rules, key=lambda r: r.name):
            digest.update(rule.canonical().encode())
        return digest.hexdigest()[:16]

    def by_name(self) -> dict[str, Rule]:
        return {r.name: r for r in self.rules}


def parse_rule(
    text: str,
    path: str | Path = "<rule>",
    *,
    known_actions: frozenset[str] | None = None,
    signatures: Mapping[str, inspect.Signature] | None = None,
) -> Rule:
    """Parse one rule from YAML text; raise its first RuleError (file and line)."""
    rule, problems = rule_problems(text, path, known_actions=known_actions, signatures=signatures)
    if problems:
        raise problems[0]
    assert rule is not None
    return rule


def rule_problems(
    text: str,
    path: str | Path = "<rule>",
    *,
    known_actions: frozenset[str] | None = None,
    signatures: Mapping[str, inspect.Signature] | None = None,
) -> tuple[Rule | None, list[RuleError]]:
    """The rule in ``text`` and every problem with it, in file order.

    With ``signatures`` (action name → its function's signature) each step's
    params are bound as the action will be called: a missing required argument
    or an unknown one is a problem now rather than a failed attempt later.
    A document nested too deeply to read (``[[[[…]]]]``) is a problem too, not a crash.
    """
    try:
        return _rule_problems(text, path, known_actions, signatures)
    except RecursionError:  # the YAML reader, the line map and the schema all recurse
        return None, [RuleError(path, "invalid YAML: nested too deeply to be a rule", 1)]


def _rule_problems(
    text: str,
    path: str | Path,
    known_actions: frozenset[str] | None,
    signatures: Mapping[str, inspect.Signature] | None,
) -> tuple[Rule | None, list[RuleError]]:
    try:
        node, data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        return None, [RuleError(path, f"invalid YAML: {problem}", line)]
    if not isinstance(data, dict):
        return None, [RuleError(path, "a rule file must be a YAML mapping", 1)]
    lines = _line_map(node)
    # Checks that need only the raw document run even when the schema fails,
    # so one pass over a file reports all of its problems.
    problems = _name_and_action_problems(data, path, lines, known_actions)
    try:
        rule = Rule.model_validate(data)
    except ValidationError as exc:
        problems += [
            RuleError(path, _describe(e), _line_for(lines, tuple(e["loc"]))) for e in exc.errors()
        ]
        return None, sorted(problems, key=lambda p: p.line or 0)

    for i, step in enumerate(rule.then):
        params_line = lines.get(("then", i, "params")) or lines.get(("then", i, "action"))
        problem = _unbindable_extract(rule, step.params)
        if problem:
            problems.append(RuleError(path, problem, params_line))
        signature = (signatures or {}).get(step.action)
        if signature is not None:
            problems.extend(
                RuleError(path, p, params_line) for p in param_problems(step, signature)
            )
    return rule, sorted(problems, key=lambda p: p.line or 0)


def _name_and_action_problems(
    data: JsonObject,
    path: str | Path,
    lines: dict[Location, int],
    known_actions: frozenset[str] | None,
) -> list[RuleError]:
    problems = []
    name = data.get("name")
    if isinstance(name, str) and (isinstance(path, Path) or path != "<rule>"):
        stem = Path(path).name.removesuffix(RULE_SUFFIX)
        if stem != name:
            problems.append(
                RuleError(
                    path, f"name {name!r} differs from file name {stem!r}", lines.get(("name",))
                )
            )
    steps = data.get("then")
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        action = step.get("action") if isinstance(step, dict) else None
        if known_actions is not None and isinstance(action, str) and action not in known_actions:
            problems.append(
                RuleError(path, f"unknown action {action!r}", lines.get(("then", i, "action")))
            )
    return problems


def param_problems(step: ActionStep, signature: inspect.Signature) -> list[str]:
    """Bind a step's params to its action's signature as ``call_action`` will.

    ``facts`` and ``workspace`` are filled in at run time, never by a rule.

    >>> def go_mod_replace(workspace: str, old_path: str, version: str) -> None: ...
    >>> param_problems(
    ...     ActionStep(action="go_mod_replace", params={"old_path": "a", "job": "b"}),
    ...     inspect.signature(go_mod_replace),
    ... )
    ["action 'go_mod_replace' is missing a required argument: 'version'", "action 'go_mod_replace' takes no argument 'job'"]
    """
    problems = []
    accepted = signature.parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in accepted.values())
    for name, param in accepted.items():
        if name in CONTEXT_PARAMS or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.default is param.empty and name not in step.params:
            problems.append(f"action {step.action!r} is missing a required argument: {name!r}")
    if not takes_any:
        for name in step.params:
            if name not in accepted or name in CONTEXT_PARAMS:
                problems.append(f"action {step.action!r} takes no argument {name!r}")
    return problems


def load_rule(
    path: Path,
    *,
    known_actions: frozenset[str] | None = None,
    signatures: Mapping[str, inspect.Signature] | None = None,
) -> Rule:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(path, f"cannot read: {exc}") from exc
    return parse_rule(text, path, known_actions=known_actions, signatures=signatures)


def load_rules(
    directories: str | Path | Sequence[Path],
    *,
    known_actions: frozenset[str] | None = None,
    signatures: Mapping[str, inspect.Signature] | None = None,
) -> RuleSet:
    """Load every ``*.rule.yaml`` under each directory; every problem goes to ``errors``.

    Several directories are layers, earliest first: a rule of a later layer
    replaces the rule of the same name of an earlier one. Within one layer a
    name defined twice is an error.
    """
    layers = [Path(directories)] if isinstance(directories, str | Path) else list(directories)
    by_name: dict[str, tuple[Rule, Origin]] = {}
    errors: list[RuleError] = []
    for layer in layers:
        found = _load_layer(layer, known_actions, signatures, errors)
        for name, (rule, path) in found.items():
            replaced = by_name.pop(name, None)
            overrides = (*replaced[1].overrides, replaced[1].layer) if replaced else ()
            by_name[name] = (rule, Origin(path, layer, overrides))
    return RuleSet(
        tuple(rule for rule, _ in by_name.values()),
        tuple(errors),
        {name: origin for name, (_, origin) in by_name.items()},
    )


def _load_layer(
    root: Path,
    known_actions: frozenset[str] | None,
    signatures: Mapping[str, inspect.Signature] | None,
    errors: list[RuleError],
) -> dict[str, tuple[Rule, Path]]:
    """The valid rules of one directory by name; its problems are appended to ``errors``."""
    if not root.is_dir():
        errors.append(
            RuleError(
                root,
                "rules directory does not exist (THEOW_RULES_DIRS layers directories over the "
                "shipped rules, THEOW_RULES_DIR names the only one; installed without a "
                "checkout, the shipped rules are ./rules)",
            )
        )
        return {}
    found: dict[str, tuple[Rule, Path]] = {}
    # What a file's parse depends on beside its text and path: the actions it is checked against.
    checked_against = (
        known_actions,
        tuple(sorted((k, str(v)) for k, v in signatures.items())) if signatures else None,
    )
    for path in sorted(root.rglob(f"*{RULE_SUFFIX}")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(RuleError(path, f"cannot read: {exc}"))
            continue
        rule, problems = _parsed(text, path, known_actions, signatures, checked_against)
        if problems or rule is None:
            errors.extend(problems)
            continue
        if rule.name in found:
            errors.append(
                RuleError(path, f"rule {rule.name!r} is also defined in {found[rule.name][1]}")
            )
            continue
        found[rule.name] = (rule, path)
    return found


_Parsed = tuple[Rule | None, list[RuleError]]
_PARSED: OrderedDict[tuple[object, ...], _Parsed] = OrderedDict()
PARSED_CACHE_SIZE = 20_000  # rule files a process keeps parsed: a reload parses only changes


def _parsed(
    text: str,
    path: Path,
    known_actions: frozenset[str] | None,
    signatures: Mapping[str, inspect.Signature] | None,
    checked_against: tuple[object, ...],
) -> _Parsed:
    """``rule_problems`` of a file, remembered by its text, path and the actions it is checked
    against: reloading a library of thousands of rules after one changed parses that one."""
    key = (text, str(path), checked_against)
    found = _PARSED.get(key)
    if found is None:
        found = rule_problems(text, path, known_actions=known_actions, signatures=signatures)
        _PARSED[key] = found
        if len(_PARSED) > PARSED_CACHE_SIZE:
            _PARSED.popitem(last=False)
    else:
        _PARSED.move_to_end(key)
    return found[0], list(found[1])


def _unbindable_extract(rule: Rule, params: JsonObject) -> str | None:
    """A static check: ``{extract.N}``/``{extract.NAME}`` must name a group that exists."""
    compiled = [
        regex.compile(_pattern(operand), REGEX_FLAGS)
        for c in rule.when
        for op, operand in c.active()
        if op.captures
    ]
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


def _pattern(operand: Operand) -> str:
    assert isinstance(operand, str)  # the schema types a regex operand as text
    return operand


def _strings(value: Json) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _describe(error: ErrorDetails) -> str:
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


def _line_map(node: yaml.Node | None) -> dict[Location, int]:
    """Path in the YAML document → 1-based line where that key or item starts."""
    lines: dict[Location, int] = {}

    def walk(current: yaml.Node, path: Location) -> None:
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


def _line_for(lines: dict[Location, int], loc: Location) -> int | None:
    """The line of the deepest part of ``loc`` present in the document."""
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1
