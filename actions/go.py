"""Go actions: module path renames, toolchain versions and private modules.

``go_mod_replace`` runs on the build agent (it edits the workspace's go.mod);
``suggest_go_toolchain`` and ``suggest_goprivate`` are worker-side advisors
that only say what to do. None of them touches the network.
"""

from __future__ import annotations

import re
from pathlib import Path

from theow_workers import action

# Module paths and versions come out of build logs: accept only what Go itself
# accepts, so nothing else (spaces, newlines, quotes) can reach go.mod.
_MODULE_PATH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~/-]*")
_VERSION = re.compile(r"v\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?")
_GO_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?((?:rc|beta)\d+)?")


def _replace_spec(line: str) -> tuple[str, str] | None:
    """Split one replace spec ``OLD [VER] => NEW [VER]`` into (old path, target)."""
    body = line.split("//", 1)[0].strip()
    if body.startswith("replace "):
        body = body[len("replace ") :].strip()
    if "=>" not in body:
        return None
    left, right = (part.strip() for part in body.split("=>", 1))
    if not left:
        return None
    return left.split()[0], " ".join(right.split())


@action("go_mod_replace", client_side=True)
def go_mod_replace(workspace: str, old_path: str, new_path: str, version: str) -> dict:
    """Point a renamed Go module's old path at its new one with a replace directive in go.mod."""
    if not _MODULE_PATH.fullmatch(old_path) or not _MODULE_PATH.fullmatch(new_path):
        return {"status": "error", "error": f"not a module path: {old_path!r} / {new_path!r}"}
    if not _VERSION.fullmatch(version):
        return {"status": "error", "error": f"not a module version: {version!r}"}
    go_mod = Path(workspace) / "go.mod"
    if not go_mod.is_file():
        return {"status": "error", "error": f"no go.mod in {workspace}"}

    target = f"{new_path} {version}"
    directive = f"replace {old_path} => {target}"
    result = {
        "status": "ok",
        "changed": [],
        "directive": directive,
        "fix": f"go mod edit -replace {old_path}={new_path}@{version}",
    }
    text = go_mod.read_text(encoding="utf-8")
    lines = text.splitlines()
    in_block = False
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("replace") and stripped.endswith("(") and "=>" not in stripped:
            in_block = True
            continue
        if in_block and stripped.startswith(")"):
            in_block = False
            continue
        if not (in_block or stripped.startswith("replace ")):
            continue
        spec = _replace_spec(stripped)
        if spec is None or spec[0] != old_path:
            continue
        if spec[1] == target:
            return result  # already there: nothing to do
        indent = line[: len(line) - len(line.lstrip())]
        lines[index] = f"{indent}{old_path} => {target}" if in_block else f"{indent}{directive}"
        go_mod.write_text("\n".join(lines) + "\n", encoding="utf-8")
        result["changed"] = [str(go_mod)]
        return result

    if text and not text.endswith("\n"):
        text += "\n"
    go_mod.write_text(f"{text}\n{directive}\n", encoding="utf-8")
    result["changed"] = [str(go_mod)]
    return result


@action("suggest_go_toolchain", suggests=True)
def suggest_go_toolchain(required: str, running: str = "") -> dict:
    """Say which Go toolchain a build needs when go.mod asks for a newer Go than the image has."""
    match = _GO_VERSION.fullmatch(required)
    if not match or (running and not _GO_VERSION.fullmatch(running)):
        return {"status": "error", "error": f"not Go versions: {required!r} / {running!r}"}
    major, minor, patch, pre = match.groups()
    # Since Go 1.21 toolchain names carry a patch number: "go 1.22" means go1.22.0.
    if patch is None and pre is None and (int(major), int(minor)) >= (1, 21):
        toolchain = f"go{major}.{minor}.0"
    else:
        toolchain = f"go{required}"
    image_tag = f"{major}.{minor}" if pre is None else required
    return {
        "status": "ok",
        "required": required,
        "running": running,
        "toolchain": toolchain,
        "fix": f"build with Go >= {required} (image golang:{image_tag}), "
        f"or let go fetch it: GOTOOLCHAIN={toolchain}+auto",
        "env": {"GOTOOLCHAIN": f"{toolchain}+auto"},
    }


# Hosts where the first path element is an owner: GOPRIVATE can name just the owner.
_FORGES = ("github.com", "gitlab.com", "bitbucket.org")


@action("suggest_goprivate", suggests=True)
def suggest_goprivate(module: str) -> dict:
    """Say how to fetch a private Go module that the public proxy and checksum database cannot see."""
    if not _MODULE_PATH.fullmatch(module) or "/" not in module:
        return {"status": "error", "error": f"not a module path: {module!r}"}
    parts = module.split("/")
    pattern = "/".join(parts[:2]) if parts[0] in _FORGES else parts[0]
    return {
        "status": "ok",
        "module": module,
        "goprivate": pattern,
        "env": {"GOPRIVATE": pattern},
        "fix": f"set GOPRIVATE={pattern} so go fetches {module} directly (not via proxy.golang.org "
        "or sum.golang.org), and give git credentials for it (a .netrc or "
        "url.<base>.insteadOf with a token)",
    }
