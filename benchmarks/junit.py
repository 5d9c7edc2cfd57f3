"""Reading test reports: a 20 MB report of 50,000 cases, and hostile XML, through the CLI.

    .venv/bin/python benchmarks/junit.py                  # 3 runs, a table on stdout
    .venv/bin/python benchmarks/junit.py --json --runs 5  # one JSON object on stdout

Writes, in a temporary folder, a Surefire-style report of 50,000 test cases in 500 suites
(2% failed with a 20-frame Java trace, 1% flaky with a ``<flakyFailure>``, 2% skipped,
every suite with a ``<system-out>`` of a few kilobytes) padded to about 20 MB, then runs the
real ``theow-client junit --json`` on it in a fresh process each run: its peak resident
memory (``ru_maxrss``, interpreter and imports included) and its wall time (``CLI``,
which includes starting Python and importing the client, about 0.3 s on an idle machine);
and, in another fresh process, the seconds of the reading alone (``read``) and its CPU
seconds (``cpu``: what a loaded machine does not stretch). The same for
a billion-laughs file and an external-entity file, which must be refused. Targets, on the
reading: the large report in under 2 s and 200 MB; each hostile file refused in under
1 s and 200 MB. The load average is printed beside: on a shared machine the seconds grow
with it. The exit code is 1 when a target is missed. Figures are medians.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = 50_000
SUITES = 500
TARGET_BYTES = 20 * 1024 * 1024
TARGETS = {"large": (2.0, 200.0), "laughs": (1.0, 200.0), "external": (1.0, 200.0)}

LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE testsuite [\n <!ENTITY lol "lol">\n'
    + "".join(
        f' <!ENTITY lol{n} "{f"&lol{n - 1};" * 10 if n > 1 else "&lol;" * 10}">\n'
        for n in range(1, 10)
    )
    + ']>\n<testsuite><testcase classname="x" name="&lol9;"/></testsuite>\n'
)
EXTERNAL = (
    '<?xml version="1.0"?>\n<!DOCTYPE testsuite [<!ENTITY p SYSTEM "file:///etc/passwd">]>\n'
    '<testsuite><testcase classname="x" name="leak"><failure message="&p;"/></testcase>'
    "</testsuite>\n"
)


def trace(rng: random.Random, cls: str, method: str) -> str:
    frames = [
        f"\tat org.junit.jupiter.api.Assertions.assertEquals(Assertions.java:{rng.randint(100, 999)})"
    ]
    frames.append(f"\tat {cls}.{method}(Widget{cls[-3:]}Test.java:{rng.randint(10, 400)})")
    frames += [
        f"\tat java.base/java.lang.reflect.Method.invoke(Method.java:{rng.randint(100, 999)})"
        for _ in range(18)
    ]
    return (
        "org.opentest4j.AssertionFailedError: expected: &lt;200&gt; but was: &lt;503&gt;\n"
        + "\n".join(frames)
    )


def large_report(path: Path, seed: int = 7) -> dict[str, int]:
    """A report of CASES cases in SUITES suites, padded with output to about TARGET_BYTES."""
    rng = random.Random(seed)
    per_suite = CASES // SUITES
    counts = {"failed": 0, "flaky": 0, "skipped": 0}
    pieces: list[str] = ['<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>\n']
    for s in range(SUITES):
        cls = f"com.example.shop.module{s // 50}.Widget{s:03d}Test"
        pieces.append(f'<testsuite name="{cls}" tests="{per_suite}">\n')
        for c in range(per_suite):
            method = f"handlesCase{c:03d}"
            roll = rng.random()
            head = f'  <testcase name="{method}" classname="{cls}" time="{rng.random():.3f}"'
            if roll < 0.02:
                counts["failed"] += 1
                pieces.append(
                    f'{head}>\n    <failure message="expected: &lt;200&gt; but was: &lt;503&gt;" '
                    f'type="org.opentest4j.AssertionFailedError">{trace(rng, cls, method)}'
                    "</failure>\n  </testcase>\n"
                )
            elif roll < 0.03:
                counts["flaky"] += 1
                pieces.append(
                    f'{head}>\n    <flakyFailure message="timed out" type="java.util.concurrent.'
                    f'TimeoutException">\n      <stackTrace>{trace(rng, cls, method)}</stackTrace>\n'
                    "    </flakyFailure>\n  </testcase>\n"
                )
            elif roll < 0.05:
                counts["skipped"] += 1
                pieces.append(f'{head}>\n    <skipped message="disabled"/>\n  </testcase>\n')
            else:
                pieces.append(f"{head}/>\n")
        pieces.append("  <system-out><![CDATA[")
        pieces.append(
            "".join(
                f"INFO shop.module{s} request {n} served in {rng.randint(1, 900)} ms\n"
                for n in range(60)
            )
        )
        pieces.append("]]></system-out>\n</testsuite>\n")
    body = "".join(pieces)
    padding = max(0, TARGET_BYTES - len(body) - 40)
    body += f"<!-- {'.' * padding} -->\n</testsuites>\n"
    path.write_text(body)
    return counts


def run_cli(report: Path) -> tuple[float, float, int, str, str]:
    """Seconds, peak MB, exit code, stdout and stderr of ``theow-client junit --json``."""
    code = (
        "import resource, subprocess, sys, time\n"
        "started = time.perf_counter()\n"
        "done = subprocess.run([sys.executable, '-m', 'theow_client.cli', 'junit', '--json', "
        f"{str(report)!r}], capture_output=True, text=True)\n"
        "took = time.perf_counter() - started\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "import json; print(json.dumps([took, peak, done.returncode, done.stdout, done.stderr]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    took, peak, exit_code, stdout, stderr = json.loads(out.stdout)
    return float(took), float(peak), int(exit_code), str(stdout), str(stderr)


def read_alone(report: Path) -> tuple[float, float, float]:
    """Seconds of ``read_reports`` alone, the peak MB of its process and the CPU seconds of
    the reading (which the machine's load does not stretch), in a fresh process."""
    code = (
        "import json, resource, time\n"
        "from theow_client.junit import read_reports\n"
        "started, cpu = time.perf_counter(), time.process_time()\n"
        f"read_reports([{str(report)!r}])\n"
        "took, cpu = time.perf_counter() - started, time.process_time() - cpu\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "print(json.dumps([took, peak, cpu]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    took, peak, cpu = json.loads(out.stdout)
    return float(took), float(peak), float(cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    missed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="theow-junit-bench-") as folder:
        large = Path(folder) / "TEST-large.xml"
        expected = large_report(large)
        files = {
            "large": large,
            "laughs": Path(folder) / "laughs.xml",
            "external": Path(folder) / "external.xml",
        }
        files["laughs"].write_text(LAUGHS)
        files["external"].write_text(EXTERNAL)
        for name, path in files.items():
            seconds, peaks, cli_seconds, cpu_seconds = [], [], [], []
            for _ in range(args.runs):
                took, peak, code, stdout, stderr = run_cli(path)
                cli_seconds.append(took)
                peaks.append(peak)
                alone, _, cpu = read_alone(path)
                seconds.append(alone)
                cpu_seconds.append(cpu)
            if name == "large":
                summary = json.loads(stdout)["summary"]
                correct = (
                    code == 0
                    and summary["tests"] == CASES
                    and summary["failed"] == expected["failed"]
                    and summary["flaky"] == expected["flaky"]
                    and summary["skipped"] == expected["skipped"]
                )
            else:
                correct = code == 2 and "refused" in stderr and "root:" not in stdout
            limit_s, limit_mb = TARGETS[name]
            row: dict[str, object] = {
                "bytes": path.stat().st_size,
                "seconds_p50": round(statistics.median(seconds), 3),
                "cli_seconds_p50": round(statistics.median(cli_seconds), 3),
                "cpu_seconds_p50": round(statistics.median(cpu_seconds), 3),
                "peak_mb_p50": round(statistics.median(peaks), 1),
                "correct": correct,
                "target_seconds": limit_s,
                "target_mb": limit_mb,
            }
            if name == "large":
                row["expected"] = expected
            results[name] = row
            if (
                not correct
                or statistics.median(seconds) > limit_s
                or statistics.median(peaks) > limit_mb
            ):
                missed.append(name)
    output = {
        "cases": CASES,
        "runs": args.runs,
        "load_average": os.getloadavg()[0],
        "results": results,
        "missed": missed,
    }
    if args.json:
        print(json.dumps(output))
    else:
        for name, row in results.items():
            print(
                f"{name:9} {row['bytes']:>10} bytes  read {row['seconds_p50']:>6} s "
                f"({row['cpu_seconds_p50']} s CPU)  "
                f"CLI {row['cli_seconds_p50']:>6} s  {row['peak_mb_p50']:>6} MB  "
                f"correct={row['correct']}"
            )
        print(
            f"load average {output['load_average']:.1f}; missed: " + (", ".join(missed) or "none")
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
