"""Workspace cleanup: delete caches that a build left corrupted or stale.

Both actions run on the build agent and only ever delete inside the
workspace: ``clear_workspace_cache`` removes one cache directory from an
allow-list, ``clear_python_bytecode`` removes ``__pycache__`` directories and
``.pyc`` files. Deleting a cache is safe (the next build recreates it) and
idempotent (a second run finds nothing to delete).
"""

from __future__ import annotations

import shutil
from fnmatch import fnmatch
from pathlib import Path

from theow_workers import action

# Cache directories (relative to the workspace) that may be deleted.
CACHE_PATTERNS = (
    "target/*/incremental",
    "target/*/*/incremental",
    "node_modules/.cache",
    "node_modules/.vite",
    ".next/cache",
    ".nuxt",
    ".parcel-cache",
    ".turbo",
    ".angular/cache",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".gradle/caches",
    ".gradle/configuration-cache",
)

# Directories never walked for bytecode: environments and VCS data.
_SKIP_DIRS = {".git", ".hg", "node_modules", ".venv", "venv", ".tox", ".nox", "site-packages"}


@action("clear_workspace_cache", client_side=True)
def clear_workspace_cache(workspace: str, path: str) -> dict:
    """Delete cache directories under the workspace (e.g. target/*/incremental) so the build recreates them."""
    parts = Path(path).parts
    allowed = any(fnmatch(path, pattern) for pattern in CACHE_PATTERNS)
    if not allowed or ".." in parts or Path(path).is_absolute():
        return {"status": "error", "error": f"{path!r} is not a cache this action deletes"}
    root = Path(workspace).resolve()
    removed = []
    for candidate in sorted(root.glob(path)):
        target = candidate.resolve()  # a symlink anywhere on the way must not lead outside
        if candidate.is_symlink() or not target.is_dir() or not target.is_relative_to(root):
            continue
        shutil.rmtree(target)
        removed.append(str(target))
    return {"status": "ok", "changed": removed, "path": path}


@action("clear_python_bytecode", client_side=True)
def clear_python_bytecode(workspace: str) -> dict:
    """Delete stale __pycache__ directories and .pyc files from the workspace's sources."""
    root = Path(workspace).resolve()
    removed: list[str] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        for entry in sorted(directory.iterdir()):
            if entry.is_symlink():
                continue
            if entry.is_dir():
                if entry.name == "__pycache__":
                    shutil.rmtree(entry)
                    removed.append(str(entry))
                elif entry.name not in _SKIP_DIRS:
                    stack.append(entry)
            elif entry.suffix in (".pyc", ".pyo"):
                entry.unlink()
                removed.append(str(entry))
    return {"status": "ok", "changed": removed, "removed": len(removed)}
