"""The broker edge: what a worker takes off its queues before Celery reads it.

Anyone who may push onto a queue (a build agent's broker login may push onto
``resolve`` and ``passing``) can push any bytes. Kombu's Redis transport
decodes them before any of Theow's code runs, and Celery then acts on what the
envelope says: which task to run, which tasks to chain after it, where to put
the message back if the worker dies. So each message is checked here, once,
below Celery:

- ``envelope``: the pure check, bytes -> an envelope kombu may deliver, or a
  ``Refusal`` with a fixed reason;
- ``dead_letters``: where a refused message is set aside (a bounded list with
  a TTL) and counted, for ``theow dead-letters`` and ``theow doctor``;
- ``transport``: the kombu Redis transport the workers consume with, which
  runs the check on every message it pops and never raises for one.
"""
