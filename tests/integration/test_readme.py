"""The README's examples, run as written against the embedded stack.

Every ``console``, ``bash``, ``python``, ``yaml`` and ``json`` block of
README.md carries a directive in an HTML comment on the line before it:

``<!-- readme-test: run -->``
    Run it. A ``console``/``bash`` block's ``$`` lines are shell commands, run
    in order in one scratch directory (a copy of ``rules/``, ``actions/`` and
    ``examples/``); each must exit 0, or as ``exit=0,3,…`` says, one code per
    command. A ``python`` block runs in a fresh interpreter there.
``<!-- readme-test: run output -->``
    Also: every line the block shows after a command must appear in that
    command's output (``…`` stands for anything).
``<!-- readme-test: file PATH -->``
    Write the block to PATH in the scratch directory, for later blocks to use.
``<!-- readme-test: skip REASON -->``
    Not run, and the reason says why (Docker, a Gemini key, runs until Ctrl-C).

A block without a directive fails the first test: an example nobody runs is an
example that drifts. The stack is the integration tests' own: Valkey, a Milvus
Lite server, SQLite in the scratch home, a resolver and a replay worker.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from theow_client.names import QUEUE_EXPLORE

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CHECKED = {"console", "bash", "sh", "shell", "python", "yaml", "json"}
DIRECTIVE = re.compile(r"<!--\s*readme-test:\s*(run|file|skip)\b\s*(.*?)\s*-->")
COMMAND_TIMEOUT = 120


@dataclass
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    action: str | None = None  # run | file | skip
    argument: str = ""

    def where(self) -> str:
        return f"README.md:{self.line} ({self.lang})"


def blocks(text: str) -> list[Block]:
    """Fenced blocks in order, each with the directive just before it (blank lines allowed)."""
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(```+)\s*(\S*)", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1)))
        block = Block(i + 1, fence.group(2).lower(), "\n".join(lines[i + 1 : end]) + "\n")
        before = i - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        directive = DIRECTIVE.search(lines[before]) if before >= 0 else None
        if directive:
            block.action, block.argument = directive.group(1), directive.group(2)
        found.append(block)
        i = end + 1
    return found


def commands(block: Block) -> list[tuple[str, list[str]]]:
    """``$`` commands with the output lines the README shows after each."""
    result: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            result.append((line[2:], []))
        elif result and line.strip():
            result[-1][1].append(line.strip())
    return result


def shows(output: str, expected: str) -> bool:
    """``expected`` appears in ``output``, ``…`` matching anything on one line."""
    pattern = ".*?".join(re.escape(part) for part in expected.split("…"))
    return re.search(pattern, output) is not None


def test_every_example_in_the_readme_says_whether_and_how_it_is_tested() -> None:
    unmarked = [
        b.where() for b in blocks(README.read_text()) if b.lang in CHECKED and b.action is None
    ]
    assert not unmarked, f"README blocks with no <!-- readme-test: ... --> directive: {unmarked}"
    skipped = [b for b in blocks(README.read_text()) if b.action == "skip"]
    assert all(b.argument for b in skipped), "a skipped README block must say why"


@pytest.fixture
def scratch(tmp_path: Path, redis_url: str, milvus_uri: str) -> Iterator[dict[str, str]]:
    """A working directory like a checkout's, and the environment of a user on the stack."""
    from theow_workers.config import Settings
    from theow_workers.stack import EmbeddedStack

    work = tmp_path / "work"
    work.mkdir()
    for part in ("rules", "actions", "examples"):
        shutil.copytree(ROOT / part, work / part)
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "THEOW_HOME": str(work / ".theow"),
        "THEOW_REDIS_URL": redis_url,
        "THEOW_MILVUS_URI": milvus_uri,
        "THEOW_MILVUS_COLLECTION": f"readme_{uuid.uuid4().hex[:8]}",
        "THEOW_SPOOL_DIR": str(tmp_path / "spool"),
        # The machine's caches, as a user's own HOME keeps them: the shipped rules
        # compiled and embedded by earlier runs (addressed by content, never stale).
        "THEOW_SCANNER_CACHE": os.environ.get(
            "THEOW_SCANNER_CACHE", str(Path.home() / ".cache" / "theow" / "scanner")
        ),
        "THEOW_EMBEDDING_CACHE": os.environ.get(
            "THEOW_EMBEDDING_CACHE", str(Path.home() / ".cache" / "theow" / "embeddings")
        ),
    }  # rules/ and actions/: the defaults, relative to the working directory
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        dirs = {"THEOW_RULES_DIR": str(work / "rules"), "THEOW_ACTIONS_DIR": str(work / "actions")}
        settings = Settings.load(env={**env, **dirs})
        (work / ".theow").mkdir()
        upgraded = subprocess.run(["theow", "db", "upgrade"], env=env, cwd=work,
                                  capture_output=True, text=True)  # fmt: skip
        assert upgraded.returncode == 0, upgraded.stderr
        stack = EmbeddedStack(settings)
        try:
            stack.start_worker(["resolve"], concurrency=1, name="resolver")
            stack.start_worker(["replay"], concurrency=1, name="replay")
            wait_for_workers(redis_url, ["resolver@", "replay@"])
            yield {**env, "_work": str(work)}
        finally:
            stack.stop(timeout=10)
            # Explorations the examples queued with no explorer running: not another test's.
            redis.Redis.from_url(redis_url).delete(QUEUE_EXPLORE)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def wait_for_workers(redis_url: str, names: list[str], timeout: float = 90) -> None:
    from celery import Celery

    app = Celery(broker=redis_url, backend=redis_url)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            replies = app.control.ping(timeout=0.5) or []
            up = [key for reply in replies for key in reply]
            if all(any(key.startswith(n) for key in up) for n in names):
                return
        raise AssertionError(f"workers {names} did not come up")
    finally:
        app.close()


def run_block(block: Block, env: dict[str, str], work: Path) -> list[str]:
    """Problems found running one block (an empty list when it ran as written)."""
    if block.action == "file":
        target = work / block.argument
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text)
        return []
    if block.lang == "python":
        done = subprocess.run([sys.executable, "-c", block.text], cwd=work, env=env,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT)  # fmt: skip
        if done.returncode != 0:
            return [f"{block.where()}: exit {done.returncode}\n{done.stdout}{done.stderr}"]
        return []
    options = dict(o.split("=", 1) if "=" in o else (o, "") for o in block.argument.split())
    steps = commands(block)
    codes = [int(c) for c in options["exit"].split(",")] if "exit" in options else [0] * len(steps)
    assert len(codes) == len(steps), f"{block.where()}: exit= needs one code per command"
    problems = []
    for (command, expected), code in zip(steps, codes, strict=True):
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True,
                              text=True, timeout=COMMAND_TIMEOUT)  # fmt: skip
        output = done.stdout + done.stderr
        if done.returncode != code:
            problems.append(f"{block.where()}: `{command}` exited {done.returncode}, "
                            f"expected {code}\n{output[-3000:]}")  # fmt: skip
        if "output" in options:
            problems += [f"{block.where()}: `{command}` did not show {line!r}\n{output[-3000:]}"
                         for line in expected if not shows(output, line)]  # fmt: skip
    return problems


def test_the_readme_examples_run_as_written(scratch: dict[str, str]) -> None:
    work = Path(scratch.pop("_work"))
    problems: list[str] = []
    for block in blocks(README.read_text()):
        if block.action == "file" or (block.action == "run" and block.lang in CHECKED):
            problems += run_block(block, scratch, work)
    assert not problems, "\n\n".join(problems)


def test_commands_of_the_readme_parse_like_a_shell_would() -> None:
    # A runnable command with an unbalanced quote would fail for a reader too.
    for block in blocks(README.read_text()):
        if block.action == "run" and block.lang in {"console", "bash"}:
            for command, _ in commands(block):
                shlex.split(command, comments=True)
