"""Which reports to read: files and globs, and for ``run --junit`` only this run's."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable

from theow_client.jsontypes import JsonObject
from theow_client.junit.reading import read_reports
from theow_client.junit.report import FACT_LIMITS

# Some file systems keep modification times to 1 or 2 seconds.
MTIME_SLACK = 2.0


def tests_fact(
    patterns: Iterable[str],
    *,
    since: float | None = None,
    root: str | os.PathLike[str] | None = None,
) -> tuple[JsonObject | None, list[str]]:
    """What ``run --junit`` sends as the fact ``tests``, and one line per problem.

    Only reports written or changed since ``since`` (a ``time.time()``) are read, so a
    report an earlier build left behind is not taken for this one's. None when no report
    was read.
    """
    files, problems = expand(patterns)
    if since is not None:
        fresh = [path for path in files if _modified_since(path, since)]
        if files and not fresh:
            problems.append(f"{len(files)} report(s) found, none written by this run: not sent")
        files = fresh
    if not files:
        return None, problems
    report, unread = read_reports(files, root=root, limits=FACT_LIMITS)
    return report.to_json(), problems + unread


def _modified_since(path: str, since: float) -> bool:
    try:
        return os.stat(path).st_mtime >= since - MTIME_SLACK
    except OSError:
        return True  # read, and the reading names what is wrong with it


def expand(patterns: Iterable[str]) -> tuple[list[str], list[str]]:
    """The files that paths and globs (``**`` for any depth) name, and one line per
    pattern that names none."""
    files: list[str] = []
    errors: list[str] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            found = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
            if not found:
                errors.append(f"{pattern}: no file matches")
        elif os.path.isdir(pattern):
            errors.append(
                f"{pattern}: a directory (give a file or a glob such as {pattern}/**/*.xml)"
            )
            found = []
        else:
            found = [pattern]
        files += [path for path in found if path not in files]
    return files, errors
