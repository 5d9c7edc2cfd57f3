"""The replay report: what a team reads to judge its rule library."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from theow_workers.config import Settings
from theow_workers.replay import report as reports
from theow_workers.replay.grouping import error_summary
from theow_workers.store.replay import DONE, ItemRecord, ReplayStore
from theow_workers.store.schema import make_engine, migrate

PRICING = reports.Pricing("gemini/gemini-2.5-flash", 100_000, 5_000, 0.30, 2.50)
RULES = ["apt_missing", "go_rename", "network_flake", "never_used"]


@pytest.fixture
def jobs(tmp_path) -> ReplayStore:
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    return ReplayStore(make_engine(url))


def unmatched(key: str, text: str) -> ItemRecord:
    sample, basis = error_summary({"stderr": text})
    return ItemRecord(key, "unmatched", line=int(key), failure_id=f"f{key}", fingerprint=text[:20], sample=sample, basis=basis)  # fmt: skip


def replay(jobs, items, created_at=None, **job) -> str:
    values = {"kind": "file", "source": "/h.jsonl", "source_key": "same", "rules": RULES, **job}
    if created_at is not None:
        values["created_at"] = created_at
    made = jobs.create(total=len(items), **values)
    jobs.record(made.id, items)
    jobs.update(made.id, status=DONE)
    return made.id


def history(go_rename_lines=(1, 2)) -> list[ItemRecord]:
    items = [
        ItemRecord(
            str(n),
            "resolved",
            line=n,
            failure_id=f"f{n}",
            rule="go_rename",
            sample=f"log:{n}: module declares its path as: a/b but was required as: c/d",
        )
        for n in go_rename_lines
    ]
    items += [
        ItemRecord("3", "retry", line=3, failure_id="f3", rule="network_flake"),
        ItemRecord("4", "tracked", line=4, failure_id="f4", rule="apt_missing"),
        unmatched("5", "fatal: disk quota exceeded on /data/5"),
        unmatched("6", "fatal: disk quota exceeded on /data/6"),
        unmatched("7", "panic: nil map write in scheduler"),
        ItemRecord("8", "invalid", line=8, sample="not JSON: Expecting value (column 1)"),
        ItemRecord("9", "duplicate", line=9, sample="duplicate of line 3"),
    ]
    return items


def test_hit_rate_counts_per_rule_and_rules_that_matched_nothing(jobs):
    job = jobs.get(replay(jobs, history()))
    data = reports.build(jobs, job, PRICING)
    assert data["summary"]["replayed"] == 7  # invalid and duplicate lines are not replayed
    assert data["summary"]["hit_rate"] == round(4 / 7, 4)
    assert [(r["rule"], r["matched"]) for r in data["rules"]] == [
        ("go_rename", 2),
        ("apt_missing", 1),
        ("network_flake", 1),
    ]
    # Each rule shows a person one line of evidence for why it matched.
    assert data["rules"][0]["evidence"].startswith("log:1: module declares its path as")
    assert data["rules_without_matches"] == ["never_used"]
    assert data["input_problems"] == [
        {"line": 8, "kind": "invalid", "problem": "not JSON: Expecting value (column 1)"},
        {"line": 9, "kind": "duplicate", "problem": "duplicate of line 3"},
    ]


def test_largest_unmatched_groups_with_samples_ids_and_an_exploration_estimate(jobs):
    job = jobs.get(replay(jobs, history()))
    data = reports.build(jobs, job, PRICING)
    first, second = data["unmatched_groups"]
    assert (first["size"], first["failure_ids"]) == (2, ["f5", "f6"])
    assert first["sample"] == "fatal: disk quota exceeded on /data/5"
    assert second["failure_ids"] == ["f7"]
    cost = data["exploration"]
    assert (cost["groups"], cost["sessions"]) == (2, 2)
    assert cost["usd_per_session"] == pytest.approx(0.0425)
    assert cost["estimated_usd"] == pytest.approx(0.085, abs=0.01)
    assert "estimate" in cost["note"]


def test_an_exploration_budget_caps_the_estimated_sessions(jobs):
    job = jobs.get(replay(jobs, history(), explore=True, explore_budget=1))
    assert reports.build(jobs, job, PRICING)["exploration"]["sessions"] == 1


def test_rules_that_stopped_matching_since_the_last_replay_of_the_same_source(jobs):
    earlier = datetime.now(UTC) - timedelta(days=7)
    replay(jobs, history(), created_at=earlier)
    now = history(go_rename_lines=())
    now += [unmatched("1", "go: example.com/x moved"), unmatched("2", "go: example.com/y moved")]
    job = jobs.get(replay(jobs, now))
    cmp = reports.build(jobs, job, PRICING)["comparison"]
    assert cmp["stopped_matching"] == [{"rule": "go_rename", "before": 2, "now": 0, "exists": True}]
    assert cmp["lost_matches"]["count"] == 2
    assert cmp["lost_matches"]["by_rule"] == {"go_rename": 2}
    assert cmp["lost_matches"]["sample"][0] == {
        "key": "1", "line": 1, "rule_before": "go_rename", "status_now": "unmatched", "rule_now": "",
    }  # fmt: skip


def test_a_replay_of_another_source_is_not_compared(jobs):
    replay(jobs, history(), created_at=datetime.now(UTC) - timedelta(days=1))
    job = jobs.get(replay(jobs, history(), source_key="another file"))
    assert reports.build(jobs, job, PRICING)["comparison"] is None


def test_the_report_is_written_as_json_and_markdown(jobs, tmp_path):
    job = jobs.get(replay(jobs, history()))
    data = reports.build(jobs, job, PRICING)
    json_path, md_path = reports.write(data, tmp_path / "reports")
    assert json.loads(json_path.read_text())["unmatched_groups"][0]["failure_ids"] == ["f5", "f6"]
    markdown = md_path.read_text()
    assert f"# Replay {job.id}" in markdown
    assert "**Hit rate 57.1% explained**" in markdown
    assert "| 2 | `fatal: disk quota exceeded on /data/5` |" in markdown
    assert "- line 8: not JSON" in markdown


def test_pricing_comes_from_the_configured_price_table():
    pricing = reports.Pricing.from_settings(Settings(llm="gemini/gemini-2.5-flash"))
    assert (pricing.input_per_mtok, pricing.output_per_mtok) == (0.30, 2.50)


def test_log_text_in_the_terminal_report_is_shown_as_text(jobs):
    """Given evidence and samples holding emoji codes, Rich markup and ANSI, I read them as written."""
    import io

    from rich.console import Console

    from theow_workers.replay.show import show_report

    items = [
        ItemRecord("1", "tracked", line=1, failure_id="f1", rule="apt_missing",
                   sample="log:9: travis_fold:end:after_failure [bold]not bold[/bold]"),
        ItemRecord("2", "unmatched", line=2, failure_id="f2", fingerprint="x",
                   sample="\x1b[31mE: broken [red]pipe[/red] :smile:\x1b[0m", basis="e: broken pipe"),
    ]  # fmt: skip
    job = jobs.get(replay(jobs, items))
    screen = io.StringIO()
    show_report(reports.build(jobs, job, PRICING), Console(file=screen, width=300))
    shown = screen.getvalue()
    assert "travis_fold:end:after_failure [bold]not bold[/bold]" in shown
    assert "E: broken [red]pipe[/red] :smile:" in shown
    assert "\x1b" not in shown and "🔚" not in shown and "😄" not in shown


def test_the_terminal_report_counts_the_rules_that_matched_nothing_instead_of_listing_them(jobs):
    """Given a library of 240 rules of which 2 matched, and a rule that stopped matching."""
    import io

    from rich.console import Console

    from theow_workers.replay.show import show_report

    library = [*RULES, *(f"idle_rule_{n:03}" for n in range(236))]
    replay(jobs, history(), created_at=datetime.now(UTC) - timedelta(days=7), rules=library)
    job = jobs.get(replay(jobs, history(go_rename_lines=()), rules=library))
    data = reports.build(jobs, job, PRICING)
    screen = io.StringIO()
    show_report(data, Console(file=screen, width=200))
    shown = screen.getvalue()

    assert "idle_rule_" not in shown and "never_used" not in shown
    assert "238 rule(s) matched nothing (named in the report files below, and in `--json`" in shown
    assert "stopped matching go_rename: 2 → 0" in shown
    assert len(data["rules_without_matches"]) == 238  # `--json` still names them
    markdown = reports.markdown(data)
    assert "<summary>238 rule(s) matched nothing</summary>" in markdown
    assert "idle_rule_235" in markdown.split("<summary>")[1]


def test_each_unmatched_group_shows_the_lines_to_look_at_of_its_first_failure(jobs):
    import io

    from rich.console import Console

    from theow_client.verdict import Status, Verdict, Where
    from theow_workers.core.ports import FailureRecord
    from theow_workers.replay.show import show_report
    from theow_workers.store.results import SqlStore

    sql = SqlStore(str(jobs.engine.url), engine=jobs.engine)
    lines = {"f5": Where("log", 399_990, "fatal: disk quota exceeded on /data/5"),
             "f6": Where("log", 12, "fatal: disk quota exceeded on /data/6"),
             "f7": Where("stderr", 3, "panic: nil map write in scheduler")}  # fmt: skip
    for fid, where in lines.items():
        sql.add_failure(FailureRecord(fid, "fp", {"log": "x"}, None, "replay", datetime.now(UTC)))
        sql.add_verdict(Verdict(fid, Status.UNMATCHED, where=(where,)))
    job = jobs.get(replay(jobs, history()))
    data = reports.build(jobs, job, PRICING)
    first, second = data["unmatched_groups"]
    assert first["where"] == [lines["f5"].to_dict()]  # the group's first failure's lines
    assert second["where"] == [lines["f7"].to_dict()]
    markdown = reports.markdown(data)
    assert "`log line 399,990: fatal: disk quota exceeded on /data/5`" in markdown
    screen = io.StringIO()
    show_report(data, Console(file=screen, width=300))
    assert "stderr line 3: panic: nil map write in scheduler" in screen.getvalue()


def test_a_dry_runs_estimate_says_what_exploring_would_cost_not_what_was_spent(jobs):
    """Given a dry run with one unmatched group, the terminal and markdown say 'would cost'."""
    import io

    from rich.console import Console

    from theow_workers.replay.show import show_report

    data = reports.build(jobs, jobs.get(replay(jobs, history())), PRICING)
    screen = io.StringIO()
    show_report(data, Console(file=screen, width=300))
    shown = screen.getvalue()

    sessions = data["exploration"]["sessions"]
    assert f"exploring {sessions} group(s) would cost ≈ $" in shown
    assert f"Exploring them would cost {sessions} LLM session(s) x $" in reports.markdown(data)
