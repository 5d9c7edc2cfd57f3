"""Which rules are tried, in which order."""

from theow_workers.adapters.memory import HashingEmbedder, InMemoryIndex
from theow_workers.core.ports import IndexEntry, RuleStats
from theow_workers.core.resolve.plan import Hints, RuleBook, plan
from theow_workers.core.rules.schema import parse_rule


def make(name: str, contains: str, tags: str = "[]", description: str = "") -> object:
    return parse_rule(
        f"name: {name}\nmode: track\ndescription: '{description or name}'\ntags: {tags}\n"
        f"when:\n  - {{fact: stderr, contains: '{contains}'}}\n"
    )


def book(*rules) -> RuleBook:
    return RuleBook(tuple(rules), "v1")


def test_named_rules_come_first_in_the_order_given_then_tagged_then_the_rest():
    rules = book(
        make("generic", "error"),
        make("tagged", "error", tags="[go]"),
        make("first", "error"),
        make("second", "error"),
    )
    result = plan(rules, {"stderr": "error"}, Hints(rules=("second", "first"), tags=("go",)))
    assert [c.rule for c in result.attempts] == ["second", "first", "tagged", "generic"]


def test_a_named_rule_that_does_not_exist_is_explained_not_fatal():
    result = plan(book(make("a", "x")), {"stderr": "x"}, Hints(rules=("ghost",)))
    assert [c.rule for c in result.attempts] == ["a"]
    assert result.rejected[0].reason == "no rule named 'ghost'"


def test_without_fallback_only_named_and_tagged_rules_are_tried():
    rules = book(make("a", "x"), make("b", "x", tags="[py]"))
    result = plan(rules, {"stderr": "x"}, Hints(tags=("py",), fallback=False))
    assert [c.rule for c in result.attempts] == ["b"]


def test_track_record_reorders_rules_of_equal_similarity():
    rules = book(make("flaky", "timeout"), make("solid", "timeout"))
    stats = {"flaky": RuleStats(2, 20), "solid": RuleStats(20, 1)}
    same = lambda names: {n: 0.8 for n in names}  # noqa: E731
    result = plan(rules, {"stderr": "timeout"}, similarity=same, stats=stats)
    assert [c.rule for c in result.attempts] == ["solid", "flaky"]


def test_similarity_is_computed_only_when_specificity_and_position_leave_a_tie():
    calls = []

    def similarity(names):
        calls.append(list(names))
        return {}

    rules = book(make("a", "alpha"), make("b", "beta"), make("c", "alpha"))
    plan(rules, {"stderr": "beta"}, similarity=similarity)
    assert calls == []
    two = book(make("a", "alpha"), make("b", "beta"))
    result = plan(two, {"stderr": "alpha\nbeta"}, similarity=similarity)
    assert calls == [], "the evidence of b is later in the log: no tie to break"
    assert [c.rule for c in result.attempts] == ["b", "a"]
    plan(rules, {"stderr": "alpha"}, similarity=similarity)
    assert calls == [["a", "c"]]


def test_a_rule_scoped_to_the_project_beats_a_library_wide_one_on_the_same_line_without_similarity():
    calls = []

    def similarity(names):
        calls.append(list(names))
        return {"library": 0.9, "taught": 0.1, "other_project": 0.9}

    taught = parse_rule(
        "name: taught\nmode: track\nwhen:\n  - {fact: repo, equals: acme/app}\n"
        "  - {fact: stderr, contains: 'widget broke'}\n"
    )
    other = parse_rule(
        "name: other_project\nmode: track\nwhen:\n  - {fact: repo, equals: acme/lib}\n"
        "  - {fact: stderr, contains: 'widget broke'}\n"
    )
    rules = book(make("library", "widget broke"), taught, other)
    result = plan(rules, {"stderr": "widget broke", "repo": "acme/app"}, similarity=similarity)
    assert [c.rule for c in result.attempts] == ["taught", "library"]
    assert calls == [] and not result.scored
    # Two rules of one scope on one line are still level: similarity decides.
    twin = parse_rule(
        "name: twin\nmode: track\nwhen:\n  - {fact: repo, equals: acme/app}\n"
        "  - {fact: stderr, contains: 'widget'}\n"
    )
    result = plan(
        book(make("library", "widget broke"), taught, twin),
        {"stderr": "widget broke", "repo": "acme/app"},
        similarity=lambda names: {"twin": 0.9, "taught": 0.1},
    )
    assert result.scored and [c.rule for c in result.attempts] == ["twin", "taught", "library"]


def test_a_validating_rule_is_found_even_when_it_ranks_below_any_top_k():
    # Thirty rules read almost exactly like the failure but do not validate;
    # the one that does has a description that shares no word with it.
    failure = {"stderr": "npm ERR! code ERESOLVE unable to resolve dependency tree"}
    decoys = [
        make(
            f"decoy_{i}",
            f"NEVER-{i}",
            description="npm ERR code ERESOLVE unable to resolve dependency tree",
        )
        for i in range(30)
    ]
    right = make("right", "ERESOLVE", description="zzz qqq")
    rules = book(*decoys, right)
    embedder = HashingEmbedder()
    index = InMemoryIndex()
    index.sync(
        [
            IndexEntry(f"rule:{r.name}", "rule", r.name, r.content_hash("h"), r.embedding_text())
            for r in rules.rules
        ],
        embedder,
    )
    vector = embedder.embed([failure["stderr"]])[0]
    ranking = [h.name for h in index.search(vector, limit=31)]
    assert ranking.index("right") >= 10  # far below a top-10

    def similarity(names):
        return {h.name: h.similarity for h in index.search(vector, names=names, limit=len(names))}

    result = plan(rules, failure, similarity=similarity, explain=True)
    assert [c.rule for c in result.attempts] == ["right"]
    assert all(not c.validated for c in result.rejected)
    assert result.rejected[0].similarity > result.attempts[0].similarity
