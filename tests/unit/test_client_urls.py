"""A broker URL that cannot work is one line naming it and what is wrong, and no failure is lost.

The client checks ``--redis-url`` / ``THEOW_REDIS_URL`` when it first needs
it: ``submit`` spools the failure, says so and exits 2; ``run`` spools, warns
and keeps the command's exit code; ``flush`` sends nothing and exits 2. The
workers' settings check their URLs (Redis, database, Milvus) when read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from theow_workers.config import ConfigError, Settings

ROOT = Path(__file__).resolve().parents[2]

# What a new user types: a web URL, no scheme, a port out of range.
BAD_URLS = [
    ("http://theow.internal:6379/0", "scheme 'http' is not one of redis://"),
    ("127.0.0.1:6379", "no scheme; write redis://127.0.0.1:6379"),
    ("redis://host:99999", "port '99999' is not a number from 1 to 65535"),
]


def theow_client(
    *argv: str, spool: Path, url: str | None = None, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """The real `theow-client` in a fresh process: code, stdout, stderr."""
    environ = {**os.environ, "THEOW_SPOOL_DIR": str(spool)}
    environ.pop("THEOW_REDIS_URL", None)
    environ.update(env or {})
    options = ["--redis-url", url] if url else []
    process = subprocess.run(
        [sys.executable, "-m", "theow_client.cli", *options, *argv],
        capture_output=True, text=True, cwd=ROOT, env=environ, timeout=60,
    )  # fmt: skip
    return process.returncode, process.stdout, process.stderr


def spooled_facts(spool: Path) -> list[dict[str, object]]:
    return [json.loads(json.loads(p.read_text())["facts_json"]) for p in spool.glob("*.json")]


@pytest.mark.parametrize(("url", "problem"), BAD_URLS)
def test_submit_with_a_bad_redis_url_spools_the_failure_and_exits_2_in_one_line(
    url: str, problem: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    code, out, err = theow_client("submit", "--fact", "step=build", spool=spool, url=url)

    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"theow: bad --redis-url {url!r}: {problem}")
    assert "spooled failure" in err and "fix the URL, then run `theow-client flush`" in err
    assert spooled_facts(spool) == [{"step": "build"}]  # not lost


@pytest.mark.parametrize(("url", "problem"), BAD_URLS)
def test_run_with_a_bad_redis_url_keeps_the_exit_code_spools_and_warns_once(
    url: str, problem: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    script = "import sys; print('ld: error', file=sys.stderr); sys.exit(7)"
    code, out, err = theow_client(
        "run", "--", sys.executable, "-c", script, spool=spool, env={"THEOW_REDIS_URL": url}
    )

    assert (code, out) == (7, "ld: error\n")  # the command's output, both streams on stdout
    (warning,) = err.splitlines()
    assert warning.startswith(f"theow: bad THEOW_REDIS_URL {url!r}: {problem}")
    assert "could not help" not in err and "Traceback" not in err
    (facts,) = spooled_facts(spool)
    assert facts["exit_code"] == 7 and facts["log"] == "ld: error\n"


@pytest.mark.parametrize(("url", "problem"), BAD_URLS)
def test_flush_with_a_bad_redis_url_is_one_line_and_keeps_the_spool(
    url: str, problem: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    theow_client("submit", "--fact", "a=b", spool=spool, url=url)

    code, out, err = theow_client("flush", spool=spool, url=url)

    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"theow-client: bad --redis-url {url!r}: {problem}")
    assert err.endswith("; nothing sent, 1 spooled failure(s) kept\n")
    assert len(list(spool.glob("*.json"))) == 1


def test_the_password_of_a_bad_url_is_never_printed(tmp_path: Path) -> None:
    url = "redis://:hunter2@cache.internal:99999/0"
    code, _, err = theow_client("submit", "--fact", "a=b", spool=tmp_path / "spool", url=url)
    assert code == 2
    assert "hunter2" not in err
    assert "'redis://:***@cache.internal:99999/0'" in err


def test_a_failure_that_cannot_be_sent_for_any_other_reason_is_spooled_and_said(
    tmp_path: Path,
) -> None:
    # A well-formed URL whose credential provider is not installed: Celery raises ImportError.
    url = "redis://127.0.0.1:6379/0?credential_provider=no_such_module.Provider"
    spool = tmp_path / "spool"
    code, out, err = theow_client("submit", "--fact", "step=build", spool=spool, url=url)

    assert code == 0
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("theow: could not send (ModuleNotFoundError: ")
    assert out.strip() in err  # the failure id, spooled
    assert spooled_facts(spool) == [{"step": "build"}]


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("THEOW_REDIS_URL", "http://theow.internal:6379/0", "scheme 'http' is not one of"),
        ("THEOW_REDIS_URL", "127.0.0.1:6379", "no scheme; write redis://127.0.0.1:6379"),
        ("THEOW_REDIS_URL", "redis://host:99999", "port '99999' is not a number"),
        ("THEOW_DATABASE_URL", "localhost:5432/theow", "not a database URL"),
        ("THEOW_DATABASE_URL", "postgresql://theow@db:99999/theow", "port '99999'"),
        ("THEOW_MILVUS_URI", "localhost:19530", "neither a URI (http://HOST:PORT) nor"),
        ("THEOW_MILVUS_URI", "http://milvus:99999", "port '99999'"),
    ],
)
def test_the_workers_settings_name_a_bad_url_and_its_variable(
    variable: str, value: str, problem: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as raised:
        Settings.load(env={variable: value}, path=tmp_path / "none.yaml")
    assert str(raised.value).startswith(f"bad {variable} {value!r}: {problem}")


def test_the_workers_settings_name_the_theow_yaml_key_and_mask_the_password(
    tmp_path: Path,
) -> None:
    path = tmp_path / "theow.yaml"
    path.write_text("database_url: postgresql://theow:hunter2@db:70000/theow\n")
    with pytest.raises(ConfigError) as raised:
        Settings.load(env={}, path=path)
    assert str(raised.value) == (
        f"bad {path} key database_url 'postgresql://theow:***@db:70000/theow': "
        "port '70000' is not a number from 1 to 65535"
    )


def test_the_workers_settings_read_every_kind_of_good_url(tmp_path: Path) -> None:
    good = {
        "THEOW_REDIS_URL": "rediss://:pw@cache:6380/2?ssl_cert_reqs=required",
        "THEOW_DATABASE_URL": "postgresql+psycopg://theow:pw@[::1]:5432/theow",
        "THEOW_MILVUS_URI": str(tmp_path / "milvus.db"),
    }
    settings = Settings.load(env=good, path=tmp_path / "none.yaml")
    assert settings.redis_url == good["THEOW_REDIS_URL"]
    for variable, value in [
        ("THEOW_REDIS_URL", "redis://cache"),
        ("THEOW_DATABASE_URL", "sqlite:////var/lib/theow/theow.db"),
        ("THEOW_MILVUS_URI", "https://milvus.internal"),
    ]:
        Settings.load(env={variable: value}, path=tmp_path / "none.yaml")
    with pytest.raises(
        ConfigError, match=r"bad THEOW_REDIS_URL 'unix:///run/redis\.sock': scheme 'unix'"
    ):
        Settings.load(env={"THEOW_REDIS_URL": "unix:///run/redis.sock"}, path=tmp_path / "n")


def test_the_theow_command_shows_a_bad_url_in_one_line_with_exit_2(tmp_path: Path) -> None:
    environ = {**os.environ, "THEOW_REDIS_URL": "http://theow.internal:6379/0"}
    process = subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "failures", "list"],
        capture_output=True, text=True, cwd=tmp_path, env=environ, timeout=120,
    )  # fmt: skip
    assert process.returncode == 2
    assert process.stderr.strip().splitlines() == [
        "error: bad THEOW_REDIS_URL 'http://theow.internal:6379/0': "
        "scheme 'http' is not one of redis://, rediss://"
    ]
