"""How often is "log line N" the line the command wrote Nth, when it writes to both streams?

    .venv/bin/python benchmarks/log_order.py --json                 # 20 runs of 200 pairs
    .venv/bin/python benchmarks/log_order.py --runs 50 --pairs 500 --busy 2 --json

Runs a Python command under ``theow_client.capture.capture`` that writes
``--pairs`` pairs of numbered lines, one line to stdout and one to stderr back
to back (which stream goes first alternates), and compares the ``log`` with
the order written, for each way the client can read the command's output:

- ``one_pipe`` (the default of ``theow-client run``): stdout and stderr are one
  pipe, as a CI runner gives its steps; the kernel appends the writes in the
  order they were made. Expect none out of place, however busy the machine.
- ``two_pipes`` (``--separate-stderr``): the order between two pipes is read
  from outside (``theow_client.streams``); lines written to both within one
  read of the client can only be guessed, so some land out of place, more on
  a busy machine.

and each way of writing:

- ``taken``: after each pair the command waits until the client has read
  everything. Two pipes know this order too: expect none wrong either way.
- ``back_to_back``: no wait at all, the worst case.

``--busy N`` keeps N processes spinning beside it, as a loaded build agent.
Prints one JSON object per pair of ways: runs, runs with any line out of
place, and the share of lines out of place (median over runs, and overall).

On 2 cores shared with other builds (load average 11 before it started),
20 runs of 400 lines, ``--busy 1``: ``one_pipe`` 0 of 20 runs with a line out
of place, taken or back to back; ``two_pipes`` 0 of 20 taken, 19 of 20 back
to back (a median 99% of positions, 82% overall: the writer outruns the
reader, which reads whole blocks of one stream).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from theow_client.capture import capture

COMMAND = """
import array, fcntl, os, sys, termios, time

def taken(*fds):
    for fd in fds:
        left = array.array("i", [0])
        while fcntl.ioctl(fd, termios.FIONREAD, left) == 0 and left[0]:
            time.sleep(0.0002)

pairs, wait = int(sys.argv[1]), sys.argv[2] == "taken"
for n in range(0, 2 * pairs, 2):
    first, second = (1, 2) if n % 4 == 0 else (2, 1)
    os.write(first, b"%d\\n" % n)
    os.write(second, b"%d\\n" % (n + 1))
    if wait:
        taken(1, 2)
"""
READS = {"one_pipe": False, "two_pipes": True}  # capture(separate=...)


def out_of_place(log: str, lines: int) -> int:
    """Lines of ``log`` that are not the line written at their position."""
    got = log.split()
    return sum(1 for n in range(lines) if n >= len(got) or got[n] != str(n))


def measure(read: str, way: str, runs: int, pairs: int) -> dict[str, object]:
    shares: list[float] = []
    wrong_runs, wrong_lines = 0, 0
    for _ in range(runs):
        result = capture(
            [sys.executable, "-c", COMMAND, str(pairs), way],
            passthrough=False,
            separate=READS[read],
        )
        wrong = out_of_place(result.log, 2 * pairs)
        wrong_runs += bool(wrong)
        wrong_lines += wrong
        shares.append(wrong / (2 * pairs))
    return {
        "read": read,
        "way": way,
        "runs": runs,
        "lines_per_run": 2 * pairs,
        "runs_with_a_line_out_of_place": wrong_runs,
        "share_out_of_place_median": round(statistics.median(shares), 4),
        "share_out_of_place_overall": round(wrong_lines / (runs * 2 * pairs), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--busy", type=int, default=0, help="processes spinning beside it")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args()
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)
    ]
    try:
        for read in READS:
            for way in ("taken", "back_to_back"):
                row = {**measure(read, way, args.runs, args.pairs), "busy": args.busy}
                print(
                    json.dumps(row) if args.json else "  ".join(f"{k}={v}" for k, v in row.items()),
                    flush=True,
                )
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


if __name__ == "__main__":
    main()
