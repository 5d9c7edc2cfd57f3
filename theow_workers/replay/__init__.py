"""Replay: push a history of failures through the resolver in bulk (DESIGN §6).

``theow replay FILE.jsonl`` or ``theow replay --from-db --since 24h`` answers
"what would our rules have done with last month's failures, and what is still
unknown?". The pieces:

``reader``   streams JSON Lines, plain or gzipped (never a whole file in memory), bad
             lines reported, a file that is not JSON Lines refused; ``rules eval`` and
             ``demo`` read through it too.
``sources``  a file or a selection of stored failures, as batches of items.
``jobs``     the job row and one item row per input in SQL; counters move only
             when an item row is first inserted, so nothing is counted twice.
``runner``   on a worker: a chunk of items through ``ResolveService``, the very
             path live failures take (``dry_run`` by default: match, run nothing).
``tasks``    the ``theow.replay`` Celery task, a few lines around ``runner``.
``driver``   on the command line: sends chunks with a bounded number in flight,
             shows progress, survives Ctrl-C, resumes.
``grouping`` unmatched failures grouped by root cause; ``report`` the report,
             compared item by item with an earlier replay of the same source.
``explore``  the largest unmatched groups sent to the explorer under the job's budget.

Why live traffic is never starved — the decision
------------------------------------------------
Chunks travel on their own ``replay`` queue, and they are consumed by a
**separate worker** that consumes nothing else (``theow up`` starts a
``resolve`` worker and a ``replay`` worker; in production run
``theow worker --queues replay`` apart from the resolvers). A queue alone is
not enough: a worker that consumes both queues fetches replay chunks as fast
as it finishes them, and a live failure then waits behind whole chunks in
every process. With separate workers, live resolves always have processes
that a replay cannot occupy, whatever the replay's size.

What remains shared is CPU and the database. On one machine ``theow up``
starts the replay worker at a lower CPU priority (``replay_nice``, 10), so
when both compete the kernel gives the resolver most of the CPU; chunks are
small (``replay_chunk_bytes``, 1 MB of facts: a fraction of a second of work,
whatever the logs' size; at most ``replay_chunk_size``, 200, failures) with
prefetch 1 (a killed worker redoes at most one small chunk, a cancel takes
effect within a chunk), and the driver keeps at most ``replay_in_flight``
chunks queued (Redis holds megabytes, not the whole history). The price: a
replay runs slower while live traffic is heavy, which is the intended order of
priorities.

Warning: ``theow worker --queues resolve,replay`` works but gives up this
guarantee; a live failure may wait for a chunk (a fraction of a second) in each
process.
"""
