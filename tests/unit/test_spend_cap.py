"""The daily spend cap as the explorer's tool loop meets it: the turn that would pass it is not sent."""

from __future__ import annotations

import pytest

from theow_workers.adapters.memory import InMemoryLimiter, InMemorySpend
from theow_workers.core.llm.model import (
    Budget,
    BudgetReached,
    FallbackRunner,
    Outcome,
    tool_from_callable,
)
from theow_workers.core.llm.session import ToolLoop
from theow_workers.core.ports import ModelTurn, ToolCall

PRICE = (1.0, 2.0)  # dollars per million tokens in and out


class Counting:
    """A model that calls ``look`` every turn and counts what it was sent."""

    model = "priced-model"

    def __init__(self) -> None:
        self.requests: list[int | None] = []

    def send(self, request):
        self.requests.append(request.max_output_tokens)
        return ModelTurn(calls=(ToolCall("look", {}),), tokens_in=2000, tokens_out=300)

    def check(self):
        return None

    def scrub(self, value):
        return value


def look() -> str:
    """Look around."""
    return "nothing here"


def test_a_session_stops_before_the_turn_whose_most_would_pass_the_day_s_budget():
    model, spend = Counting(), InMemorySpend(0.05, clock=lambda: 1_000.0)
    loop = ToolLoop(model, InMemoryLimiter(), spend=spend, price=PRICE, max_output_tokens=4000)
    with pytest.raises(BudgetReached) as stopped:
        loop.tool_session("find the cause", [tool_from_callable(look)], Budget(max_tool_calls=100))

    # Each turn reserves its prompt as estimated and all 4,000 output tokens ($0.008 and
    # more), and settles at what it cost: the turns sent never cost more than the cap.
    assert model.requests and set(model.requests) == {4000}  # the bound is sent with each turn
    spent = spend.spent()
    assert spent <= 0.05
    assert "until 1970-01-02 00:00 UTC" in stopped.value.reason
    assert stopped.value.partial is not None and stopped.value.partial.turns == len(model.requests)


def test_the_secondary_model_does_not_take_over_when_the_budget_is_reached():
    primary, secondary = Counting(), Counting()
    spend = InMemorySpend(0.0001)
    loops = [ToolLoop(m, InMemoryLimiter(), spend=spend, price=PRICE) for m in (primary, secondary)]
    with pytest.raises(BudgetReached):
        FallbackRunner(*loops).generate("explain", {"type": "object"}, max_output_tokens=400)
    assert primary.requests == [] and secondary.requests == []


def test_a_model_without_a_price_is_not_held_by_the_budget():
    model = Counting()
    loop = ToolLoop(model, InMemoryLimiter(), spend=InMemorySpend(0.0), price=(0.0, 0.0))
    result = loop.tool_session("go", [tool_from_callable(look)], Budget(max_tool_calls=3))
    assert result.outcome is Outcome.BUDGET and len(model.requests) == 3
