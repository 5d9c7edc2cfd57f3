"""A rule the simulated reviewer approves is used at once, as a recompiled library would use it.

Given the shipped library and a rule learned during ``rules eval --learn``, I
expect the verdicts of the library widened with it (its scanner kept, the new
rule checked in full) to be those of the library compiled anew.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers import evaluation
from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.plan import RuleBook
from theow_workers.core.rules.schema import parse_rule

ROOT = Path(__file__).resolve().parents[2]
LEARNED = parse_rule(
    r"""
name: widget_quota_spent
mode: track
tags: [taught]
when:
  - fact: log
    regex: '(?m)^fatal: the widget quota of (?P<name>\S+) is spent$'
"""
)
LOGS = {
    "learned": "building\nfatal: the widget quota of acme is spent\nmake: *** [all] Error 1\n",
    "shipped": "compiling\nsrc/a.c:3:1: error: expected ';' before '}' token\n",
    "neither": "all good\n",
}


@pytest.fixture(scope="module")
def base() -> RuleBook:
    book = Library.load(ROOT / "rules", ROOT / "actions").book
    book.scanner  # noqa: B018
    return book


def test_a_learned_rule_joins_without_recompiling_and_decides_as_a_recompiled_library(base):
    widened = evaluation.with_learned(base, (*base.rules, LEARNED), "v+learned")
    assert widened.scanner.patterns is base.scanner.patterns  # nothing compiled again
    anew = RuleBook((*base.rules, LEARNED), "anew")
    for name, log in LOGS.items():
        mine, _ = evaluation.decide(widened, {"log": log}, name)
        theirs, _ = evaluation.decide(anew, {"log": log}, name)
        assert (mine.rule, mine.wrapper, mine.evidence) == (
            theirs.rule,
            theirs.wrapper,
            theirs.evidence,
        )
    assert evaluation.decide(widened, {"log": LOGS["learned"]}, "x")[0].rule == "widget_quota_spent"


def test_a_learned_rule_a_wider_one_retires_no_longer_decides(base):
    wider = LEARNED.model_copy(
        update={"name": "widget_quota_spent_2", "when": [LEARNED.when[0].model_copy(
            update={"regex": r"(?m)^fatal: the widget quota of (?P<name>\S+) is (?:spent|gone)$"}
        )]}
    )  # fmt: skip
    widened = evaluation.with_learned(base, (*base.rules, LEARNED), "v+learned")
    assert evaluation.decide(widened, {"log": LOGS["learned"]}, "x")[0].rule == LEARNED.name
    # The reviewer's library after the wider rule replaced the first: built from the base again.
    replaced = evaluation.with_learned(base, (*base.rules, wider), "v+wider")
    assert evaluation.decide(replaced, {"log": LOGS["learned"]}, "x")[0].rule == wider.name
