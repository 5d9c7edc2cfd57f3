"""The examples of README.md and of every docs/*.md page, run as written.

Every ``console``, ``bash``, ``python``, ``yaml`` and ``json`` block of a page
carries a directive in an HTML comment on the line before it:

``<!-- readme-test: run -->``
    Run it. A ``console``/``bash`` block's ``$`` lines are shell commands, run
    in order in the page's scratch directory (a copy of ``rules/``,
    ``actions/`` and ``examples/``); each must exit 0, or as ``exit=0,3,…``
    says, one code per command. A ``python`` block runs in a fresh
    interpreter there. Options, after ``run``:

    ``output``
        every line the block shows after a command must appear in that
        command's output (``…`` stands for anything);
    ``retry=S``
        a command that did not yet exit as expected and show its lines is run
        again, for up to S seconds (the worker records a failure as it picks
        it up);
    ``installed``
        ``make TARGET`` runs as ``theow TARGET``: the test's environment is
        installed already, which is all make adds;
    ``background``
        each command starts in the background and the block is done when the
        command shows its lines (its readiness); it is stopped with SIGINT,
        as Ctrl-C, when its stack section or page ends;
    ``http=PATH``
        with ``background``: also wait until ``http://127.0.0.1:$THEOW_WEB_PORT
        PATH`` answers 200.

    A bare word ``ID`` in a command stands for the last failure id an earlier
    command printed.
``<!-- readme-test: file PATH -->``
    Write the block to PATH in the scratch directory, for later blocks to use.
``<!-- readme-test: skip REASON -->``
    Not run, and the reason says why (Docker, a Gemini key, a corpus).

A block without a directive fails the first test: an example nobody runs is an
example that drifts. Blocks run against a shared stack, the integration
tests' own (Valkey, a Milvus Lite server, SQLite, a resolver and a replay
worker), one scratch directory per page. After ``<!-- readme-test: stack own
-->`` (until ``<!-- readme-test: stack shared -->``) blocks run in a scratch
directory of their own, on free ports, with no stack started for them: the
page's own commands start it (the README's quick start runs ``theow demo`` and
``theow up`` itself, as a new user does).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from tests.conftest import free_port
from theow_client import TheowClient
from theow_client.names import QUEUE_EXPLORE

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CHECKED = {"console", "bash", "sh", "shell", "python", "yaml", "json"}
DIRECTIVE = re.compile(r"<!--\s*readme-test:\s*(run|file|skip)\b\s*(.*?)\s*-->")
STACK = re.compile(r"<!--\s*readme-test:\s*stack\s+(own|shared)\s*-->")
FAILURE_ID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
COMMAND_TIMEOUT = 300  # `theow demo` on a machine whose caches are cold
READY_TIMEOUT = 180
README_LINES = 400


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    action: str | None = None  # run | file | skip
    argument: str = ""
    stack: str = "shared"  # shared | own

    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.lang})"

    def options(self) -> dict[str, str]:
        return dict(o.split("=", 1) if "=" in o else (o, "") for o in self.argument.split())


def blocks(page: Path) -> list[Block]:
    """Fenced blocks in order, each with the directive just before it (blank lines allowed)."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    stack = "shared"
    i = 0
    while i < len(lines):
        switch = STACK.search(lines[i])
        if switch:
            stack = switch.group(1)
        fence = re.match(r"^(```+)\s*(\S*)", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1)))
        text = "\n".join(lines[i + 1 : end]) + "\n"
        block = Block(page_id(page), i + 1, fence.group(2).lower(), text, stack=stack)
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
    """``$`` commands with the output lines the page shows after each."""
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


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_example_says_whether_and_how_it_is_tested(page: Path) -> None:
    found = blocks(page)
    unmarked = [b.where() for b in found if b.lang in CHECKED and b.action is None]
    assert not unmarked, f"blocks with no <!-- readme-test: ... --> directive: {unmarked}"
    assert all(b.argument for b in found if b.action == "skip"), "a skipped block must say why"


def test_the_readme_stays_short_enough_to_read_first() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines < README_LINES, f"README.md has {lines} lines: move reference to docs/"


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings."""
    found = set()
    for line in page.read_text().splitlines():
        heading = re.match(r"^#+\s+(.*)", line)
        if heading:
            text = re.sub(r"[^\w\- ]", "", heading.group(1).lower())
            found.add(text.replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_link_to_a_file_or_heading_of_the_docs_leads_somewhere(page: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # an address elsewhere
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in anchors(linked)
        ):
            broken.append(target)
    assert not broken, f"{page_id(page)} links to nothing: {broken}"


def test_the_docs_pages_are_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    unlinked = [page.name for page in PAGES[1:] if f"](docs/{page.name})" not in readme]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_commands_of_the_docs_parse_like_a_shell_would() -> None:
    # A runnable command with an unbalanced quote would fail for a reader too.
    for page in PAGES:
        for block in blocks(page):
            if block.action == "run" and block.lang in {"console", "bash"}:
                for command, _ in commands(block):
                    shlex.split(command, comments=True)


def checkout_copy(work: Path) -> Path:
    work.mkdir(parents=True)
    for part in ("rules", "actions", "examples"):
        shutil.copytree(ROOT / part, work / part)
    return work


def user_environment(home: Path, theow_home: Path) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    return {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "THEOW_HOME": str(theow_home),
        "THEOW_SPOOL_DIR": str(home / "spool"),
        "THEOW_WEB_PORT": str(free_port()),
        # The machine's caches, as a user's own HOME keeps them: the shipped rules
        # compiled and embedded by earlier runs (addressed by content, never stale).
        "THEOW_SCANNER_CACHE": os.environ.get(
            "THEOW_SCANNER_CACHE", str(Path.home() / ".cache" / "theow" / "scanner")
        ),
        "THEOW_EMBEDDING_CACHE": os.environ.get(
            "THEOW_EMBEDDING_CACHE", str(Path.home() / ".cache" / "theow" / "embeddings")
        ),
    }  # rules/ and actions/: the defaults, relative to the working directory


@pytest.fixture(scope="module")
def shared_stack(
    tmp_path_factory: pytest.TempPathFactory, acl_broker_url: str, milvus_uri: str
) -> Iterator[tuple[dict[str, str], Path]]:
    """The environment of a user on a running stack, and the directory pages' scratch goes in."""
    redis_url = acl_broker_url  # the pages' `theow tokens add` saves the agent's broker user
    from theow_workers.config import Settings
    from theow_workers.stack import EmbeddedStack

    base = tmp_path_factory.mktemp("docs")
    theow_home = base / ".theow"
    theow_home.mkdir()
    env = {
        **user_environment(base, theow_home),
        "THEOW_REDIS_URL": redis_url,
        "THEOW_MILVUS_URI": milvus_uri,
        "THEOW_MILVUS_COLLECTION": f"docs_{uuid.uuid4().hex[:8]}",
    }
    stack_dir = checkout_copy(base / "stack")
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        dirs = {"THEOW_RULES_DIR": str(stack_dir / "rules"),
                "THEOW_ACTIONS_DIR": str(stack_dir / "actions")}  # fmt: skip
        settings = Settings.load(env={**env, **dirs})
        upgraded = subprocess.run(["theow", "db", "upgrade"], env=env, cwd=stack_dir,
                                  capture_output=True, text=True)  # fmt: skip
        assert upgraded.returncode == 0, upgraded.stderr
        # What `theow up` leaves a user: an agent token where theow-client finds it.
        added = subprocess.run(["theow", "tokens", "add", "docs", "--scope", "agent", "--json"],
                               env=env, cwd=stack_dir, capture_output=True, text=True)  # fmt: skip
        assert added.returncode == 0, added.stderr
        client_env = base / ".config" / "theow" / "client.env"
        client_env.parent.mkdir(parents=True)
        client_env.write_text(f"THEOW_AGENT_TOKEN={json.loads(added.stdout)['token']}\n")
        stack = EmbeddedStack(settings)
        try:
            stack.start_worker(["resolve"], concurrency=1, name="resolver")
            stack.start_worker(["replay"], concurrency=1, name="replay")
            wait_for_workers(redis_url, ["resolver@", "replay@"])
            warm_up(redis_url)
            yield env, base
        finally:
            stack.stop(timeout=10)
            # Explorations the examples queued with no explorer running: not another test's.
            redis.Redis.from_url(redis_url).delete(QUEUE_EXPLORE)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def own_stack_environment(base: Path) -> dict[str, str]:
    """A user's environment with nothing running: free ports for whatever the page starts."""
    return {
        **user_environment(base, base / "work" / ".theow"),
        "THEOW_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "THEOW_MILVUS_URI": f"http://127.0.0.1:{free_port()}",
    }


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


def warm_up(redis_url: str, timeout: float = 300) -> None:
    """One verdict first: the pages describe a stack that has been serving.

    A resolver's first failure loads MiniLM and compiles the rules, which on a
    busy machine takes longer than the client's default wait for a verdict.
    """
    with TheowClient(redis_url) as client:
        client.submit({"log": "warming up", "job": "docs/warm-up"}).wait(timeout=timeout)


@dataclass
class Session:
    """One scratch directory and environment, as one user's terminals share them."""

    env: dict[str, str]
    work: Path
    failure_id: str | None = None
    background: list[tuple[str, subprocess.Popen[str], Path]] = field(default_factory=list)

    def shell(self, command: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["bash", "-c", command], cwd=self.work, env=self.env,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT)  # fmt: skip
        self.remember(done.stdout + done.stderr)
        return done

    def remember(self, output: str) -> None:
        ids = FAILURE_ID.findall(output)
        if ids:
            self.failure_id = ids[-1]

    def start(self, command: str) -> tuple[subprocess.Popen[str], Path]:
        log = self.work / f".background-{len(self.background)}.log"
        with log.open("w") as sink:  # the child keeps its own descriptor
            process = subprocess.Popen(["bash", "-c", command], cwd=self.work, env=self.env,
                                       stdout=sink, stderr=subprocess.STDOUT, text=True,
                                       start_new_session=True)  # fmt: skip
        self.background.append((command, process, log))
        return process, log

    def stop(self) -> list[str]:
        """Ctrl-C for every background command; problems if one does not stop."""
        problems = []
        for command, process, log in self.background:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
                problems.append(f"`{command}` did not stop on Ctrl-C\n{log.read_text()[-3000:]}")
        self.background.clear()
        return problems


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def run_in_background(block: Block, session: Session, command: str, expected: list[str]) -> str:
    """Start ``command``; a problem unless it shows its lines (and answers) while running."""
    process, log = session.start(command)
    path = block.options().get("http")
    url = f"http://127.0.0.1:{session.env['THEOW_WEB_PORT']}{path}" if path else None
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        output = log.read_text()
        if process.poll() is not None:
            return f"{block.where()}: `{command}` exited {process.returncode}\n{output[-3000:]}"
        if all(shows(output, line) for line in expected) and (url is None or answers(url)):
            session.remember(output)
            return ""
        time.sleep(0.5)
    waited = f"{url} to answer" if url else f"{expected}"
    return f"{block.where()}: `{command}` not ready ({waited})\n{log.read_text()[-3000:]}"


def run_command(block: Block, session: Session, command: str, expected: list[str],
                code: int) -> list[str]:  # fmt: skip
    options = block.options()
    if re.search(r"\bID\b", command):
        if session.failure_id is None:
            return [f"{block.where()}: `{command}` needs a failure id no command printed"]
        command = re.sub(r"\bID\b", session.failure_id, command)
    if "installed" in options and command.startswith("make "):
        command = "theow " + command.removeprefix("make ")
    if "background" in options:
        problem = run_in_background(block, session, command, expected)
        return [problem] if problem else []
    checked = expected if "output" in options else []
    deadline = time.monotonic() + float(options.get("retry", "0"))
    while True:
        done = session.shell(command)
        output = done.stdout + done.stderr
        problems = []
        if done.returncode != code:
            problems.append(f"{block.where()}: `{command}` exited {done.returncode}, "
                            f"expected {code}\n{output[-3000:]}")  # fmt: skip
        problems += [f"{block.where()}: `{command}` did not show {line!r}\n{output[-3000:]}"
                     for line in checked if not shows(output, line)]  # fmt: skip
        if not problems or time.monotonic() > deadline:
            return problems
        time.sleep(1)


def run_block(block: Block, session: Session) -> list[str]:
    """Problems found running one block (an empty list when it ran as written)."""
    if block.action == "file":
        target = session.work / block.argument
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text)
        return []
    if block.lang == "python":
        done = subprocess.run([sys.executable, "-c", block.text], cwd=session.work,
                              env=session.env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT)  # fmt: skip
        if done.returncode != 0:
            return [f"{block.where()}: exit {done.returncode}\n{done.stdout}{done.stderr}"]
        return []
    steps = commands(block)
    options = block.options()
    codes = [int(c) for c in options["exit"].split(",")] if "exit" in options else [0] * len(steps)
    assert len(codes) == len(steps), f"{block.where()}: exit= needs one code per command"
    problems: list[str] = []
    for (command, expected), code in zip(steps, codes, strict=True):
        problems += run_command(block, session, command, expected, code)
    return problems


def runnable(block: Block) -> bool:
    return block.action == "file" or (block.action == "run" and block.lang in CHECKED)


@pytest.mark.slow
@pytest.mark.timeout(900)  # the README's quick start alone may take its five minutes
@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_the_examples_of_each_page_run_as_written(
    page: Path, shared_stack: tuple[dict[str, str], Path]
) -> None:
    env, base = shared_stack
    stem = page_id(page).replace("/", "-")
    shared = Session(env, checkout_copy(base / stem))
    own: Session | None = None
    problems: list[str] = []
    try:
        for block in blocks(page):
            if block.stack == "own" and own is None:
                scratch = base / f"{stem}-own"
                own = Session(own_stack_environment(scratch), checkout_copy(scratch / "work"))
            if block.stack == "shared" and own is not None:
                problems += own.stop()
                own = None
            if runnable(block):
                problems += run_block(block, own if own is not None else shared)
    finally:
        if own is not None:
            problems += own.stop()
        problems += shared.stop()
    assert not problems, "\n\n".join(problems)
