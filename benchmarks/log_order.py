"""How often is "log line N" the line the command wrote Nth, when it writes to both streams?

    .venv/bin/python benchmarks/log_order.py --json                 # 20 runs of 200 pairs
    .venv/bin/python benchmarks/log_order.py --runs 50 --pairs 500 --json

Runs a Python command under ``theow_client.capture.capture`` that writes
``--pairs`` pairs of numbered lines, one line to stdout and one to stderr back
to back (which stream goes first alternates), and compares the ``log`` with
the order written. Two ways of writing:

- ``taken``: after each pair the command waits until the client has read both
  pipes. Everything here is an order the client can know: expect none wrong.
- ``back_to_back``: no wait at all, the worst case; lines written to both
  streams within one read of the client can only be guessed (see
  ``theow_client.streams``), so some land out of place, more on a busy machine.

Prints one JSON object per way: runs, runs with any line out of place, and
the share of lines out of place (median over runs, and overall).

On 2 cores shared with other builds (load 10), 20 runs of 400 lines: ``taken``
0 runs of 20 with a line out of place (the two reader threads this loop
replaced: 18 of 20, a median 8% of lines out of place); ``back_to_back`` every
run has lines out of place with either reader (median 72% of positions with
this loop, 44% with the threads: the writer outruns the reader and each reads
whole blocks of one stream; which came first within a block cannot be known).
"""

from __future__ import annotations

import argparse
import json
import statistics
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


def out_of_place(log: str, lines: int) -> int:
    """Lines of ``log`` that are not the line written at their position."""
    got = log.split()
    return sum(1 for n in range(lines) if n >= len(got) or got[n] != str(n))


def measure(way: str, runs: int, pairs: int) -> dict[str, object]:
    shares: list[float] = []
    wrong_runs, wrong_lines = 0, 0
    for _ in range(runs):
        result = capture([sys.executable, "-c", COMMAND, str(pairs), way], passthrough=False)
        wrong = out_of_place(result.log, 2 * pairs)
        wrong_runs += bool(wrong)
        wrong_lines += wrong
        shares.append(wrong / (2 * pairs))
    return {
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
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args()
    for way in ("taken", "back_to_back"):
        row = measure(way, args.runs, args.pairs)
        print(json.dumps(row) if args.json else "  ".join(f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
