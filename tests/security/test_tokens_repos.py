"""`theow tokens add --repo`: the repositories an agent may speak for, given once, shown after."""

from __future__ import annotations

import json

from tests.conftest import free_port
from tests.security.test_revoke_broker import theow as theow_beside
from tests.security.test_tokens_cli import theow


def test_an_agent_token_keeps_the_repositories_it_may_speak_for(embedded_valkey):
    made = theow_beside(
        embedded_valkey, "add", "ci-r", "--repo", "Acme/API", "--repo", "group/sub/web", "--json"
    )
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["repos"] == ["acme/api", "group/sub/web"]

    listed = theow_beside(embedded_valkey, "list", "--json")

    (token,) = json.loads(listed.stdout)
    assert token["name"] == "ci-r" and token["repos"] == ["acme/api", "group/sub/web"]
    assert "tw1." not in listed.stdout


def test_a_repository_that_is_no_repository_is_refused_in_one_line(tmp_path):
    closed = free_port()
    for given in ("acme", "acme/api name", "../etc", "a/" + "b" * 300):
        refused = theow(tmp_path / "home", "add", "ci-s", "--repo", given, redis_port=closed)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert line.startswith("error: --repo ") and "owner/name" in line
    wrong_scope = theow(
        tmp_path / "home", "add", "reader", "--scope", "api-read", "--repo", "acme/api",
        redis_port=closed,
    )  # fmt: skip
    assert wrong_scope.returncode == 2
    assert "--repo is for agent tokens" in wrong_scope.stderr
    listed = theow(tmp_path / "home", "list", "--json", redis_port=closed)
    assert listed.stdout.strip() == "[]"  # nothing was made
