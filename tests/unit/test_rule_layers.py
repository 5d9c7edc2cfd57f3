"""Rule and action directories as layers: the shipped ones first, a user's after, the last wins."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from theow_workers.config import ConfigError, Settings
from theow_workers.core.resolve.library import Library

ROOT = Path(__file__).resolve().parents[2]
NO_FILE = Path("/nonexistent/theow.yaml")

MY_RULE = """\
name: {name}
description: {description}
mode: track
when:
  - fact: stderr
    contains: "{text}"
"""


def user_layer(directory: Path) -> Path:
    directory.mkdir()
    (directory / "my_cache_corrupt.rule.yaml").write_text(
        MY_RULE.format(name="my_cache_corrupt", description="Our cache.", text="CACHE BAD")
    )
    (directory / "network_flake.rule.yaml").write_text(
        MY_RULE.format(name="network_flake", description="Our own flake rule.", text="FLAKE")
    )
    return directory


def test_a_user_layer_adds_a_rule_and_replaces_a_shipped_one_by_name(tmp_path: Path) -> None:
    mine = user_layer(tmp_path / "mine")
    settings = Settings.load(env={"THEOW_RULES_DIRS": str(mine)}, path=NO_FILE)

    knowledge = Library.configured(settings)

    rules = knowledge.rules.by_name()
    assert knowledge.rules.errors == ()
    assert rules["network_flake"].description == "Our own flake rule."
    assert "my_cache_corrupt" in rules and "go_mod_replace" in knowledge.actions
    assert len(rules) == len(list((ROOT / "rules").glob("*.rule.yaml"))) + 1
    flake = knowledge.rules.origins["network_flake"]
    assert (flake.layer, flake.overrides) == (mine, (ROOT / "rules",))


def test_rules_dirs_are_separated_as_path_is_and_come_after_the_shipped_rules(
    tmp_path: Path,
) -> None:
    env = {"THEOW_RULES_DIRS": os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")])}
    settings = Settings.load(env=env, path=NO_FILE)
    assert settings.rule_layers == (ROOT / "rules", tmp_path / "a", tmp_path / "b")
    assert settings.user_rules_dir == tmp_path / "b"


def test_rules_dirs_in_theow_yaml_is_a_list(tmp_path: Path) -> None:
    config = tmp_path / "theow.yaml"
    config.write_text(f"rules_dirs: [{tmp_path / 'team'}, {tmp_path / 'mine'}]\n")
    settings = Settings.load(env={}, path=config)
    assert settings.rule_layers == (ROOT / "rules", tmp_path / "team", tmp_path / "mine")


def test_rules_dir_alone_still_means_only_that_directory(tmp_path: Path) -> None:
    mine = user_layer(tmp_path / "mine")
    settings = Settings.load(env={"THEOW_RULES_DIR": str(mine)}, path=NO_FILE)

    knowledge = Library.configured(settings)

    assert settings.rule_layers == (mine,)
    assert sorted(knowledge.rules.by_name()) == ["my_cache_corrupt", "network_flake"]


def test_the_shipped_rules_and_actions_are_found_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings.load(env={}, path=NO_FILE)
    assert settings.rule_layers == (ROOT / "rules",)
    assert settings.action_layers == (ROOT / "actions",)


@pytest.mark.parametrize("kind", ["RULES", "ACTIONS"])
def test_setting_both_the_only_directory_and_layers_is_one_configuration_error(
    tmp_path: Path, kind: str
) -> None:
    env = {f"THEOW_{kind}_DIR": str(tmp_path), f"THEOW_{kind}_DIRS": str(tmp_path)}
    with pytest.raises(ConfigError) as caught:
        Settings.load(env=env, path=NO_FILE)
    message = str(caught.value)
    assert f"(THEOW_{kind}_DIR, THEOW_{kind}_DIRS)" in message
    assert "\n" not in message


def test_a_missing_layer_is_named(tmp_path: Path) -> None:
    settings = Settings.load(env={"THEOW_RULES_DIRS": str(tmp_path / "gone")}, path=NO_FILE)
    (error,) = Library.configured(settings).rules.errors
    assert str(error).startswith(f"{tmp_path / 'gone'}: rules directory does not exist")


def test_an_action_layer_replaces_a_shipped_action_of_the_same_name(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(
        "from theow_workers import action\n\n"
        "@action('go_mod_replace')\n"
        "def ours(workspace: str, module: str) -> dict:\n"
        "    return {}\n"
    )
    settings = Settings.load(env={"THEOW_ACTIONS_DIRS": str(tmp_path)}, path=NO_FILE)
    knowledge = Library.configured(settings)
    spec = knowledge.actions.get("go_mod_replace")
    assert spec is not None and spec.source_file == str(tmp_path / "mine.py")
    assert "suggest_goprivate" in knowledge.actions
