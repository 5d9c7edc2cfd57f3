"""Failures kept on the build agent's disk while the broker is unreachable.

One JSON file per failure, ``<failure_id>.json``, holding exactly the payload
that would have been sent. Files are written to a temporary name and renamed,
so a reader (a concurrent ``flush``) never sees half a payload and a crash
never leaves a corrupt one behind.

Two ``flush`` runs at once may both send the same file before either deletes
it; that is harmless because the workers are idempotent on the failure id.

>>> import tempfile
>>> spool = Spool(tempfile.mkdtemp())
>>> path = spool.put({"failure_id": "f-1", "facts": {}})
>>> [p.name for p in spool.pending()], spool.load(path)["failure_id"]
(['f-1.json'], 'f-1')
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

from theow_client import signing
from theow_client.facts import FactsError, dumps_facts
from theow_client.jsontypes import JsonObject
from theow_client.redact import redact, redact_text

log = logging.getLogger("theow.client")

SUFFIX = ".json"
# Files that cannot be read back are renamed aside, not deleted: a person may
# still want them, and they must not block every later flush.
BAD_SUFFIX = ".bad"


class SpoolError(OSError):
    """A spooled file could not be written or read back; names the file."""


class Spool:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path_for(self, failure_id: str) -> Path:
        return self.directory / f"{failure_id}{SUFFIX}"

    def put(self, payload: JsonObject) -> Path:
        """Write ``payload`` atomically; return the file it now lives in."""
        failure_id = str(payload["failure_id"])
        if not failure_id or "/" in failure_id or failure_id.startswith("."):
            raise SpoolError(f"cannot spool a failure with id {failure_id!r}")
        target = self.path_for(failure_id)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=SUFFIX)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(payload, handle)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise SpoolError(f"cannot write spool file {target}: {exc}") from exc
        return target

    def pending(self) -> list[Path]:
        """Spooled files, oldest first (temporary files excluded)."""
        if not self.directory.is_dir():
            return []
        entries = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            if path.name.startswith("."):
                continue
            try:
                entries.append((path.stat().st_mtime_ns, path.name, path))
            except FileNotFoundError:  # sent and removed by a concurrent flush
                continue
        return [path for _, _, path in sorted(entries)]

    def load(self, path: Path) -> JsonObject:
        """Read one spooled payload; a file that is not one is an error naming it."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            raise SpoolError(f"cannot read spool file {path}: {type(exc).__name__}") from exc
        if not isinstance(data, dict) or not data.get("failure_id"):
            raise SpoolError(f"spool file {path} is not a failure payload")
        return data

    def set_aside(self, path: Path, reason: str = "unreadable") -> None:
        """Move an unreadable file out of the way so later flushes skip it."""
        target = path.with_name(path.name + BAD_SUFFIX)
        try:
            os.replace(path, target)
        except OSError as exc:
            log.warning("theow: %s; cannot move it aside: %s", reason, exc)
        else:
            log.warning("theow: %s; moved to %s", reason, target)

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)


def remasked(payload: JsonObject, agent: str) -> JsonObject:
    """A spooled payload with its facts masked again, in whichever form it holds them.

    A spool file may come from an older client or have been edited since. When
    masking changes the facts of a submission with an idempotency key, its
    failure id is derived again, as the worker derives it from the facts it gets.

    >>> remasked({"facts_json": '{"log": "GITHUB_TOKEN=ghp_' + 'a1B2' * 9 + '"}'}, "")["facts_json"]
    '{"log": "GITHUB_TOKEN=[masked:github-token]"}'
    """
    payload = dict(payload)
    if isinstance(payload.get("facts"), dict):
        payload["facts"] = redact(payload["facts"])
    raw = payload.get("facts_json")
    if not isinstance(raw, str):
        return payload
    try:
        facts = json.loads(raw)
    except (ValueError, RecursionError):
        facts = None
    masked = redact_text(raw)  # not facts the worker will take: never sent in clear all the same
    if isinstance(facts, dict):
        again = redact(facts)
        with contextlib.suppress(FactsError):  # NaN: the text masked above is sent
            masked = raw if again == facts else dumps_facts(again)
    if masked == raw:
        return payload
    payload["facts_json"] = masked
    key, job, nonce = payload.get("idempotency_key"), payload.get("job"), payload.get("nonce")
    if isinstance(key, str):
        payload["failure_id"] = signing.failure_id(
            agent,
            job if isinstance(job, str) else None,
            key,
            masked,
            nonce=nonce if isinstance(nonce, str) else "",
        )
    return payload
