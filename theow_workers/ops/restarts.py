"""``theow doctor``'s ``restarts``: what ``theow up`` had to start again, from ``restarts.json``.

``theow up`` keeps the counts in ``$THEOW_HOME/restarts.json``
(``theow_workers.stack.supervisor``). A child restarted since ``theow up``
started is a warning (worth a look at its log); one crash-looping now is a
failure. Under compose, Docker restarts the containers and keeps its own count
(``docker compose ps``, ``docker inspect --format '{{.RestartCount}}'``).

The findings are plain ``(check, status, detail, fix)`` tuples, which
``ops.checks`` makes ``Finding``s of: this module is read by it, never the reverse.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from theow_workers.stack.supervisor import CRASH_WINDOW, MAX_DELAY, RESTARTS_FILE, read_status

Found = tuple[str, str, str, str]  # check, status (ops.checks' OK, WARN, FAIL, SKIP), detail, fix


def restart_findings(home: Path) -> list[Found]:
    """One finding per child ``theow up`` restarted, or one saying there is nothing to say."""
    try:
        status = read_status(home)
    except ValueError as exc:
        return [("restarts", "warn", str(exc), "it is rewritten when `theow up` starts")]
    if status is None:
        detail = f"no `theow up` ran with THEOW_HOME {home} (under compose: `docker compose ps`)"
        return [("restarts", "skip", detail, "")]
    if not _running(status.pid):
        detail = f"the `theow up` that wrote {home / RESTARTS_FILE} (pid {status.pid}) has stopped"
        return [("restarts", "skip", detail, "")]
    since = _clock(status.since)
    findings: list[Found] = []
    for child in status.children:
        if not child.restarts:
            continue
        check = f"restarts.{child.name.removeprefix('worker ')}"
        last = f"last {child.last_exit} at {_clock(child.last_exit_at)}"
        fix = f"its log: {child.log}" if child.log else ""
        if child.crash_loop:
            detail = (
                f"{child.name} is crash-looping: {child.recent} restarts in the last "
                f"{CRASH_WINDOW:g} s, {child.restarts} since {since} ({last}); "
                f"`theow up` keeps trying, up to {MAX_DELAY:g} s apart"
            )
            findings.append((check, "fail", detail, fix))
        else:
            times = "once" if child.restarts == 1 else f"{child.restarts} times"
            detail = f"{child.name} restarted {times} since {since} ({last})"
            findings.append((check, "warn", detail, fix))
    if not findings:
        detail = f"`theow up` (pid {status.pid}) has restarted nothing since {since}"
        findings.append(("restarts", "ok", detail, ""))
    return findings


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        return True
    return True


def _clock(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)) if at else "?"
