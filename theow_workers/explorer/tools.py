"""Tools a deployment can give the explorer, each with the permissions it needs.

Default deny: a tool is offered only when every permission it declares is in
``THEOW_EXPLORE_PERMISSIONS`` (``fs-read``, ``fs-write``, ``shell``,
``network``). A deployment adds its own tools in a module named by
``THEOW_EXPLORE_TOOLS``::

    from theow_workers.explorer.tools import tool

    @tool(permissions=["network"])
    def package_versions(name: str) -> list[str]:
        '''Versions of a package on the internal index.

        Args:
            name: the package name.
        '''
        ...

Shipped: ``read_log`` (no permission: the failure's stored log) and a
workspace, a temporary directory that is removed after the session, with
``list_files``/``read_file`` (fs-read), ``write_file`` (fs-write),
``run_command`` (shell) and ``checkout`` (network: clones the failure's
``repo`` at ``commit`` when git is installed). Commands run inside bubblewrap
(:mod:`theow_workers.explorer.sandbox`), with the host's network only when
``network`` is granted; where no sandbox can start they are refused, never run
without one.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from theow_client.jsontypes import JsonObject
from theow_workers.core.llm.model import ToolError, tool_from_callable
from theow_workers.core.ports import Permission, Tool
from theow_workers.core.resolve.fingerprint import log_text
from theow_workers.explorer.sandbox import SandboxUnavailable, sandbox

_REGISTERED: list[Tool] = []
# A deployment tool's function, returned by ``tool`` as it was given.
ToolFunc = TypeVar("ToolFunc", bound=Callable[..., object])
OUTPUT_LIMIT = 16_000


def tool(
    permissions: Iterable[Permission | str] = (), name: str | None = None
) -> Callable[[ToolFunc], ToolFunc]:
    """Register a deployment tool; its type hints and docstring declare it to the LLM."""

    def register(func: ToolFunc) -> ToolFunc:
        _REGISTERED.append(tool_from_callable(func, name=name, permissions=permissions))
        return func

    return register


def deployment_tools(modules: Iterable[str]) -> list[Tool]:
    for module in modules:
        importlib.import_module(module)
    return list(_REGISTERED)


class Workspace:
    """A temporary directory for one session; every path stays inside it.

    ``permissions`` are the granted ones: commands reach the network only with
    ``network``. ``bwrap`` is the bubblewrap program (the ``explore_bwrap`` setting).
    """

    def __init__(
        self,
        facts: JsonObject,
        permissions: Iterable[Permission | str] = (),
        bwrap: str = "bwrap",
        command_timeout: float = 60.0,
    ) -> None:
        self.facts = facts
        self.network = Permission.NETWORK in set(permissions)  # a StrEnum: names match
        self.bwrap = bwrap
        self.command_timeout = command_timeout
        self.root = Path(tempfile.mkdtemp(prefix="theow-explore-"))

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _path(self, path: str) -> Path:
        target = (self.root / path).resolve()
        if not target.is_relative_to(self.root.resolve()):
            raise ToolError(f"{path!r} is outside the workspace")
        return target

    def list_files(self, path: str = ".") -> list[str]:
        """List files under a directory of the workspace.

        Args:
            path: directory relative to the workspace root.
        """
        base = self._path(path)
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file())[:500]

    def read_file(self, path: str) -> str:
        """Read a text file of the workspace (the first 16,000 characters).

        Args:
            path: file relative to the workspace root.
        """
        target = self._path(path)
        if not target.is_file():
            raise ToolError(f"no file {path!r} in the workspace")
        return target.read_text(errors="replace")[:OUTPUT_LIMIT]

    def write_file(self, path: str, content: str) -> str:
        """Write a text file in the workspace (never outside it).

        Args:
            path: file relative to the workspace root.
            content: the complete new content.
        """
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        return f"wrote {len(content)} characters to {path}"

    def run_command(self, command: list[str], timeout: int = 60) -> JsonObject:
        """Run a command in a sandbox: the workspace (/workspace) and system programs only.

        Args:
            command: program and arguments, e.g. ["go", "build", "./..."].
            timeout: seconds before the command is killed (at most the workspace limit).
        """
        limit = min(float(timeout), self.command_timeout)
        try:
            done = sandbox(self.bwrap, self.root, self.network).run(command, limit)
        except SandboxUnavailable as exc:
            raise ToolError(f"commands are not run without a sandbox: {exc}") from None
        except subprocess.TimeoutExpired:
            raise ToolError(f"command timed out after {limit:g}s; it was killed") from None
        return {
            "exit_code": done.returncode,
            "stdout": done.stdout[-OUTPUT_LIMIT:],
            "stderr": done.stderr[-OUTPUT_LIMIT:],
        }

    def checkout(self) -> str:
        """Clone the failure's repo at its commit into the workspace (needs git)."""
        repo, commit = self.facts.get("repo"), self.facts.get("commit")
        if not repo or shutil.which("git") is None:
            raise ToolError("no `repo` fact, or git is not installed")
        result = self.run_command(["git", "clone", "--quiet", str(repo), "src"], timeout=300)
        if result["exit_code"] == 0 and commit:
            result = self.run_command(["git", "-C", "src", "checkout", "--quiet", str(commit)])
        if result["exit_code"] != 0:
            raise ToolError(f"checkout failed: {result['stderr'][-2000:]}")
        return f"checked out {repo}{'@' + str(commit) if commit else ''} into src/"

    def tools(self) -> list[Tool]:
        return [
            tool_from_callable(self.list_files, permissions=[Permission.FS_READ]),
            tool_from_callable(self.read_file, permissions=[Permission.FS_READ]),
            tool_from_callable(self.write_file, permissions=[Permission.FS_WRITE]),
            tool_from_callable(self.run_command, permissions=[Permission.SHELL]),
            tool_from_callable(
                self.checkout, permissions=[Permission.NETWORK, Permission.FS_WRITE]
            ),
        ]


def read_log_tool(facts: JsonObject) -> Tool:
    text = log_text(facts)

    def read_log(start_line: int = 0, lines: int = 200) -> str:
        """Read lines of the failure's stored log.

        Args:
            start_line: first line (0-based; negative counts from the end).
            lines: how many lines, at most 500.
        """
        all_lines = text.splitlines()
        chunk = all_lines[start_line:][: max(1, min(lines, 500))]
        return "\n".join(chunk) or "(the log is empty)"

    return tool_from_callable(read_log)
