"""Node.js actions: heap size, .npmrc settings, packages, peers and engines.

``set_node_options`` and ``set_npmrc_option`` run on the build agent and edit
the workspace's ``.npmrc``; the ``suggest_*`` actions are worker-side
advisors. No network.
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


@action("suggest_npm_peer_fix", suggests=True)
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


# .npmrc keys an action may set: package-manager behaviour, never registries or tokens.
NPMRC_KEYS = frozenset(
    {
        "auto-install-peers",
        "strict-peer-dependencies",
        "legacy-peer-deps",
        "engine-strict",
        "fund",
        "audit",
    }
)
_NPMRC_VALUE = re.compile(r"[\w.@^~<>=|* -]+")


@action("set_npmrc_option", client_side=True)
def set_npmrc_option(workspace: str, key: str, value: str) -> dict:
    """Set one package-manager option (like auto-install-peers=true) in the workspace's .npmrc."""
    value = str(value).lower() if isinstance(value, bool) else str(value)
    if key not in NPMRC_KEYS:
        return {"status": "error", "error": f"{key!r} is not an option this action sets"}
    if not _NPMRC_VALUE.fullmatch(value):
        return {"status": "error", "error": f"not an .npmrc value: {value!r}"}
    npmrc = Path(workspace) / ".npmrc"
    wanted = f"{key}={value}"
    lines = npmrc.read_text(encoding="utf-8").splitlines() if npmrc.is_file() else []
    for index, line in enumerate(lines):
        name, sep, current = line.partition("=")
        if not sep or name.strip() != key:
            continue
        if current.strip() == value:
            return {"status": "ok", "changed": [], "setting": wanted}
        lines[index] = wanted
        break
    else:
        lines.append(wanted)
    npmrc.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"status": "ok", "changed": [str(npmrc)], "setting": wanted}


NODE_BUILTINS = frozenset(
    [
        "assert",
        "buffer",
        "child_process",
        "cluster",
        "crypto",
        "dgram",
        "dns",
        "events",
        "fs",
        "http",
        "http2",
        "https",
        "net",
        "os",
        "path",
        "perf_hooks",
        "process",
        "querystring",
        "readline",
        "stream",
        "string_decoder",
        "timers",
        "tls",
        "tty",
        "url",
        "util",
        "v8",
        "vm",
        "worker_threads",
        "zlib",
    ]
)
_MODULE_SPEC = re.compile(r"(?P<package>(?:@[\w.-]+/)?[\w][\w.-]*)(?:/[\w.@/-]*)?")


@action("suggest_npm_package", suggests=True)
def suggest_npm_package(module: str, types: bool = False) -> dict:
    """Say which npm package to add for a module (or its TypeScript types) the build could not find."""
    name = module.removeprefix("node:")
    match = _MODULE_SPEC.fullmatch(name)
    if not match:
        return {"status": "error", "error": f"not a package import: {module!r}"}
    package = match["package"]
    if package in NODE_BUILTINS:
        return {
            "status": "ok",
            "module": module,
            "package": "@types/node" if types else None,
            "fix": f"{package} is a Node.js built-in: add @types/node (devDependency) for its "
            "types, or build for a Node target rather than the browser",
        }
    if types:
        scoped = package[1:].replace("/", "__") if package.startswith("@") else package
        package = f"@types/{scoped}"
        fix = f"npm install --save-dev {package}  (or declare the module in a .d.ts file)"
    else:
        fix = f"npm install {package}  (and commit package.json and the lockfile)"
    return {"status": "ok", "module": module, "package": package, "fix": fix}


_NODE_LOWER_BOUND = re.compile(r"(?:>=|\^|~|=|v)?\s*(\d+)(?:\.(\d+|x))?(?:\.(\d+|x))?")


@action("suggest_node_version", suggests=True)
def suggest_node_version(required: str) -> dict:
    """Say which Node.js version satisfies a package's "engines" range the build's Node does not."""
    first = required.split("||")[0].strip()
    lower = next(
        (
            m
            for part in first.split()
            if (m := _NODE_LOWER_BOUND.fullmatch(part)) and "<" not in part
        ),
        None,
    )
    if lower is None:
        return {"status": "error", "error": f"no lower bound in {required!r}"}
    major, minor, patch = (g if g and g != "x" else "0" for g in lower.groups())
    version = f"{major}.{minor}.{patch}"
    return {
        "status": "ok",
        "required": required,
        "node": version,
        "nvmrc": major,
        "fix": f"run this build on Node.js {version} or newer (image node:{major}, "
        f"actions/setup-node node-version: {major}, or .nvmrc {major})",
    }


@action("suggest_npm_registry", suggests=True)
def suggest_npm_registry(package: str) -> dict:
    """Say why the registry answered 404 for a package and how to point npm at the right one."""
    name = package.replace("%2f", "/").replace("%2F", "/")
    match = _PACKAGE.match(name)
    if not match:
        return {"status": "error", "error": f"not an npm package: {package!r}"}
    name = match.group()
    if name.startswith("@"):
        scope = name.split("/", 1)[0]
        fix = (
            f"{name} is not on the registry that was asked: if {scope} is a private scope, map it "
            f"in .npmrc ({scope}:registry=https://<your registry>/) and give that registry a "
            "token; otherwise check the name and that the version was published"
        )
    else:
        fix = f"check the name {name!r} and that the requested version exists (npm view {name} versions)"
    return {"status": "ok", "package": name, "scoped": name.startswith("@"), "fix": fix}
