"""Actions: plain functions that rules call by name.

An action lives in ``actions/*.py`` and is registered with a decorator::

    from theow_workers import action

    @action("suggest_pip_install")
    def suggest_pip_install(module: str) -> dict:
        '''Say which package to install for a missing Python module.'''
        return {"status": "ok", "command": f"pip install {module}"}

Actions run on the resolver worker by default. One that must touch the build
agent's workspace is declared ``client_side=True``: the worker then only binds
its params, and ``theow_client`` runs it on the agent. An action that raises,
returns ``{"status": "error"}`` or exceeds its time limit fails the attempt.

An action may declare a ``facts`` parameter (the failure's facts) and, on the
client side, a ``workspace`` parameter (the build step's working directory);
they are passed when declared and never come from rule params.

The loader and the runner live in the client because both sides use them:
the resolver worker runs server-side actions, the build agent client-side
ones; ``theow_workers.core.actions`` is this module under the core's name.

An action that only says what to do (a command to run, a package to add)
is declared ``suggests=True``: a fix made of such actions is ``suggested``,
never ``resolved``, because the build still fails until someone acts on it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from theow_client.jsontypes import JsonObject

DEFAULT_ACTION_TIMEOUT = 30.0
# Parameters filled from the context of the run, never from a rule's params.
CONTEXT_PARAMS = ("facts", "workspace")

ActionFunc = Callable[..., object]


class ActionError(Exception):
    """An action failed: it raised, returned an error status, or timed out."""


class ActionTimeout(ActionError):
    pass


class ActionLoadError(Exception):
    """An actions file could not be imported; names the file."""


@dataclass(frozen=True)
class ActionSpec:
    name: str
    func: ActionFunc
    client_side: bool = False
    timeout: float | None = None
    # Only says what to do (a command, a package name) and changes nothing: a rule
    # whose actions all only suggest leaves the failure ``suggested``, not ``resolved``.
    suggests: bool = False

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.func) or ""

    @property
    def signature(self) -> str:
        return f"{self.name}{inspect.signature(self.func)}"

    @property
    def source_file(self) -> str:
        return inspect.getsourcefile(self.func) or ""

    def parameters(self) -> list[str]:
        return [p for p in inspect.signature(self.func).parameters if p not in CONTEXT_PARAMS]


class ActionRegistry:
    """Name → ActionSpec. Registering a name twice is an error (two files disagree)."""

    def __init__(self) -> None:
        self._specs: dict[str, ActionSpec] = {}

    def register(self, spec: ActionSpec) -> None:
        existing = self._specs.get(spec.name)
        if existing is not None and existing.func is not spec.func:
            raise ActionLoadError(
                f"action {spec.name!r} is defined twice: in {existing.source_file} "
                f"and in {spec.source_file}"
            )
        self._specs[spec.name] = spec

    def get(self, name: str) -> ActionSpec | None:
        return self._specs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ActionSpec]:
        return iter(sorted(self._specs.values(), key=lambda s: s.name))

    def __len__(self) -> int:
        return len(self._specs)

    def names(self) -> list[str]:
        return sorted(self._specs)

    def merged(self, other: ActionRegistry) -> ActionRegistry:
        result = ActionRegistry()
        for spec in [*self, *other]:
            result.register(spec)
        return result


# Actions decorated outside an actions directory (in a deployment's own code).
REGISTRY = ActionRegistry()
_collecting: list[ActionRegistry] = []


def action(
    name: str, *, client_side: bool = False, timeout: float | None = None, suggests: bool = False
) -> Callable[[ActionFunc], ActionFunc]:
    """Register the decorated function as the action ``name``.

    ``suggests=True``: the action only says what to do and changes nothing.
    """

    def decorate(func: ActionFunc) -> ActionFunc:
        target = _collecting[-1] if _collecting else REGISTRY
        spec = ActionSpec(name, func, client_side=client_side, timeout=timeout, suggests=suggests)
        target.register(spec)
        return func

    return decorate


def load_actions(directory: str | Path) -> ActionRegistry:
    """Import every ``*.py`` in ``directory`` and return the actions they define.

    Each call imports the files afresh, so an edited action is picked up by
    calling it again. Raises ActionLoadError naming the file that failed.
    """
    registry = ActionRegistry()
    root = Path(directory)
    if not root.is_dir():
        return registry
    _collecting.append(registry)
    try:
        for path in sorted(root.glob("*.py")):
            if path.name.startswith("_"):
                continue
            module_name = f"theow_actions_{abs(hash(str(path.resolve())))}_{path.stem}"
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise ActionLoadError(f"{path}: cannot be imported")
            module = importlib.util.module_from_spec(spec)
            try:
                sys.modules[module_name] = module
                spec.loader.exec_module(module)
            except ActionLoadError:
                raise
            except Exception as exc:
                raise ActionLoadError(f"{path}: {type(exc).__name__}: {exc}") from exc
    finally:
        _collecting.pop()
    return registry


def call_action(
    spec: ActionSpec,
    params: JsonObject,
    *,
    facts: JsonObject | None = None,
    workspace: str | None = None,
    timeout: float | None = None,
) -> object:
    """Run an action with its bound params; return its output or raise ActionError."""
    signature = inspect.signature(spec.func)
    kwargs = dict(params)
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    context = {"facts": facts, "workspace": workspace}
    for key, value in context.items():
        if key in signature.parameters:
            kwargs[key] = value
        elif not accepts_any:
            kwargs.pop(key, None)
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        raise ActionError(f"action {spec.name!r} called with wrong params: {exc}") from exc

    limit = spec.timeout or timeout or DEFAULT_ACTION_TIMEOUT
    try:
        with _time_limit(limit, spec.name):
            output = spec.func(**kwargs)
    except ActionError:
        raise
    except Exception as exc:
        raise ActionError(f"action {spec.name!r} raised {type(exc).__name__}: {exc}") from exc
    if isinstance(output, dict) and str(output.get("status", "")).lower() == "error":
        detail = output.get("error") or output.get("message") or output
        raise ActionError(f"action {spec.name!r} returned an error: {detail}")
    return output


@contextlib.contextmanager
def _time_limit(seconds: float, name: str) -> Iterator[None]:
    """Interrupt the action after ``seconds`` with SIGALRM (main thread only).

    Outside the main thread no signal can be delivered; there the Celery task
    time limit is the backstop.
    """
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise ActionTimeout(f"action {name!r} timed out after {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
