"""Every queue, task name, Redis key and shared default in one place.

The client and the workers both import this module, so a name changed here
changes on both sides of the broker at once. It imports nothing.

Redis keys (all under ``theow:``):

``theow:rules:version``
    String. Content hash of the rule set most recently synced into the index;
    workers compare it with their own to notice a new rules version.
``theow:rules:last-good``
    JSON {version, files: {path: text}} of the last valid rule set a worker
    loaded: a worker that starts while the rules directory is invalid serves
    this version instead of answering ``error`` for every failure.
``theow:rules:error``
    JSON {error, serving, at} while a worker finds the rules directory invalid
    (read by ``theow doctor`` and the metrics); deleted by the next valid load.
``theow:lock:index-sync``
    redis-py lock held while one process syncs the rule index.
``theow:deliveries:<failure_id>``
    Integer, expires after a day. How many times a resolve task for this
    failure was started; past ``max_deliveries`` the failure is recorded as an
    error instead of being tried again (a poison message must not crash-loop).
``theow:resolving:<failure_id>``
    String with a short TTL kept fresh while a worker resolves that failure:
    a duplicate submit of the same failure waits for the first one's verdict
    instead of running the actions twice; a killed worker's claim expires.
``theow:verdict:<agent>:<failure_id>``
    String (the verdict's JSON), expires after ``VERDICT_TTL`` (a day). Set by
    the resolve worker once a failure sent by that agent is decided (and again
    when a client-side fix is settled); the agent's client polls it with GET.
    A string, not a list popped by BLPOP, so a second waiter (another process,
    ``theow-client wait``) and a re-read see the same verdict. Agent-scoped, so
    a broker ACL can let an agent read ``theow:verdict:<its name>:*`` and
    nothing else.
``theow:verdict:<agent>:<failure_id>:ready``
    List, expires after ``READY_TTL`` (a minute): one element pushed right after
    the verdict key is set. A waiting client blocks on it (BLPOP, at most a
    poll's pause) instead of sleeping between GETs, so it reads the verdict as
    soon as it is there; the verdict itself is always read from the string.
``theow:verdict:<agent>:<failure_id>:refused:<signature>``
    String with the same TTL: why a message claiming to be that agent's was
    refused (a wrong or revoked token), under the refused message's own
    signature, which only its sender knows: a forger's refusal can never
    stand in for another message's verdict.
``theow:intake:<agent>:<failure_id>``
    String ("queued"), same TTL: the web intake (``theow_workers.web.intake``)
    queued this failure for that agent; until a verdict is stored it answers
    the agent's ``GET /api/v1/failures/<id>/verdict`` with 202, not 404.
``theow:refused``
    Hash, task name -> how many messages of that task were refused because
    their sender could not be verified (``theow_workers.identity``);
    exported as ``theow_refused_messages_total``.
``theow:refused:edge``
    Hash, ``<task> <reason>`` -> how many messages a worker took off a queue
    and refused before Celery read them (``theow_workers.edge``): not a
    Theow task envelope, or a task that may not run from a queue. ``<task>``
    is a Theow task name, ``celery`` (a built-in) or ``unknown``; ``<reason>``
    one of ``theow_workers.edge.envelope.REASONS``. Exported as
    ``theow_refused_messages_total{task,reason}``.
``theow:dead-letters``
    List, newest first, of the messages refused at the edge: JSON {at, queue,
    task, reason, detail, size, head} with ``head`` the message's first
    ``DEAD_LETTER_HEAD`` characters, secrets masked. At most
    ``DEAD_LETTER_CAP`` entries (older ones are dropped); expires
    ``DEAD_LETTER_TTL`` after the last refusal. Read by ``theow dead-letters``
    and ``theow doctor``.
``theow:llm:<model>:requests`` / ``theow:llm:<model>:tokens``
    Sorted sets, the sliding window of the global rate limit
    (``theow_workers/adapters/ratelimit.lua``).
``theow:llm:<model>:backoff`` / ``theow:llm:<model>:stopped``
    Strings with a TTL: a per-minute 429 makes every worker wait; a per-day
    429 stops exploring with that model until the TTL ends (value: why).
``theow:explore:sessions:<session id>``
    Integer: LLM sessions started under a session id (a replay job, or an
    hourly window), capped by ``session_limit.lua``.
``theow:explore:flight:<fingerprint>``
    String (the failure id exploring it), expires after the explore time
    limit: single-flight, one LLM session per root cause fleet-wide.
``theow:explore:done:<fingerprint>``
    JSON of the finished exploration for that root cause (outcome, proposal).
``theow:explore:cache``
    Hash, proposal id → JSON {vector, rule_yaml, proposal_id}: the semantic
    session cache shared by every explorer worker.
``theow:llm:spend:<day>``
    Integer, micro-dollars reserved and spent on model calls that UTC day
    (``YYYY-MM-DD``), by every worker; expires two days later. A call
    reserves its most (``spend.lua``) and settles what it cost.
``theow:llm:budget-reached:<day>``
    String (why) set when a call was refused because the day's budget would
    be exceeded; read by ``theow doctor`` and the console; expires with the day.
``theow:explain:cause:<cause>``
    JSON of the explanation of one cause (``core.llm.explanation.cause_key``:
    the project and the summary's basis), expires after ``EXPLAIN_TTL``: every
    failure of the cause carries it; the SQL ``explanations`` table keeps it too.
``theow:explain:flight:<cause>``
    redis-py lock held while one worker asks the model about the cause: the
    fleet pays once per cause, a second worker waits for the first's answer.
``theow:passing:sample:<job>``
    String with a TTL of the sampling interval, set with ``SET NX EX`` by the
    client that reports a passing run of that job: at most one passing run per
    job per interval reaches the ``passing`` queue, however large the fleet.
``theow:normal:<job>``
    (``<job>`` is ``<agent>/<job>`` for what an agent's passing runs taught,
    the job alone for what an operator's replay taught.) Sorted set, template → time last seen (epoch seconds), expires
    ``normal_ttl`` after the job's last learned passing run and holds at most
    ``MAX_TEMPLATES`` members (the least recently seen are dropped): the
    job's normal, mined from its recent passing runs.
``theow:normal-runs:<job>``
    Integer with the same TTL: how many passing runs of the job were learned.
``theow:hook:seen:<forge>:<repo>:<job id>:<attempt>``
    String (the delivery id), expires after ``HOOK_SEEN_TTL``. Set with
    ``SET NX`` by the web process when a webhook names a finished job: a
    duplicated or replayed delivery of the same job and attempt is answered
    and dropped (``theow_workers.web.hooks``).
``theow:hook:pr:<forge>:<repo>:<number>``
    Hash, job key -> JSON line of that job's outcome, plus ``comment`` -> the
    id of the one comment Theow keeps on that pull request; expires after
    ``HOOK_PR_TTL``. ``theow:lock:pr:<forge>:<repo>:<number>`` is the
    redis-py lock held while a worker writes that comment (never two).
``theow:hook:job-prs:<job key>``
    Set of the pull-request numbers whose comment lists that job as failed,
    expires after ``HOOK_PR_TTL``: a passing run of the job looks there before
    any forge call, so a job no comment lists costs none.
``theow:hook:failure-prs:<failure id>``
    JSON {job, prs}, expires after ``HOOK_PR_TTL``: the hooked job a failure
    is of and the pull requests whose comment lists it, so a later revision of
    the failure's origin rewrites those comments (``feedback.refresh_comment``).
``theow:hook:run-pr:<forge>:<repo>:<run id>``
    JSON {pr, base_sha}, expires after ``HOOK_SEEN_TTL``: the pull request a
    ``workflow_run`` delivery said a workflow run belongs to, so the ledger
    records its jobs' runs (``workflow_job`` names no pull request) with it.
``theow:hook:rate:<forge>:<repo>:requests`` (and ``:tokens``, ``:backoff``, ``:stopped``)
    The sliding window of forge API calls for one repository, kept by
    ``theow_workers/adapters/ratelimit.lua`` as for a model (``backoff``: a 429's
    Retry-After, which every worker waits out; tokens always 0).
``theow:alert:sent:<incident id>:<event>``
    String (when it was raised), expires after ``ALERT_SENT_TTL``. Set with
    ``SET NX`` when an incident's event raises an alert
    (``theow_workers.integrations.alerts``): the same incident and event raised
    again, by any worker, sends nothing.
``theow:alert:rate:requests`` (and ``:tokens``, ``:backoff``, ``:stopped``)
    The sliding window of alerts posted by every worker, kept by
    ``ratelimit.lua`` (``alerts_per_minute``; tokens always 0).
``theow:consumer:<queue>:<worker>``
    JSON {worker, queue, pid, at}, expires ``CONSUMER_TTL`` seconds after the
    worker's last heartbeat: the worker consumes that queue. Refreshed every
    ``CONSUMER_BEAT`` seconds, deleted when the worker stops consuming it
    (cancelled, shut down); read by ``theow doctor`` and ``theow replay``
    instead of Celery's remote control, which agents cannot reach.
``theow:served:<host>:<pid>``
    JSON {host, pid, parent, version}, expires ``CONSUMER_TTL`` seconds after
    it was last written: the rules version that worker process resolves with,
    written when it changes and every ``CONSUMER_BEAT`` seconds; read by
    ``theow review approve`` to say when a rule it wrote is live.
"""

from __future__ import annotations

# Queues: live traffic, LLM exploration, bulk history. Separate queues so that
# a replay or a slow exploration never starves a build waiting for a verdict.
QUEUE_RESOLVE = "resolve"
QUEUE_EXPLORE = "explore"
QUEUE_REPLAY = "replay"
# Passing runs to learn each job's normal from: sampled, low priority, never urgent.
QUEUE_PASSING = "passing"
# Plain-language explanations of unexplained failures: after the verdict, never before it.
QUEUE_EXPLAIN = "explain"
QUEUES = (QUEUE_RESOLVE, QUEUE_EXPLORE, QUEUE_REPLAY, QUEUE_PASSING, QUEUE_EXPLAIN)

# Stable task names: clients send by name and never import worker code.
TASK_RESOLVE = "theow.resolve"
TASK_EXPLORE = "theow.explore"
TASK_REPLAY = "theow.replay"
# From the build agent, after it ran a verdict's client-side actions: their
# outcome, the only thing that may count a client-side fix as a success.
TASK_CLIENT_OUTCOME = "theow.client_outcome"
# A passing run of a job: its log is mined into the job's normal.
TASK_PASSING = "theow.passing"
# One unexplained failure to explain (internal: sent by the resolve task).
TASK_EXPLAIN = "theow.explain"
# A finished CI job named by a forge's webhook: its log fetched, resolved, commented on.
TASK_HOOK = "theow.hook"
# One run of a job for the ledger (passed, or failed without its log): a small record, no log.
TASK_RUN = "theow.run"
# One alert to post to the configured webhook (internal: raised by a worker).
TASK_ALERT = "theow.alert"

TASK_ROUTES = {
    TASK_RESOLVE: {"queue": QUEUE_RESOLVE},
    TASK_EXPLORE: {"queue": QUEUE_EXPLORE},
    TASK_REPLAY: {"queue": QUEUE_REPLAY},
    TASK_CLIENT_OUTCOME: {"queue": QUEUE_RESOLVE},
    TASK_PASSING: {"queue": QUEUE_PASSING},
    TASK_EXPLAIN: {"queue": QUEUE_EXPLAIN},
    TASK_HOOK: {"queue": QUEUE_RESOLVE},
    # Low priority, never urgent, and already writable by every agent's broker user.
    TASK_RUN: {"queue": QUEUE_PASSING},
    TASK_ALERT: {"queue": QUEUE_RESOLVE},
}

# The embedded stack listens on 6479, not 6379: a developer's own Redis on the
# default port is left alone, and client and `theow up` agree without config.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6479/0"
DEFAULT_MILVUS_URI = "http://127.0.0.1:19531"

# The one key of a task argument standing for a message the worker could not
# decode (theow_workers.wire): the task records a rejection with its reason.
UNREADABLE = "theow_unreadable"

KEY_PREFIX = "theow:"
KEY_RULES_VERSION = KEY_PREFIX + "rules:version"
KEY_INDEX_SYNC_LOCK = KEY_PREFIX + "lock:index-sync"
KEY_RULES_LAST_GOOD = KEY_PREFIX + "rules:last-good"
KEY_RULES_ERROR = KEY_PREFIX + "rules:error"


KEY_EXPLORE_CACHE = KEY_PREFIX + "explore:cache"
KEY_REFUSED = KEY_PREFIX + "refused"
KEY_REFUSED_AT_EDGE = KEY_PREFIX + "refused:edge"
KEY_DEAD_LETTERS = KEY_PREFIX + "dead-letters"
DEAD_LETTER_CAP = 1000
DEAD_LETTER_TTL = 7 * 24 * 3600
DEAD_LETTER_HEAD = 1024
# Token names revoked (a set), read by each signed message's check, so a revocation
# holds at once and not when a worker's cached read of the token store expires. No
# TTL: a revoked name is never reused, so it holds at most every token ever revoked.
KEY_REVOKED = KEY_PREFIX + "tokens:revoked"


def key_passing_sample(job: str) -> str:
    return f"{KEY_PREFIX}passing:sample:{job}"


def agent_job(agent: str, job: str) -> str:
    """A job as an agent's passing runs teach it: no agent teaches another's jobs' normals."""
    return f"{agent}/{job}"


def key_normal(job: str) -> str:
    return f"{KEY_PREFIX}normal:{job}"


def key_normal_runs(job: str) -> str:
    return f"{KEY_PREFIX}normal-runs:{job}"


VERDICT_TTL = 24 * 3600


def verdict_key(agent: str, failure_id: str) -> str:
    return f"{KEY_PREFIX}verdict:{agent}:{failure_id}"


READY_TTL = 60


def verdict_ready_key(agent: str, failure_id: str) -> str:
    return f"{verdict_key(agent, failure_id)}:ready"


def intake_key(agent: str, failure_id: str) -> str:
    return f"{KEY_PREFIX}intake:{agent}:{failure_id}"


def refusal_key(agent: str, failure_id: str, signature: str) -> str:
    return f"{verdict_key(agent, failure_id)}:refused:{signature[:64]}"


def key_deliveries(failure_id: str) -> str:
    return f"{KEY_PREFIX}deliveries:{failure_id}"


def key_resolving(failure_id: str) -> str:
    return f"{KEY_PREFIX}resolving:{failure_id}"


def key_llm(model: str, part: str) -> str:
    """``part``: requests, tokens, backoff or stopped."""
    return f"{KEY_PREFIX}llm:{model}:{part}"


def key_session_budget(session_id: str) -> str:
    return f"{KEY_PREFIX}explore:sessions:{session_id}"


def key_explore_flight(fingerprint: str) -> str:
    return f"{KEY_PREFIX}explore:flight:{fingerprint}"


def key_explore_done(fingerprint: str) -> str:
    return f"{KEY_PREFIX}explore:done:{fingerprint}"


def key_llm_spend(day: str) -> str:
    """``day``: the UTC date, ``YYYY-MM-DD``."""
    return f"{KEY_PREFIX}llm:spend:{day}"


def key_llm_budget_reached(day: str) -> str:
    return f"{KEY_PREFIX}llm:budget-reached:{day}"


EXPLAIN_TTL = 30 * 24 * 3600


def key_explanation(cause: str) -> str:
    return f"{KEY_PREFIX}explain:cause:{cause}"


def key_explain_flight(cause: str) -> str:
    return f"{KEY_PREFIX}explain:flight:{cause}"


def key_query_vector(model: str, digest: str) -> str:
    """A failure's query vector (float32), by its normalized text's hash."""
    return f"{KEY_PREFIX}vector:{model}:{digest}"


def explore_task_id(failure_id: str) -> str:
    """The explore task's id: a client waits on it for the exploration's outcome."""
    return f"explore-{failure_id}"


# Liveness: a heartbeat per worker and queue consumed (theow_workers.ops.heartbeat).
CONSUMER_BEAT = 5.0
CONSUMER_TTL = 15


def key_consumer(queue: str, worker: str) -> str:
    """``worker``'s heartbeat on ``queue``; ``worker`` ``*`` is the pattern of them all."""
    return f"{KEY_PREFIX}consumer:{queue}:{worker}"


def key_served(host: str, pid: int | str) -> str:
    """The rules version process ``pid`` on ``host`` serves; ``*`` in either for a pattern."""
    return f"{KEY_PREFIX}served:{host}:{pid}"


# Webhook intake (theow_workers.web.hooks, theow_workers.integrations).
# The agents hooked failures are recorded under: reserved, no token is ever given one.
HOOK_AGENTS = {"github": "github-hooks", "gitlab": "gitlab-hooks"}
HOOK_SEEN_TTL = 7 * 24 * 3600  # GitHub lets a delivery be redelivered for days
HOOK_PR_TTL = 30 * 24 * 3600


def key_hook_seen(job_key: str) -> str:
    return f"{KEY_PREFIX}hook:seen:{job_key}"


def key_hook_run_pr(forge: str, repo: str, run_id: str) -> str:
    return f"{KEY_PREFIX}hook:run-pr:{forge}:{repo}:{run_id}"


def key_hook_pr(forge: str, repo: str, number: str) -> str:
    return f"{KEY_PREFIX}hook:pr:{forge}:{repo}:{number}"


def key_hook_job_prs(job: str) -> str:
    return f"{KEY_PREFIX}hook:job-prs:{job}"


def key_hook_failure_prs(failure_id: str) -> str:
    return f"{KEY_PREFIX}hook:failure-prs:{failure_id}"


def key_hook_pr_lock(forge: str, repo: str, number: str) -> str:
    return f"{KEY_PREFIX}lock:pr:{forge}:{repo}:{number}"


def key_hook_rate(forge: str, repo: str) -> str:
    return f"{KEY_PREFIX}hook:rate:{forge}:{repo}"


# Alerts (theow_workers.integrations.alerts): once per incident and event.
ALERT_SENT_TTL = 30 * 24 * 3600


def key_alert_sent(incident_id: str, event: str) -> str:
    return f"{KEY_PREFIX}alert:sent:{incident_id}:{event}"


def key_alert_rate(part: str) -> str:
    """``part``: requests, tokens, backoff or stopped."""
    return f"{KEY_PREFIX}alert:rate:{part}"


# Runs an agent reports (theow.run, POST /api/v1/runs): a token bucket per agent, shared by every
# worker (theow_workers.adapters.agent_rate; a hash of ``tokens`` and ``at``, expiring once full).
def key_run_rate(agent: str) -> str:
    return f"{KEY_PREFIX}rate:runs:{agent}"
