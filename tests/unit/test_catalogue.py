"""The rule catalogue of docs/rules.md is generated, never hand-kept."""

from __future__ import annotations

from pathlib import Path

from theow_workers.catalogue import END, PAGE, START, family, markdown, rewrite
from theow_workers.core.rules.schema import load_rules, parse_rule

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_catalogue_is_what_rules_list_markdown_prints():
    page = (ROOT / PAGE).read_text()
    shown = page[page.index(START) + len(START) : page.index(END)]
    expected = markdown(load_rules(ROOT / "rules").rules)
    assert shown == expected, "regenerate it: make catalogue"


def test_a_generic_rule_counts_as_a_wrapper_whatever_its_tags():
    rule = parse_rule(
        "name: r\nmode: track\ngeneric: true\ntags: [java, test]\nwhen: [{fact: log, contains: x}]\n"
    )
    assert family(rule) == "wrapper"
    assert "| java |" in markdown([rule]) and "wrapper" in markdown([rule])


def test_make_catalogue_rewrites_only_the_table_of_the_page(tmp_path):
    page = tmp_path / "rules.md"
    page.write_text(f"# Rules\n\nbefore\n{START}| stale |\n{END}\nafter\n")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.rule.yaml").write_text(
        "name: r\nmode: track\ntags: [go, test]\nwhen: [{fact: log, contains: x}]\n"
    )
    assert rewrite(page, rules) is True
    text = page.read_text()
    assert text.startswith("# Rules\n\nbefore\n") and text.endswith(f"{END}\nafter\n")
    assert "| go |" in text and "| stale |" not in text
    assert rewrite(page, rules) is False  # already current
