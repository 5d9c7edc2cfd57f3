"""A build agent can import the client without the workers' heavy dependencies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FORBIDDEN = ("torch", "sentence_transformers", "pymilvus", "sqlalchemy", "google", "typer", "rich")

PROBE = f"""
import json, sys
import theow_client, theow_client.cli, theow_client.mark
forbidden = {FORBIDDEN!r}
loaded = sorted(
    name for name in sys.modules
    if any(name == root or name.startswith(root + ".") for root in forbidden)
)
print(json.dumps({{"loaded": loaded, "mark_is_decorator": callable(theow_client.mark)}}))
"""


def test_importing_the_client_loads_only_stdlib_celery_kombu_and_redis() -> None:
    root = Path(__file__).resolve().parents[2]
    process = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=root, timeout=60
    )
    assert process.returncode == 0, process.stderr
    result = json.loads(process.stdout)
    assert result["loaded"] == []
    assert result["mark_is_decorator"]


def test_the_client_install_pulls_only_celery_redis_and_defusedxml() -> None:
    """defusedxml: the hardened XML parser that reads test reports (theow_client.junit)."""
    import re
    import tomllib

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}

    assert names(project["dependencies"]) == {"celery", "redis", "defusedxml"}
    assert names(project["optional-dependencies"]["client"]) == {"celery", "redis", "defusedxml"}
