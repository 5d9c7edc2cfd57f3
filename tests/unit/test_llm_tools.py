"""Tools declared from plain typed, documented callables (core.llm)."""

from __future__ import annotations

from typing import Literal

import pytest

from theow_workers.core.llm.model import (
    Budget,
    ToolError,
    call_tool,
    offered,
    split_model,
    tool_from_callable,
)
from theow_workers.core.ports import Permission


def search_logs(
    pattern: str,
    max_hits: int = 20,
    ratio: float | None = None,
    case: bool = False,
    paths: list[str] | None = None,
    options: dict[str, str] | None = None,
    mode: Literal["head", "tail"] = "tail",
) -> list[str]:
    """Search the failure's log for a pattern.

    Returns matching lines, newest first.

    Args:
        pattern: a regular expression,
            matched line by line.
        max_hits (int): how many lines at most.
        ratio: unused.
        case: match case.
        paths: only these log files.
        options: extra flags.
        mode: which end of the log to read.
    """
    return [pattern][:max_hits]


def test_type_hints_become_a_json_schema_and_defaults_make_parameters_optional() -> None:
    tool = tool_from_callable(search_logs)

    props = tool.parameters["properties"]
    assert tool.parameters["type"] == "object"
    assert tool.parameters["required"] == ["pattern"]
    assert {name: p["type"] for name, p in props.items()} == {
        "pattern": "string",
        "max_hits": "integer",
        "ratio": "number",
        "case": "boolean",
        "paths": "array",
        "options": "object",
        "mode": "string",
    }
    assert props["paths"]["items"] == {"type": "string"}
    assert props["mode"]["enum"] == ["head", "tail"]


def test_the_docstring_gives_the_description_and_each_parameters_meaning() -> None:
    tool = tool_from_callable(search_logs)

    props = tool.parameters["properties"]
    assert tool.description == (
        "Search the failure's log for a pattern. Returns matching lines, newest first."
    )
    assert props["pattern"]["description"] == "a regular expression, matched line by line."
    assert props["max_hits"]["description"] == "how many lines at most."
    assert props["mode"]["description"] == "which end of the log to read."


def test_declaration_is_what_the_model_reads() -> None:
    tool = tool_from_callable(search_logs, name="grep_log", permissions=["fs-read"])

    assert tool.declaration() == {
        "name": "grep_log",
        "description": tool.description,
        "parameters": tool.parameters,
    }
    assert tool.permissions == frozenset({Permission.FS_READ})


def test_a_tool_without_a_docstring_is_refused() -> None:
    def silent(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="'silent' needs a docstring"):
        tool_from_callable(silent)


def test_a_parameter_without_a_type_hint_is_refused() -> None:
    def loose(x):  # type: ignore[no-untyped-def]
        """Do something."""

    with pytest.raises(TypeError, match="parameter 'x' has no type hint"):
        tool_from_callable(loose)


def test_a_parameter_type_json_cannot_carry_is_refused() -> None:
    def odd(when: complex) -> None:
        """Do something."""

    with pytest.raises(TypeError, match="cannot declare a tool parameter of type"):
        tool_from_callable(odd)


def test_wrong_arguments_from_the_model_are_a_tool_error() -> None:
    tool = tool_from_callable(search_logs)

    assert call_tool(tool, {"pattern": "x", "max_hits": 1}) == ["x"]
    with pytest.raises(ToolError, match="bad arguments for search_logs"):
        call_tool(tool, {"pattern": "x", "limit": 3})
    with pytest.raises(ToolError, match="bad arguments for search_logs"):
        call_tool(tool, {})


def test_only_tools_whose_every_permission_was_granted_are_offered() -> None:
    def read(path: str) -> str:
        """Read a file."""
        return path

    def patch(path: str) -> str:
        """Change a file."""
        return path

    def plain() -> str:
        """Needs nothing."""
        return ""

    tools = [
        tool_from_callable(read, permissions=[Permission.FS_READ]),
        tool_from_callable(patch, permissions=[Permission.FS_READ, Permission.FS_WRITE]),
        tool_from_callable(plain),
    ]

    assert [t.name for t in offered(tools, [])] == ["plain"]
    assert [t.name for t in offered(tools, ["fs-read"])] == ["read", "plain"]
    assert [t.name for t in offered(tools, ["fs-read", "fs-write"])] == ["read", "patch", "plain"]
    with pytest.raises(ValueError):
        offered(tools, ["root"])


def test_model_names_are_provider_slash_model() -> None:
    assert split_model("gemini/gemini-2.5-flash") == ("gemini", "gemini-2.5-flash")
    for bad in ("gemini-2.5-flash", "gemini/", "/gemini-2.5-flash"):
        with pytest.raises(ValueError, match="provider/model"):
            split_model(bad)


def test_a_rules_constraints_narrow_the_budget() -> None:
    budget = Budget.from_constraints({"max_tool_calls": "5"}, Budget(max_tokens=1000))

    assert (budget.max_tool_calls, budget.max_tokens) == (5, 1000)
