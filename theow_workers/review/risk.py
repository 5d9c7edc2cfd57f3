"""What a reviewer should look at twice in a proposal, found without running any of it.

Pure: texts in, flags out. Action code is read from its syntax tree after the
proposal's diff is applied, never grepped, so ``x = cfg or os.system("…")``
is found wherever the call hides; only lines the proposal adds or changes are
flagged, as a shipped action's own ``subprocess`` use is not the proposal's.
Invisible and bidirectional characters are shown as ``<U+202E>``, as GitHub
and GitLab mark them in diffs.

No flag does not mean safe (``NOT_A_VERDICT``): these checks catch the
obvious, and a determined author can write code that none of them sees.

>>> [f.kind for f in code_flags("actions/x.py", "", "import os\\nv = 1 or os.system('id')\\n")]
['import-time code', 'os.system']
"""

from __future__ import annotations

import ast
import difflib
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from theow_client.jsontypes import Json, JsonObject

NOT_A_VERDICT = (
    "No flag does not mean safe: these checks only catch the obvious. "
    "Read the rule and every changed line before approving."
)

# Callees worth a second look, by the dotted name they resolve to; a prefix ending in "."
# covers the whole module.
CALLS: dict[str, str] = {
    "subprocess.": "runs a program (subprocess)",
    "os.system": "runs a shell command",
    "os.popen": "runs a shell command",
    "os.exec*": "replaces the process with a program",
    "os.spawn*": "runs a program",
    "os.posix_spawn*": "runs a program",
    "pty.": "runs a program",
    "eval": "evaluates text as code",
    "exec": "executes text as code",
    "compile": "compiles text as code",
    "__import__": "imports a module by name",
    "importlib.": "imports a module by name",
    "socket.": "opens a network connection",
    "urllib.": "reaches the network",
    "http.client.": "reaches the network",
    "requests.": "reaches the network",
    "httpx.": "reaches the network",
    "ftplib.": "reaches the network",
    "smtplib.": "reaches the network",
}
BIDI = {*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C}
ZERO_WIDTH = {0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x00AD, 0x180E}
# Text addressed to the model rather than to a person reading a build log.
INJECTION = re.compile(
    r"ignore (?:all |any )?(?:the )?(?:previous|prior|above|earlier) (?:instructions|prompts?|rules)"
    r"|disregard (?:all |any )?(?:the )?(?:previous|prior|above|earlier)"
    r"|forget (?:all |your )?(?:previous |prior )?instructions"
    r"|you are now\b|system prompt|new instructions\s*:|developer mode"
    r"|do not (?:tell|inform|alert) the (?:user|reviewer|human)"
    r"|<\|im_start\|>|\[/?INST\]|</?system>",
    re.IGNORECASE,
)
URL = re.compile(
    r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>{}]+"  # scheme://…
    r"|\b[\w.-]+@[\w-]+(?:\.[\w-]+)+:[\w./~-]+"  # git@host:owner/repo
    r"|\b(?:[a-z0-9-]+\.)+[a-z]{2,}/[\w.~/-]+",  # host.tld/owner/repo
    re.IGNORECASE,
)
_ALLOWED_DECORATED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Flag:
    kind: str  # what was found, e.g. "os.system", "client-side action", "bidi character"
    where: str  # "actions/x.py:12", "rule line 3", "stderr line 40"
    detail: str  # one line for the reviewer, with hidden characters made visible

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.kind} at {self.where}: {self.detail}"


@dataclass(frozen=True)
class ActionFile:
    """One action file the proposal writes: its path and content before and after."""

    path: str
    before: str
    after: str


def assess(
    rule_yaml: str,
    rule_actions: Sequence[tuple[str, JsonObject]],
    files: Sequence[ActionFile],
    facts: Mapping[str, Json],
    client_side: Iterable[str],
    known_text: str,
) -> list[Flag]:
    """Every flag of a proposal.

    ``rule_actions``: the rule's ``then`` steps (action, params); ``client_side``:
    the existing actions that run on build agents; ``known_text``: the shipped
    rules' text, where a URL already reviewed appears.
    """
    flags = hidden_characters("rule", rule_yaml)
    for file in files:
        flags += hidden_characters(file.path, file.after, changed_lines(file.before, file.after))
        flags += code_flags(file.path, file.before, file.after)
    flags += rule_flags(rule_actions, files, facts, frozenset(client_side), known_text)
    flags += injection_flags(facts)
    return flags


def visible(text: str) -> str:
    """``text`` with each invisible, bidirectional or control character as ``<U+XXXX>``."""
    return "".join(f"<U+{ord(c):04X}>" if _hidden(c) else c for c in text)


def _hidden(char: str) -> bool:
    code = ord(char)
    if code in BIDI or code in ZERO_WIDTH:
        return True
    return char not in "\n\t" and unicodedata.category(char) in ("Cc", "Cf", "Co", "Zl", "Zp")


def hidden_characters(where: str, text: str, lines: set[int] | None = None) -> list[Flag]:
    """A flag per line with bidi, invisible or other non-ASCII characters (``lines``: only those)."""
    flags: list[Flag] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.isascii() or (lines is not None and number not in lines):
            continue
        odd = sorted({c for c in line if not c.isascii()})
        hidden = [c for c in odd if _hidden(c)]
        bidi = any(ord(c) in BIDI for c in hidden)
        kind = "bidi character" if bidi else "invisible character" if hidden else "non-ASCII"
        names = ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, '?')}" for c in odd[:4])
        flags.append(Flag(kind, _at(where, number), f"{names}: {visible(line.strip())[:160]}"))
    return flags


def changed_lines(before: str, after: str) -> set[int]:
    """1-based numbers of the lines of ``after`` that are not in ``before``."""
    old, new = before.splitlines(), after.splitlines()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    changed: set[int] = set()
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            changed.update(range(j1 + 1, j2 + 1))
    return changed


def code_flags(path: str, before: str, after: str) -> list[Flag]:
    """Risky calls, import-time code and new client-side actions in the changed lines."""
    try:
        tree = ast.parse(after, path)
    except SyntaxError as exc:
        return [Flag("does not parse", _at(path, exc.lineno or 0), str(exc.msg))]
    changed = changed_lines(before, after)

    def new(node: ast.AST) -> bool:
        first = getattr(node, "lineno", 0)
        last = getattr(node, "end_lineno", None) or first
        return any(n in changed for n in range(first, last + 1))

    aliases = _aliases(tree)
    flags: list[Flag] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name | ast.Attribute) and new(node):
            dotted = _dotted(node, aliases)
            risk = _risk_of(dotted) if dotted else None
            if risk and not isinstance(getattr(node, "ctx", None), ast.Store):
                flags.append(
                    Flag(dotted or "", _at(path, node.lineno), f"{risk}: {_line(after, node)}")
                )
        elif isinstance(node, ast.keyword) and node.arg == "shell" and new(node) and _truthy(node):
            flags.append(Flag("shell=True", _at(path, node.lineno), _line(after, node)))
    flags = _outermost(flags)
    flags += [
        f for f in _import_time(path, tree, after) if f.where in {_at(path, n) for n in changed}
    ]
    old_actions = actions_in(before)
    for name, (client, line, source) in actions_in(after).items():
        if client and old_actions.get(name, (False, 0, ""))[2] != source:
            what = "new" if name not in old_actions else "changed"
            detail = f"{what} action {name!r} runs on the build agents, beside the build's checkout and its credentials"
            flags.append(Flag("client-side action", _at(path, line), detail))
    return sorted(flags, key=lambda f: (int(f.where.rsplit(":", 1)[-1]), f.kind))


def _truthy(keyword: ast.keyword) -> bool:
    """``shell=True`` or anything not plainly false (``shell=flag`` counts)."""
    return not (isinstance(keyword.value, ast.Constant) and not keyword.value.value)


def _at(where: str, line: int) -> str:
    return f"{where}:{line}" if where != "rule" else f"rule line {line}"


def _line(text: str, node: ast.AST) -> str:
    lines = text.splitlines()
    number = getattr(node, "lineno", 1)
    return visible(lines[number - 1].strip())[:160] if 0 < number <= len(lines) else ""


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name → the dotted name it was imported as (``import os as o``: o → os)."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                found[a.asname or a.name.split(".")[0]] = (
                    a.name if a.asname else a.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                found[a.asname or a.name] = f"{node.module}.{a.name}"
    return found


def _dotted(node: ast.AST, aliases: Mapping[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Call) and _callee(node) in ("__import__", "import_module"):
        module = node.args[0] if node.args else None  # __import__("os").system
        if isinstance(module, ast.Constant) and isinstance(module.value, str):
            return ".".join([module.value, *reversed(parts)])
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def _risk_of(dotted: str) -> str | None:
    for name, risk in CALLS.items():
        if name.endswith("*") and dotted.startswith(name[:-1]):
            return risk
        if name.endswith(".") and (dotted == name[:-1] or dotted.startswith(name)):
            return risk  # the module itself counts: it can be passed around as a value
        if dotted == name:
            return risk
    return None


def _outermost(flags: list[Flag]) -> list[Flag]:
    """One flag per name and line: ``os.system`` is not flagged again as ``os``."""
    seen: dict[tuple[str, str], Flag] = {}
    for flag in flags:
        key = (flag.where, flag.detail)
        kept = seen.get(key)
        if kept is None or len(flag.kind) > len(kept.kind):
            seen[key] = flag
    return list(seen.values())


def _import_time(path: str, tree: ast.Module, text: str) -> list[Flag]:
    """Module-level statements that do something when the file is imported."""
    flags: list[Flag] = []
    for statement in tree.body:
        if _inert(statement):
            continue
        flags.append(
            Flag(
                "import-time code",
                _at(path, statement.lineno),
                f"runs when the file is loaded: {_line(text, statement)}",
            )
        )
    return flags


def _inert(statement: ast.stmt) -> bool:
    """Definitions, imports, docstrings and constants: nothing runs but decorators."""
    if isinstance(statement, ast.Import | ast.ImportFrom | ast.Pass):
        return True
    if isinstance(statement, _ALLOWED_DECORATED):
        defaults = (
            [*statement.args.defaults, *statement.args.kw_defaults]
            if not isinstance(statement, ast.ClassDef)
            else [*statement.bases, *statement.keywords]
        )
        return not any(isinstance(n, ast.Call) for d in defaults if d for n in ast.walk(d))
    if isinstance(statement, ast.Assign | ast.AnnAssign | ast.Expr):
        value = statement.value
        return value is None or not any(isinstance(n, ast.Call) for n in ast.walk(value))
    if isinstance(statement, ast.If | ast.Try):
        branches = [*statement.body, *statement.orelse]
        if isinstance(statement, ast.Try):
            branches += [s for h in statement.handlers for s in h.body] + statement.finalbody
        test = statement.test if isinstance(statement, ast.If) else None
        calls = test is not None and any(isinstance(n, ast.Call) for n in ast.walk(test))
        return not calls and all(_inert(s) for s in branches)
    return False


def actions_in(text: str) -> dict[str, tuple[bool, int, str]]:
    """Action name → (client side, line, source) for each ``@action(...)`` function in ``text``."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    found: dict[str, tuple[bool, int, str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            if not (isinstance(decorator, ast.Call) and _callee(decorator) == "action"):
                continue
            name = decorator.args[0] if decorator.args else None
            client = any(k.arg == "client_side" and _truthy(k) for k in decorator.keywords)
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                found[name.value] = (client, node.lineno, ast.get_source_segment(text, node) or "")
    return found


def _callee(call: ast.Call) -> str:
    func = call.func
    return (
        func.attr
        if isinstance(func, ast.Attribute)
        else func.id
        if isinstance(func, ast.Name)
        else ""
    )


def rule_flags(
    steps: Sequence[tuple[str, JsonObject]],
    files: Sequence[ActionFile],
    facts: Mapping[str, Json],
    client_side: frozenset[str],
    known_text: str,
) -> list[Flag]:
    """Existing client-side actions the rule calls, and URLs its params point them at."""
    proposed = {name for f in files for name in actions_in(f.after)}
    log = "\n".join(v for v in facts.values() if isinstance(v, str))
    flags: list[Flag] = []
    for action, params in steps:
        if action in client_side and action not in proposed:
            flags.append(
                Flag(
                    "client-side action",
                    f"rule: {action}",
                    f"the rule runs the existing action {action!r} on the build agents",
                )
            )
        for url in sorted({u.rstrip(".,;:)") for u in URL.findall(_strings(params))}):
            if url in known_text:
                continue
            origin = (
                " (it appears in the failure's log, which the build's author controls)"
                if url in log
                else ""
            )
            flags.append(
                Flag(
                    "new URL",
                    f"rule: {action}",
                    f"points action {action!r} at {visible(url)}, found in no shipped rule{origin}",
                )
            )
    return flags


def _strings(value: object) -> str:
    if isinstance(value, Mapping):
        return "\n".join(f"{k}\n{_strings(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return "\n".join(_strings(v) for v in value)
    return str(value)


def injection_flags(facts: Mapping[str, Json], limit: int = 5) -> list[Flag]:
    """Lines of the failure's facts that talk to the model, first ``limit`` of them."""
    flags: list[Flag] = []
    for fact, value in facts.items():
        if not isinstance(value, str):
            continue
        for number, line in enumerate(value.splitlines(), 1):
            found = INJECTION.search(line)
            if found and len(flags) < limit:
                flags.append(
                    Flag(
                        "injection phrase",
                        f"{fact} line {number}",
                        f"{found.group(0)!r} in the log: the model may have been steered: "
                        f"{visible(line.strip())[:160]}",
                    )
                )
    return flags
