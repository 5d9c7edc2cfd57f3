"""The pull-request comment groups failed jobs by whose failure they are, against a fake GitHub on
loopback (real HTTP) and real Redis, and is rewritten in place when a failure's origin is revised."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.forge_server import FakeForge
from theow_client import names
from theow_workers.adapters.forges import ForgeAPI, RepoLimiter
from theow_workers.config import Settings
from theow_workers.core.history.model import Decision, Origin, Outcome, Run
from theow_workers.integrations import feedback
from theow_workers.integrations.hooks import github_job
from theow_workers.runtime import Runtime
from theow_workers.store.runs import LedgerRun
from theow_workers.store.schema import migrate

pytestmark = pytest.mark.integration

CULPRIT = "c0ffee1" + "0" * 33
FIXED = "fee1dad" + "1" * 33
HEAD = "feed01"


def job(job_id: int, name: str) -> Any:
    return github_job(
        {
            "action": "completed",
            "repository": {"full_name": "acme/app"},
            "workflow_job": {
                "id": job_id,
                "run_attempt": 1,
                "name": name,
                "workflow_name": "CI",
                "conclusion": "failure",
                "head_sha": HEAD,
                "html_url": f"https://github.com/acme/app/actions/runs/1/job/{job_id}",
            },
        }
    )


def verdict(failure_id: str, origin: dict[str, object] | None) -> dict[str, object]:
    found: dict[str, object] = {"failure_id": failure_id, "status": "unexplained"}
    return {**found, "origin": origin} if origin is not None else found


@pytest.fixture
def fake() -> Iterator[FakeForge]:
    with FakeForge() as forge:
        forge.pulls[HEAD] = [12]
        yield forge


@pytest.fixture
def rt(tmp_path: Path, redis_url: str, redis_client: Any, fake: FakeForge) -> Runtime:
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    env = {
        "THEOW_HOME": str(tmp_path / "home"),
        "THEOW_REDIS_URL": redis_url,
        "THEOW_DATABASE_URL": url,
        "THEOW_GITHUB_TOKEN": fake.token,
        "THEOW_GITHUB_API_URL": fake.url,
        "THEOW_PR_COMMENTS": "on",
    }
    return Runtime(Settings.load(env=env, stack=False))


def api(fake: FakeForge, redis: Any) -> ForgeAPI:
    return ForgeAPI("github", fake.url, fake.token, RepoLimiter(redis))


def sections(body: str) -> list[tuple[str, list[str]]]:
    """The comment's groups: each heading with the job lines under it."""
    found: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("#### "):
            found.append((line[5:], []))
        elif line.startswith("- **") and found:
            found[-1][1].append(line)
    return found


def post_the_five(rt: Runtime, fake: FakeForge) -> str:
    client = api(fake, rt.redis)
    posted = [
        (
            job(1, "unit"),
            verdict(
                "f-flaky",
                {"origin": "flaky", "flip_rate": 0.18, "reason": "passed on the same commit"},
            ),
        ),
        (job(2, "lint"), verdict("f-change", {"origin": "change", "reason": "main passes"})),
        (job(3, "e2e"), verdict("f-infra", {"origin": "infra", "reason": "registry 503"})),
        (job(4, "build"), verdict("f-main", {"origin": "main", "culprit": CULPRIT})),
        (job(5, "docs"), verdict("f-none", None)),
        (job(6, "types"), verdict("f-later", {"origin": "change", "reason": "main passes"})),
    ]
    for hooked, said in posted:
        assert feedback.post(rt.redis, client, hooked, said) == ["12"]
    [comment] = fake.comments["12"]
    return str(comment["id"])


def test_the_comment_lists_this_changes_failures_first_then_main_flaky_infra_unknown(rt, fake):
    post_the_five(rt, fake)
    body = fake.comments["12"][0]["body"]
    assert [heading for heading, _ in sections(body)] == [
        "Probably caused by this change (2)",
        "Broken on main, not by this change (1)",
        "Flaky: retry them (1)",
        "Infrastructure (1)",
        "Origin unknown (1)",
    ]
    groups = dict(sections(body))
    assert [line.split("**")[1] for line in groups["Probably caused by this change (2)"]] == [
        "[CI / lint](https://github.com/acme/app/actions/runs/1/job/2)",
        "[CI / types](https://github.com/acme/app/actions/runs/1/job/6)",
    ]
    [main] = groups["Broken on main, not by this change (1)"]
    assert f"broken by [c0ffee1](https://github.com/acme/app/commit/{CULPRIT})" in main
    [flaky] = groups["Flaky: retry them (1)"]
    assert "flips 18% of runs · passed on the same commit" in flaky
    [infra] = groups["Infrastructure (1)"]
    assert "registry 503" in infra
    [unknown] = groups["Origin unknown (1)"]
    assert "CI / docs" in unknown  # no history said: not guessed


def test_a_revised_origin_rewrites_the_same_comment_and_moves_the_job(rt, fake):
    made = post_the_five(rt, fake)
    before = len(fake.requests)
    # A later run: main fails the same way as lint did here.
    decision = Decision(Origin.MAIN, "fails on main", culprit=CULPRIT, fixed_by=FIXED)
    assert feedback.refresh_comment(rt, "f-change", decision.to_dict()) == ["12"]
    [comment] = fake.comments["12"]
    assert str(comment["id"]) == made  # edited in place, never a second comment
    assert fake.requests[before:] == [("PATCH", f"/repos/acme/app/issues/comments/{made}")]
    groups = dict(sections(comment["body"]))
    assert len(groups["Probably caused by this change (1)"]) == 1
    lint = next(line for line in groups["Broken on main, not by this change (2)"] if "lint" in line)
    assert "broken by [c0ffee1]" in lint
    assert f"fixed on main by [fee1dad](https://github.com/acme/app/commit/{FIXED})" in lint

    # Said already: no call; a failure no comment lists: no call.
    calls = len(fake.requests)
    assert feedback.refresh_comment(rt, "f-change", decision.to_dict()) == []
    assert feedback.refresh_comment(rt, "no-such-failure", decision.to_dict()) == []
    assert len(fake.requests) == calls


def test_a_revision_stored_in_the_ledger_is_read_from_it(rt, fake):
    post_the_five(rt, fake)
    run = Run(
        id="run-9",
        repo="acme/app",
        job="github:acme/app/CI/lint",
        branch="feature",
        sha=HEAD,
        outcome=Outcome.FAILED,
        finished_at=1.0,
        cause="c",
        pr="12",
    )
    rt.runs.record(LedgerRun(run, agent="github-hooks", source="webhook", failure_id="f-change"))
    flaky = Decision(Origin.FLAKY, "passed on the same commit feed01 (attempt 2)", flip_rate=0.4)
    assert rt.runs.set_origin("github-hooks", "run-9", flaky, then=False)

    assert feedback.refresh_comment(rt, "f-change") == ["12"]
    groups = dict(sections(fake.comments["12"][0]["body"]))
    assert any("CI / lint" in line for line in groups["Flaky: retry them (2)"])


def test_with_comments_off_or_the_job_failed_again_a_revision_changes_nothing(rt, fake):
    post_the_five(rt, fake)
    body = fake.comments["12"][0]["body"]
    # The same job failed again since: its entry is the new failure's, with its own origin.
    feedback.post(rt.redis, api(fake, rt.redis), job(7, "lint"), verdict("f-again", None))
    body = fake.comments["12"][0]["body"]
    calls = len(fake.requests)
    infra = {"origin": "infra", "reason": "runner lost"}
    assert feedback.refresh_comment(rt, "f-change", infra) == []
    assert fake.comments["12"][0]["body"] == body and len(fake.requests) == calls

    rt.settings = rt.settings.model_copy(update={"pr_comments": False})
    assert feedback.refresh_comment(rt, "f-flaky", infra) == []
    assert len(fake.requests) == calls


def test_a_hostile_origin_cannot_link_elsewhere_mention_or_break_the_comment(rt, fake):
    client = api(fake, rt.redis)
    hostile = {
        "origin": "main",
        "culprit": "](https://evil.example) @org/admins",
        "reason": "x\n#### Probably caused by this change\n<!-- theow --> ghp_" + "c" * 36,
    }
    feedback.post(rt.redis, client, job(1, "unit"), verdict("f-1", hostile))
    feedback.post(
        rt.redis, client, job(2, "lint"), verdict("f-2", {"origin": "main", "culprit": "ABCDEF1"})
    )
    body = fake.comments["12"][0]["body"]
    assert "evil.example" not in body and "@org" not in body and "ghp_" not in body
    assert body.count(feedback.MARKER) == 1
    assert [heading for heading, _ in sections(body)] == ["Broken on main, not by this change (2)"]
    # A commit id is lower-cased and linked; the other culprit was dropped, its reason shown.
    assert "broken by [abcdef1](https://github.com/acme/app/commit/abcdef1)" in body
    assert "x \\#\\#\\#\\# Probably caused" in body
    assert redis_keys(rt) >= {names.key_hook_failure_prs("f-1"), names.key_hook_failure_prs("f-2")}


def redis_keys(rt: Runtime) -> set[str]:
    return {key.decode() for key in rt.redis.keys(names.key_hook_failure_prs("*"))}
