"""Advisors that name a command to run: lockfile refreshes and private Go modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers.core.actions import ActionError, ActionRegistry, call_action, load_actions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def registry() -> ActionRegistry:
    return load_actions(ROOT / "actions")


def run(registry, name, **params):
    return call_action(registry.get(name), params)


@pytest.mark.parametrize(
    ("tool", "name", "command"),
    [
        ("npm", "npm", "npm install --package-lock-only"),
        ("cipm", "npm", "npm install --package-lock-only"),
        ("yarn", "yarn", "yarn install"),
        ("YN0028", "yarn", "yarn install"),
        ("PNPM", "pnpm", "pnpm install --lockfile-only"),
        ("poetry.lock", "poetry", "poetry lock --no-update  (Poetry 2: poetry lock)"),
        ("uv.lock", "uv", "uv lock"),
        ("Pipfile.lock", "pipenv", "pipenv lock"),
        ("--locked", "cargo", "cargo update --workspace"),
        ("go mod tidy", "go", "go mod tidy"),
        ("go mod vendor", "go-vendor", "go mod vendor"),
    ],
)
def test_lockfile_refresh_names_each_tools_command(registry, tool, name, command):
    out = run(registry, "suggest_lockfile_refresh", tool=tool)
    assert (out["tool"], out["command"]) == (name, command)
    assert command in out["fix"]


def test_lockfile_refresh_mentions_what_is_missing(registry):
    out = run(registry, "suggest_lockfile_refresh", tool="go", package="github.com/jackc/pgx/v5")
    assert "github.com/jackc/pgx/v5 is missing" in out["fix"]
    with pytest.raises(ActionError, match="unknown package manager"):
        run(registry, "suggest_lockfile_refresh", tool="bundler")


@pytest.mark.parametrize(
    ("module", "pattern"),
    [
        ("github.com/acme/platform-sdk", "github.com/acme"),
        ("gitlab.corp.example/payments/ledger-client", "gitlab.corp.example"),
        ("gitlab.com/acme/infra/tools", "gitlab.com/acme"),
    ],
)
def test_goprivate_covers_the_owner_or_the_host(registry, module, pattern):
    out = run(registry, "suggest_goprivate", module=module)
    assert out["env"] == {"GOPRIVATE": pattern}


def test_goprivate_refuses_what_is_not_a_module_path(registry):
    for bad in ("acme", "github.com/acme x", ""):
        with pytest.raises(ActionError):
            run(registry, "suggest_goprivate", module=bad)


def test_go_toolchain_advice_works_without_the_running_version(registry):
    out = run(registry, "suggest_go_toolchain", required="1.22.1")
    assert out["toolchain"] == "go1.22.1"
    assert out["running"] == ""
