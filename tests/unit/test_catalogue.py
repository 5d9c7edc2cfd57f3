"""The README's rule catalogue is generated, never hand-kept."""

from __future__ import annotations

from pathlib import Path

from theow_workers.catalogue import family, markdown
from theow_workers.core.rules import load_rules, parse_rule

ROOT = Path(__file__).resolve().parents[2]
START, END = "<!-- rules-catalogue:start -->\n", "<!-- rules-catalogue:end -->"


def test_the_readme_catalogue_is_what_rules_list_markdown_prints():
    readme = (ROOT / "README.md").read_text()
    shown = readme[readme.index(START) + len(START) : readme.index(END)]
    expected = markdown(load_rules(ROOT / "rules").rules)
    assert shown == expected, "regenerate it: make catalogue"


def test_a_generic_rule_counts_as_a_wrapper_whatever_its_tags():
    rule = parse_rule(
        "name: r\nmode: track\ngeneric: true\ntags: [java, test]\nwhen: [{fact: log, contains: x}]\n"
    )
    assert family(rule) == "wrapper"
    assert "| java |" in markdown([rule]) and "wrapper" in markdown([rule])
