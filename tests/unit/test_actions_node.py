"""Node actions: .npmrc settings, which package to add, which Node to run, 404s."""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers.core.actions import ActionError, ActionRegistry, call_action, load_actions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def registry() -> ActionRegistry:
    return load_actions(ROOT / "actions")


def run(registry, name, workspace=None, **params):
    return call_action(registry.get(name), params, workspace=str(workspace) if workspace else None)


# --- set_npmrc_option -----------------------------------------------------------------


def test_set_npmrc_option_appends_once(registry, tmp_path):
    npmrc = tmp_path / ".npmrc"
    npmrc.write_text("@acme:registry=https://npm.corp.example/\nfund=false")
    out = run(registry, "set_npmrc_option", tmp_path, key="auto-install-peers", value="true")
    assert out == {
        "status": "ok",
        "changed": [str(npmrc)],
        "setting": "auto-install-peers=true",
    }
    assert npmrc.read_text() == (
        "@acme:registry=https://npm.corp.example/\nfund=false\nauto-install-peers=true\n"
    )
    again = run(registry, "set_npmrc_option", tmp_path, key="auto-install-peers", value=True)
    assert again["changed"] == []


def test_set_npmrc_option_replaces_the_current_value(registry, tmp_path):
    npmrc = tmp_path / ".npmrc"
    npmrc.write_text("auto-install-peers = false\nstrict-peer-dependencies=true\n")
    out = run(registry, "set_npmrc_option", tmp_path, key="auto-install-peers", value="true")
    assert out["changed"] == [str(npmrc)]
    assert npmrc.read_text() == "auto-install-peers=true\nstrict-peer-dependencies=true\n"


def test_set_npmrc_option_creates_the_file(registry, tmp_path):
    run(registry, "set_npmrc_option", tmp_path, key="legacy-peer-deps", value="true")
    assert (tmp_path / ".npmrc").read_text() == "legacy-peer-deps=true\n"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("registry", "https://evil.example/"),
        ("//registry.npmjs.org/:_authToken", "abc"),
        ("auto-install-peers", "true\nregistry=https://evil.example/"),
    ],
)
def test_set_npmrc_option_never_touches_registries_or_tokens(registry, tmp_path, key, value):
    with pytest.raises(ActionError):
        run(registry, "set_npmrc_option", tmp_path, key=key, value=value)
    assert not (tmp_path / ".npmrc").exists()


# --- advisors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "types", "package"),
    [
        ("express", False, "express"),
        ("date-fns/format", False, "date-fns"),
        ("@tanstack/react-query", False, "@tanstack/react-query"),
        ("drizzle-orm/pg-core", False, "drizzle-orm"),
        ("multer", True, "@types/multer"),
        ("@acme/ui/button", True, "@types/acme__ui"),
        ("node", True, "@types/node"),
    ],
)
def test_suggest_npm_package_names_the_package_to_add(registry, module, types, package):
    out = run(registry, "suggest_npm_package", module=module, types=types)
    assert out["package"] == package
    assert package in out["fix"]


def test_suggest_npm_package_knows_node_builtins(registry):
    out = run(registry, "suggest_npm_package", module="node:fs")
    assert out["package"] is None
    assert "built-in" in out["fix"]
    with pytest.raises(ActionError):
        run(registry, "suggest_npm_package", module="./local-file")


@pytest.mark.parametrize(
    ("required", "node", "major"),
    [
        ("^18.18.0 || ^20.9.0 || >=21.1.0", "18.18.0", "18"),
        (">=20.11", "20.11.0", "20"),
        (">= v18.17.0", "18.17.0", "18"),
        ("v18.19", "18.19.0", "18"),
        ("18", "18.0.0", "18"),
        ("20.x", "20.0.0", "20"),
    ],
)
def test_suggest_node_version_reads_engine_ranges(registry, required, node, major):
    out = run(registry, "suggest_node_version", required=required)
    assert (out["node"], out["nvmrc"]) == (node, major)
    assert f"node:{major}" in out["fix"]


def test_suggest_node_version_needs_a_lower_bound(registry):
    with pytest.raises(ActionError):
        run(registry, "suggest_node_version", required="<20")


def test_suggest_npm_registry_points_scoped_packages_at_their_registry(registry):
    out = run(registry, "suggest_npm_registry", package="@acme%2fui-kit")
    assert (out["package"], out["scoped"]) == ("@acme/ui-kit", True)
    assert "@acme:registry=" in out["fix"]
    public = run(registry, "suggest_npm_registry", package="left-padd")
    assert public["scoped"] is False
    assert "npm view left-padd versions" in public["fix"]
