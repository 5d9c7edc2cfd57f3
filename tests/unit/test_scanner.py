"""Given rules whose patterns Hyperscan takes as written, only in its prefilter
mode, or not at all (one of them with syntax the scanner does not expect it to
reject), I expect each rule found in every log where it matches and in no other."""

from __future__ import annotations

import pytest

from theow_workers.core.resolve.plan import RuleBook, plan
from theow_workers.core.rules.schema import parse_rule


def rule(name: str, condition: str) -> str:
    return f"name: {name}\nmode: track\nwhen: [{{fact: log, {condition}}}]\n"


RULES = tuple(
    parse_rule(text)
    for text in (
        rule("plain", r"regex: 'error: (?P<what>\w+)'"),
        rule("literal", "contains: 'boom'"),
        rule("lookbehind", r"regex: '(?<=job )\d+ failed'"),  # prefilter mode
        rule("keep_out", r"regex: 'fatal: \K\w+'"),  # rejected: checked the old way
        rule("grapheme", r"regex: 'crash: \X+ lost'"),  # rejected, unforeseen syntax
    )
)


@pytest.mark.parametrize(
    ("log", "found"),
    [
        ("ok\nerror: disk\n", {"plain"}),
        ("it went boom", {"literal"}),
        ("job 42 failed", {"lookbehind"}),
        ("step 42 failed", set()),
        ("fatal: oops", {"keep_out"}),
        ("crash: data lost", {"grapheme"}),
        ("error: disk\ncrash: data lost\njob 7 failed", {"plain", "grapheme", "lookbehind"}),
        ("all fine", set()),
    ],
)
def test_every_rule_is_found_where_it_matches_whatever_hyperscan_makes_of_it(
    log, found, tmp_path, monkeypatch
):
    monkeypatch.setenv("THEOW_SCANNER_CACHE", str(tmp_path))
    book = RuleBook(RULES, "mixed")
    assert {c.rule for c in plan(book, {"log": log}).attempts} == found
    assert not book.scanner.loaded  # compiled here: the cache directory was empty
