"""Lockfile advisor: a build installs with a frozen lockfile that no longer matches its manifest.

``suggest_lockfile_refresh`` is worker-side and pure: it names the command
that brings the lockfile back in line for each package manager. Running it
(and committing the result) is for a person or the pipeline: the fix changes
what the build installs, so it belongs in review, not on a build agent.
"""

from __future__ import annotations

from theow_workers import action

# tool → (lockfile, command that refreshes it without upgrading everything)
LOCKFILES: dict[str, tuple[str, str]] = {
    "npm": ("package-lock.json", "npm install --package-lock-only"),
    "yarn": ("yarn.lock", "yarn install"),
    "pnpm": ("pnpm-lock.yaml", "pnpm install --lockfile-only"),
    "poetry": ("poetry.lock", "poetry lock --no-update  (Poetry 2: poetry lock)"),
    "uv": ("uv.lock", "uv lock"),
    "pipenv": ("Pipfile.lock", "pipenv lock"),
    "pdm": ("pdm.lock", "pdm lock --update-reuse"),
    "cargo": ("Cargo.lock", "cargo update --workspace"),
    "go": ("go.mod/go.sum", "go mod tidy"),
    "go-vendor": ("vendor/modules.txt", "go mod vendor"),
}

# What the logs say, when it is not the tool's own name.
ALIASES: dict[str, str] = {
    "yn0028": "yarn",  # Yarn Berry: "The lockfile would have been modified by this install"
    "cipm": "npm",  # npm 6's name for npm ci
    "package-lock.json": "npm",
    "npm-shrinkwrap.json": "npm",
    "yarn.lock": "yarn",
    "pnpm-lock.yaml": "pnpm",
    "poetry.lock": "poetry",
    "uv.lock": "uv",
    "pipfile.lock": "pipenv",
    "pdm.lock": "pdm",
    "cargo.lock": "cargo",
    "go.mod": "go",
    "go.sum": "go",
    "go mod tidy": "go",
    "go mod download": "go",
    "go mod vendor": "go-vendor",
    "--locked": "cargo",
    "--frozen": "cargo",
}


@action("suggest_lockfile_refresh", suggests=True)
def suggest_lockfile_refresh(tool: str, package: str = "") -> dict:
    """Say how to bring a lockfile back in sync with its manifest (npm, yarn, pnpm, poetry, uv, cargo, go)."""
    key = " ".join(tool.split()).lower()
    name = ALIASES.get(key, key)
    if name not in LOCKFILES:
        return {"status": "error", "error": f"unknown package manager: {tool!r}"}
    lockfile, command = LOCKFILES[name]
    missing = f" ({package} is missing from it)" if package else ""
    return {
        "status": "ok",
        "tool": name,
        "lockfile": lockfile,
        "package": package or None,
        "command": command,
        "fix": f"run `{command}` and commit {lockfile}{missing}: the manifest changed but the "
        "lockfile was not regenerated, and this build refuses to update it",
    }
