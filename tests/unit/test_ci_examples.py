"""The copy-paste CI snippets in examples/ci parse, and their step is a valid `theow-client run`."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from theow_client.cli import build_parser

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ci"


def client_runs(commands: list[str]) -> list[list[str]]:
    """The ``theow-client run`` command lines among shell lines, split as a shell would."""
    found = []
    for line in commands:
        for part in re.split(r"&&|;|\n", line):
            words = shlex.split(part)
            if words and Path(words[0]).name == "theow-client" and words[1:2] == ["run"]:
                found.append(words[1:])
    return found


def assert_valid_run(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.cmd == "run" and args.command[:1] == ["--"] and args.command[1:]


def test_the_github_actions_snippet_is_yaml_whose_build_step_runs_theow_client() -> None:
    workflow: dict[Any, Any] = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())
    (job,) = workflow["jobs"].values()
    runs = client_runs([step["run"] for step in job["steps"] if "run" in step])
    assert len(runs) == 1
    assert_valid_run(runs[0])
    assert {"THEOW_REDIS_URL", "THEOW_AGENT_TOKEN", "THEOW_CONSOLE_URL"} <= set(job["env"])


def test_the_gitlab_ci_snippet_is_yaml_whose_job_script_runs_theow_client() -> None:
    pipeline: dict[str, Any] = yaml.safe_load((EXAMPLES / "gitlab-ci.yml").read_text())
    runs = client_runs(pipeline["build"]["script"])
    assert len(runs) == 1
    assert_valid_run(runs[0])


def test_the_jenkinsfile_is_balanced_and_its_build_stage_runs_theow_client() -> None:
    text = (EXAMPLES / "Jenkinsfile").read_text()
    code = re.sub(r"(?m)(^|\s)//[^\n]*", "", text)  # a comment, not a URL's //
    code = re.sub(r"'[^'\n]*'|\"[^\"\n]*\"", "''", code)  # braces in strings do not count
    depth = 0
    for char in code:
        depth += {"{": 1, "}": -1}.get(char, 0)
        assert depth >= 0
    assert depth == 0 and "'" not in code.replace("''", "")
    steps = re.findall(r"\bsh\s+(?:'([^'\n]*)'|\"([^\"\n]*)\")", text)
    runs = client_runs([single or double for single, double in steps])
    assert len(runs) == 1
    assert_valid_run(runs[0])


@pytest.mark.parametrize("name", ["github-actions.yml", "gitlab-ci.yml", "Jenkinsfile"])
def test_no_snippet_holds_a_credential_in_clear(name: str) -> None:
    text = (EXAMPLES / name).read_text()
    assert "tw1." not in text and not re.search(r"redis://[^\s]*:[^\s]*@", text.split("#")[0])
