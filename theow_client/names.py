"""Every queue, task name, Redis key and shared default in one place.

The client and the workers both import this module, so a name changed here
changes on both sides of the broker at once. It imports nothing.

Redis keys (all under ``theow:``):

``theow:rules:version``
    String. Content hash of the rule set most recently synced into the index;
    workers compare it with their own to notice a new rules version.
``theow:lock:index-sync``
    redis-py lock held while one process syncs the rule index.
``theow:deliveries:<failure_id>``
    Integer, expires after a day. How many times a resolve task for this
    failure was started; past ``max_deliveries`` the failure is recorded as an
    error instead of being tried again (a poison message must not crash-loop).
"""

from __future__ import annotations

# Queues: live traffic, LLM exploration, bulk history. Separate queues so that
# a replay or a slow exploration never starves a build waiting for a verdict.
QUEUE_RESOLVE = "resolve"
QUEUE_EXPLORE = "explore"
QUEUE_REPLAY = "replay"
QUEUES = (QUEUE_RESOLVE, QUEUE_EXPLORE, QUEUE_REPLAY)

# Stable task names: clients send by name and never import worker code.
TASK_RESOLVE = "theow.resolve"
TASK_EXPLORE = "theow.explore"
TASK_REPLAY = "theow.replay"

TASK_ROUTES = {
    TASK_RESOLVE: {"queue": QUEUE_RESOLVE},
    TASK_EXPLORE: {"queue": QUEUE_EXPLORE},
    TASK_REPLAY: {"queue": QUEUE_REPLAY},
}

# The embedded stack listens on 6479, not 6379: a developer's own Redis on the
# default port is left alone, and client and `theow up` agree without config.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6479/0"
DEFAULT_MILVUS_URI = "http://127.0.0.1:19531"

KEY_PREFIX = "theow:"
KEY_RULES_VERSION = KEY_PREFIX + "rules:version"
KEY_INDEX_SYNC_LOCK = KEY_PREFIX + "lock:index-sync"


def key_deliveries(failure_id: str) -> str:
    return f"{KEY_PREFIX}deliveries:{failure_id}"
