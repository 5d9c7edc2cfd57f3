"""Node.js actions: heap size and npm peer-dependency conflicts.

``set_node_options`` runs on the build agent and edits the workspace's
``.npmrc``; ``suggest_npm_peer_fix`` is a worker-side advisor. No network.
"""

from __future__ import annotations

import re
from pathlib import Path

from theow_workers import action

_PACKAGE = re.compile(r"(?:@[\w.-]+/)?[\w.-]+")
_NODE_OPTIONS_LINE = re.compile(r"\s*node-options\s*=(.*)")
_HEAP_FLAG = re.compile(r"--max-old-space-size=(\d+)")


@action("set_node_options", client_side=True)
def set_node_options(workspace: str, max_old_space_size: int | str) -> dict:
    """Raise Node's heap limit for npm scripts via node-options in the workspace's .npmrc."""
    try:
        size = int(max_old_space_size)
    except (TypeError, ValueError):
        return {"status": "error", "error": f"not a heap size in MB: {max_old_space_size!r}"}
    if not 256 <= size <= 65536:
        return {"status": "error", "error": f"heap size {size} MB is out of range"}
    npmrc = Path(workspace) / ".npmrc"
    flag = f"--max-old-space-size={size}"
    result = {
        "status": "ok",
        "changed": [],
        "node_options": flag,
        "fix": f'export NODE_OPTIONS="{flag}" (npm scripts read it from .npmrc node-options)',
    }
    lines = npmrc.read_text(encoding="utf-8").splitlines() if npmrc.is_file() else []
    for index, line in enumerate(lines):
        match = _NODE_OPTIONS_LINE.fullmatch(line)
        if not match:
            continue
        options = match.group(1).strip().strip("\"'").split()
        current = [int(m.group(1)) for o in options if (m := _HEAP_FLAG.fullmatch(o))]
        if current and max(current) >= size:
            result["node_options"] = " ".join(options)
            return result  # already at least this big: never shrink the heap
        options = [o for o in options if not _HEAP_FLAG.fullmatch(o)] + [flag]
        result["node_options"] = " ".join(options)
        lines[index] = f"node-options={result['node_options']}"
        break
    else:
        lines.append(f"node-options={flag}")
    npmrc.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result["changed"] = [str(npmrc)]
    return result


@action("suggest_npm_peer_fix")
def suggest_npm_peer_fix(package: str, version: str, peer: str, peer_range: str) -> dict:
    """Say how to get past an npm ERESOLVE conflict: which package's peer range is too narrow."""
    if not _PACKAGE.fullmatch(package) or not _PACKAGE.fullmatch(peer):
        return {"status": "error", "error": f"not npm package names: {package!r} / {peer!r}"}
    return {
        "status": "ok",
        "package": f"{package}@{version}",
        "peer": peer,
        "peer_range": peer_range,
        "fix": (
            f"{package}@{version} accepts only {peer}@{peer_range}, which excludes the {peer} "
            f"in the tree: upgrade {package} to a release whose peer range includes it, "
            f'align {peer} with that range, or add an "overrides" entry in package.json'
        ),
        "workaround": "npm install --legacy-peer-deps (or legacy-peer-deps=true in .npmrc)",
    }
