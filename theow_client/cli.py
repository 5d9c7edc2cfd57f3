"""``theow-client``: the build agent's command line.

    theow-client submit --fact problem_type=dependency_resolution --stderr-file build.log --wait
    theow-client run --retries 2 -- go build ./...
    theow-client success --log build.log --fact job=nightly
    theow-client flush
    theow-client junit 'build/test-results/**/*.xml' --json

``run`` wraps a build command: its output passes through, its exit code is the
exit code of the last run, always; Theow's own problems are warnings on
stderr. On a failure it waits a few seconds for the verdict and shows it
(``--wait-timeout S``, ``--no-wait``, ``THEOW_CLIENT_WAIT``); ``--retries``
re-runs after a growing delay (``--retry-delay S``). ``submit`` exits 0 once
the failure is sent or spooled (with ``--wait``: and its verdict, and with
``--explore`` its exploration's outcome, came back), 3 when ``--wait`` got no
answer in time (a warning says which), 1 when it could be neither sent nor
spooled, and 2 for a bad argument or a broker URL that cannot work (the
failure is spooled first).

A passing ``run`` (and ``success``) reports the run to learn its job's normal,
unless a worker learned one of this agent's job this interval (the workers'
``THEOW_PASSING_INTERVAL``: ``theow_client.passing``); the job comes from ``--fact job=...`` or the CI
system's variables (``theow_client.job``). Every ``run`` inside a CI system (or
given ``--repo --branch --sha``) is also recorded in Theow's ledger of runs:
a failure carries where it ran as its ``run`` fact, a pass is sent as one
small record (``theow_client.ci_run``, ``theow_client.ledger``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from theow_client import config
from theow_client.capture import Captured, HeadTail, capture, shell_join
from theow_client.ci_output import show_verdict
from theow_client.ci_run import CiRun, RunValueError, ci_run, rerun_of
from theow_client.client import (
    DEFAULT_WAIT_TIMEOUT,
    TheowClient,
    TheowUnavailable,
    Ticket,
    one_line,
)
from theow_client.facts import FactsError, loads_facts
from theow_client.job import job_of
from theow_client.jsontypes import JsonObject
from theow_client.junit import expand, read_reports, tests_fact
from theow_client.ledger import report_run
from theow_client.mark import Rerun, should_rerun
from theow_client.passing import report_passing
from theow_client.terminal import printable
from theow_client.verdict import Status, Verdict, fixes_in
from theow_client.verdict_text import fix_lines, format_exploration, format_verdict

__all__ = ["format_verdict", "main"]

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 1
EXIT_NO_ANSWER = 3  # submit --wait: sent, but no verdict or exploration outcome in time

# run --retries: the first re-run waits DEFAULT_RETRY_DELAY seconds, each next one twice as
# long, up to MAX_RETRY_DELAY; a transient cause (a registry, a lock) gets time to clear.
DEFAULT_RETRY_DELAY = 5.0
MAX_RETRY_DELAY = 60.0


class ArgumentProblem(Exception):
    """A bad command-line value; the message names the argument."""


def parse_fact(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ArgumentProblem(f"--fact {text!r}: expected NAME=VALUE")
    return name.strip(), value


def read_facts_file(path: str) -> JsonObject:
    try:
        data = loads_facts(Path(path).read_bytes(), where=f"--facts-file {path}")
    except OSError as exc:
        raise ArgumentProblem(f"--facts-file {path}: {exc.strerror or exc}") from exc
    except FactsError as exc:  # not JSON, too large, or nested too deeply to parse
        raise ArgumentProblem(str(exc)) from exc
    if not isinstance(data, dict):
        raise ArgumentProblem(
            f"--facts-file {path}: expected a JSON object, got {type(data).__name__}"
        )
    return data


def read_log(path: str) -> str:
    """A log file (``-`` for stdin) of any size and encoding, bounded as it is read."""
    keep = HeadTail()
    try:
        if path == "-":
            stream = sys.stdin.buffer
            while chunk := stream.read(64 * 1024):
                keep.write(chunk)
        else:
            with open(path, "rb") as handle:
                while chunk := handle.read(64 * 1024):
                    keep.write(chunk)
    except OSError as exc:
        raise ArgumentProblem(f"--stderr-file {path}: {exc.strerror or exc}") from exc
    return keep.text()


def collect_facts(args: argparse.Namespace) -> JsonObject:
    """Facts from, in increasing precedence: --facts-file, --stderr-file, --fact."""
    facts: JsonObject = {}
    if getattr(args, "facts_file", None):
        facts.update(read_facts_file(args.facts_file))
    if getattr(args, "stderr_file", None):
        facts["stderr"] = read_log(args.stderr_file)
    facts.update(parse_fact(text) for text in args.fact)
    return facts


def warn(message: str) -> None:
    print(f"theow: {message}", file=sys.stderr)


def wait_for(ticket: Ticket, timeout: float) -> Verdict | None:
    """The verdict, or None with a one-line warning saying where to look later."""
    try:
        return ticket.wait(timeout=timeout)
    except TimeoutError as exc:
        warn(f"{exc}; its verdict later: `theow failures show {ticket.failure_id}`")
    except TheowUnavailable as exc:
        warn(str(exc))
    return None


def cmd_submit(args: argparse.Namespace, client: TheowClient) -> int:
    facts = collect_facts(args)
    try:
        ticket = client.submit(
            facts,
            explore=args.explore,
            idempotency_key=args.idempotency_key,
            rules=args.rule,
            tags=args.tag,
        )
    except FactsError as exc:
        raise ArgumentProblem(f"facts: {exc}") from exc
    if ticket.misconfigured:  # the one line naming the URL and the spool file is printed
        return EXIT_USAGE
    if not args.wait:
        if args.json:
            print(json.dumps({"failure_id": ticket.failure_id, "spooled": ticket.spooled}))
        else:
            print(ticket.failure_id)
        return 0
    started = time.monotonic()
    verdict = wait_for(ticket, args.timeout)
    if verdict is None:
        return EXIT_NO_ANSWER
    if (verdict.explanation or {}).get("state") == "pending":  # explain runs after the verdict
        left = args.timeout - (time.monotonic() - started)
        verdict = ticket.wait_explanation(left) or verdict
    exploration = None
    code = 0
    if verdict.status is Status.EXPLORING:
        try:
            exploration = ticket.wait_exploration(timeout=args.timeout)
        except (TimeoutError, TheowUnavailable) as exc:
            warn(str(exc))
            code = EXIT_NO_ANSWER
    if args.json:
        data = verdict.to_dict()
        if exploration is not None:
            data["exploration"] = exploration
        print(json.dumps(data))
    else:
        print(format_verdict(verdict))
        if exploration is not None:
            print(format_exploration(exploration))
    return code


def run_facts(args: argparse.Namespace, result: Captured) -> JsonObject:
    facts: JsonObject = {
        "command": shell_join(args.command),
        "exit_code": result.exit_code,
        # The output as the command wrote it, which the rules read (a rule written to the
        # library spec's `stderr` reads it too); stderr alone only when it had a pipe of its own.
        "log": result.log,
        "cwd": os.getcwd(),
    }
    if result.separate:
        facts["stderr"] = result.stderr
    facts.update(parse_fact(text) for text in args.fact)
    job = job_of(facts, os.environ)
    if job is not None:
        facts["job"] = job
    return facts


def junit_facts(args: argparse.Namespace) -> JsonObject:
    """``{"tests": ...}`` from the reports --junit (or $THEOW_JUNIT) names. Never raises."""
    patterns = list(args.junit) or [os.environ.get(config.ENV_JUNIT, "")]
    patterns = [pattern for pattern in patterns if pattern.strip()]
    if not patterns:
        return {}
    try:
        tests, problems = tests_fact(patterns, since=args.started)
    except Exception as exc:  # a report must never cost the failure its submission
        warn(f"could not read the test reports ({type(exc).__name__}: {one_line(exc)})")
        return {}
    for problem in problems:
        warn(f"--junit: {problem}")
    return {"tests": tests} if tests is not None else {}


def report_passing_run(args: argparse.Namespace, client: TheowClient, facts: JsonObject) -> str:
    """Report a passing run for its job's normal; what happened, in a few words. Never raises."""
    job = job_of(facts, os.environ)
    if job is None:
        return "no job: give --fact job=NAME, or run inside a CI system"
    try:
        sent = report_passing(client, facts, job=job)
    except Exception as exc:
        return f"passing run of {job} not sent ({type(exc).__name__}: {exc})"
    if sent:
        return f"passing run of {job} sent"
    return f"passing run of {job} not sent: one was learned this interval (or Theow is unreachable)"


RUN_FLAGS = ("repo", "branch", "sha", "pr", "base_sha", "attempt")


def where_it_runs(args: argparse.Namespace) -> CiRun | None:
    """Where this run runs (``ci_run``): the CI's variables, ``THEOW_RUN_*``, then the flags.

    A bad flag is a usage error; a bad variable a warning (``ci_run``).
    """
    facts: JsonObject = dict(parse_fact(text) for text in args.fact)
    flags = {name: getattr(args, name) for name in RUN_FLAGS}
    try:
        return ci_run(os.environ, job=job_of(facts, os.environ), flags=flags, warn=warn)
    except RunValueError as exc:
        raise ArgumentProblem(str(exc)) from None


def ask_theow(
    args: argparse.Namespace, client: TheowClient, result: Captured, reruns: int
) -> Rerun | None:
    """Report a failed run; a Rerun when the command should run again. Never raises."""
    try:
        facts = run_facts(args, result)
        facts.update(junit_facts(args))
        if args.where is not None:
            facts["run"] = args.where.fact(args.started, args.finished)
        ticket = client.submit(
            facts, explore=args.explore, rules=args.rule, tags=args.tag, max_retries=args.retries
        )
        if ticket.spooled:  # the client said so, and why, on stderr
            return None
        rerun_left = reruns < args.retries
        if args.wait_seconds <= 0 and not rerun_left:
            warn(
                f"reported failure {ticket.failure_id}; its verdict: "
                f"`theow failures show {ticket.failure_id}`"
            )
            return None
        # Deciding a re-run needs the verdict even when waiting is turned off.
        started = time.monotonic()
        verdict = wait_for(ticket, args.wait_seconds or config.DEFAULT_RUN_WAIT)
        if verdict is None:  # already warned
            return None
        if (verdict.explanation or {}).get("state") == "pending":
            # explain runs after the verdict: shown if it comes within what is left of the wait.
            left = args.wait_seconds - (time.monotonic() - started)
            verdict = ticket.wait_explanation(left) or verdict
        if args.json:
            print(json.dumps(verdict.to_dict()), file=sys.stderr)
        else:  # the plain block, and the CI's annotation, summary or section (ci_output)
            show_verdict(verdict)
        if not rerun_left:
            return None
        return should_rerun(
            verdict, facts, actions_dir=args.actions_dir, workspace=os.getcwd(), client=client
        )
    except Exception as exc:
        warn(f"could not help with this failure ({type(exc).__name__}: {one_line(exc)})")
        return None


def wait_seconds(args: argparse.Namespace) -> float:
    """How long ``run`` waits for a verdict: --no-wait, --wait-timeout, $THEOW_CLIENT_WAIT, 10 s."""
    if args.no_wait:
        return 0.0
    try:
        seconds = config.run_wait(args.wait_timeout)
    except ValueError as exc:  # the fleet's variable: a warning, never the build's failure
        warn(f"{exc}; waiting {config.DEFAULT_RUN_WAIT:g} s")
        seconds = config.DEFAULT_RUN_WAIT
    if args.wait and seconds <= 0:  # --wait in the pipeline wins over the fleet's 0
        return config.DEFAULT_RUN_WAIT
    return seconds


def retry_delay(first: float, rerun: int) -> float:
    """Seconds before re-run number ``rerun`` (1, 2, ...): ``first``, doubling, capped.

    >>> [retry_delay(5, n) for n in (1, 2, 3, 4, 5)], retry_delay(90, 1)
    ([5.0, 10.0, 20.0, 40.0, 60.0], 60.0)
    """
    delay: float = first * 2.0 ** (rerun - 1)
    return min(delay, MAX_RETRY_DELAY)


def cmd_run(args: argparse.Namespace, client: TheowClient) -> int:
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        raise ArgumentProblem("run: no command given (theow-client run [options] -- CMD ARGS...)")
    for text in args.fact:  # a bad --fact is a usage error before anything runs
        parse_fact(text)
    if args.retry_delay < 0:
        raise ArgumentProblem(f"--retry-delay {args.retry_delay:g}: expected 0 or more seconds")
    args.wait_seconds = wait_seconds(args)
    args.where = where_it_runs(args)
    args.started = time.time()  # reports older than this are an earlier build's
    result = capture(args.command, separate=args.separate_stderr)
    args.finished = time.time()
    if result.interrupted:  # stopped by Ctrl-C or SIGTERM: report the failure, wait for nothing
        args.wait_seconds, args.retries = 0.0, 0
        try:
            if result.exit_code != 0:
                ask_theow(args, client, result, 0)
        except KeyboardInterrupt:  # a second Ctrl-C: the failure may be lost, never the status
            pass
        return result.exit_code
    reruns = 0
    while result.exit_code != 0 and (rerun := ask_theow(args, client, result, reruns)):
        reruns += 1
        for line in fix_lines(fixes_in(rerun.outputs)):  # what the client-side fix changed
            warn(printable(line))
        delay = retry_delay(args.retry_delay, reruns)
        warn(f"re-running {shell_join(args.command)} in {delay:g} s ({reruns}/{args.retries})")
        time.sleep(delay)
        if args.where is not None:  # each attempt is a run of its own in the ledger
            args.where = rerun_of(args.where)
        args.started = time.time()
        result = capture(args.command, separate=args.separate_stderr)
        args.finished = time.time()
        rerun.report(passed=result.exit_code == 0)  # only now is it known whether the fix worked
    if result.exit_code == 0 and not args.no_passing:
        try:
            logging.getLogger("theow.client").info(
                "theow: %s", report_passing_run(args, client, run_facts(args, result))
            )
        except Exception as exc:  # the build passed: nothing of ours may change that
            warn(f"could not report the passing run ({type(exc).__name__}: {exc})")
    if result.exit_code == 0 and args.where is not None:
        record_passed(args, client)
    return result.exit_code


def record_passed(args: argparse.Namespace, client: TheowClient) -> None:
    """The passed run's ledger record (every time, unlike the sampled passing run), with what
    its test reports say (``--junit``): their counts and flaky tests."""
    try:
        job = job_of(dict(parse_fact(text) for text in args.fact), os.environ)
        if job is None:
            warn(
                "the run is not recorded: no job (give --fact job=NAME, or run inside a CI system)"
            )
            return
        tests = junit_facts(args).get("tests")  # its counts and flaky tests, cheaply
        said = report_run(
            client,
            args.where,
            job=job,
            started_at=args.started,
            finished_at=args.finished,
            tests=tests if isinstance(tests, dict) else None,
        )
        logging.getLogger("theow.client").info("theow: %s", said)
    except Exception as exc:  # the build passed: nothing of ours may change that
        warn(f"could not record the run ({type(exc).__name__}: {one_line(exc)})")


def cmd_success(args: argparse.Namespace, client: TheowClient) -> int:
    facts: JsonObject = {"log": read_log(args.log)}
    facts.update(parse_fact(text) for text in args.fact)
    if job_of(facts, os.environ) is None:
        raise ArgumentProblem("success: no job: give --fact job=NAME, or run inside a CI system")
    print(report_passing_run(args, client, facts))
    return 0


def cmd_flush(args: argparse.Namespace, client: TheowClient) -> int:
    try:
        sent, remaining = client.flush()
    except config.RedisURLError as exc:
        kept = len(client.spool.pending())
        raise ArgumentProblem(f"{exc}; nothing sent, {kept} spooled failure(s) kept") from exc
    print(f"sent {sent}, {remaining} remaining")
    return 0


def cmd_junit(args: argparse.Namespace) -> int:
    """Print what test reports say failed; 2 when one of them could not be read."""
    files, errors = expand(args.reports)
    report, unread = read_reports(files, root=args.root)
    if args.json:
        print(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        for line in report.lines():
            print(line)
    for error in errors + unread:
        print(f"theow-client: {error}", file=sys.stderr)
    return EXIT_USAGE if errors or unread else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="theow-client", description=__doc__.split("\n")[0])
    parser.add_argument("--redis-url", help=f"broker URL (default: ${config.ENV_REDIS_URL})")
    parser.add_argument("--spool-dir", help=f"spool directory (default: ${config.ENV_SPOOL_DIR})")
    parser.add_argument("-v", "--verbose", action="store_true", help="log Theow's decisions")
    commands = parser.add_subparsers(dest="cmd", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--fact", action="append", default=[], metavar="NAME=VALUE")
        sub.add_argument("--rule", action="append", default=[], metavar="NAME")
        sub.add_argument("--tag", action="append", default=[], metavar="TAG")
        sub.add_argument("--explore", action="store_true", help="allow LLM exploration")
        sub.add_argument("--wait", action="store_true", help="wait for the verdict")
        sub.add_argument(
            "--json", action="store_true", help="verdicts as JSON (run: on stderr, one per line)"
        )

    submit = commands.add_parser("submit", help="send one failure's facts")
    common(submit)
    submit.add_argument("--facts-file", metavar="FILE", help="JSON object of facts")
    submit.add_argument(
        "--stderr-file", metavar="FILE", help="log file for fact 'stderr' (- = stdin)"
    )
    submit.add_argument("--idempotency-key", metavar="KEY")
    submit.add_argument("--timeout", type=float, default=DEFAULT_WAIT_TIMEOUT, metavar="S")
    submit.set_defaults(handler=cmd_submit)

    run = commands.add_parser("run", help="run a command; on failure ask Theow, maybe re-run")
    common(run)
    run.add_argument("--retries", type=int, default=0, metavar="N", help="re-runs (default 0)")
    run.add_argument(
        "--retry-delay",
        type=float,
        default=DEFAULT_RETRY_DELAY,
        metavar="S",
        help=f"seconds before the first re-run, doubling after (default {DEFAULT_RETRY_DELAY:g}, "
        f"at most {MAX_RETRY_DELAY:g})",
    )
    run.add_argument(
        "--wait-timeout",
        type=float,
        default=None,
        metavar="S",
        help=f"seconds to wait for the verdict (default: ${config.ENV_CLIENT_WAIT} or "
        f"{config.DEFAULT_RUN_WAIT:g}; 0 = do not wait)",
    )
    run.add_argument(
        "--no-wait", action="store_true", help="do not wait for the verdict (its id is printed)"
    )
    run.add_argument(
        "--actions-dir", help=f"client-side actions (default: ${config.ENV_ACTIONS_DIR})"
    )
    run.add_argument(
        "--no-passing", action="store_true", help="do not report a passing run for its job's normal"
    )
    run.add_argument(
        "--separate-stderr",
        action="store_true",
        help="keep the command's stderr on stderr (two pipes: the log's order between them is "
        "then best effort; default: one pipe for both, on stdout, in the order written)",
    )
    run.add_argument(
        "--junit",
        action="append",
        default=[],
        metavar="GLOB",
        help=f"JUnit XML reports the command writes: its failed and flaky tests are sent with "
        f"the failure, a passed run's counts and flaky tests with its record (repeatable; "
        f"default: ${config.ENV_JUNIT})",
    )
    where = run.add_argument_group(
        "where it runs", "read from the CI's variables; these override them (docs/client.md)"
    )
    for flag, meta, what in (
        ("--repo", "OWNER/NAME", "the repository"),
        ("--branch", "NAME", "the branch (a pull request's own branch)"),
        ("--sha", "SHA", "the commit built (a pull request's head)"),
        ("--pr", "N", "the pull request's number"),
        ("--base-sha", "SHA", "the pull request's base commit"),
        ("--attempt", "N", "which attempt of the job this is (1 for the first)"),
    ):
        where.add_argument(flag, default=None, metavar=meta, help=what)
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    run.set_defaults(handler=cmd_run)

    success = commands.add_parser(
        "success", help="report a passing run's log, to learn what its job prints normally"
    )
    success.add_argument("--log", required=True, metavar="FILE", help="the run's log (- = stdin)")
    success.add_argument("--fact", action="append", default=[], metavar="NAME=VALUE")
    for sub in (run, success):
        sub.add_argument(
            "--passing-interval",
            type=float,
            default=None,
            metavar="S",
            help="no effect: the workers' THEOW_PASSING_INTERVAL decides how often a job's "
            "passing run is learned (kept so that build scripts giving it still run)",
        )
    success.set_defaults(handler=cmd_success)

    flush = commands.add_parser("flush", help="send failures spooled while the broker was down")
    flush.set_defaults(handler=cmd_flush)

    junit = commands.add_parser(
        "junit", help="print the failed and flaky tests of JUnit XML reports (docs/junit.md)"
    )
    junit.add_argument("reports", nargs="+", metavar="FILE|GLOB", help="reports; ** for any depth")
    junit.add_argument("--json", action="store_true", help="the tests and counts as JSON")
    junit.add_argument(
        "--root",
        default=None,
        metavar="DIR",
        help="the repository, for paths in traces (default: the current directory)",
    )
    junit.set_defaults(handler=None, local=cmd_junit)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s"
    )
    if not args.verbose:
        # Celery's own account of a lost broker spans lines; the client says it in one.
        logging.getLogger("celery").setLevel(logging.CRITICAL + 1)
    if getattr(args, "local", None) is not None:  # needs no broker, no spool
        code: int = args.local(args)
        return code
    client = TheowClient(redis_url=args.redis_url, spool_dir=args.spool_dir, url_name="--redis-url")
    try:
        code = args.handler(args, client)
        return code
    except ArgumentProblem as exc:
        print(f"theow-client: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TheowUnavailable as exc:
        print(f"theow-client: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except config.RedisURLError as exc:
        print(f"theow-client: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
