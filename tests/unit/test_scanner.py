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
        rule("keep_out", r"regex: 'fatal: \K\w+'"),  # scanned without its \K
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


def generated(i: int, word: str = "failed") -> str:
    return rule(f"r{i}", f"regex: 'component c{i}x {word}: (?P<why>\\w+)'")


def test_a_changed_rule_compiles_only_its_own_patterns_and_the_rest_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("THEOW_SCANNER_CACHE", str(tmp_path))
    library = [parse_rule(generated(i)) for i in range(300)]
    before = RuleBook(tuple(library), "v1")
    assert len(before.scanner.parts) >= 2
    changed = [*library[:-1], parse_rule(generated(299, "broke")), parse_rule(generated(300))]
    after = RuleBook(tuple(changed), "v2")
    after.build_scanner(previous=before.scanner)
    kept = [p for p in after.scanner.parts if p in before.scanner.parts]
    new = [p for p in after.scanner.parts if p not in before.scanner.parts]
    assert kept == list(before.scanner.parts)
    assert [len(p.patterns) for p in new] == [2]  # the changed rule's and the new rule's
    found = {c.rule for c in plan(after, {"log": "component c299x broke: disk"}).attempts}
    assert found == {"r299"}
    assert not plan(after, {"log": "component c299x failed: disk"}).attempts  # the old text
    assert {c.rule for c in plan(after, {"log": "component c300x failed: x"}).attempts} == {"r300"}
    assert {c.rule for c in plan(after, {"log": "component c5x failed: x"}).attempts} == {"r5"}


def test_many_changes_are_merged_into_one_part_and_a_new_process_starts_from_the_disk(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("THEOW_SCANNER_CACHE", str(tmp_path))
    library = [parse_rule(generated(i)) for i in range(300)]
    book = RuleBook(tuple(library), "v0")
    for n in range(1, 7):  # six changes, one rule each
        library = [*library, parse_rule(generated(300 + n))]
        nxt = RuleBook(tuple(library), f"v{n}")
        nxt.build_scanner(previous=book.scanner)
        book = nxt
    assert len(book.scanner.parts) <= 2 + 3 + 1  # the library's parts, few small ones
    assert {c.rule for c in plan(book, {"log": "component c306x failed: x"}).attempts} == {"r306"}
    fresh = RuleBook(tuple(library), "v6 elsewhere")  # another process: nothing compiled
    assert fresh.scanner.loaded
    assert {c.rule for c in plan(fresh, {"log": "component c303x failed: x"}).attempts} == {"r303"}
