"""Python actions: missing modules, dependency conflicts, pins and interpreters.

``add_python_requirement`` and ``pin_python_requirement`` run on the build
agent and edit a requirements file; the others are worker-side advisors that
read the log and say what to do. None of them touches the network.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from theow_workers import action

# Import name → PyPI distribution, where the two differ. Dotted keys win over
# their top-level package (google.protobuf is protobuf, not "google").
MODULE_TO_PACKAGE: dict[str, str] = {
    "yaml": "PyYAML",
    "cv2": "opencv-python",
    "PIL": "Pillow",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
    "bs4": "beautifulsoup4",
    "dateutil": "python-dateutil",
    "dotenv": "python-dotenv",
    "jwt": "PyJWT",
    "jose": "python-jose",
    "OpenSSL": "pyOpenSSL",
    "Crypto": "pycryptodome",
    "Cryptodome": "pycryptodomex",
    "magic": "python-magic",
    "serial": "pyserial",
    "usb": "pyusb",
    "git": "GitPython",
    "docx": "python-docx",
    "pptx": "python-pptx",
    "attr": "attrs",
    "zmq": "pyzmq",
    "fitz": "PyMuPDF",
    "MySQLdb": "mysqlclient",
    "psycopg2": "psycopg2-binary",
    "multipart": "python-multipart",
    "slugify": "python-slugify",
    "telegram": "python-telegram-bot",
    "ldap": "python-ldap",
    "gi": "PyGObject",
    "websocket": "websocket-client",
    "grpc": "grpcio",
    "google.protobuf": "protobuf",
    "google.cloud.storage": "google-cloud-storage",
    "google.cloud.bigquery": "google-cloud-bigquery",
    "googleapiclient": "google-api-python-client",
    "win32api": "pywin32",
    "win32con": "pywin32",
    "pkg_resources": "setuptools",
    "distutils": "setuptools",
    "Levenshtein": "levenshtein",
    "markdown": "Markdown",
    "jinja2": "Jinja2",
    "nacl": "PyNaCl",
    "kafka": "kafka-python",
    "consul": "python-consul",
    "snappy": "python-snappy",
}

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def package_for_module(module: str) -> tuple[str, bool]:
    """Return (distribution name, whether it came from the known mapping)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        known = MODULE_TO_PACKAGE.get(".".join(parts[:end]))
        if known:
            return known, True
    return parts[0].replace("_", "-"), False


def _canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@action("suggest_pip_install", suggests=True)
def suggest_pip_install(module: str) -> dict:
    """Say which PyPI package provides a module that Python could not import."""
    if not _MODULE.fullmatch(module):
        return {"status": "error", "error": f"not a module name: {module!r}"}
    package, known = package_for_module(module)
    return {
        "status": "ok",
        "module": module,
        "package": package,
        "confidence": "known" if known else "guessed",
        "fix": f"pip install {package}  (and declare {package} in the project's dependencies)",
    }


@action("add_python_requirement", client_side=True)
def add_python_requirement(
    workspace: str, module: str, requirements_file: str = "requirements.txt"
) -> dict:
    """Add the package providing a missing module to the workspace's requirements file."""
    if not _MODULE.fullmatch(module):
        return {"status": "error", "error": f"not a module name: {module!r}"}
    root = Path(workspace).resolve()
    path = (root / requirements_file).resolve()
    if not path.is_relative_to(root):
        return {"status": "error", "error": f"{requirements_file!r} is outside the workspace"}
    if not path.is_file():
        return {"status": "error", "error": f"no {requirements_file} in {workspace}"}
    package, _ = package_for_module(module)
    text = path.read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.lstrip().startswith(("#", "-")):
            continue
        match = _REQUIREMENT_NAME.match(line)
        if match and _canonical(match.group(1)) == _canonical(package):
            return {"status": "ok", "changed": [], "package": package}
    if text and not text.endswith("\n"):
        text += "\n"
    path.write_text(f"{text}{package}\n", encoding="utf-8")
    return {"status": "ok", "changed": [str(path)], "package": package}


@action("explain_pip_conflict", suggests=True)
def explain_pip_conflict(packages: str, facts: dict[str, Any] | None = None) -> dict:
    """Summarise a pip ResolutionImpossible: the clashing constraints and which pins to loosen."""
    log = str((facts or {}).get("stderr", ""))
    causes: list[str] = []
    lines = log.splitlines()
    for index, line in enumerate(lines):
        if line.strip() == "The conflict is caused by:":
            for cause in lines[index + 1 :]:
                if not cause.strip():
                    break
                causes.append(cause.strip())
            break
    pinned = [
        c[len("The user requested ") :] for c in causes if c.startswith("The user requested ")
    ]
    if pinned:
        fix = (
            "loosen or drop the pins " + ", ".join(pinned) + " so pip can pick compatible versions"
        )
    else:
        fix = f"loosen the version ranges of {packages} so pip can pick compatible versions"
    return {
        "status": "ok",
        "packages": packages,
        "conflict": causes,
        "pinned": pinned,
        "fix": fix,
    }


_FINAL_RELEASE = re.compile(r"\d+(?:\.\d+)*(?:\.post\d+)?")
_REQUIREMENT_LINE = re.compile(
    r"(?P<indent>\s*)(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<extras>\s*\[[^\]]*\])?"
    r"\s*(?P<spec>[^;#]*?)(?P<marker>\s*;[^#]*?)?(?P<comment>\s+#.*)?"
)


def _release_key(version: str) -> tuple[int, ...]:
    """Order of final releases: 2.10 after 2.9, a .post after its release."""
    release, _, post = version.partition(".post")
    return (*(int(part) for part in release.split(".")), int(post or -1))


@action("pin_python_requirement", client_side=True)
def pin_python_requirement(
    workspace: str, package: str, available: str, requirements_file: str = "requirements.txt"
) -> dict:
    """Re-pin a requirement whose pinned version does not exist to the newest final release offered."""
    if not _REQUIREMENT_NAME.fullmatch(package):
        return {"status": "error", "error": f"not a package name: {package!r}"}
    finals = [v.strip() for v in available.split(",") if _FINAL_RELEASE.fullmatch(v.strip())]
    if not finals:
        return {"status": "error", "error": f"no final release among {available!r}"}
    version = max(finals, key=_release_key)
    root = Path(workspace).resolve()
    path = (root / requirements_file).resolve()
    if not path.is_relative_to(root):
        return {"status": "error", "error": f"{requirements_file!r} is outside the workspace"}
    if not path.is_file():
        return {"status": "error", "error": f"no {requirements_file} in {workspace}"}
    lines = path.read_text(encoding="utf-8").splitlines()
    found, previous = False, []
    # Every line naming the package is re-pinned (one per environment marker).
    for index, line in enumerate(lines):
        match = _REQUIREMENT_LINE.fullmatch(line)
        if not match or line.lstrip().startswith(("#", "-")):
            continue
        if _canonical(match["name"]) != _canonical(package):
            continue
        spec = match["spec"].strip()
        if "--hash" in line or line.rstrip().endswith("\\"):
            return {"status": "error", "error": f"{package} is hash-pinned: regenerate the file"}
        if not spec.startswith("=="):
            return {"status": "error", "error": f"{package} is not pinned with == ({spec!r})"}
        found = True
        previous.append(spec)
        pinned = f"=={version}"
        if spec != pinned:
            extras = (match["extras"] or "").strip()
            tail = (match["marker"] or "") + (match["comment"] or "")
            lines[index] = f"{match['indent']}{match['name']}{extras}{pinned}{tail}"
    if not found:
        return {"status": "error", "error": f"{package} is not pinned in {requirements_file}"}
    changed = []
    if any(spec != f"=={version}" for spec in previous):
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        changed = [str(path)]
    return {
        "status": "ok",
        "changed": changed,
        "package": package,
        "version": version,
        "previous": previous,
    }


@action("explain_python_solver_conflict", suggests=True)
def explain_python_solver_conflict(conflict: str, facts: dict[str, Any] | None = None) -> dict:
    """Summarise a Poetry or uv "version solving failed": the chain of constraints that clash."""
    log = str((facts or {}).get("stderr", ""))
    chain: list[str] = []
    for line in log.splitlines():
        text = line.strip().lstrip("\u2570\u2500\u25b6 ").strip()
        if not chain and not text.startswith("Because "):
            continue
        if not text:
            break
        chain.append(text)
        if len(chain) >= 12:
            break
    packages = sorted(set(re.findall(r"\b([A-Za-z][\w.-]*) ?(?:\(|[=<>~^!]=?\d)", " ".join(chain))))
    return {
        "status": "ok",
        "conflict": conflict.strip(),
        "explanation": chain or [conflict.strip()],
        "packages": packages,
        "fix": "loosen one of the constraints named in the explanation (a pin in pyproject.toml "
        "or a dependency's range), then lock again",
    }


@action("suggest_python_version", suggests=True)
def suggest_python_version(required: str) -> dict:
    """Say which Python a build needs when a package or the project requires a newer interpreter."""
    lower = re.search(r"(?:>=|~=|\^|==|>)\s*(\d+\.\d+)", required)
    if lower is None:
        lower = re.fullmatch(r"\s*(\d+\.\d+)(?:\.\d+)?\s*", required)
    if lower is None:
        return {"status": "error", "error": f"no lower bound in {required!r}"}
    version = lower.group(1)
    return {
        "status": "ok",
        "required": required,
        "python": version,
        "fix": f"run this build on Python {version} or newer (image python:{version}, "
        f"actions/setup-python python-version: '{version}'), or pin the package to a release "
        "that still supports the current interpreter",
    }


@action("suggest_virtualenv", suggests=True)
def suggest_virtualenv() -> dict:
    """Say how to install packages when pip refuses an externally managed (PEP 668) Python."""
    return {
        "status": "ok",
        "fix": "install into a virtual environment: python3 -m venv .venv && "
        ". .venv/bin/activate && pip install ...",
        "alternative": "in a throwaway CI container only: PIP_BREAK_SYSTEM_PACKAGES=1 "
        "(or pip install --break-system-packages)",
    }
