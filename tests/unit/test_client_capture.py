"""A build command's output reaches the terminal whole, and Theow a bounded head+tail."""

from __future__ import annotations

import io
import select
import sys

import pytest

from theow_client.capture import HeadTail, capture, shell_join
from theow_client.facts import bound_facts


def test_short_output_is_kept_whole() -> None:
    keep = HeadTail(head=10, tail=10)
    keep.write(b"hello ")
    keep.write(b"world")
    assert keep.text() == "hello world"
    assert keep.omitted == 0


def test_long_output_keeps_head_and_tail_and_says_what_was_cut() -> None:
    keep = HeadTail(head=4, tail=6)
    for chunk in (b"HEAD", b"-middle-" * 1000, b"TAIL!!"):
        keep.write(chunk)
    text = keep.text()
    assert text.startswith("HEAD")
    assert text.endswith("TAIL!!")
    assert f"{8000} characters omitted" in text
    assert keep.total == 8010


def test_memory_stays_bounded_however_much_is_written() -> None:
    keep = HeadTail(head=100, tail=1000)
    for _ in range(10_000):
        keep.write(b"x" * 977)
    held = len(keep.head) + sum(len(chunk) for chunk in keep._tail)
    assert held < 100 + 1000 + 977


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    keep = HeadTail()
    keep.write(b"caf\xe9 \xff done")
    assert keep.text() == "caf\ufffd \ufffd done"


def test_capture_passes_both_streams_through_on_stdout_in_the_order_written() -> None:
    out, err = io.BytesIO(), io.BytesIO()
    script = (
        "import sys; print('building', flush=True); print('error: boom', file=sys.stderr);"
        "print('cleaning up'); sys.exit(3)"
    )
    result = capture([sys.executable, "-c", script], stdout_sink=out, stderr_sink=err)
    assert result.exit_code == 3
    assert result.log == "building\nerror: boom\ncleaning up\n"
    assert out.getvalue() == b"building\nerror: boom\ncleaning up\n"
    assert err.getvalue() == b""  # one pipe: which stream a line came from is not known
    assert (result.stderr, result.separate) == ("", False)
    assert result.duration > 0


def test_separate_keeps_the_commands_stderr_on_stderr() -> None:
    out, err = io.BytesIO(), io.BytesIO()
    script = "import sys; print('building'); print('error: boom', file=sys.stderr); sys.exit(3)"
    result = capture(
        [sys.executable, "-c", script], stdout_sink=out, stderr_sink=err, separate=True
    )
    assert result.exit_code == 3
    assert result.stdout == "building\n"
    assert result.stderr == "error: boom\n"
    assert out.getvalue() == b"building\n"
    assert err.getvalue() == b"error: boom\n"


def test_huge_output_streams_whole_but_is_captured_bounded() -> None:
    out = io.BytesIO()
    script = (
        "import sys\n"
        "sys.stdout.write('first line\\n' + 'y' * 3_000_000 + '\\nerror: the real cause\\n')\n"
    )
    result = capture(
        [sys.executable, "-c", script],
        head=1024,
        tail=2048,
        stdout_sink=out,
        stderr_sink=io.BytesIO(),
    )
    assert len(out.getvalue()) == result.stdout_bytes > 3_000_000
    assert result.stdout.startswith("first line")
    assert result.stdout.endswith("error: the real cause\n")
    assert len(result.stdout) < 4096


def test_missing_program_exits_127_like_a_shell() -> None:
    err = io.BytesIO()
    result = capture(["theow-no-such-program"], stderr_sink=err, stdout_sink=io.BytesIO())
    assert result.exit_code == 127
    assert "theow-no-such-program" in result.stderr
    assert b"theow-no-such-program" in err.getvalue()


def test_killed_by_signal_exits_128_plus_signal() -> None:
    result = capture(["sh", "-c", "kill -TERM $$"], passthrough=False)
    assert result.exit_code == 128 + 15


def test_command_is_joined_as_a_shell_line() -> None:
    assert shell_join(["go", "build", "./my dir"]) == "go build './my dir'"


def test_the_cause_in_the_middle_of_a_huge_output_is_kept_in_the_log_sent() -> None:
    script = (
        "import sys\n"
        "print('start')\n"
        "for i in range(20_000): print(f'compiling module {i}')\n"
        "sys.stdout.flush()\n"
        "print('src/app.c:12:5: error: expected ; before return', file=sys.stderr)\n"
        "sys.stderr.flush()\n"
        "for i in range(20_000): print(f'cleaning up {i}')\n"
    )
    result = capture([sys.executable, "-c", script], passthrough=False)
    facts, notes = bound_facts({"log": result.log})
    assert len(facts["log"]) < 70_000 < len(result.log)
    assert notes["log"]["omitted_chars"] > 0
    assert "src/app.c:12:5: error: expected ; before return" in facts["log"]
    assert facts["log"].startswith("start")
    assert facts["log"].rstrip().endswith("cleaning up 19999")


# Writes to one stream, then waits until the client has read what it wrote
# before touching the other: the order the client can tell, and must keep.
TAKEN = """
import array, fcntl, os, sys, termios, time

def taken(*fds):
    for fd in fds:
        left = array.array("i", [0])
        while fcntl.ioctl(fd, termios.FIONREAD, left) == 0 and left[0]:
            time.sleep(0.0002)

def write(fd, text):
    os.write(fd, text.encode())
"""

PAIRS = (
    TAKEN
    + """
for n in range(0, 2 * int(sys.argv[1]), 2):
    first, second = (1, 2) if n % 4 == 0 else (2, 1)
    write(first, f"line {n + 1}\\n")  # back to back: no wait between the two
    write(second, f"line {n + 2}\\n")
    taken(1, 2)
"""
)


BACK_TO_BACK = """
import os, sys
for n in range(0, 2 * int(sys.argv[1]), 2):
    first, second = (1, 2) if n % 4 == 0 else (2, 1)
    os.write(first, b"line %d\\n" % (n + 1))
    os.write(second, b"line %d\\n" % (n + 2))
"""


def test_log_line_n_is_the_line_written_nth_even_when_the_streams_alternate_back_to_back() -> None:
    pairs = 500
    written = [f"line {n}" for n in range(1, 2 * pairs + 1)]
    for _ in range(4):  # two pipes got this wrong in most runs; one pipe never may
        terminal = io.BytesIO()
        result = capture(
            [sys.executable, "-c", BACK_TO_BACK, str(pairs)],
            stdout_sink=terminal,
            stderr_sink=io.BytesIO(),
        )
        assert result.log.splitlines() == written
        assert terminal.getvalue().decode() == result.log


@pytest.mark.skipif(not hasattr(select, "epoll"), reason="the pipes' order is read through epoll")
def test_separate_streams_keep_the_order_the_client_could_see() -> None:
    pairs = 150
    written = [f"line {n}" for n in range(1, 2 * pairs + 1)]
    for _ in range(6):  # a race shows within a few runs on a busy machine; none may
        terminal = io.BytesIO()  # one terminal for both streams, as a person's
        result = capture(
            [sys.executable, "-c", PAIRS, str(pairs)],
            stdout_sink=terminal,
            stderr_sink=terminal,
            separate=True,
        )
        assert result.log.splitlines() == written
        assert terminal.getvalue().decode() == result.log  # the terminal showed that order
        on_stdout = [line for n, line in enumerate(written) if (n // 2) % 2 == n % 2]
        assert result.stdout.splitlines() == on_stdout  # each stream's fact stays its own
        assert result.stderr.splitlines() == [line for line in written if line not in on_stdout]


def test_with_separate_streams_a_line_the_other_interrupts_stays_whole_in_the_log() -> None:
    script = TAKEN + (
        "write(1, 'compiling widgets... '); taken(1)\n"
        "write(2, 'warning: widgets are deprecated\\n'); taken(2)\n"
        "write(1, 'done\\n'); taken(1)\n"
        "write(2, 'no newline at the end'); taken(2)\n"
        "write(1, 'nor here')\n"
    )
    terminal = io.BytesIO()
    result = capture(
        [sys.executable, "-c", script], stdout_sink=terminal, stderr_sink=terminal, separate=True
    )
    # Live on the terminal as written; in the log, each line whole, placed when it ended.
    assert terminal.getvalue().decode() == (
        "compiling widgets... warning: widgets are deprecated\ndone\nno newline at the endnor here"
    )
    assert result.log.splitlines() == [
        "warning: widgets are deprecated",
        "compiling widgets... done",
        "no newline at the end",
        "nor here",
    ]
    assert result.stdout == "compiling widgets... done\nnor here"
    assert result.stderr == "warning: widgets are deprecated\nno newline at the end"


def test_output_reaches_a_text_only_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = io.StringIO()
    monkeypatch.setattr(sys, "stdout", terminal)
    capture([sys.executable, "-c", "print('hello')"], stderr_sink=io.BytesIO())
    assert terminal.getvalue() == "hello\n"
