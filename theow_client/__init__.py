"""Theow's client for build agents: submit failures, read verdicts, retry steps.

It depends on celery and redis only (never torch, Milvus, SQL or Gemini), so
any build agent can install it.

>>> from theow_client import mark
>>> @mark(lambda: {"step": "go build"}, tags=["go"])          # doctest: +SKIP
... def build() -> None:
...     subprocess.run(["go", "build", "./..."], check=True)
"""

from theow_client.capture import Captured, capture
from theow_client.client import TheowClient, TheowUnavailable, Ticket
from theow_client.facts import FactsError

# Imported after the submodule so that `theow_client.mark` is the decorator.
from theow_client.mark import exception_facts, mark
from theow_client.verdict import BoundAction, Status, Verdict

__all__ = [
    "BoundAction",
    "Captured",
    "FactsError",
    "Status",
    "TheowClient",
    "TheowUnavailable",
    "Ticket",
    "Verdict",
    "capture",
    "exception_facts",
    "mark",
]
