"""The operations page against the code it documents: settings, queues, compose services.

The page's settings table, its queue list and its compose service table are
read as an operator reads them and compared with the settings model
(``theow_workers.config.Settings``), the queue names (``theow_client.names``)
and ``docker-compose.yml``. A setting, a queue or a service added without its
line on the page, or a default changed without its row, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from theow_client import names
from theow_workers.config import ENV_ALIASES, Settings

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "operations.md"
COMPOSE = ROOT / "docker-compose.yml"
CODE = (ROOT / "theow_client", ROOT / "theow_workers")

# A variable named in a row's first cell, with the value in brackets right after it, if any.
NAMED = re.compile(r"`((?:THEOW|GEMINI)_[A-Z0-9_*]+)`(?:\s*\(([^()]*)\))?")
SECONDS = re.compile(r"(-?\d+(?:\.\d+)?)(?: s)?")
EMPTY_LIST = ("none", "any")


def table(text: str, header: str) -> list[list[str]]:
    """The cells of each row of the Markdown table whose header row is ``header``."""
    start = text.index(header)
    end = text.find("\n\n", start)
    lines = text[start : end if end != -1 else len(text)].splitlines()[2:]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]


def documented_settings(text: str) -> dict[str, str | None]:
    """Each variable of the settings table → the default its row gives (None: none given)."""
    found: dict[str, str | None] = {}
    for row in table(text, "| setting | what it is |"):
        for name, value in NAMED.findall(row[0]):
            assert name not in found, f"{name} has two rows"
            found[name] = value or None
    return found


def env_name(field: str) -> str:
    return ENV_ALIASES.get(field, f"THEOW_{field.upper()}")


def shown(value: str) -> str:
    """The default as the row gives it: ``(`on`)``, ``(300 s)``, ``(0; dollars, …)`` → its first part."""
    return re.split(r"[;,]", value, maxsplit=1)[0].strip().strip("`")


def agrees(given: str, default: Any) -> bool:
    """Whether the page's default ``given`` says what the model's ``default`` is."""
    value = shown(given)
    if isinstance(default, bool):
        return value == ("on" if default else "off")
    if isinstance(default, int | float):
        number = SECONDS.fullmatch(value)
        return number is not None and float(number.group(1)) == default
    if isinstance(default, list):
        return not default and value in EMPTY_LIST
    if isinstance(default, str):
        return value == default
    return False


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_every_setting_has_its_row_on_the_operations_page(page):
    documented = documented_settings(page)

    missing = [env_name(f) for f in Settings.model_fields if env_name(f) not in documented]

    assert not missing, f"settings without a row in docs/operations.md's table: {missing}"


def test_a_row_names_each_setting_itself_never_a_pattern(page):
    patterns = [name for name in documented_settings(page) if "*" in name]

    assert not patterns, f"name each setting (a pattern hides a new one): {patterns}"


def test_every_default_the_page_gives_is_the_settings_default(page):
    documented = documented_settings(page)
    wrong = []
    for field, info in Settings.model_fields.items():
        given = documented.get(env_name(field))
        if given is not None and not agrees(given, info.default):
            wrong.append(f"{env_name(field)}: page says ({given}), default is {info.default!r}")

    assert not wrong, "\n".join(wrong)


def test_every_number_and_switch_shows_its_default(page):
    documented = documented_settings(page)
    plain = (bool, int, float)

    silent = [
        env_name(field)
        for field, info in Settings.model_fields.items()
        if type(info.default) in plain and documented.get(env_name(field)) is None
    ]

    assert not silent, f"give the default in brackets after the name: {silent}"


def test_no_secret_setting_shows_a_default(page):
    documented = documented_settings(page)

    shown_secrets = [
        env_name(field)
        for field, info in Settings.model_fields.items()
        if isinstance(info.default, SecretStr) and documented.get(env_name(field))
    ]

    assert not shown_secrets


def test_every_other_variable_of_the_table_is_read_by_the_code(page):
    """A row that is not a setting (an agent's variable, a cache) names what the code reads."""
    settings = {env_name(f) for f in Settings.model_fields}
    source = "\n".join(p.read_text(encoding="utf-8") for d in CODE for p in d.rglob("*.py"))

    unread = [
        name
        for name in documented_settings(page)
        if name not in settings and f'"{name}"' not in source
    ]

    assert not unread, f"rows naming variables nothing reads: {unread}"


def test_the_queue_list_names_every_queue(page):
    start = page.index("Queues: ")
    sentence = page[start : page.index("\n\n", start)]

    listed = re.findall(r"`([a-z]+)`\s+\(", sentence)

    assert sorted(listed) == sorted(names.QUEUES)


def test_the_service_table_names_every_compose_service(page):
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    rows = table(page, "| service | what it is for |")

    listed = [name for row in rows for name in re.findall(r"`([a-z-]+)`", row[0])]

    assert sorted(listed) == sorted(services)


def test_the_grace_periods_the_page_gives_are_compose_s(page):
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    start = page.index("Grace periods are longer than the task time limits")
    sentence = " ".join(page[start : page.index(")", start)].split())

    for name in ("resolver", "replay", "explorer", "explainer"):
        grace = str(services[name]["stop_grace_period"]).removesuffix("s")
        assert f"{name} {grace} s" in sentence or (
            name == "resolver" and f"resolver and replay {grace} s" in sentence
        ), f"{name}: compose waits {grace} s; the page says: {sentence}"


def test_docker_lets_an_explain_task_finish_before_it_kills_the_explainer():
    from theow_workers.tasks import EXPLAIN_TIME_LIMIT

    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    grace = int(str(services["explainer"]["stop_grace_period"]).removesuffix("s"))

    # The task's hard limit is its soft limit + 30 s (theow_workers/tasks.py).
    assert grace > EXPLAIN_TIME_LIMIT + 30, "docker would SIGKILL an explainer mid-call"
