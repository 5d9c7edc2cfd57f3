"""Given a library with one rule whose regex backtracks catastrophically, I
expect the one-pass scan to stay quick, that rule to give up at its time limit
with a reason, and every other rule to be found as if it were not there."""

from __future__ import annotations

from theow_workers.core.resolve.plan import RuleBook, plan
from theow_workers.core.rules.schema import parse_rule

SLOW = parse_rule("name: slow\nmode: track\nwhen:\n  - fact: log\n    regex: '(?:a|aa)+[bd]'\n")
CAUSE = parse_rule(
    "name: cause\nmode: track\nwhen:\n  - fact: log\n    regex: '(?-s)error: (?P<what>.+)'\n"
)
BOOK = RuleBook((SLOW, CAUSE), "catastrophic")
# Runs of a's the backtracking engine tries every split of, and a "d" later on their
# line that makes the scanner report the slow rule's pattern as present there.
LOG = ("a" * 40 + "c\n") * 20 + "error: the real cause\n" + "a" * 40 + "c ad\n"


def test_a_catastrophic_rule_gives_up_with_a_reason_and_hides_no_other_rule():
    result = plan(BOOK, {"log": LOG}, explain=True, regex_timeout=0.05)
    assert [c.rule for c in result.attempts] == ["cause"]
    assert result.attempts[0].match.captures.named == {"what": "the real cause"}
    (slow,) = result.rejected
    assert slow.rule == "slow"
    assert "timed out after 0.05s" in slow.reason
    # The worker's path (no explain): the scan hands the slow rule over, it times out.
    assert [c.rule for c in plan(BOOK, {"log": LOG}).attempts] == ["cause"]


def test_the_scanner_itself_reads_the_catastrophic_pattern_without_backtracking():
    hits = BOOK.scanner.scan({"log": "a" * 60_000 + "c"})
    assert BOOK.scanner.candidates(hits) == []  # no "b"/"d": decided by the scan alone


def test_the_compiled_scanner_is_kept_on_disk_and_a_broken_copy_is_compiled_again(
    tmp_path, monkeypatch
):
    from theow_workers.core.rules.scanner import Scanner

    monkeypatch.setenv("THEOW_SCANNER_CACHE", str(tmp_path))
    rules = [CAUSE, parse_rule("name: other\nmode: track\nwhen: [{fact: log, contains: 'boom'}]\n")]
    first = Scanner(rules)
    (kept,) = tmp_path.glob("*.part")
    again = Scanner(rules)  # loaded, not compiled
    assert (first.loaded, again.loaded) == (False, True)
    log = {"log": "x\nerror: boom\n"}
    assert {r.name for r in again.candidates(again.scan(log))} == {"cause", "other"}
    assert {r.name for r in first.candidates(first.scan(log))} == {"cause", "other"}
    kept.write_bytes(b"not a database")
    rebuilt = Scanner(rules)
    assert not rebuilt.loaded
    assert {r.name for r in rebuilt.candidates(rebuilt.scan(log))} == {"cause", "other"}
