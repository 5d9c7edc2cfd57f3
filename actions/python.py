"""Python actions: missing modules and pip dependency conflicts.

``suggest_pip_install`` and ``explain_pip_conflict`` are worker-side advisors;
``add_python_requirement`` runs on the build agent and edits a requirements
file. None of them touches the network.
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


@action("suggest_pip_install")
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


@action("explain_pip_conflict")
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
