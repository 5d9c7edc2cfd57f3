"""The shipped actions in actions/*.py: workspace edits and worker-side advisors."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml

from theow_workers.core.actions import ActionError, ActionRegistry, call_action, load_actions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def registry() -> ActionRegistry:
    return load_actions(ROOT / "actions")


def run(registry: ActionRegistry, name: str, workspace: Path | None = None, **params):
    spec = registry.get(name)
    assert spec is not None, f"action {name} is not registered"
    return call_action(spec, params, workspace=str(workspace) if workspace else None)


GO_MOD = """module github.com/acme/payments-api

go 1.22

require (
\tgithub.com/imdario/mergo v1.0.0
\tgithub.com/stretchr/testify v1.9.0
)
"""


# --- go_mod_replace ------------------------------------------------------------


def test_go_mod_replace_appends_directive_once(registry, tmp_path):
    (tmp_path / "go.mod").write_text(GO_MOD)
    params = {
        "old_path": "github.com/imdario/mergo",
        "new_path": "dario.cat/mergo",
        "version": "v1.0.0",
    }

    first = run(registry, "go_mod_replace", tmp_path, **params)
    assert first["status"] == "ok"
    assert first["changed"] == [str(tmp_path / "go.mod")]
    text = (tmp_path / "go.mod").read_text()
    assert text.startswith(GO_MOD)
    assert text.rstrip().endswith("replace github.com/imdario/mergo => dario.cat/mergo v1.0.0")

    second = run(registry, "go_mod_replace", tmp_path, **params)
    assert second["changed"] == []
    assert (tmp_path / "go.mod").read_text() == text
    assert text.count("replace ") == 1


def test_go_mod_replace_updates_existing_single_line(registry, tmp_path):
    old = GO_MOD + "\nreplace github.com/imdario/mergo => dario.cat/mergo v0.3.16 // pinned\n"
    (tmp_path / "go.mod").write_text(old)
    out = run(
        registry,
        "go_mod_replace",
        tmp_path,
        old_path="github.com/imdario/mergo",
        new_path="dario.cat/mergo",
        version="v1.0.0",
    )
    assert out["changed"] == [str(tmp_path / "go.mod")]
    text = (tmp_path / "go.mod").read_text()
    assert "v0.3.16" not in text
    assert text.count("replace github.com/imdario/mergo => dario.cat/mergo v1.0.0") == 1


def test_go_mod_replace_updates_inside_replace_block(registry, tmp_path):
    block = (
        GO_MOD
        + "\nreplace (\n\tgithub.com/Sirupsen/logrus => github.com/sirupsen/logrus v1.8.1\n"
        + "\texample.com/other => ../other\n)\n"
    )
    (tmp_path / "go.mod").write_text(block)
    params = {
        "old_path": "github.com/Sirupsen/logrus",
        "new_path": "github.com/sirupsen/logrus",
        "version": "v1.9.3",
    }
    out = run(registry, "go_mod_replace", tmp_path, **params)
    assert out["changed"]
    text = (tmp_path / "go.mod").read_text()
    assert "\tgithub.com/Sirupsen/logrus => github.com/sirupsen/logrus v1.9.3\n" in text
    assert "example.com/other => ../other" in text
    assert text.count("github.com/Sirupsen/logrus =>") == 1
    assert run(registry, "go_mod_replace", tmp_path, **params)["changed"] == []


def test_go_mod_replace_refuses_bad_input(registry, tmp_path):
    with pytest.raises(ActionError, match=r"no go\.mod"):
        run(
            registry,
            "go_mod_replace",
            tmp_path,
            old_path="a.b/c",
            new_path="d.e/f",
            version="v1.0.0",
        )
    (tmp_path / "go.mod").write_text(GO_MOD)
    with pytest.raises(ActionError, match="not a module path"):
        run(
            registry,
            "go_mod_replace",
            tmp_path,
            old_path="a.b/c\nreplace x",
            new_path="d.e/f",
            version="v1.0.0",
        )
    with pytest.raises(ActionError, match="not a module version"):
        run(
            registry,
            "go_mod_replace",
            tmp_path,
            old_path="a.b/c",
            new_path="d.e/f",
            version="latest",
        )
    assert (tmp_path / "go.mod").read_text() == GO_MOD


# --- set_node_options --------------------------------------------------------------


def test_set_node_options_creates_npmrc_once(registry, tmp_path):
    out = run(registry, "set_node_options", tmp_path, max_old_space_size=8192)
    npmrc = tmp_path / ".npmrc"
    assert out["changed"] == [str(npmrc)]
    assert npmrc.read_text() == "node-options=--max-old-space-size=8192\n"
    again = run(registry, "set_node_options", tmp_path, max_old_space_size="8192")
    assert again["changed"] == []
    assert npmrc.read_text() == "node-options=--max-old-space-size=8192\n"


def test_set_node_options_keeps_other_settings_and_flags(registry, tmp_path):
    npmrc = tmp_path / ".npmrc"
    npmrc.write_text(
        "registry=https://npm.corp.example/\n"
        "node-options=--enable-source-maps --max-old-space-size=2048\n"
        "fund=false\n"
    )
    out = run(registry, "set_node_options", tmp_path, max_old_space_size=8192)
    assert out["changed"] == [str(npmrc)]
    assert npmrc.read_text() == (
        "registry=https://npm.corp.example/\n"
        "node-options=--enable-source-maps --max-old-space-size=8192\n"
        "fund=false\n"
    )
    assert run(registry, "set_node_options", tmp_path, max_old_space_size=8192)["changed"] == []


def test_set_node_options_never_shrinks_the_heap(registry, tmp_path):
    npmrc = tmp_path / ".npmrc"
    npmrc.write_text("node-options=--max-old-space-size=12288\n")
    out = run(registry, "set_node_options", tmp_path, max_old_space_size=8192)
    assert out["changed"] == []
    assert npmrc.read_text() == "node-options=--max-old-space-size=12288\n"
    with pytest.raises(ActionError):
        run(registry, "set_node_options", tmp_path, max_old_space_size="lots")


# --- add_python_requirement -------------------------------------------------------


def test_add_python_requirement_maps_and_appends_once(registry, tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("requests==2.32.3\n# tools\n-r requirements-dev.txt")
    out = run(registry, "add_python_requirement", tmp_path, module="yaml")
    assert out == {"status": "ok", "changed": [str(req)], "package": "PyYAML"}
    assert req.read_text() == "requests==2.32.3\n# tools\n-r requirements-dev.txt\nPyYAML\n"
    assert run(registry, "add_python_requirement", tmp_path, module="yaml")["changed"] == []


def test_add_python_requirement_sees_existing_pin_under_another_spelling(registry, tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("pyyaml>=6.0\nscikit_learn==1.5.0\n")
    assert run(registry, "add_python_requirement", tmp_path, module="yaml")["changed"] == []
    assert run(registry, "add_python_requirement", tmp_path, module="sklearn")["changed"] == []
    assert req.read_text() == "pyyaml>=6.0\nscikit_learn==1.5.0\n"


def test_add_python_requirement_stays_in_workspace(registry, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "requirements.txt").write_text("")
    with pytest.raises(ActionError, match="outside the workspace"):
        run(
            registry,
            "add_python_requirement",
            workspace,
            module="yaml",
            requirements_file="../requirements.txt",
        )
    with pytest.raises(ActionError, match=r"no requirements\.txt"):
        run(registry, "add_python_requirement", workspace, module="yaml")


# --- worker-side advisors ---------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "package"),
    [
        ("yaml", "PyYAML"),
        ("cv2", "opencv-python"),
        ("PIL", "Pillow"),
        ("sklearn", "scikit-learn"),
        ("bs4", "beautifulsoup4"),
        ("google.protobuf", "protobuf"),
        ("pkg_resources", "setuptools"),
        ("requests", "requests"),
    ],
)
def test_suggest_pip_install_maps_import_names(registry, module, package):
    out = run(registry, "suggest_pip_install", module=module)
    assert out["status"] == "ok"
    assert out["package"] == package
    assert out["fix"].startswith(f"pip install {package}")


def test_suggest_pip_install_says_when_it_guesses(registry):
    assert run(registry, "suggest_pip_install", module="yaml")["confidence"] == "known"
    guessed = run(registry, "suggest_pip_install", module="acme_utils.io")
    assert (guessed["package"], guessed["confidence"]) == ("acme-utils", "guessed")
    with pytest.raises(ActionError):
        run(registry, "suggest_pip_install", module="yaml; rm -rf /")


@pytest.mark.parametrize(
    ("header", "package"),
    [
        ("openssl/ssl.h", "libssl-dev"),
        ("zlib.h", "zlib1g-dev"),
        ("ffi.h", "libffi-dev"),
        ("Python.h", "python3-dev"),
        ("libxml/xmlversion.h", "libxml2-dev"),
        ("boost/asio.hpp", "libboost-all-dev"),
    ],
)
def test_suggest_apt_package_maps_headers(registry, header, package):
    out = run(registry, "suggest_apt_package", header=header)
    assert (out["package"], out["fix"]) == (package, f"apt-get install -y {package}")


def test_suggest_apt_package_unknown_header_points_to_apt_file(registry):
    out = run(registry, "suggest_apt_package", header="acme/widget.h")
    assert out["package"] is None
    assert out["fix"].startswith("apt-file search acme/widget.h")


def test_explain_pip_conflict_reads_the_conflict_from_the_log(registry):
    stderr = (
        "ERROR: Cannot install -r requirements.txt (line 7) and urllib3==2.0.7 because these "
        "package versions have conflicting dependencies.\n\nThe conflict is caused by:\n"
        "    The user requested urllib3==2.0.7\n"
        "    botocore 1.29.165 depends on urllib3<1.27 and >=1.25.4\n\n"
        "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/\n"
    )
    spec = registry.get("explain_pip_conflict")
    out = call_action(
        spec,
        {"packages": "-r requirements.txt (line 7) and urllib3==2.0.7"},
        facts={"stderr": stderr},
    )
    assert out["pinned"] == ["urllib3==2.0.7"]
    assert out["conflict"][1] == "botocore 1.29.165 depends on urllib3<1.27 and >=1.25.4"
    assert "urllib3==2.0.7" in out["fix"]


def test_suggest_go_toolchain_names_a_real_toolchain(registry):
    out = run(registry, "suggest_go_toolchain", required="1.23", running="1.22.4")
    assert out["toolchain"] == "go1.23.0"
    assert out["env"] == {"GOTOOLCHAIN": "go1.23.0+auto"}


def test_client_side_flags(registry):
    """Actions that edit the build's workspace run on the agent; advisors on the worker."""
    client = {spec.name for spec in registry if spec.client_side}
    assert client == {
        "go_mod_replace",
        "set_node_options",
        "set_npmrc_option",
        "add_python_requirement",
        "pin_python_requirement",
        "set_rust_toolchain",
        "set_gradle_jvmargs",
        "clear_workspace_cache",
        "clear_python_bytecode",
    }
    for spec in registry:
        takes_workspace = "workspace" in inspect.signature(spec.func).parameters
        assert takes_workspace == spec.client_side, spec.name


def test_rules_call_registered_actions_with_their_params(registry):
    """Every `then` step in rules/ names an action here and passes exactly its params."""
    for path in sorted((ROOT / "rules").glob("*.rule.yaml")):
        rule = yaml.safe_load(path.read_text())
        for step in rule.get("then") or []:
            spec = registry.get(step["action"])
            assert spec is not None, f"{path.name}: unknown action {step['action']}"
            assert set(step.get("params") or {}) <= set(spec.parameters()), path.name
