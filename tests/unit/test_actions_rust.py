"""set_rust_toolchain: raise rust-toolchain.toml to a new enough rustc, never lower it."""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers.core.actions import ActionError, ActionRegistry, call_action, load_actions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def registry() -> ActionRegistry:
    return load_actions(ROOT / "actions")


def run(registry, workspace, **params):
    return call_action(registry.get("set_rust_toolchain"), params, workspace=str(workspace))


def test_creates_a_toolchain_file_once(registry, tmp_path):
    toml = tmp_path / "rust-toolchain.toml"
    out = run(registry, tmp_path, version="1.81")
    assert (out["changed"], out["channel"]) == ([str(toml)], "1.81")
    assert toml.read_text() == '[toolchain]\nchannel = "1.81"\n'
    assert run(registry, tmp_path, version="1.81")["changed"] == []


def test_raises_an_older_channel_and_keeps_the_rest(registry, tmp_path):
    toml = tmp_path / "rust-toolchain.toml"
    toml.write_text('[toolchain]\nchannel = "1.79.0"  # CI image\ncomponents = ["clippy"]\n')
    out = run(registry, tmp_path, version="1.81")
    assert out["changed"] == [str(toml)]
    assert (
        toml.read_text() == '[toolchain]\nchannel = "1.81"  # CI image\ncomponents = ["clippy"]\n'
    )


@pytest.mark.parametrize("channel", ["1.82.0", "stable", "nightly-2024-06-01"])
def test_never_lowers_or_replaces_a_chosen_channel(registry, tmp_path, channel):
    toml = tmp_path / "rust-toolchain.toml"
    toml.write_text(f'[toolchain]\nchannel = "{channel}"\n')
    out = run(registry, tmp_path, version="1.81")
    assert (out["changed"], out["channel"]) == ([], channel)
    assert toml.read_text() == f'[toolchain]\nchannel = "{channel}"\n'


def test_adds_a_channel_to_a_file_without_one(registry, tmp_path):
    toml = tmp_path / "rust-toolchain.toml"
    toml.write_text('[toolchain]\ntargets = ["wasm32-unknown-unknown"]\n')
    run(registry, tmp_path, version="1.77")
    assert toml.read_text() == (
        '[toolchain]\nchannel = "1.77"\ntargets = ["wasm32-unknown-unknown"]\n'
    )


def test_updates_the_legacy_one_line_file(registry, tmp_path):
    legacy = tmp_path / "rust-toolchain"
    legacy.write_text("1.70.0\n")
    out = run(registry, tmp_path, version="1.74")
    assert out["changed"] == [str(legacy)]
    assert legacy.read_text() == "1.74\n"
    assert not (tmp_path / "rust-toolchain.toml").exists()


@pytest.mark.parametrize(("edition", "channel"), [("2021", "1.56"), ("2024", "1.85")])
def test_an_edition_names_its_first_rustc(registry, tmp_path, edition, channel):
    assert run(registry, tmp_path, edition=edition)["channel"] == channel


def test_refuses_what_is_not_a_rustc_version(registry, tmp_path):
    for params in ({"version": "latest"}, {"version": "1.81; rm"}, {"edition": "2030"}, {}):
        with pytest.raises(ActionError):
            run(registry, tmp_path, **params)
    assert list(tmp_path.iterdir()) == []
