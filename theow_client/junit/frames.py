"""Where in the repository a failure happened, from the trace a test runner printed.

Runners that write no ``file``/``line`` for a test (pytest's default ``xunit2``, Surefire,
mocha, gotestsum) still print a trace, whose frames name files: the first frame that lies
in the repository is where the test failed. Frames in the runner, the language's library
or installed dependencies (``node_modules``, ``site-packages``, ``/usr/lib/go``) are passed
over.

>>> trace = '''AssertionError: expected 3
...     at Object.toBe (/home/ci/app/node_modules/expect/build/index.js:10:3)
...     at Object.<anonymous> (/home/ci/app/test/calc.test.js:9:25)'''
>>> first_frame(trace, Path("/home/ci/app"))
('test/calc.test.js', 9)

Java's frames name a class and a bare file name (``at calc.CalcTest.adds(CalcTest.java:20)``):
the file is looked for under the usual source folders (``src/test/java/calc/CalcTest.java``),
and a frame whose file is not in the repository (the JDK's, JUnit's) is passed over.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from pathlib import Path

PYTHON = re.compile(r'File "(?P<path>[^"\n]{1,500})", line (?P<line>\d{1,9})')
JAVA = re.compile(
    r"at (?:[\w.$@-]{1,100}/{1,2})?(?P<cls>[\w$.]{1,300})\.[\w$<>-]{1,200}\("
    r"(?P<file>[\w$-]{1,200}\.(?:java|kt|kts|scala|groovy)):(?P<line>\d{1,9})\)"
)
# path:line, with a file extension: Python's short tracebacks, JavaScript, Go, Rust, PHP, C++.
PLAIN = re.compile(
    r"(?:^|(?<=[\s(\[\"'=]))(?P<path>(?:[A-Za-z]:[\\/])?[\w.@+~/\\-]{0,500}[\w-]\.[A-Za-z][\w+]{0,5})"
    r"(?::|\((?=\d))(?P<line>\d{1,9})",
    re.MULTILINE,
)
JAVA_LIKE = (".java", ".kt", ".kts", ".scala", ".groovy")
SOURCE_ROOTS = (
    "src/test/java",
    "src/main/java",
    "src/test/kotlin",
    "src/main/kotlin",
    "src/test/scala",
    "src/main/scala",
    "src/test/groovy",
    "src/androidTest/java",
    "src/integrationTest/java",
    "test",
    "src",
    "",
)
# Folders that hold what the repository depends on, not what it is.
DEPENDENCIES = frozenset(
    {
        "node_modules",
        "site-packages",
        "dist-packages",
        ".venv",
        "venv",
        ".tox",
        "vendor",
        ".cargo",
        ".rustup",
        ".m2",
        ".gradle",
        "bower_components",
        "jspm_packages",
    }
)
MAX_FRAMES = 200  # frames looked at in one trace


def first_frame(
    trace: str, root: Path, file: str | None = None, folder: str | None = None
) -> tuple[str, int] | None:
    """The first frame of ``trace`` in the repository at ``root``, as (relative path, line).

    With ``file``, the first frame in that file (where in its file a test failed).
    ``folder``: where a bare file name is looked for first (Go prints ``calc_test.go:13``,
    relative to the package's folder).
    """
    wanted = in_repository(file, root) if file is not None else None
    for path, line, java_class in _frames(trace):
        if java_class is not None:
            found = _java_source(root, java_class, path)
        else:
            found = in_repository(path, root)
            if found is not None and folder and not os.path.isfile(root / found):
                inside = posixpath.join(folder, found)
                found = inside if os.path.isfile(root / inside) else found
        if found is not None and (wanted is None or found == wanted):
            return found, line
    return None


def in_repository(path: str, root: Path) -> str | None:
    """``path`` relative to ``root`` when it lies there and not among its dependencies."""
    path = path.replace("\\", "/")
    if path.startswith("file://"):
        path = path.removeprefix("file://")
    if posixpath.isabs(path) or re.match(r"[A-Za-z]:/", path):
        base = next((b for b in _bases(root) if path.startswith(b)), None)
        if base is None:
            return None
        path = path[len(base) :]
    relative = posixpath.normpath(path)
    parts = relative.split("/")
    if relative in (".", "") or parts[0] == ".." or DEPENDENCIES.intersection(parts):
        return None
    return relative


@functools.lru_cache(maxsize=64)
def _bases(root: Path) -> tuple[str, ...]:
    """``root/`` as given and as the file system resolves it (``/tmp`` may be ``/private/tmp``)."""
    given = root.as_posix().rstrip("/") + "/"
    resolved = Path(os.path.realpath(root)).as_posix().rstrip("/") + "/"
    return (given,) if resolved == given else (given, resolved)


def _frames(trace: str) -> list[tuple[str, int, str | None]]:
    """(path, line, Java class or None) of every frame, in the order the trace gives them."""
    found: list[tuple[int, str, int, str | None]] = []
    for match in PYTHON.finditer(trace):
        found.append((match.start(), match["path"], int(match["line"]), None))
    for match in JAVA.finditer(trace):
        found.append((match.start(), match["file"], int(match["line"]), match["cls"]))
    for match in PLAIN.finditer(trace):
        if not match["path"].endswith(JAVA_LIKE):
            found.append((match.start(), match["path"], int(match["line"]), None))
        if len(found) > 3 * MAX_FRAMES:
            break
    found.sort(key=lambda frame: frame[0])
    return [(path, line, java) for _, path, line, java in found[:MAX_FRAMES]]


@functools.lru_cache(maxsize=4096)
def _java_source(root: Path, java_class: str, file: str) -> str | None:
    """Where the source of ``java_class`` (``calc.CalcTest``) lies under ``root``, if it does.

    Remembered: a report's traces name the same frames (the JDK's, JUnit's) thousands of
    times, and each look costs a dozen ``stat`` calls.
    """
    package = java_class.split("$", 1)[0].rsplit(".", 1)[0] if "." in java_class else ""
    folder = package.replace(".", "/")
    for source_root in SOURCE_ROOTS:
        relative = (
            posixpath.join(source_root, folder, file)
            if folder
            else posixpath.join(source_root, file)
        )
        if os.path.isfile(root / relative):
            return relative.lstrip("/")
    return None


def go_package_folder(root: Path, package: str) -> str | None:
    """The folder of Go package ``package`` (``example.com/calc/calc``) by ``root``'s go.mod."""
    try:
        with open(root / "go.mod", encoding="utf-8", errors="replace") as handle:
            head = handle.read(4096)
    except OSError:
        return None
    found = re.search(r"^module\s+(\S+)", head, re.MULTILINE)
    if found is None:
        return None
    module = found[1].strip('"')
    if package == module:
        return "."
    if package.startswith(module + "/"):
        return package[len(module) + 1 :]
    return None
