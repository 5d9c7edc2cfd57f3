"""``theow rules eval``: run a rule library over a corpus of logs and score it.

No server is needed: each failure is bounded exactly as ``theow-client``
bounds it, parsed, masked and matched by the same code a resolver worker runs
(:class:`~theow_workers.core.resolve.service.Submission` and
:func:`~theow_workers.core.resolve.plan.plan`), so the figures are what a fleet
gets. The one difference: a worker breaks an exact tie of specificity and
evidence position by embedding similarity; eval has no model loaded and keeps
the rules' load order instead.

Inputs are JSON Lines, plain or gzipped, one facts object per line with an
optional ``id`` (else the line number). Labels, when given, are
``{"id", "chunk"}`` lines: the text a person marked as why the build failed.
Throughput (``logs_per_s``) counts the worker's part only (preparing and
matching, as the corpus README defines it), not the client-side shaping.
Definitions (found, grounded, precision, false alarms, located) are those of
``shared/corpus/README.md``, in :mod:`theow_workers.core.resolve.grading`.

Every failure, matched or not, gets its ``where`` lines (up to three
``{fact, line, text}``, most telling first: :func:`~theow_workers.core.logs.summary.where_lines`,
as a worker computes them; line numbers in the log as the worker receives it).
A failure is *located* when one of them is grounded in its label by the same
test as an evidence line (its text only).

With a ``baseline`` (passing runs, JSON Lines like the failures), each log is
matched with its job's normal (:mod:`theow_workers.core.logs.normal`) learned from
the baseline runs of the same ``id`` or the same ``job`` fact, as a worker
learns it from the passing runs its clients report. A baseline run whose log
is the very log being matched is left out, so a passing log is never judged
against itself.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from theow_client.client import build_payload
from theow_client.facts import loads_facts
from theow_client.job import job_fact
from theow_client.jsontypes import JsonObject
from theow_client.messages import SubmitRequest
from theow_client.passing import build_passing_payload
from theow_client.verdict import Where
from theow_workers.core.explore.teaching import MAX_SPAN, Taught, TeachError, chunk_span, synthesize
from theow_workers.core.logs.normal import IsNormal, JobNormal, mine, run_lines
from theow_workers.core.logs.summary import WHERE_LINES, where_lines
from theow_workers.core.resolve.grading import grounded
from theow_workers.core.resolve.plan import Candidate, Hints, RuleBook, matching_facts, plan
from theow_workers.core.resolve.service import Submission
from theow_workers.core.rules.scanner import Scanner
from theow_workers.core.rules.schema import Mode, Rule
from theow_workers.replay.reader import DEFAULT_MAX_LINE_BYTES, json_object, raw_lines

FAILURES, PASSING = "failures", "passing"


def shown_line(outcome: Outcome, where: Where) -> str:
    """A where line as graded: the evidence's line from where its match begins, as the
    corpus README defines the evidence line; any other line whole."""
    evidence = outcome.evidence or {}
    if (where.fact, where.line) == (evidence.get("fact"), evidence.get("line")):
        return outcome.evidence_line or where.text
    return where.text


@dataclass
class Outcome:
    """What the matcher decided for one input line (one ``--out`` row)."""

    id: str
    source: str
    rule: str | None = None
    mode: str | None = None
    wrapper: str | None = None  # the wrapper rule when no specific one matched: unexplained
    evidence: JsonObject | None = None
    also: list[str] = field(default_factory=list)
    error: str | None = None
    grounded: bool | None = None
    matched: str = ""  # what the rule's regex matched, for grading
    # The corpus README's evidence line (from where the match begins), for grading: a
    # person is shown the whole line, a label may begin mid-line as the pattern does.
    evidence_line: str = ""
    seen_in_passing: list[str] = field(default_factory=list)  # validated on normal lines only
    baseline: bool = False  # matched with its job's normal
    normal: bool = False  # the chosen rule's evidence is all normal
    over_new: bool = False  # ... although another rule had new evidence (must never happen)
    where: list[Where] = field(default_factory=list)  # the lines to look at, most telling first
    located: bool | None = None  # one of the where lines is in the labelled chunk
    taught: bool = False  # --learn: taught from its label (its verdict is the one from before)
    learned: bool = False  # the chosen rule was learned in this run

    def row(self) -> JsonObject:
        return {
            "id": self.id,
            "source": self.source,
            "rule": self.rule,
            "mode": self.mode,
            "wrapper": self.wrapper,
            "evidence": self.evidence,
            "also": self.also,
            "error": self.error,
            "grounded": self.grounded,
            "seen_in_passing": self.seen_in_passing,
            "where": [w.to_dict() for w in self.where],
            "taught": self.taught,
            "learned": self.learned,
        }


@dataclass
class Summary:
    failures: int = 0
    found: int = 0
    unexplained: int = 0  # only a wrapper rule matched: not found
    grounded: int | None = None
    located: int | None = None  # failures with one of their where lines in the label
    passing: int = 0
    false_alarms: int = 0  # passing logs on which a fix or retry rule matched
    track_on_passing: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0  # in the worker's part: preparing and matching
    by_rule: Counter[str] = field(default_factory=Counter)
    grounded_by_rule: Counter[str] = field(default_factory=Counter)
    alarms_by_rule: Counter[str] = field(default_factory=Counter)
    track_by_rule: Counter[str] = field(default_factory=Counter)
    baseline: bool = False
    with_normal: int = 0  # failures whose job had a normal to match with
    won_on_normal: int = 0  # failures whose chosen rule matched normal lines only
    won_on_normal_over_new: int = 0
    seen_in_passing_by_rule: Counter[str] = field(default_factory=Counter)
    learn: bool = False
    taught: int = 0
    learned_rules: list[str] = field(default_factory=list)
    learned_found: int = 0  # failures whose chosen rule was learned in the run
    learned_grounded: int = 0
    learned_on_passing: Counter[str] = field(default_factory=Counter)  # any mode
    not_learned: list[str] = field(default_factory=list)  # "id: why" for teachings with no rule
    replaced: list[str] = field(default_factory=list)  # learned rules a wider one retired
    curve: list[bool] = field(default_factory=list)  # grounded, per failure in input order
    library: RuleBook | None = None  # the rules at the end of the run, learned ones among them

    def add(self, outcome: Outcome, labelled: bool) -> None:
        if outcome.error is not None:
            self.errors.append(f"{outcome.source} {outcome.id}: {outcome.error}")
        if outcome.source == FAILURES:
            self.failures += 1
            self.with_normal += outcome.baseline
            self.won_on_normal += outcome.normal
            self.won_on_normal_over_new += outcome.over_new
            self.seen_in_passing_by_rule.update(outcome.seen_in_passing)
            if outcome.rule is not None:
                self.found += 1
                self.by_rule[outcome.rule] += 1
            elif outcome.wrapper is not None:
                self.unexplained += 1
            self.taught += outcome.taught
            self.learned_found += outcome.learned
            self.learned_grounded += outcome.learned and bool(outcome.grounded)
            if labelled:
                self.curve.append(bool(outcome.grounded))
                self.grounded = (self.grounded or 0) + bool(outcome.grounded)
                self.located = (self.located or 0) + bool(outcome.located)
                if outcome.grounded and outcome.rule is not None:
                    self.grounded_by_rule[outcome.rule] += 1
            return
        self.passing += 1
        if outcome.rule is None:
            return
        if outcome.learned:
            self.learned_on_passing[outcome.rule] += 1
        if outcome.mode == Mode.TRACK:
            self.track_on_passing += 1
            self.track_by_rule[outcome.rule] += 1
        else:
            self.false_alarms += 1
            self.alarms_by_rule[outcome.rule] += 1

    def to_dict(self) -> JsonObject:
        logs = self.failures + self.passing
        grounded = self.grounded
        return {
            "failures": self.failures,
            "found": self.found,
            "found_rate": _ratio(self.found, self.failures),
            "unexplained": self.unexplained,
            "grounded": grounded,
            "grounded_rate": None if grounded is None else _ratio(grounded, self.failures),
            "precision": None if grounded is None else _ratio(grounded, self.found),
            "located": self.located,
            "located_rate": None if self.located is None else _ratio(self.located, self.failures),
            "passing": self.passing,
            "false_alarms": self.false_alarms,
            "false_alarm_rate": _ratio(self.false_alarms, self.passing) if self.passing else None,
            "track_on_passing": self.track_on_passing,
            "errors": len(self.errors),
            "error_ids": self.errors[:50],
            "logs_per_s": round(logs / self.seconds, 1) if self.seconds > 0 else None,
            "by_rule": {
                name: {
                    "found": count,
                    "grounded": self.grounded_by_rule.get(name, 0),
                }
                for name, count in self.by_rule.most_common()
            },
            "false_alarms_by_rule": dict(self.alarms_by_rule.most_common()),
            "track_on_passing_by_rule": dict(self.track_by_rule.most_common()),
            "baseline": self.baseline,
            "with_normal": self.with_normal,
            "won_on_normal": self.won_on_normal,
            "won_on_normal_over_new": self.won_on_normal_over_new,
            "seen_in_passing_by_rule": dict(self.seen_in_passing_by_rule.most_common()),
            **(self._learning() if self.learn else {}),
        }

    def _learning(self) -> JsonObject:
        """The simulated reviewer's figures: teachings, learned rules, the learning curve."""
        tenths = []
        n = len(self.curve)
        for k in range(10):
            part = self.curve[k * n // 10 : (k + 1) * n // 10]
            tenths.append(_ratio(sum(part), len(part)) if part else None)
        return {
            "taught": self.taught,
            "taught_rate": _ratio(self.taught, self.failures),
            "learned_rules": self.learned_rules,
            "replaced_rules": self.replaced,
            "learned_found": self.learned_found,
            "learned_grounded": self.learned_grounded,
            "learned_precision": _ratio(self.learned_grounded, self.learned_found),
            "learned_on_passing": sum(self.learned_on_passing.values()),
            "learned_on_passing_by_rule": dict(self.learned_on_passing.most_common()),
            "not_learned": self.not_learned[:50],
            "learning_curve": tenths,
        }


def _ratio(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def read_jsonl(path: Path) -> Iterator[tuple[int, JsonObject | None, str | None]]:
    """(line number, object or None, error or None) for each non-empty line.

    Read as ``theow replay`` reads a history (:mod:`theow_workers.replay.reader`):
    ``.gz`` gunzipped, invalid UTF-8 replaced, a line over 16 MB reported.
    """
    for raw in raw_lines(path, duplicates=False):
        if raw.data is None:
            yield raw.number, None, f"line {raw.number}: longer than {DEFAULT_MAX_LINE_BYTES} bytes"
            continue
        data, problem = json_object(raw.data)
        yield raw.number, data, None if problem is None else f"line {raw.number}: {problem}"


def read_labels(path: Path) -> dict[str, str]:
    return {
        str(data["id"]): str(data.get("chunk") or "")
        for _, data, _ in read_jsonl(path)
        if data is not None and "id" in data
    }


def decide(
    book: RuleBook,
    facts: JsonObject,
    fallback_id: str,
    is_normal: IsNormal | None = None,
) -> tuple[Outcome, float]:
    """The chosen rule, and the seconds the worker's part took.

    The facts are shaped exactly as ``theow-client`` sends them (its
    ``build_payload``), then prepared and planned as a resolver worker does.
    """
    payload = build_payload(facts, failure_id=fallback_id)
    started = time.perf_counter()
    sub = Submission.parse(SubmitRequest.from_wire(payload), fallback_id)
    result = plan(book, sub.seen, Hints(), is_normal=is_normal)
    # A probabilistic rule needs an explorer; a worker without exploring skips it.
    tried = [c for c in result.attempts if not _probabilistic(c)]
    attempts = [c for c in tried if not c.generic]
    chosen_match = attempts[0].match if attempts else None
    # A wrapper's evidence says a step failed, not why: it never heads the where lines.
    where = where_lines(
        sub.seen,
        chosen_match.evidence if chosen_match is not None else None,
        is_normal=is_normal,
        is_wrapper=book.is_wrapper,
    )
    seconds = time.perf_counter() - started
    outcome = Outcome(fallback_id, FAILURES, baseline=is_normal is not None, where=where)
    if not attempts:
        wrapper = result.wrapper
        if wrapper is not None and wrapper.match is not None:
            outcome.wrapper, outcome.mode = wrapper.rule, wrapper.match.rule.mode.value
        return outcome, seconds
    chosen = attempts[0]
    assert chosen.match is not None
    outcome.rule = chosen.rule
    outcome.mode = chosen.match.rule.mode.value
    outcome.also = [c.rule for c in tried if c is not chosen]
    outcome.seen_in_passing = [c.rule for c in tried if c.normal]
    outcome.normal = chosen.normal
    outcome.over_new = chosen.normal and any(not c.normal for c in attempts)
    evidence = chosen.match.evidence
    if evidence is not None:
        outcome.evidence = {"fact": evidence.fact, "line": evidence.line, "text": evidence.text}
        outcome.matched = evidence.matched
        outcome.evidence_line = evidence.from_match
    return outcome, seconds


def _probabilistic(candidate: Candidate) -> bool:
    return candidate.match is not None and candidate.match.rule.llm_config is not None


def run(
    book: RuleBook,
    failures: Path,
    *,
    passing: Path | None = None,
    labels: dict[str, str] | None = None,
    baseline: Path | None = None,
    emit: Callable[[Outcome], None] = lambda outcome: None,
    progress: Callable[[], None] = lambda: None,
    learn: bool = False,
    learned_to: Path | None = None,
    scope: str = "auto",
) -> Summary:
    """Score ``book`` on the corpus; ``emit`` gets every outcome in input order.

    ``learn`` (with ``labels``): a simulated reviewer. Each failure whose
    verdict is not grounded is taught from its labelled chunk through the
    synthesizer (:mod:`theow_workers.core.explore.teaching`), as ``theow teach``
    would, and the rule, when one passes the checks, joins the library for
    the failures after it (and for the passing logs). The taught failure
    keeps the verdict it had before. ``learned_to``: a directory each learned
    rule is written to, as an approval writes it (to read them, or to check them
    with ``theow rules check``). ``scope``: what each taught rule is kept to, as
    ``theow teach --scope`` (``auto``: the failure's project, else its job;
    ``global``: every project). ``Summary.library`` is the library at the end.
    """
    book.scanner  # noqa: B018 - compiled before the clock starts: start-up, not throughput
    base = book
    summary = Summary(baseline=baseline is not None, learn=learn and labels is not None)
    learned: set[str] = set()
    normals = Baseline.read(baseline) if baseline is not None else None
    sources = [(FAILURES, failures)] + ([(PASSING, passing)] if passing is not None else [])
    for source, path in sources:
        for number, data, problem in read_jsonl(path):
            ident = str(data.get("id", number)) if data is not None else str(number)
            outcome = Outcome(ident, source, error=problem)
            if data is not None:
                facts = {k: v for k, v in data.items() if k != "id"}
                normal = normals.normal_for(ident, facts) if normals is not None else None
                try:
                    outcome, seconds = decide(book, facts, ident, normal)
                    summary.seconds += seconds
                    outcome.source = source
                except Exception as exc:  # a log that breaks the matcher is counted, never fatal
                    outcome = Outcome(ident, source, error=f"{type(exc).__name__}: {exc}")
            labelled = source == FAILURES and labels is not None
            if labelled and labels is not None:
                chunk = labels.get(outcome.id, "")
                outcome.located = bool(chunk) and any(
                    grounded(shown_line(outcome, w), "", chunk) for w in outcome.where[:WHERE_LINES]
                )
            if labelled and labels is not None and outcome.rule is not None:
                chunk = labels.get(outcome.id, "")
                text = outcome.evidence_line
                outcome.grounded = bool(chunk) and grounded(text, outcome.matched, chunk)
            elif labelled:
                outcome.grounded = False
            outcome.learned = outcome.rule in learned
            if summary.learn and labelled and labels is not None and data is not None:
                chunk = labels.get(outcome.id, "")
                if not outcome.grounded and chunk:
                    outcome.taught = True
                    facts = {k: v for k, v in data.items() if k != "id"}
                    taught, why = teach_label(book, facts, ident, chunk, learned, normal, scope)
                    if taught is None:
                        summary.not_learned.append(f"{ident}: {why}")
                    else:
                        rule = taught.rule
                        # A wider rule of the same cause: the reviewer retires the narrower one.
                        kept = tuple(r for r in book.rules if r.name not in taught.replaces)
                        summary.replaced.extend(taught.replaces)
                        if learned_to is not None:
                            for name in taught.replaces:
                                (learned_to / f"{name}.rule.yaml").unlink(missing_ok=True)
                            path = learned_to / f"{rule.name}.rule.yaml"
                            path.write_text(taught.rule_yaml, encoding="utf-8")
                        book = with_learned(base, (*kept, rule), f"{book.version}+{rule.name}")
                        learned.add(rule.name)
                        summary.learned_rules.append(rule.name)
            summary.add(outcome, labelled)
            emit(outcome)
            progress()
    summary.library = book
    return summary


def with_learned(base: RuleBook, rules: tuple[Rule, ...], version: str) -> RuleBook:
    """``rules`` (``base``'s and a few learned since) as a book that scans with ``base``'s scanner.

    A worker recompiles its scanner when the library changes; the simulated
    reviewer approves a rule every few failures, and recompiling 240 patterns
    each time took seconds. Learned rules join the scanner's residual (rules it
    does not decide, checked in full: a literal of theirs rules most logs out
    first), so the verdicts are those a recompiled scanner gives.
    """
    scanner = base.scanner
    known = {id(rule) for rule in base.rules}
    extra = tuple(rule for rule in rules if id(rule) not in known)
    book = RuleBook(rules, version, base.client_side)
    book._scanner.append(_Widened(scanner, extra))
    book._wrapper.append(base.is_wrapper)  # a taught rule is never a wrapper
    return book


class _Widened(Scanner):
    """A compiled scanner with more rules checked in full (see :func:`with_learned`)."""

    def __init__(self, scanner: Scanner, extra: tuple[Rule, ...]) -> None:
        self.__dict__.update(vars(scanner))  # the compiled databases are shared, not copied
        self.residual = (*scanner.residual, *extra)


def teach_label(
    book: RuleBook,
    facts: JsonObject,
    ident: str,
    chunk: str,
    taken: set[str],
    is_normal: IsNormal | None = None,
    scope: str = "auto",
) -> tuple[Taught | None, str]:
    """The rule a reviewer approves for a failure taught from its labelled ``chunk``, or why none.

    The failure is prepared as a worker receives it; the chunk's lines are
    found in its log (or, cut by bounding, taught from the chunk alone).
    """

    payload = build_payload(facts, failure_id=ident)
    prepared = matching_facts(Submission.parse(SubmitRequest.from_wire(payload), ident).facts)
    log = prepared.get("log")
    span = chunk_span(log, chunk) if isinstance(log, str) else None
    if span is None:  # the label lies in what bounding cut: the chunk is all there is
        prepared = {**{k: v for k, v in prepared.items() if k != "log"}, "log": chunk}
        span = chunk_span(chunk, chunk)
    if span is None:
        return None, "the label holds no text"
    first, last = span
    if last - first >= MAX_SPAN:  # a whole step labelled: a reviewer points at its end
        span = (last - MAX_SPAN + 1, last)
    try:
        taught = synthesize(
            prepared,
            *span,
            is_wrapper=book.is_wrapper,
            is_normal=is_normal,
            scope=scope,
            book=book,
            taken=taken,
            origin=f"failure {ident} (label)",
            replaceable=taken,
        )
    except TeachError as exc:
        return None, str(exc)
    return taught, ""


@dataclass
class Baseline:
    """Passing runs by ``id`` and by job, each kept as the worker would receive it."""

    runs: list[tuple[str, list[str]]] = field(default_factory=list)  # (log, lines)
    by_key: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Baseline:
        baseline = cls()
        for number, data, _ in read_jsonl(path):
            if data is None:
                continue
            facts = {k: v for k, v in data.items() if k != "id"}
            # Shaped as `theow-client success` sends a passing run.
            sent = loads_facts(build_passing_payload(facts, job="eval")["facts_json"])
            lines = run_lines(sent)
            baseline.runs.append(("\n".join(run_lines(facts)), lines))
            for key in _keys(str(data.get("id", number)), facts):
                baseline.by_key.setdefault(key, []).append(len(baseline.runs) - 1)
        return baseline

    def normal_for(self, ident: str, facts: JsonObject) -> IsNormal | None:
        """The job's normal for a log, from the other passing runs of its id or job."""
        own = "\n".join(run_lines(facts))
        picked = {i for key in _keys(ident, facts) for i in self.by_key.get(key, ())}
        templates: list[str] = []
        for i in sorted(picked):
            log, lines = self.runs[i]
            if log != own:
                templates = mine(lines, templates)
        if not templates:
            return None
        return JobNormal.from_templates(templates).is_normal


def _keys(ident: str, facts: JsonObject) -> list[str]:
    job = job_fact(facts)
    return [f"id:{ident}"] + ([f"job:{job}"] if job else [])


def count_lines(path: Path) -> int:
    """Non-empty lines, for a progress bar's total (not parsed)."""
    return sum(1 for _ in raw_lines(path, duplicates=False))
