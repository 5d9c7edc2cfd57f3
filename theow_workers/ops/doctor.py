"""``theow doctor``: is every dependency of this deployment there and sane?

One finding per check, each ``ok``, ``warn``, ``fail`` or ``skip``, with what is
wrong and how to fix it; exit code 1 when any check fails.

=================  ==============================================================
config             settings load; visibility timeout above every task time limit
redis              reachable, version; ``maxmemory-policy noeviction``; persistence
consumers          every queue has a worker whose heartbeat is alive (resolve,
                   explore with ``THEOW_EXPLORE=1``: fail; replay, passing, explain
                   with ``THEOW_EXPLAIN=1``: warn)
milvus             reachable; the index collection exists
sql                reachable; Alembic at the head revision of this code
model              the MiniLM files are installed (``--deep``: load it and embed)
rules              rules and actions load without errors (``Library.load``); every
                   resolver worker serves this version of them (``rules.served``)
index              Milvus holds exactly the content hashes of the current rules
llm                with ``THEOW_EXPLORE=1``, an API key is set
=================  ==============================================================

Every check has a time limit; nothing here writes to a service, except that
reading the index loads the collection into Milvus memory. Service URLs are
shown with their credentials masked; no secret is ever printed.

Run it where the workers run (``docker compose exec explorer theow doctor``)
to check that container's configuration.
"""

from __future__ import annotations

from dataclasses import asdict

from theow_client.jsontypes import JsonObject
from theow_workers.config import Settings
from theow_workers.ops.checks import CHECKS, FAIL, Context, Finding


def diagnose(settings: Settings, deep: bool = False) -> list[Finding]:
    """Run every check; a check that crashes is itself a failed finding."""
    from theow_workers.logs import SecretFilter, secrets_of

    ctx = Context(settings, deep)
    findings: list[Finding] = []
    for check in CHECKS:
        name = check.__name__.removeprefix("check_")
        try:
            findings.extend(check(ctx))
        except Exception as exc:
            findings.append(Finding(name, FAIL, f"the check itself failed: {exc!r}"))
    mask = SecretFilter(secrets_of(settings)).mask
    return [Finding(f.check, f.status, mask(f.detail), mask(f.fix)) for f in findings]


def report(findings: list[Finding]) -> JsonObject:
    return {
        "ok": all(f.status != FAIL for f in findings),
        "checks": [asdict(f) for f in findings],
    }
