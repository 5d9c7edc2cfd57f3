"""The lines to look at and the wrapper travel with a verdict; older and malformed ones still read."""

from theow_client.verdict import Status, Verdict, Where


def test_where_lines_and_wrapper_survive_the_trip_through_the_result_backend() -> None:
    sent = Verdict(
        "f1", Status.UNEXPLAINED, where=(Where("log", 2461, "KeyError: 'DATABASE_URL'"),),
        wrapper="make_recipe_failed",
    )  # fmt: skip
    got = Verdict.from_dict(sent.to_dict())
    assert got == sent
    assert got.status is Status.UNEXPLAINED


def test_a_verdict_from_an_older_worker_has_no_lines_and_no_wrapper() -> None:
    got = Verdict.from_dict({"failure_id": "f1", "status": "unmatched"})
    assert (got.where, got.wrapper) == ((), None)


def test_a_where_line_that_is_not_fact_line_text_is_left_out_not_a_crash() -> None:
    got = Verdict.from_dict({
        "failure_id": "f1", "status": "unmatched",
        "where": [{"fact": "log"}, "text", {"fact": "log", "line": "x", "text": "t"},
                  {"fact": "log", "line": 7, "text": "error: it broke"}],
    })  # fmt: skip
    assert got.where == (Where("log", 7, "error: it broke"),)
