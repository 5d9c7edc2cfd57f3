"""Workspace cleanup: delete known caches and stale bytecode, nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from theow_workers.core.actions import ActionError, ActionRegistry, call_action, load_actions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def registry() -> ActionRegistry:
    return load_actions(ROOT / "actions")


def run(registry, name, workspace, **params):
    return call_action(registry.get(name), params, workspace=str(workspace))


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    return path


def test_clear_workspace_cache_deletes_the_incremental_caches_once(registry, tmp_path):
    touch(tmp_path / "target/debug/incremental/ledger-1x2y/s-abc/dep-graph.bin")
    touch(tmp_path / "target/release/incremental/ledger-9z/query-cache.bin")
    binary = touch(tmp_path / "target/debug/ledger")
    out = run(registry, "clear_workspace_cache", tmp_path, path="target/*/incremental")
    assert sorted(out["changed"]) == [
        str(tmp_path / "target/debug/incremental"),
        str(tmp_path / "target/release/incremental"),
    ]
    assert binary.exists()
    assert (
        run(registry, "clear_workspace_cache", tmp_path, path="target/*/incremental")["changed"]
        == []
    )


@pytest.mark.parametrize("path", ["src", "target", "..", "target/../../etc/incremental", "/tmp"])
def test_clear_workspace_cache_refuses_anything_but_a_known_cache(registry, tmp_path, path):
    touch(tmp_path / "src/main.rs")
    with pytest.raises(ActionError, match="not a cache"):
        run(registry, "clear_workspace_cache", tmp_path, path=path)
    assert (tmp_path / "src/main.rs").exists()


def test_clear_workspace_cache_does_not_follow_links_out_of_the_workspace(registry, tmp_path):
    outside = tmp_path / "elsewhere"
    keep = touch(outside / "incremental/keep.bin")
    workspace = tmp_path / "ws"
    (workspace / "target").mkdir(parents=True)
    os.symlink(outside, workspace / "target/debug")
    out = run(registry, "clear_workspace_cache", workspace, path="target/*/incremental")
    assert out["changed"] == []
    assert keep.exists()


def test_clear_python_bytecode_removes_stale_bytecode_from_the_sources(registry, tmp_path):
    cache = touch(tmp_path / "tests/unit/__pycache__/test_utils.cpython-311-pytest-8.2.2.pyc")
    stray = touch(tmp_path / "tools/settings.pyc")
    source = touch(tmp_path / "tools/settings.py")
    venv = touch(tmp_path / ".venv/lib/python3.11/site-packages/yaml/__pycache__/x.pyc")
    deps = touch(tmp_path / "node_modules/node-gyp/gyp/__pycache__/y.pyc")

    out = run(registry, "clear_python_bytecode", tmp_path)

    assert sorted(out["changed"]) == sorted([str(cache.parent), str(stray)])
    assert out["removed"] == 2
    assert source.exists() and venv.exists() and deps.exists()
    assert run(registry, "clear_python_bytecode", tmp_path)["changed"] == []
