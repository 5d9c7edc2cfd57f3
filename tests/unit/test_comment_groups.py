"""The pull-request comment's groups by origin, rendered from stored entries (no forge)."""

from __future__ import annotations

from theow_workers.integrations import comment
from theow_workers.integrations.hooks import github_job, gitlab_job

SHA = "abcdef1" + "2" * 33


def github(job_id: int, name: str, url: str = "") -> object:
    ran = {
        "id": job_id,
        "run_attempt": 1,
        "name": name,
        "workflow_name": "CI",
        "conclusion": "failure",
        "head_sha": "feed01",
        "html_url": url or f"https://github.com/acme/app/actions/runs/1/job/{job_id}",
    }
    return github_job(
        {"action": "completed", "repository": {"full_name": "acme/app"}, "workflow_job": ran}
    )


def headings(body: str) -> list[str]:
    return [line[5:] for line in body.splitlines() if line.startswith("#### ")]


def test_without_any_origin_the_jobs_are_one_list_as_before():
    items = [comment.entry(github(i, f"j{i}"), {"status": "unexplained"}) for i in range(3)]
    body = comment.render(items)
    assert headings(body) == [] and body.count("- **") == 3


def test_an_origin_this_worker_does_not_know_is_shown_under_unknown_with_its_word():
    items = [
        comment.entry(github(1, "a"), {"status": "unexplained", "origin": {"origin": "change"}}),
        comment.entry(
            github(2, "b"),
            {"status": "unexplained", "origin": {"origin": "quarantined", "reason": "muted"}},
        ),
    ]
    body = comment.render(items)
    assert headings(body) == ["Probably caused by this change (1)", "Origin unknown (1)"]
    assert "unexplained · origin quarantined · muted" in body


def test_a_job_passed_since_stays_in_its_group_struck():
    item = comment.entry(
        github(1, "unit"), {"status": "unexplained", "origin": {"origin": "flaky"}}
    )
    body = comment.render([{**item, "passed": "2"}])
    assert headings(body) == ["Flaky: retry them (1)"]
    assert "~~unexplained~~ passed on attempt 2" in body


def test_a_gitlab_culprit_links_to_its_commit_page_and_an_unknown_forge_url_links_nothing():
    hooked = gitlab_job(
        {
            "object_kind": "build",
            "build_id": 9,
            "build_name": "unit",
            "build_status": "failed",
            "project_id": 42,
            "sha": "feed01",
            "project": {
                "id": 42,
                "path_with_namespace": "acme/app",
                "web_url": "https://gitlab.example.com/acme/app",
            },
        }
    )
    main = {"status": "unexplained", "origin": {"origin": "main", "culprit": SHA}}
    body = comment.render([comment.entry(hooked, main)])
    assert f"broken by [abcdef1](https://gitlab.example.com/acme/app/-/commit/{SHA})" in body
    unlinked = github(2, "lint", url="http://github.example/acme/app/job/2")
    body = comment.render([comment.entry(unlinked, main)])
    assert "broken by `abcdef1`" in body and "/commit/" not in body


def test_at_most_fifty_jobs_are_shown_across_the_groups_the_first_groups_first():
    changed = [
        comment.entry(
            github(i, f"c{i:02}"), {"status": "unexplained", "origin": {"origin": "change"}}
        )
        for i in range(45)
    ]
    flaky = [
        comment.entry(
            github(100 + i, f"f{i:02}"), {"status": "unexplained", "origin": {"origin": "flaky"}}
        )
        for i in range(10)
    ]
    body = comment.render(changed + flaky)
    assert headings(body) == ["Probably caused by this change (45)", "Flaky: retry them (10)"]
    assert body.count("- **") == 50 and body.rstrip().endswith("- … and 5 more")
