"""theow.yaml: its keys are setting names, and a wrong key says what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers.config import ConfigError, Settings


def test_a_theow_yaml_of_setting_names_is_read(tmp_path: Path) -> None:
    path = tmp_path / "theow.yaml"
    path.write_text("redis_url: redis://10.0.0.5:6379/0\nworker_concurrency: 4\n")
    settings = Settings.load(env={}, path=path)
    assert (settings.redis_url, settings.worker_concurrency) == ("redis://10.0.0.5:6379/0", 4)


@pytest.mark.parametrize("key", ["THEOW_REDIS_URL", "theow_redis_url"])
def test_an_environment_variable_name_as_key_says_which_setting_to_write(
    tmp_path: Path, key: str
) -> None:
    path = tmp_path / "theow.yaml"
    path.write_text(f"{key}: redis://10.0.0.5:6379/0\n")
    with pytest.raises(ConfigError, match=f"key '{key}': .* write redis_url:"):
        Settings.load(env={}, path=path)


def test_an_unknown_key_is_named(tmp_path: Path) -> None:
    path = tmp_path / "theow.yaml"
    path.write_text("redis: x\n")
    with pytest.raises(ConfigError, match=f"{path}: unknown setting 'redis'"):
        Settings.load(env={}, path=path)
