"""``@mark``: let Theow look at a failing build step and run it again.

When the decorated step raises, its facts go to Theow; if the verdict says the
failure is fixed (``resolved``), has a fix for this agent to run
(``suggested`` with client-side actions) or is transient (``retry``), the
verdict's client-side actions run here, on the build agent, and the step runs
again. Whether that re-run passed is reported back: only then does a
client-side fix count as ``resolved`` (or ``failed``).

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
import shlex
import subprocess
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from theow_client import config
from theow_client.client import DEFAULT_WAIT_TIMEOUT, TheowClient
from theow_client.facts import bound_text
from theow_client.jsontypes import JsonObject
from theow_client.verdict import RETRYABLE, Status, Verdict
from theow_client.verdict_text import format_verdict, prefixed

log = logging.getLogger("theow.client")

P = ParamSpec("P")
R = TypeVar("R")
FactsFrom = Callable[..., JsonObject]

# The frames nearest the error matter most; bound_text keeps mostly the tail.
TRACEBACK_LIMIT = 16 * 1024


def exception_facts(exc: BaseException) -> JsonObject:
    """The facts describing a failed step's exception ``exc``.

    Always ``exception`` (type and message) and ``traceback``. For a
    ``subprocess.CalledProcessError`` (``check=True``), what the command
    printed, because that is what rules read: ``log`` (stdout then stderr,
    whichever were captured), ``stdout`` and ``stderr`` as captured,
    ``exit_code`` and ``command``. Other exceptions have no output of their
    own, so ``log`` is their traceback.

    >>> err = subprocess.CalledProcessError(1, ["go", "build"], output="ok\\n", stderr="boom\\n")
    >>> facts = exception_facts(err)
    >>> facts["log"], facts["stderr"], facts["exit_code"], facts["command"]
    ('ok\\nboom\\n', 'boom\\n', 1, 'go build')
    """
    formatted = "".join(traceback.format_exception(exc))
    facts: JsonObject = {
        "exception": f"{type(exc).__name__}: {exc}",
        "traceback": bound_text(formatted, TRACEBACK_LIMIT)[0],
    }
    if isinstance(exc, subprocess.CalledProcessError):
        facts.update(_process_facts(exc))
    # Nothing captured (the output went to the terminal): the traceback is the log.
    facts["log"] = facts.get("log") or facts["traceback"]
    return facts


def _process_facts(exc: subprocess.CalledProcessError) -> JsonObject:
    """``log``/``stdout``/``stderr``/``exit_code``/``command`` of a failed command."""
    streams = {"stdout": _text(exc.stdout), "stderr": _text(exc.stderr)}
    captured = {k: v for k, v in streams.items() if v is not None}
    command = exc.cmd
    if isinstance(command, (list, tuple)):
        command = shlex.join(str(part) for part in command)
    facts: JsonObject = {**captured, "exit_code": exc.returncode, "command": str(command)}
    # Captured separately the two streams cannot be interleaved as a terminal
    # showed them; stdout first keeps the error (usually on stderr) at the end.
    facts["log"] = "".join(captured.values())
    return facts


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def run_client_actions(
    verdict: Verdict,
    facts: JsonObject,
    *,
    actions_dir: str | os.PathLike[str] | None = None,
    workspace: str | None = None,
    client: TheowClient | None = None,
) -> list[JsonObject]:
    """Run the verdict's client-side actions in order; return ``{"action", "output"}`` of each.

    Actions are loaded from ``actions_dir`` (``THEOW_ACTIONS_DIR``, else
    ``./actions``): the build agent needs the same actions the workers have.
    Raises ActionError when one is missing or fails; with ``client``, that
    failure is reported back. That they ran is not reported here: whether
    the fix worked is known only once the step ran again (``Rerun.report``).
    """
    if not verdict.client_actions:
        return []
    # Imported here: only a verdict with client-side actions needs the loader.
    from theow_client.actions import ActionError, ActionLoadError, call_action, load_actions

    directory = config.actions_dir(actions_dir)
    outputs: list[JsonObject] = []
    try:
        registry = load_actions(directory)
        for bound in verdict.client_actions:
            spec = registry.get(bound.action)
            if spec is None:
                raise ActionError(
                    f"client-side action {bound.action!r} is not defined in {directory}"
                    " (the build agent needs the workers' actions: set THEOW_ACTIONS_DIR)"
                )
            log.info("theow: running client-side action %s %s", bound.action, bound.params)
            output = call_action(
                spec, bound.params, facts=facts, workspace=workspace or os.getcwd()
            )
            outputs.append({"action": bound.action, "output": output})
    except (ActionError, ActionLoadError) as exc:
        if client is not None:
            client.report_outcome(verdict, success=False, error=str(exc), outputs=outputs)
        raise
    return outputs


@dataclass(frozen=True)
class Rerun:
    """The step may run again after ``verdict``; ``outputs``: its client-side actions' outputs."""

    verdict: Verdict
    outputs: list[JsonObject]
    client: TheowClient | None = None

    def report(self, passed: bool) -> None:
        """After the re-run: tell the workers whether the client-side fix worked.

        Only this report makes the failure ``resolved`` (or ``failed``) and
        counts in the rule's track record. Nothing to report for a verdict
        without client-side actions. Never raises.
        """
        if self.client is None or not self.verdict.client_actions:
            return
        self.client.report_outcome(
            self.verdict, success=True, outputs=self.outputs, rerun_passed=passed
        )


def should_rerun(
    verdict: Verdict,
    facts: JsonObject,
    *,
    actions_dir: str | os.PathLike[str] | None = None,
    workspace: str | None = None,
    client: TheowClient | None = None,
) -> Rerun | None:
    """A Rerun when the step should run again: the verdict allows it and its actions ran.

    None when it should not. A ``suggested`` fix with nothing for this agent
    to run (advice only) is not re-run: nothing changed. Raises what
    ``run_client_actions`` raises; ``client`` reports their failure, and
    ``Rerun.report`` whether the re-run passed.
    """
    nothing_to_run = verdict.status == Status.SUGGESTED and not verdict.client_actions
    if verdict.status not in RETRYABLE or nothing_to_run:
        log.info(
            "theow: failure %s is %s%s; not re-running",
            verdict.failure_id,
            verdict.status,
            f" ({verdict.reason})" if verdict.reason else "",
        )
        return None
    outputs = run_client_actions(
        verdict, facts, actions_dir=actions_dir, workspace=workspace, client=client
    )
    return Rerun(verdict, outputs, client)


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

        def step_facts(*args: P.args, **kwargs: P.kwargs) -> JsonObject:
            # A broken facts_from must not cost the failure its report.
            if facts_from is None:
                return {}
            try:
                return dict(facts_from(*args, **kwargs))
            except Exception as exc:
                log.warning("theow: facts_from for %s raised %s: %s", name, type(exc).__name__, exc)
                return {}

        def ask_theow(
            exc: Exception, reruns: int, *args: P.args, **kwargs: P.kwargs
        ) -> Rerun | None:
            """A Rerun when the step should run again; never raises."""
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
                    log.info(
                        "theow: %s failed, no re-runs left; its verdict: `theow failures show %s`",
                        name,
                        ticket.failure_id,
                    )
                    return None
                verdict = ticket.wait(timeout=wait_timeout)
                if not ticket.spooled:  # a spooled failure was already said on stderr
                    # Warning: the step failed, and this is what a user needs to see about it.
                    log.warning("theow: %s failed\n%s", name, prefixed(format_verdict(verdict)))
                return should_rerun(
                    verdict, facts, actions_dir=actions_dir, workspace=workspace, client=theow
                )
            except Exception as theow_exc:
                log.warning(
                    "theow: could not help with %s (%s: %s); raising its own error",
                    name,
                    type(theow_exc).__name__,
                    theow_exc,
                )
                return None
            finally:
                if client is None and theow is not None:
                    theow.close()

        @functools.wraps(step)
        def run_step(*args: P.args, **kwargs: P.kwargs) -> R:
            reruns = 0
            rerun: Rerun | None = None  # the fix this run follows, reported once it ends
            while True:
                try:
                    result = step(*args, **kwargs)
                except Exception as exc:
                    if rerun is not None:
                        rerun.report(passed=False)
                    rerun = ask_theow(exc, reruns, *args, **kwargs)
                    if rerun is None:
                        raise
                    reruns += 1
                    log.info("theow: re-running %s (%d/%d)", name, reruns, max_retries)
                    continue
                if rerun is not None:
                    rerun.report(passed=True)
                return result

        return run_step

    return decorate
