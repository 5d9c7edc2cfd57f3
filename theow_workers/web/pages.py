"""The console's pages: the review queue, proposals, failures, rules, insight, replays."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from theow_client.jsontypes import JsonObject
from theow_client.lines import FIELD as KEPT_LINES
from theow_client.lines import LineMap, LineMapError, parse_kept_lines
from theow_workers.core.explore.teaching import TeachError
from theow_workers.core.logs.redact import redact_text
from theow_workers.core.resolve.fingerprint import log_text
from theow_workers.core.resolve.pointing import evidence_in_sent_log
from theow_workers.core.rules.matching import evaluate
from theow_workers.core.rules.schema import RuleError, parse_rule
from theow_workers.review.flags import called_actions, proposal_flags
from theow_workers.review.proposals import ReviewError, approve, reject, sync_after_approval
from theow_workers.review.risk import NOT_A_VERDICT, visible
from theow_workers.views.failures import console_page, failure_detail
from theow_workers.views.ports import LIVE, FailureFilter, UnknownSource
from theow_workers.views.proposals import recently_reviewed, review_queue
from theow_workers.views.replays import replay_list
from theow_workers.web import charts
from theow_workers.web.render import code, log_lines
from theow_workers.web.transcript import test_rule_results, turns

if TYPE_CHECKING:
    from theow_workers.config import Settings
    from theow_workers.web.console import Console


PLACEHOLDER = re.compile(r"&lt;U\+[0-9A-F]{4,6}&gt;")  # risk.visible's, once escaped


def marked(html: Markup) -> Markup:
    """Each ``<U+202E>`` placeholder of escaped, highlighted text wrapped in a ``mark``."""
    mark = r'<mark class="hidden-char" title="a hidden or bidirectional character">\g<0></mark>'
    return Markup(PLACEHOLDER.sub(mark, str(html)))  # the text in it is escaped already


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def _missing(request: Request, what: str) -> Response:
    return _console(request).render(request, "missing.html", status=404, what=what)


async def home(request: Request) -> Response:
    return RedirectResponse("/queue", status_code=303)


def _affected(console: Console, proposal_id: str, pending: bool = True) -> JsonObject:
    count = console.affected.get(proposal_id)
    if count is None:
        text = "counting…" if pending else "not counted (only pending proposals are)"
        return {"known": False, "matched": -1, "text": text}
    text = f"{count.matched:,} of {count.scanned:,} stored failures"
    if count.error:
        text = f"not countable: {count.error}"
    elif not count.done:
        text += " so far (counting…)"
    return {"known": count.done, "matched": count.matched, "text": text, "examples": count.examples}


async def queue(request: Request) -> Response:
    console = _console(request)
    console.affected.poke()
    rows = await run_in_threadpool(review_queue, console.reads)
    for row in rows:
        row["affected"] = _affected(console, row["id"])
    # Most-affecting first, newest first among equals (the query returns newest first).
    rows.sort(key=lambda r: -r["affected"]["matched"])
    recent = await run_in_threadpool(recently_reviewed, console.reads)
    return console.render(request, "queue.html", proposals=rows, reviewed=recent)


def _log_fact(facts: JsonObject) -> str | None:
    """The name of the fact ``log_text`` reads as the failure's log."""
    text = log_text(facts)
    return next((k for k, v in facts.items() if text and v is text), None)


def _proposal_context(console: Console, proposal_id: str) -> JsonObject | None:
    store = console.store
    proposal = store.proposal(proposal_id)
    if proposal is None:
        return None
    exploration = store.exploration(proposal.exploration_id)
    failure = store.failure(proposal.failure_id)
    evidence, check = None, ""
    facts = failure.facts if failure is not None else {}
    try:
        match = evaluate(parse_rule(proposal.rule_yaml), facts)
        evidence, check = match.evidence, ("matches" if match.ok else match.reason)
    except RuleError as exc:
        check = f"the rule is invalid: line {exc.line}: {exc.reason}"
    shown = evidence.fact if evidence is not None else _log_fact(facts)
    text = facts.get(shown) if shown else ""
    marks = {evidence.line: [proposal.rule_name]} if evidence is not None else {}
    transcript = exploration.transcript if exploration is not None else []
    layers = console.settings.rule_layers, console.settings.action_layers
    flags = proposal_flags(proposal, facts, *layers)
    return {
        "proposal": proposal,
        "exploration": exploration,
        "failure": failure,
        # Hidden and bidirectional characters shown as marked <U+202E>, as the forges do.
        "rule_html": marked(code(visible(proposal.rule_yaml), "yaml")),
        "diffs": [
            {"path": visible(d["path"]), "html": marked(code(visible(d["diff"]), "diff"))}
            for d in proposal.diffs
        ],
        "flags": [
            {"kind": f.kind, "where": f.where, "detail": redact_text(f.detail)} for f in flags
        ],
        "not_a_verdict": NOT_A_VERDICT,
        "calls": called_actions(proposal, layers[1]),
        "check": check,
        "evidence": evidence,
        "log_fact": shown or "log",
        "log": log_lines(text if isinstance(text, str) else "", marks),
        "tests": [
            code(json.dumps(r, indent=1, default=str), "json")
            for r in test_rule_results(transcript)
        ],
        "turns": turns(transcript, console.settings.model_prices),
        "taught": _taught(transcript),
        "affected": _affected(console, proposal.id, proposal.status == "pending"),
    }


def _taught(transcript: list[JsonObject]) -> JsonObject | None:
    """A taught proposal's origin and its latest test results (re-run on each edit)."""
    origin = next(
        (
            t["taught"]
            for t in transcript
            if isinstance(t, dict) and isinstance(t.get("taught"), dict)
        ),
        None,
    )
    if origin is None:
        return None
    tests: JsonObject = next(
        (
            t["tests"]
            for t in reversed(transcript)
            if isinstance(t, dict) and isinstance(t.get("tests"), dict)
        ),
        {},
    )
    edited = [
        t["edited"] for t in transcript if isinstance(t, dict) and isinstance(t.get("edited"), dict)
    ]
    return {"origin": origin, "tests": tests, "edited": edited[-1] if edited else None}


async def proposal_page(request: Request) -> Response:
    console = _console(request)
    context = await run_in_threadpool(_proposal_context, console, request.path_params["pid"])
    if context is None:
        return _missing(request, "proposal")
    return console.render(request, "proposal.html", **context)


async def _review(request: Request, verb: str) -> Response:
    console = _console(request)
    session = request.state.session
    pid = request.path_params["pid"]
    if not session.can_review:
        return console.render(
            request,
            "refused.html",
            status=403,
            reason="this login is read-only: it cannot approve or reject",
        )
    form = request.state.form  # read (and its CSRF token checked) by AuthMiddleware
    by = f"{session.name} (web)"
    settings = console.settings
    try:
        if verb == "approve":
            result = await run_in_threadpool(
                approve, console.store, pid, settings.rule_layers, settings.action_layers, None, by
            )
            if result.already:
                message = f"proposal {pid} was already approved; nothing to do"
            else:
                _, synced = await run_in_threadpool(
                    sync_after_approval, settings, console.runtime()
                )
                console.activity.invalidate()
                message = (
                    f"approved {result.rule_name}: wrote {', '.join(result.written)}; {synced}"
                )
        else:
            await run_in_threadpool(reject, console.store, pid, str(form.get("reason") or ""), by)
            message = f"rejected proposal {pid}"
        console.insight.invalidate()
    except ReviewError as exc:
        context = await run_in_threadpool(_proposal_context, console, pid)
        if context is None:
            return _missing(request, "proposal")
        return console.render(request, "proposal.html", status=409, error=str(exc), **context)
    response = RedirectResponse(f"/proposals/{pid}", status_code=303)
    response.set_cookie("theow_flash", message[:600], httponly=True, samesite="strict")
    return response


async def approve_post(request: Request) -> Response:
    return await _review(request, "approve")


async def reject_post(request: Request) -> Response:
    return await _review(request, "reject")


def _cursor(text: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


async def failures_list(request: Request) -> Response:
    console = _console(request)
    params = request.query_params
    where = FailureFilter(
        **{
            k: params.get(k, "").strip()[:200]
            for k in ("repo", "job", "rule", "mode", "outcome", "q", "origin")
        },
        source=params.get("source", "").strip() or LIVE,
    )
    before = _cursor(params.get("before", ""))
    try:
        rows, more = await run_in_threadpool(console_page, console.reads, where, before)
    except UnknownSource as exc:
        return PlainTextResponse(str(exc), status_code=400)
    return console.render(
        request, "failures.html", rows=rows, where=where, more=more, filters=where.active()
    )


def _failure_context(
    console: Console, failure_id: str, chosen: tuple[int | None, int | None] = (None, None)
) -> JsonObject | None:
    info = failure_detail(console.reads, failure_id)
    if info is None:
        return None
    facts = info["facts"]
    verdict = info["verdict"] or {}
    kept = _kept_lines(info)
    evidences: list[tuple[str, JsonObject]] = []
    if verdict.get("evidence") and verdict.get("rule"):
        evidences.append((verdict["rule"], verdict["evidence"]))
    evidences += [(a["rule"], a["evidence"]) for a in info["attempts"] if a["evidence"]]
    # Rules that also validated keep no evidence in SQL: found again with today's rules.
    known = {r.name: r for r in console.library().knowledge().rules.rules}
    for name in verdict.get("also") or []:
        also = known.get(name)
        match = evaluate(also, facts) if also is not None else None
        if match is not None and match.ok and match.evidence is not None:
            # Found in the stored (bounded) log: numbered as the build's log, like the verdict's.
            found = evidence_in_sent_log(match.evidence.to_dict(), facts, kept)
            evidences += [(name, found)] if found else []
    shown = evidences[0][1]["fact"] if evidences else _log_fact(facts)
    text = facts.get(shown) if shown else ""
    marks: dict[int, list[str]] = {}
    for rule, ev in evidences:
        if ev.get("fact") == (shown or ev.get("fact")) and rule not in marks.get(ev["line"], []):
            marks.setdefault(ev["line"], []).append(rule)
    brief = {
        k: redact_text(v if isinstance(v, str) else json.dumps(v, default=str))
        for k, v in facts.items()
        if not (isinstance(v, str) and ("\n" in v or len(v) > 300))
    }
    explanation = (
        verdict.get("explanation") if isinstance(verdict.get("explanation"), dict) else None
    )
    lines = log_lines(text if isinstance(text, str) else "", marks, kept.get(shown or "", ()))
    return {
        "info": info,
        "verdict": verdict,
        # A model's words: masked again, and shown as text (the template escapes them).
        "explanation": {k: redact_text(str(v)) for k, v in explanation.items()}
        if explanation
        else None,
        "budget": budget_notice(console.settings),
        "brief_facts": brief,
        "long_facts": [k for k in facts if k not in brief],
        "log_fact": shown or "log",
        "log": lines,
        "selection": _select(lines, *chosen),
        "marked": sorted(marks.items()),
        "where": [
            {"fact": w.get("fact"), "line": w.get("line"), "text": redact_text(str(w.get("text")))}
            for w in verdict.get("where") or []
            if isinstance(w, dict)
        ],
    }


def budget_notice(settings: Settings) -> str | None:
    """Why no model call is sent today (the daily LLM budget is reached), or None.

    Read from Redis with a short time limit; a console whose Redis is away says nothing.
    """
    if settings.llm_daily_budget <= 0:
        return None
    import redis

    from theow_workers.adapters.redis_state import RedisSpend

    client = redis.Redis.from_url(settings.redis_url, socket_timeout=1, socket_connect_timeout=1)
    try:
        return RedisSpend(client, settings.llm_daily_budget).status()[1]
    except redis.RedisError:
        return None
    finally:
        client.close()


def _line_param(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() and len(value) <= 9 else None


def _select(lines: list[JsonObject], first: int | None, last: int | None) -> JsonObject:
    """Teaching by pointing without a script: each line number links to the selection it makes.

    With no line chosen, or a whole selection, a number starts a new one
    (``?from=N``); with a first line chosen, it ends it (``?from=A&to=N``,
    in either order). Each line gets its ``href`` and ``selected``; the
    selection's first and last (as the build's log numbers them) are returned.
    """
    numbers = {line["n"] for line in lines if line["n"] is not None}
    first = first if first in numbers else None
    last = last if first is not None and last in numbers else None
    if first is not None and last is not None and last < first:
        first, last = last, first
    for line in lines:
        n = line["n"]
        line["selected"] = n is not None and first is not None and first <= n <= (last or first)
        if n is None:
            line["href"] = ""
        elif first is not None and last is None:
            low, high = min(first, n), max(first, n)
            line["href"] = f"?from={low}&to={high}#L{n}"
        else:
            line["href"] = f"?from={n}#L{n}"
    return {"first": first, "last": last, "count": (last - first + 1) if first and last else 0}


def _kept_lines(info: JsonObject) -> dict[str, LineMap]:
    """Which lines of the build's log the stored facts kept (none: they are the whole log)."""
    try:
        return parse_kept_lines((info["notes"] or {}).get(KEPT_LINES), info["facts"])
    except LineMapError:
        return {}


async def failure_page(request: Request) -> Response:
    console = _console(request)
    chosen = (
        _line_param(request.query_params.get("from")),
        _line_param(request.query_params.get("to")),
    )
    context = await run_in_threadpool(_failure_context, console, request.path_params["fid"], chosen)
    if context is None:
        return _missing(request, "failure")
    return console.render(request, "failure.html", **context)


def _teach(
    console: Console, failure_id: str, first: int, last: int, by: str, scope: str, mode: str
) -> tuple[str, str]:
    """File a taught proposal for lines ``first``-``last`` as the failure page numbers them:
    (proposal id, message); raises TeachError (nothing filed)."""
    from theow_client.job import job_fact
    from theow_workers.review.proposals import defined_names
    from theow_workers.review.teach import normal_test, teach

    context = _failure_context(console, failure_id)
    if context is None:
        raise TeachError(f"no failure {failure_id!r}")
    # The page numbers lines as the build's log did; the synthesizer reads the stored text.
    places = {line["n"]: line["i"] for line in context["log"] if line["n"] is not None}
    if first not in places or last not in places:
        raise TeachError(f"lines {first}-{last} are not lines of the stored log")
    failure = console.store.failure(context["info"]["id"])
    if failure is None:
        raise TeachError(f"no failure {failure_id!r}")
    offset = _offset(failure.facts, context["log_fact"])
    if offset is None:
        raise TeachError(f"rules read the log, not {context['log_fact']!r}: nothing to teach from")
    start, end = sorted((places[first] + offset, places[last] + offset))
    settings = console.settings
    try:
        is_normal = normal_test(console.runtime(), job_fact(failure.facts))
    except Exception:  # no runtime (its broker or model missing): taught without the normal
        is_normal = None
    taken = {name for layer in settings.rule_layers for name in defined_names(layer)}
    teaching = teach(
        console.store,
        console.library().knowledge().book,
        failure.id,
        start,
        end,
        by=by,
        scope=scope,
        mode=mode,
        is_normal=is_normal,
        taken=frozenset(taken),
    )
    tests = teaching.tests
    message = (
        f"taught {teaching.taught.rule.name} from lines {min(first, last)}-{max(first, last)}: "
        f"it matches {tests.matches} of {tests.scanned} stored failures; "
        "edit it below, then approve or reject"
    )
    return teaching.proposal_id, message


def _offset(facts: JsonObject, shown: str) -> int | None:
    """Where the shown fact's lines start in the log rules read (``matching_facts``):
    0 for the log itself, after stdout's lines for stderr (they are joined stdout first),
    None for a fact rules do not read as the log."""
    from theow_workers.core.resolve.plan import matching_facts

    if "log" in facts or shown == "log":
        return 0 if shown == "log" else None
    log = matching_facts(facts).get("log")
    if shown == "stdout" or (shown == "stderr" and log is facts.get("stderr")):
        return 0
    stdout = facts.get("stdout")
    if shown == "stderr" and isinstance(stdout, str) and stdout:
        return stdout.rstrip("\n").count("\n") + 1
    return None


async def teach_post(request: Request) -> Response:
    """ "This explains it": the selected lines through the synthesizer into the review queue."""
    console = _console(request)
    session = request.state.session
    fid = request.path_params["fid"]
    if not session.can_review:
        return console.render(
            request, "refused.html", status=403, reason="this login is read-only: it cannot teach"
        )
    form = request.state.form
    first, last = (
        _line_param(str(form.get("first") or "")),
        _line_param(str(form.get("last") or "")),
    )
    scope = str(form.get("scope") or "auto")
    mode = str(form.get("mode") or "track")
    try:
        if first is None or last is None:
            raise TeachError("select the first and the last line that explain the failure")
        if mode not in ("track", "retry"):
            raise TeachError(f"mode must be track or retry, not {mode[:20]!r}")
        pid, message = await run_in_threadpool(
            _teach, console, fid, first, last, f"{session.name} (web)", scope, mode
        )
    except TeachError as exc:
        context = await run_in_threadpool(_failure_context, console, fid, (first, last))
        if context is None:
            return _missing(request, "failure")
        return console.render(
            request, "failure.html", status=422, teach_error=redact_text(str(exc))[:2000], **context
        )
    console.affected.poke()
    response = RedirectResponse(f"/proposals/{pid}", status_code=303)
    response.set_cookie("theow_flash", message[:600], httponly=True, samesite="strict")
    return response


def _edit(console: Console, pid: str, text: str, by: str) -> list[str]:
    """Save a pending proposal's edited rule if it passes the checks; the problems otherwise."""
    from theow_workers.review.proposals import defined_names
    from theow_workers.review.teach import rule_problems, test_rule

    proposal = console.store.proposal(pid)
    if proposal is None or proposal.status != "pending":
        return ["only a pending proposal can be edited"]
    failure = console.store.failure(proposal.failure_id)
    facts = failure.facts if failure is not None else {}
    book = console.library().knowledge().book
    taken = {name for layer in console.settings.rule_layers for name in defined_names(layer)}
    taken |= {p.rule_name for p in console.store.proposals("pending") if p.id != pid}
    rule, problems = rule_problems(text, facts, book, taken, proposed=proposal.rule_yaml)
    if rule is None or problems:
        return problems
    tests = test_rule(console.store, rule, proposal.failure_id, facts, None, book)
    edited = {
        "by": by,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "previous_yaml": proposal.rule_yaml,
    }
    note = {"edited": edited, "tests": tests.to_dict()}
    if not console.store.edit_proposal(pid, rule.name, text, note):
        return ["the proposal was reviewed meanwhile: it is no longer pending"]
    console.affected.forget(pid)
    return []


async def edit_post(request: Request) -> Response:
    """A reviewer's edit of the rule: re-checked, saved only when it passes."""
    console = _console(request)
    session = request.state.session
    pid = request.path_params["pid"]
    if not session.can_review:
        return console.render(
            request,
            "refused.html",
            status=403,
            reason="this login is read-only: it cannot edit a proposal",
        )
    text = str(request.state.form.get("rule_yaml") or "").replace("\r\n", "\n")
    problems = await run_in_threadpool(_edit, console, pid, text, f"{session.name} (web)")
    if problems:
        context = await run_in_threadpool(_proposal_context, console, pid)
        if context is None:
            return _missing(request, "proposal")
        shown = [redact_text(p)[:1000] for p in problems[:20]]
        return console.render(
            request, "proposal.html", status=422, edit_errors=shown, edit_text=text, **context
        )
    console.affected.poke()
    response = RedirectResponse(f"/proposals/{pid}", status_code=303)
    response.set_cookie(
        "theow_flash",
        "saved: the edited rule passes its checks; its tests were run again",
        httponly=True,
        samesite="strict",
    )
    return response


async def rules_list(request: Request) -> Response:
    console = _console(request)
    activity = await run_in_threadpool(console.activity.get)
    context = await run_in_threadpool(console.library().overview, console.store, activity)
    return console.render(request, "rules.html", **context)


async def rule_page(request: Request) -> Response:
    console = _console(request)
    context = await run_in_threadpool(
        console.library().detail, console.store, request.path_params["name"]
    )
    if context is None:
        return _missing(request, "rule")
    return console.render(request, "rule.html", **context)


def _insight_context(console: Console) -> JsonObject:
    taken = console.insight.get()
    days = taken.value["days"]
    d = days["days"]
    return {
        **taken.value,
        "as_of": taken.at,
        "charts": [
            charts.line(d, days["hit_rate"], "hit rate per day"),
            charts.bars(d, days["failures"], "failures per day"),
            charts.bars(d, days["sessions"], "LLM sessions (explorations) per day"),
            charts.bars(d, days["cost"], "LLM cost per day ($)", label=lambda v: f"${v:,.2f}"),
        ],
    }


async def insight(request: Request) -> Response:
    console = _console(request)
    context = await run_in_threadpool(_insight_context, console)
    return console.render(request, "insight.html", **context)


async def replays(request: Request) -> Response:
    console = _console(request)
    jobs = await run_in_threadpool(replay_list, console.reads)
    return console.render(request, "replays.html", jobs=jobs)


def _replay_context(console: Console, job_id: str) -> JsonObject | None:
    from theow_workers.replay.report import Pricing, build
    from theow_workers.store.replay import DONE, JobNotFound, ReplayStore

    store = ReplayStore(console.store.sql.engine)
    try:
        job = store.get(job_id)
    except (JobNotFound, LookupError):
        return None
    report = build(store, job, Pricing.from_settings(console.settings))
    return {
        "job": job,
        "report": report,
        "running": job.status != DONE and job.status in ("pending", "running"),
    }


async def replay_page(request: Request) -> Response:
    console = _console(request)
    context = await run_in_threadpool(_replay_context, console, request.path_params["jid"])
    if context is None:
        return _missing(request, "replay job")
    return console.render(request, "replay.html", **context)


def routes() -> list[Route]:
    return [
        Route("/", home),
        Route("/queue", queue),
        Route("/proposals/{pid}", proposal_page),
        Route("/proposals/{pid}/approve", approve_post, methods=["POST"]),
        Route("/proposals/{pid}/reject", reject_post, methods=["POST"]),
        Route("/proposals/{pid}/edit", edit_post, methods=["POST"]),
        Route("/failures", failures_list),
        Route("/failures/{fid}", failure_page),
        Route("/failures/{fid}/teach", teach_post, methods=["POST"]),
        Route("/rules", rules_list),
        Route("/rules/{name}", rule_page),
        Route("/insight", insight),
        Route("/replays", replays),
        Route("/replays/{jid}", replay_page),
    ]
