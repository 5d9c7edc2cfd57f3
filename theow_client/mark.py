"""``@mark``: let Theow look at a failing build step and run it again.

When the decorated step raises, its facts go to Theow; if the verdict says the
failure is fixed (``resolved``) or transient (``retry``), the verdict's
client-side actions run here, on the build agent, and the step runs again.

Warning: a build never fails *because of* Theow. Broker down (spooled),
no verdict in time, an action that fails, a status that is not retryable:
each re-raises the step's own exception, as if the step were not decorated.

>>> @mark(lambda path: {"manifest": Path(path).read_text()}, tags=["go"])  # doctest: +SKIP
... def build(path: str) -> None:
...     subprocess.run(["go", "build", "./..."], check=True, capture_output=True)
"""

from __future__ import annotations

import functools
import logging
import os
import traceback
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from theow_client import config
from theow_client.client import DEFAULT_WAIT_TIMEOUT, TheowClient
from theow_client.facts import bound_text
from theow_client.verdict import RETRYABLE, Verdict

log = logging.getLogger("theow.client")

P = ParamSpec("P")
R = TypeVar("R")
FactsFrom = Callable[..., dict[str, Any]]

# The frames nearest the error matter most; bound_text keeps mostly the tail.
TRACEBACK_LIMIT = 16 * 1024


def exception_facts(exc: BaseException) -> dict[str, Any]:
    """The ``exception`` and ``traceback`` facts describing ``exc``."""
    formatted = "".join(traceback.format_exception(exc))
    return {
        "exception": f"{type(exc).__name__}: {exc}",
        "traceback": bound_text(formatted, TRACEBACK_LIMIT)[0],
    }


def run_client_actions(
    verdict: Verdict,
    facts: dict[str, Any],
    *,
    actions_dir: str | os.PathLike[str] | None = None,
    workspace: str | None = None,
) -> list[Any]:
    """Run the verdict's client-side actions in order; return their outputs.

    Actions are loaded from ``actions_dir`` (``THEOW_ACTIONS_DIR``, else
    ``./actions``). Raises ActionError when one is missing or fails.
    """
    if not verdict.client_actions:
        return []
    # Imported here: only a verdict with client-side actions needs the loader.
    from theow_workers.core.actions import ActionError, call_action, load_actions

    directory = config.actions_dir(actions_dir)
    registry = load_actions(directory)
    outputs = []
    for bound in verdict.client_actions:
        spec = registry.get(bound.action)
        if spec is None:
            raise ActionError(f"client-side action {bound.action!r} is not defined in {directory}")
        log.info("theow: running client-side action %s %s", bound.action, bound.params)
        outputs.append(
            call_action(spec, bound.params, facts=facts, workspace=workspace or os.getcwd())
        )
    return outputs


def should_rerun(
    verdict: Verdict,
    facts: dict[str, Any],
    *,
    actions_dir: str | os.PathLike[str] | None = None,
    workspace: str | None = None,
) -> bool:
    """Whether the step should run again: the verdict allows it and its actions ran.

    Raises what ``run_client_actions`` raises.
    """
    if verdict.status not in RETRYABLE:
        log.info(
            "theow: failure %s is %s%s; not re-running",
            verdict.failure_id,
            verdict.status,
            f" ({verdict.reason})" if verdict.reason else "",
        )
        return False
    run_client_actions(verdict, facts, actions_dir=actions_dir, workspace=workspace)
    return True


def mark(
    facts_from: FactsFrom | None = None,
    *,
    rules: list[str] | None = None,
    tags: list[str] | None = None,
    max_retries: int = 3,
    fallback: bool = True,
    explore: bool = False,
    client: TheowClient | None = None,
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
    actions_dir: str | os.PathLike[str] | None = None,
    workspace: str | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a build step so Theow may fix it and run it again.

    ``facts_from`` is called with the step's arguments after a failure and
    returns extra facts (its keys win over ``exception``/``traceback``). The
    step runs at most ``1 + max_retries`` times; its last failure is still
    submitted, for the record, but not waited for. ``client`` defaults to a
    TheowClient configured from the environment, made only when a step fails.
    """

    def decorate(step: Callable[P, R]) -> Callable[P, R]:
        name = getattr(step, "__qualname__", repr(step))

        def step_facts(*args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
            # A broken facts_from must not cost the failure its report.
            if facts_from is None:
                return {}
            try:
                return dict(facts_from(*args, **kwargs))
            except Exception as exc:
                log.warning("theow: facts_from for %s raised %s: %s", name, type(exc).__name__, exc)
                return {}

        def ask_theow(exc: Exception, reruns: int, *args: P.args, **kwargs: P.kwargs) -> bool:
            """Whether to run the step again; never raises."""
            theow = client
            try:
                theow = theow or TheowClient()
                facts = exception_facts(exc)
                facts.update(step_facts(*args, **kwargs))
                ticket = theow.submit(
                    facts,
                    explore=explore,
                    rules=rules,
                    tags=tags,
                    fallback=fallback,
                    max_retries=max_retries,
                )
                if reruns >= max_retries:
                    log.info("theow: %s failed, no re-runs left (%s)", name, ticket.failure_id)
                    return False
                verdict = ticket.wait(timeout=wait_timeout)
                return should_rerun(verdict, facts, actions_dir=actions_dir, workspace=workspace)
            except Exception as theow_exc:
                log.warning(
                    "theow: could not help with %s (%s: %s); raising its own error",
                    name,
                    type(theow_exc).__name__,
                    theow_exc,
                )
                return False
            finally:
                if client is None and theow is not None:
                    theow.close()

        @functools.wraps(step)
        def run_step(*args: P.args, **kwargs: P.kwargs) -> R:
            reruns = 0
            while True:
                try:
                    return step(*args, **kwargs)
                except Exception as exc:
                    if not ask_theow(exc, reruns, *args, **kwargs):
                        raise
                    reruns += 1
                    log.info("theow: re-running %s (%d/%d)", name, reruns, max_retries)

        return run_step

    return decorate
