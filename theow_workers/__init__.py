"""Theow's workers: resolver, explorer and replay, plus the `theow` command.

Importing this package is cheap on purpose: action files do
``from theow_workers import action`` and are also loaded on build agents.
"""

import os

# Celery's prefork pool forks a worker's main process; gRPC (the Milvus client)
# with its default epoll poller and fork handlers can then abort the main
# process ("epoll_wait error: Bad file descriptor"), seen in the fault suite
# when pool processes are killed. The plain poll strategy without fork
# handlers is safe across fork. Set before grpc is first imported; an
# operator's own setting wins.
os.environ.setdefault("GRPC_POLL_STRATEGY", "poll")
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from theow_workers.core.actions import action

__all__ = ["action"]
