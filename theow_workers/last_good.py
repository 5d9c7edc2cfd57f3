"""The last valid rules version, kept in Redis for every worker of the fleet.

A bad rule file must not turn workers into error machines. A worker process
that already serves rules keeps them when the directory turns invalid; a new
process (a restarted pool child, a new worker) has none of its own, so each
valid load stores the rule files of every layer here and invalid rules are
served from this snapshot instead, layer by layer. While the directory is invalid the error is kept
under ``names.KEY_RULES_ERROR`` for ``theow doctor`` and the metrics.

Redis being down only costs the snapshot: every function here logs and
carries on rather than failing a resolution.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError

from theow_client import names
from theow_client.jsontypes import JsonObject
from theow_workers.core.rules.schema import RULE_SUFFIX

log = logging.getLogger("theow.runtime")


def remember(redis: Redis, layers: Sequence[Path], version: str) -> None:
    """Store the rule files of a valid version (once per version) and clear any error."""
    try:
        if _text(redis.hget(names.KEY_RULES_LAST_GOOD, "version")) != version:
            snapshot = [
                {
                    str(path.relative_to(root)): path.read_text(encoding="utf-8")
                    for path in sorted(root.rglob(f"*{RULE_SUFFIX}"))
                }
                for root in map(Path, layers)
            ]
            redis.hset(
                names.KEY_RULES_LAST_GOOD,
                mapping={"version": version, "layers": json.dumps(snapshot)},
            )
        redis.delete(names.KEY_RULES_ERROR)
    except (RedisError, OSError) as exc:
        log.warning("could not keep rules version %s as the last good one: %s", version[:12], exc)


def restore(
    redis: Redis, written: dict[str, tuple[Path, ...]] | None = None
) -> tuple[Path, ...] | None:
    """Directories holding the last valid rule files, one per layer; None if none was stored.

    ``written``: version -> the layers this caller already wrote it to (its own
    record, kept by its services), so a version is written to disk once.
    """
    written = {} if written is None else written
    try:
        version = _text(redis.hget(names.KEY_RULES_LAST_GOOD, "version"))
        if not version:
            return None
        if version in written:
            return written[version]
        raw = _text(redis.hget(names.KEY_RULES_LAST_GOOD, "layers"))
        # A snapshot stored before layers held one directory's files under "files".
        snapshot = (
            json.loads(raw)
            if raw
            else [json.loads(_text(redis.hget(names.KEY_RULES_LAST_GOOD, "files")) or "{}")]
        )
    except (RedisError, ValueError) as exc:
        log.warning("could not read the last good rules version: %s", exc)
        return None
    top = Path(tempfile.mkdtemp(prefix=f"theow-rules-{version[:12]}-"))
    layers = tuple(top / str(i) for i in range(len(snapshot)))
    for directory, files in zip(layers, snapshot, strict=True):
        directory.mkdir()
        for name, text in files.items():
            target = directory / name
            if directory.resolve() not in target.resolve().parents:
                continue  # written by us from relative paths; anything else is not ours
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    written[version] = layers
    return layers


def report(redis: Redis, error: str, serving: str | None) -> None:
    """Keep the error for doctor and metrics: what is wrong and which version still serves."""
    data = {"error": error[:4000], "serving": serving, "at": time.time()}
    try:
        redis.set(names.KEY_RULES_ERROR, json.dumps(data))
    except RedisError as exc:
        log.warning("could not report the rules error: %s", exc)


def current_error(redis: Redis) -> JsonObject | None:
    """The rules error a worker last reported, or None while the rules are valid."""
    raw = _text(redis.get(names.KEY_RULES_ERROR))
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return {"error": raw, "serving": None, "at": None}
    return data if isinstance(data, dict) else None


def _text(value: object) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)
