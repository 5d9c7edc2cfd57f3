"""Replay benchmark: 10,000 failures through ``theow replay`` on the embedded stack.

    .venv/bin/python benchmarks/replay.py                  # 10,000 failures, 3 runs
    .venv/bin/python benchmarks/replay.py --quick          # 1,000 failures, 1 run
    .venv/bin/python benchmarks/replay.py --json --runs 5  # one JSON object on stdout
    .venv/bin/python benchmarks/replay.py --runs 1 --history ../shared/corpus/logchunks-dev/failures.jsonl.gz
                                                           # real CI logs instead (memory on real logs)

It writes a JSON Lines history in a fleet-like mix: the 126 example failures
(``examples/failures.jsonl``, real CI logs) as templates, 80 % of lines drawn
from 30 "hot" ones (the same root causes again and again), each line with its
own job id, runner and timestamp, and its log padded with build noise to a
log-normal size (median ~12 KB, at most 60 KB). It starts Valkey, Milvus Lite
and SQLite on free ports in a temporary home, as ``theow up`` does: a
resolver worker (1 process) and a separate replay worker (2 processes, nice
10); plus a no-op Celery worker (2 processes) on the same broker for the floor.

Each run replays the whole file with ``theow replay FILE`` as a subprocess
(the command a user types) and reports:

* throughput: failures per second from the command's start to its exit
  (scan, job row, every chunk decided, report written);
* floor: the same broker and settings with no-op tasks: (a) as many no-op
  tasks as the replay sent chunks (the cost Celery adds to a replay), and
  (b) one no-op task per failure (the ceiling of a one-task-per-failure
  design); ``vs_noop_per_failure`` = replay rate / (b);
* live latency: while the replay runs, a live failure is submitted with
  ``theow_client`` every 0.5 s and waited for (p50, p95, max), against the
  same measured with no replay running;
* peak memory: the highest RSS (VmHWM, /proc) of each replay worker process;
* memory growth: the replay worker's processes' RSS together, sampled twice a
  second, at the end against a tenth of the run in (``replay_worker_rss_growth``,
  1.0 is flat);
* CPU: seconds the replay worker processes and the command used, per failure,
  and the rate 2 cores would sustain if nothing else ran (``cpu_bound_fps_2_cores``)
  — on a shared machine the wall-clock rate depends on everyone else's load.

Figures are medians over runs. Targets on 2 cores (issue 15): >= 300 failures/s on
the made-up mix (CI-size logs), >= 100 failures/s on the real logs of ``--history``
(hundreds of KB each). ``--profile`` adds the top of a cProfile of the command and
of the replay worker (the last run's; it slows the run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from theow_workers.celery_app import make_app  # noqa: E402
from theow_workers.config import Settings  # noqa: E402

TARGET_FPS = 300.0  # the made-up mix: CI-size logs, tens of KB
TARGET_HISTORY_FPS = 100.0  # real logs (--history), hundreds of KB each
NOOP_QUEUE = "bench_noop"
NOISE = [
    "Downloading {w}-{n}.{c}.tar.gz ({n} kB)", "   Compiling {w} v0.{n}.{c}",
    "ok  \tgithub.com/acme/{w}\t0.{n}s", "[{n}%] Building CXX object src/CMakeFiles/{w}.dir/{w}.cpp.o",
    "PASSED tests/test_{w}.py::test_{w}_{n}", "Step {n}/{c} : RUN make {w}",
    "[INFO] --- maven-compiler-plugin:3.11.0:compile (default-compile) @ {w} ---",
    "Collecting {w}>={n}.0", "  Using cached {w}-{n}.{c}-py3-none-any.whl",
]  # fmt: skip
WORDS = ["alpha", "bravo", "delta", "echo", "kilo", "lima", "oscar", "tango", "victor", "zulu"]

# The no-op floor: the theow app's settings (broker, acks, prefetch), one trivial task.
noop_app = make_app(Settings.load())
noop_app.conf.task_routes = {"bench.noop": {"queue": NOOP_QUEUE}}


@noop_app.task(name="bench.noop")
def noop(payload: Any) -> int:
    return 1


def corpus(n: int, seed: int, log_bytes: int = 12_000) -> list[str]:
    examples = [json.loads(line) for line in (ROOT / "examples/failures.jsonl").open()]
    rng = random.Random(seed)
    hot = rng.sample(range(len(examples)), 30)
    lines = []
    for i in range(n):
        src = examples[rng.choice(hot) if rng.random() < 0.8 else rng.randrange(len(examples))]
        facts = dict(src)
        facts["job"] = f"{src.get('job', 'build')}#{100000 + i}"
        size = min(60_000, int(rng.lognormvariate(math.log(log_bytes), 0.6))) if log_bytes else 0
        noise: list[str] = []
        while sum(len(x) + 1 for x in noise) < size - len(src.get("stderr", "")):
            w = rng.choice(WORDS)
            noise.append(
                rng.choice(NOISE).format(w=w, n=rng.randint(2, 99), c=rng.randint(100, 999))
            )
        stamp = f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:07Z"
        header = f"Running job {rng.randrange(10**8)} on runner-{rng.randrange(64)} at {stamp}"
        facts["stderr"] = "\n".join([header, *noise, src.get("stderr", "")])
        lines.append(json.dumps(facts))
    return lines


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_worker(redis_url: str, name: str, timeout: float = 120) -> None:
    from celery import Celery

    app = Celery(broker=redis_url, backend=redis_url)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if any(name in key for reply in app.control.ping(timeout=0.5) or [] for key in reply):
                return
        raise RuntimeError(f"worker {name} did not answer a ping within {timeout:g}s")
    finally:
        app.close()


def peak_rss_mb(pid: int, field: str = "VmHWM") -> dict[str, float]:
    """VmHWM (or ``field``: VmRSS now) of a worker's main process and of each child (its pool processes)."""
    pids = [pid] + [
        int(p.name) for p in Path("/proc").iterdir()
        if p.name.isdigit() and _ppid(int(p.name)) == pid
    ]  # fmt: skip
    out = {}
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith(f"{field}:"):
                    out["main" if p == pid else f"pool-{p}"] = int(line.split()[1]) / 1024
        except OSError:
            continue
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a worker's main process and its children (pool processes)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in [pid] + [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit() and _ppid(int(d.name)) == pid]:  # fmt: skip
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return total


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def sample_rss(pid: int, stop: threading.Event, out: list[tuple[float, float]]) -> None:
    """(seconds since start, MB) of a worker's processes together, twice a second."""
    start = time.perf_counter()
    while not stop.is_set():
        out.append((time.perf_counter() - start, sum(peak_rss_mb(pid, "VmRSS").values())))
        stop.wait(0.5)


def rss_growth(samples: list[tuple[float, float]]) -> dict[str, float]:
    """Resident memory once warm (a tenth of the run in) against the end: flat is 1.0."""
    if not samples:
        return {}
    warm_from = samples[-1][0] / 10
    warm = next(mb for t, mb in samples if t >= warm_from)
    end = samples[-1][1]
    return {"replay_worker_rss_warm_mb": warm, "replay_worker_rss_end_mb": end,
            "replay_worker_rss_growth": end / warm if warm else 0.0}  # fmt: skip


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def live_probe(client: Any, facts: dict, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        client.submit(facts).wait(120)
        out.append(1000 * (time.perf_counter() - t0))
        stop.wait(0.5)


def noop_floor(n: int, timeout: float = 600) -> float:
    """Seconds to push ``n`` no-op tasks through the broker and get every result."""
    start = time.perf_counter()
    results = [noop.apply_async(args=[None]) for _ in range(n)]
    for r in results:
        r.get(timeout=timeout)
        r.forget()
    return time.perf_counter() - start


def one_run(args: argparse.Namespace, env: dict, history: Path, client: Any, probe: dict, replay_pid: int) -> dict:  # fmt: skip
    latencies: list[float] = []
    stop = threading.Event()
    thread = threading.Thread(target=live_probe, args=(client, probe, stop, latencies))
    memory: list[tuple[float, float]] = []
    sampler = threading.Thread(target=sample_rss, args=(replay_pid, stop, memory))
    cmd = [sys.executable, "-m", "theow_workers.cli", "replay", str(history), "--json"]
    if args.profile_dir:
        driver_prof = (
            args.profile_dir / f"driver-{len(list(args.profile_dir.glob('driver-*')))}.prof"
        )
        cmd[1:3] = ["-m", "cProfile", "-o", str(driver_prof), "-m", "theow_workers.cli"]
    worker_cpu_before = cpu_seconds(replay_pid)
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    thread.start()
    sampler.start()
    output, _ = proc.communicate(timeout=args.timeout)
    elapsed = time.perf_counter() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    driver_cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (
        cpu_after.ru_stime - cpu_before.ru_stime
    )
    worker_cpu = cpu_seconds(replay_pid) - worker_cpu_before
    stop.set()
    thread.join()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"theow replay exited with {proc.returncode}")
    report = json.loads(output)
    job = report["job"]
    chunks = chunk_count(history, job["replayed"], env)
    chunk_floor_s = noop_floor(chunks)
    per_failure_floor_s = noop_floor(job["processed"])
    fps = job["processed"] / elapsed
    noop_fps = job["processed"] / per_failure_floor_s
    rss = peak_rss_mb(replay_pid)
    if args.profile_dir:
        workers = sorted(args.profile_dir.glob(f"replay-{job['id']}-*.prof"))
        args.profiles = {"driver (theow replay)": profile_top([driver_prof]),
                         f"replay worker ({len(workers)} processes)": profile_top(workers)}  # fmt: skip
    return {
        "failures": job["processed"], "seconds": elapsed, "throughput_fps": fps,
        "driver_cpu_s": driver_cpu, "replay_worker_cpu_ms_per_failure": 1000 * worker_cpu / job["processed"],
        # What 2 cores would do if nothing else ran: CPU is the bound, the load on a shared box is not.
        "cpu_bound_fps_2_cores": 2 * job["processed"] / (worker_cpu + driver_cpu),
        "hit_rate": job["hit_rate"], "unmatched_groups": len(report["unmatched_groups"]),
        "chunks": chunks, "noop_same_tasks_s": chunk_floor_s,
        "noop_per_failure_fps": noop_fps, "vs_noop_per_failure": fps / noop_fps,
        "live_n": len(latencies), "live_p50_ms": pct(latencies, 50),
        "live_p95_ms": pct(latencies, 95), "live_max_ms": max(latencies),
        "replay_worker_peak_rss_mb": max(rss.values()), "replay_worker_rss_sum_mb": sum(rss.values()),
        **rss_growth(memory),
    }  # fmt: skip


def profile_top(paths: list[Path], n: int = 25) -> str:
    """The top of cProfile files merged, by own time: where the CPU went."""
    import io
    import pstats

    if not paths:
        return "(no profile written)"
    out = io.StringIO()
    stats = pstats.Stats(*map(str, paths), stream=out)
    stats.sort_stats("tottime").print_stats(n)
    text = out.getvalue()
    return text[text.find("   ncalls") :] if "   ncalls" in text else text


def real(paths: list[Path]) -> list[str]:
    """The lines of real histories (the corpus' failures.jsonl.gz), as they are."""
    import gzip

    lines = []
    for path in paths:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:
            lines += [line.rstrip("\n") for line in handle if line.strip()]
    return lines


def chunk_count(history: Path, replayed: int, env: dict) -> int:
    """About as many chunks as the driver sent: by bytes of facts (bounded), or by items."""
    limit = Settings().fact_limit
    with history.open("rb") as handle:
        facts_bytes = sum(min(len(line), limit + 2_000) for line in handle)
    by_bytes = math.ceil(
        facts_bytes / env_int(env, "THEOW_REPLAY_CHUNK_BYTES", Settings().replay_chunk_bytes)
    )
    by_items = math.ceil(
        replayed / env_int(env, "THEOW_REPLAY_CHUNK_SIZE", Settings().replay_chunk_size)
    )
    return max(by_bytes, by_items)


def env_int(env: dict, key: str, default: int) -> int:
    return int(env.get(key, default))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--failures", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument(
        "--log-bytes", type=int, default=12_000, help="median log size (0: examples as they are)"
    )
    ap.add_argument("--replay-nice", type=int, default=10, help="CPU niceness of the replay worker")
    ap.add_argument("--quick", action="store_true", help="1,000 failures, 1 run")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--keep", action="store_true", help="keep the temporary home")
    ap.add_argument(
        "--profile", action="store_true",
        help="cProfile the command and the replay worker; print the top of each (slows the run)",
    )  # fmt: skip
    ap.add_argument(
        "--history", type=Path, action="append",
        help="replay these real logs (JSON Lines, .gz too; repeatable) instead of the made-up mix",
    )  # fmt: skip
    args = ap.parse_args()
    if args.quick:
        args.failures, args.runs = 1000, 1
    from rich.console import Console

    from theow_client import TheowClient
    from theow_workers.runtime import Runtime
    from theow_workers.stack import EmbeddedStack

    console, t0 = Console(stderr=True), time.monotonic()

    def say(text: str) -> None:
        console.print(f"[dim]{time.monotonic() - t0:6.1f}s[/dim] {text}")

    tmp = Path(tempfile.mkdtemp(prefix="theow-replay-bench-"))
    settings = Settings(
        home=tmp / "home", redis_url=f"redis://127.0.0.1:{free_port()}/0",
        milvus_uri=f"http://127.0.0.1:{free_port()}", rules_dir=tmp / "rules", actions_dir=tmp / "actions",
    )  # fmt: skip
    shutil.copytree(ROOT / "rules", settings.rules_dir)  # a snapshot: the same rules every run
    shutil.copytree(ROOT / "actions", settings.actions_dir)
    history = tmp / "history.jsonl"
    args.profile_dir, args.profiles = (tmp / "profile" if args.profile else None), {}
    if args.profile_dir:
        args.profile_dir.mkdir()
        os.environ["THEOW_REPLAY_PROFILE"] = str(args.profile_dir)  # read by the replay worker
    lines = real(args.history) if args.history else corpus(args.failures, args.seed, args.log_bytes)
    args.failures = len(lines)
    history.write_text("\n".join(lines) + "\n")
    say(f"{len(lines)} failures, {history.stat().st_size / 1e6:.0f} MB in {history}")
    stack, client = EmbeddedStack(settings), None
    env = {**stack.environment(), "THEOW_LOG_LEVEL": "WARNING"}
    result: dict[str, Any] = {"config": {"failures": args.failures, "runs": args.runs, "log_bytes": args.log_bytes,
                              "resolver_processes": 1, "replay_processes": 2, "replay_nice": args.replay_nice, "seed": args.seed}}  # fmt: skip
    try:
        stack.start()
        rt = Runtime(settings)
        result["config"]["rules"] = len(rt.knowledge().book.rules)
        result["config"]["median_line_bytes"] = sorted(map(len, lines))[len(lines) // 2]
        say(f"{result['config']['rules']} rules indexed")
        rt.index.close()
        stack.start_worker(["resolve"], concurrency=1)
        replay_proc = stack.start_worker(
            ["replay"], concurrency=2, name="replay", nice=args.replay_nice
        )
        noop_cmd = [sys.executable, "-m", "celery", "-A", "replay:noop_app", "worker", "--queues", NOOP_QUEUE,
                    "--concurrency", "2", "--hostname", "noop@%h", "--loglevel", "WARNING", "--without-gossip", "--without-mingle"]  # fmt: skip
        noop_proc = subprocess.Popen(noop_cmd, cwd=ROOT / "benchmarks", env={**env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        stack.processes.append(("noop worker", noop_proc))
        for name in ("resolver", "replay", "noop"):
            wait_for_worker(settings.redis_url, name)
        os.environ.update(THEOW_REDIS_URL=settings.redis_url)
        noop_app.conf.broker_url = noop_app.conf.result_backend = settings.redis_url
        client = TheowClient(redis_url=settings.redis_url, spool_dir=tmp / "spool")
        probe = json.loads(lines[0])
        warm = tmp / "warm.jsonl"
        warm.write_text("\n".join(corpus(300, args.seed + 1, args.log_bytes)) + "\n")
        subprocess.run([sys.executable, "-m", "theow_workers.cli", "replay", str(warm), "--json"],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        idle: list[float] = []
        for _ in range(20):
            t = time.perf_counter()
            client.submit(probe).wait(120)
            idle.append(1000 * (time.perf_counter() - t))
        noop_floor(200)
        result["live_idle_p50_ms"] = pct(idle, 50)
        say(f"warmed; live latency with no replay: p50 {pct(idle, 50):.0f} ms")
        result["runs_raw"] = []
        for run in range(args.runs):
            say(f"run {run + 1}/{args.runs} …")
            result["runs_raw"].append(one_run(args, env, history, client, probe, replay_proc.pid))
            say(f"  {result['runs_raw'][-1]['throughput_fps']:.0f} failures/s")
    except KeyboardInterrupt:
        return 130
    except Exception:
        for log in sorted(settings.home.glob("*.log")):
            say(f"--- tail of {log.name}:\n{log.read_text(errors='replace')[-2000:]}")
        raise
    finally:
        if client is not None:
            client.close()
        stack.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    runs = result["runs_raw"]
    result["median"] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    result["target_fps"] = TARGET_HISTORY_FPS if args.history else TARGET_FPS
    result["pass"] = result["median"]["throughput_fps"] >= result["target_fps"]
    if args.profiles:
        result["profile"] = args.profiles  # the last run's
        for name, text in args.profiles.items():
            console.print(
                f"[bold]profile, {name}[/bold] (last run, by own time)\n{text}", highlight=False
            )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        show(result)
    return 0 if result["pass"] else 1


def show(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console()
    runs, med = result["runs_raw"], result["median"]
    cfg = ", ".join(f"{k} {v}" for k, v in result["config"].items())
    table = Table("figure", *(f"run {i + 1}" for i in range(len(runs))), "median", title=cfg)
    for key in med:
        cells = [r[key] for r in [*runs, med]]
        table.add_row(key, *(f"{v:.2f}" if isinstance(v, float) else str(v) for v in cells))
    out.print(table)
    out.print(f"live latency with no replay running: p50 {result['live_idle_p50_ms']:.0f} ms")
    verdict = "PASS" if result["pass"] else "FAIL"
    out.print(
        f"{verdict}  throughput {med['throughput_fps']:.0f} failures/s (target {result['target_fps']:.0f})"
    )


if __name__ == "__main__":
    sys.exit(main())
