"""Python actions: re-pinning a requirement, explaining conflicts, interpreters, plugins."""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers.core.actions import ActionError, ActionRegistry, call_action, load_actions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def registry() -> ActionRegistry:
    return load_actions(ROOT / "actions")


def run(registry, name, workspace=None, facts=None, **params):
    workspace = str(workspace) if workspace else None
    return call_action(registry.get(name), params, facts=facts, workspace=workspace)


# --- pin_python_requirement ---------------------------------------------------------

REQUIREMENTS = """\
# runtime
requests==2.32.3
torch==2.9.9 ; platform_machine == "x86_64"  # GPU image
acme-auth[jwt]==3.1.0
numpy>=1.26
"""


def test_pin_moves_a_missing_pin_to_the_newest_final_release_once(registry, tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text(REQUIREMENTS)
    available = "2.2.0, 2.2.1, 2.3.0, 2.3.1, 2.4.0rc1"

    out = run(registry, "pin_python_requirement", tmp_path, package="torch", available=available)

    assert out["changed"] == [str(req)]
    assert (out["version"], out["previous"]) == ("2.3.1", ["==2.9.9"])
    text = req.read_text()
    assert 'torch==2.3.1 ; platform_machine == "x86_64"  # GPU image\n' in text
    assert text.replace("torch==2.3.1", "torch==2.9.9") == REQUIREMENTS
    again = run(registry, "pin_python_requirement", tmp_path, package="torch", available=available)
    assert again["changed"] == [] and req.read_text() == text


def test_pin_keeps_extras_and_matches_names_as_pip_does(registry, tmp_path):
    (tmp_path / "requirements.txt").write_text(REQUIREMENTS)
    out = run(
        registry,
        "pin_python_requirement",
        tmp_path,
        package="Acme_Auth",
        available="2.9.1, 3.0.0, 3.0.2, 3.0.2.post1",
    )
    assert out["version"] == "3.0.2.post1"
    assert "acme-auth[jwt]==3.0.2.post1\n" in (tmp_path / "requirements.txt").read_text()


@pytest.mark.parametrize(
    ("content", "package", "message"),
    [
        (REQUIREMENTS, "numpy", "not pinned with =="),
        (REQUIREMENTS, "pandas", "not pinned in requirements.txt"),
        ("torch==2.9.9 \\\n    --hash=sha256:0a1b\n", "torch", "hash-pinned"),
    ],
)
def test_pin_refuses_what_it_should_not_touch(registry, tmp_path, content, package, message):
    (tmp_path / "requirements.txt").write_text(content)
    with pytest.raises(ActionError, match=message):
        run(registry, "pin_python_requirement", tmp_path, package=package, available="1.0")
    assert (tmp_path / "requirements.txt").read_text() == content


def test_pin_refuses_bad_input_and_paths_outside_the_workspace(registry, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "requirements.txt").write_text("torch==2.9.9\n")
    with pytest.raises(ActionError, match="no final release"):
        run(registry, "pin_python_requirement", workspace, package="torch", available="2.4.0rc1")
    with pytest.raises(ActionError, match="outside the workspace"):
        run(
            registry,
            "pin_python_requirement",
            workspace,
            package="torch",
            available="2.3.1",
            requirements_file="../requirements.txt",
        )
    with pytest.raises(ActionError, match="not a package name"):
        run(registry, "pin_python_requirement", workspace, package="torch; rm", available="1.0")


# --- advisors -----------------------------------------------------------------------


def test_solver_conflict_quotes_poetrys_explanation(registry):
    log = (
        "Resolving dependencies...\n\n"
        "Because pandas (2.2.2) depends on numpy (>=1.26.0)\n"
        " and myproj depends on numpy (1.24.4), pandas is forbidden.\n"
        "So, because myproj depends on pandas (2.2.2), version solving failed.\n"
    )
    out = run(
        registry,
        "explain_python_solver_conflict",
        facts={"stderr": log},
        conflict="So, because myproj depends on pandas (2.2.2), version solving failed.",
    )
    assert out["explanation"][0] == "Because pandas (2.2.2) depends on numpy (>=1.26.0)"
    assert len(out["explanation"]) == 3
    assert {"pandas", "numpy"} <= set(out["packages"])


def test_solver_conflict_reads_uvs_tree(registry):
    log = (
        "  \u00d7 No solution found when resolving dependencies:\n"
        "  ╰─▶ Because you require numpy==1.21.6 and pandas==2.2.2 depends on numpy>=1.22.4, "
        "we can conclude that your requirements and pandas==2.2.2 are incompatible.\n"
    )
    out = run(
        registry, "explain_python_solver_conflict", facts={"stderr": log}, conflict="Because ..."
    )
    assert out["explanation"][0].startswith("Because you require numpy==1.21.6")
    assert {"numpy", "pandas"} <= set(out["packages"])


@pytest.mark.parametrize(
    ("required", "python"),
    [(">=3.10", "3.10"), (">=3.9,<4.0", "3.9"), ("^3.11", "3.11"), ("<3.13,>=3.9", "3.9")],
)
def test_suggest_python_version_reads_the_lower_bound(registry, required, python):
    out = run(registry, "suggest_python_version", required=required)
    assert out["python"] == python
    assert f"python:{python}" in out["fix"]


def test_suggest_python_version_needs_a_lower_bound(registry):
    with pytest.raises(ActionError):
        run(registry, "suggest_python_version", required="<3.12")


def test_suggest_virtualenv_offers_a_venv_first(registry):
    out = run(registry, "suggest_virtualenv")
    assert "python3 -m venv" in out["fix"]
    assert "break-system-packages" in out["alternative"]


@pytest.mark.parametrize(
    ("fixture", "plugin"),
    [("mocker", "pytest-mock"), ("benchmark", "pytest-benchmark"), ("db", "pytest-django")],
)
def test_suggest_pytest_plugin_knows_common_plugins(registry, fixture, plugin):
    out = run(registry, "suggest_pytest_plugin", fixture=fixture)
    assert (out["plugin"], out["confidence"]) == (plugin, "known")
    assert out["fix"].startswith(f"pip install {plugin}")


def test_suggest_pytest_plugin_says_when_it_does_not_know(registry):
    out = run(registry, "suggest_pytest_plugin", fixture="tenant_factory")
    assert (out["plugin"], out["confidence"]) == (None, "unknown")
    assert "conftest.py" in out["fix"]
    with pytest.raises(ActionError):
        run(registry, "suggest_pytest_plugin", fixture="x; y")
