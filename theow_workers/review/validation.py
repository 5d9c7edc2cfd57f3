"""Loading proposed action files in a child process that holds no secret.

Importing a module runs it, and the console and the CLI hold every secret
(the Gemini key, the console passwords, the database URL). So the action
layers, with the proposed files in place, are copied to a temporary
directory and loaded by ``python -I`` started with an empty environment but
``PATH``, in a new process group that is killed on timeout. The child prints
what registered (names, where, parameters) as JSON; the caller checks rules
against that, never importing the proposed code itself.

Run as the child: ``python -I -c 'import theow_workers.review.validation as v; v.child()'``
with ``{"layers": [...]}`` on standard input.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import theow_client

TIMEOUT = 30.0
MAX_OUTPUT = 1_000_000
ROOT = Path(theow_client.__file__).resolve().parents[1]  # where the packages are imported from


_KINDS = {
    int(kind): kind
    for kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.VAR_KEYWORD,
    )
}


class ActionCheckFailed(Exception):
    """Why the proposed actions do not load; one line naming the file."""


@dataclass(frozen=True)
class LoadedAction:
    """An action as the child saw it register: enough to check rules against it."""

    name: str
    file: str  # the real path, not the temporary copy
    client_side: bool
    parameters: tuple[tuple[str, int, bool], ...]  # (name, inspect kind, has a default)

    def signature(self) -> inspect.Signature:
        return inspect.Signature(
            [
                inspect.Parameter(
                    name,
                    _KINDS[kind],
                    default=None if has_default else inspect.Parameter.empty,
                )
                for name, kind, has_default in self.parameters
            ]
        )


def load_in_child(
    layers: Sequence[Path], proposed: Mapping[str, str], timeout: float = TIMEOUT
) -> list[LoadedAction]:
    """The actions of ``layers`` with ``proposed`` (file name → text) in the last one."""
    with tempfile.TemporaryDirectory(prefix="theow-check-") as scratch:
        copies = [Path(scratch) / str(i) for i in range(len(layers))]
        for layer, copy in zip(layers, copies, strict=True):
            copy.mkdir()
            for path in layer.glob("*.py"):
                shutil.copyfile(path, copy / path.name)
        for name, text in proposed.items():
            (copies[-1] / name).write_text(text, encoding="utf-8")
        env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8", "HOME": scratch}
        request = json.dumps({"layers": [str(c) for c in copies], "root": str(ROOT)})
        code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import {__name__} as v; v.child()"
        process = subprocess.Popen(
            [sys.executable, "-I", "-B", "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=scratch,
            start_new_session=True,
            text=True,
        )
        try:
            out, err = process.communicate(request, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise ActionCheckFailed(
                f"loading the actions took over {timeout:g} s: does a proposed file work at import?"
            ) from None
        finally:
            _kill_group(process.pid)
        real = {str(copy): str(layer) for copy, layer in zip(copies, layers, strict=True)}
        try:
            answer = json.loads(out[:MAX_OUTPUT].strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            detail = (err or out).strip().splitlines()[-1:] or [f"exit {process.returncode}"]
            raise ActionCheckFailed(
                _unmask(f"the actions do not load: {detail[0]}", real)
            ) from None
    if "error" in answer:
        raise ActionCheckFailed(_unmask(str(answer["error"]), real))
    return [
        LoadedAction(
            a["name"],
            _unmask(a["file"], real),
            a["client_side"],
            tuple((p[0], p[1], p[2]) for p in a["parameters"]),
        )
        for a in answer["actions"]
    ]


def _unmask(text: str, real: Mapping[str, str]) -> str:
    """The temporary copies' paths replaced by the layers they stand for."""
    for copy, layer in sorted(real.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(copy, layer)
    return text


def _kill_group(pid: int) -> None:
    """Whatever the proposed code started in the child's group ends with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def child() -> None:
    """The child's side: load the layers named on stdin, print what registered."""
    from theow_workers.core.actions import ActionLoadError, load_action_layers

    request = json.loads(sys.stdin.read())
    try:
        registry = load_action_layers([Path(p) for p in request["layers"]])
    except ActionLoadError as exc:
        answer: dict[str, object] = {"error": str(exc)}
    else:
        answer = {
            "actions": [
                {
                    "name": spec.name,
                    "file": spec.source_file,
                    "client_side": spec.client_side,
                    "parameters": [
                        (p.name, int(p.kind), p.default is not p.empty)
                        for p in inspect.signature(spec.func).parameters.values()
                    ],
                }
                for spec in registry
            ]
        }
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    sys.stdout.flush()
