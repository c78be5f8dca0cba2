"""Team scale: N specs x 3 targets through the local executor at -j1 and -j2 and through Ray, and a
fresh clone with the remote cache against one without.

Each spec is the real digits model at its own batch size, so every spec x target has its own whole
chain (import, check, quantize/compile, evaluate). Every configuration builds from an empty `.npuctl/`
in its own git repository. Then a developer clone applies with a file:// remote (pushes), and two
fresh clones of it are timed: one with the remote (downloads every artifact, builds 0 stages) and one
without it that needs the bytes (no remote, so it rebuilds everything), with the bytes each moved.

The model printed at the end: wall(S, W) = t0 + S * t_spec / (W * e), with t0 the fixed cost of a run
(interpreter, workers, Ray start), t_spec the mean build time of one spec x target at -j1, W workers
and e the parallel efficiency measured at -j2 (1.0 would be perfect). Each Ray node adds W = its cores.

Measured here (2026-12-02 05:19, `--specs 2`: 6 spec x target chains on cpu, intel-npu and
qualcomm-htp-v73, load average 13-15 on 2 cores while five other sessions built): -j1 45.6 s wall /
11.1 s CPU, -j2 50.2 s / 14.6 s, Ray -j2 66.7 s; a fresh clone with the remote cache 4.5 s (0 built,
1.49 MB downloaded) against 37.2 s (20 stages built) without it: 8.3x.

Why -j2 is not faster here: the printed parallel capacity was 1.08 (0.99 in a second probe): two busy
processes got the throughput of one, so this session's CPU does not grow with its process count while
the machine is shared, and nice(1) changes nothing (-j1 took 3.5x its CPU time in wall time even at
nice -10). -j2 can then only lose by its own cost: 1.32x the CPU of -j1, the two worker interpreters
and their stage child interpreters importing the stack that -j1 imports once (about 1.2 s CPU each;
6 chains of ~1.9 s CPU make that a large share). With an idle machine's capacity of 2.00 the bound
printed is 1.52x for -j2; more chains per worker shrink the start-up share towards 2x. Ray's CPU is
under-counted (its daemons are not this process's children).

When the machine eased (05:42-05:44, load ~4, capacity 1.0-1.4), -j2 was faster: 6 chains 13.4 s ->
10.0 s (1.34x; CPU 8.9 -> 11.9 s), 18 chains (`--specs 6`) 36.1 s -> 28.1 s (1.28x; CPU 23.0 -> 27.2 s,
the workers' cost down to 1.18x). The ledger of a -j2 run at capacity 2.1 shows two specs' stages
overlapping throughout; the gaps before a worker's first spec of each target are that backend's
imports (onnx, OpenVINO: ~0.8 s), paid once per worker interpreter. Nothing serializes the workers.

The model with these figures (t0 = 3.9 s, t_spec = 7.0 s, e = 0.45 as measured under that load): a
16-node cluster of 2-core nodes (W = 32) would build 300 chains in ~150 s against ~2100 s at -j1
(~14x); at the CPU-bound efficiency e = 0.76 (1 / 1.32) it would be ~90 s, and Ray's start-up (10-30 s
here) adds to t0. The model ignores shared upstream stages (early cutoff), the remote's bandwidth and
the slowest single chain; this machine cannot check it beyond W = 2.

Ray against the local pool at equal CPUs (`--ray-rounds N`, alternated, medians, each run from an
empty `.npuctl/` in its own repository): local -j2; Ray on an existing single-node cluster of 2 CPUs
(started by the bench, so the cluster's start is not in the run, as with a team's standing cluster);
Ray on the private cluster `--executor ray` starts itself (its start is in the run); then Ray on a
two-node cluster (two raylets of 1 CPU each on 127.0.0.1) against local -j2 again. Printed as ratios
to local -j2 (1.00: as fast; the aim is <= 1.10 at equal CPUs). The two nodes share this machine's
two cores, so that result shows what spreading over nodes costs, not what a second machine adds.

Measured (2026-12-06 17:29-17:32, `--ray-rounds 2 --specs 4 --targets cpu,intel-npu`: 8 chains, load
average 2.5 before and 7.5 after, capacity 1.40): Ray on a standing 2-CPU node 1.02x local -j2 (rounds
1.03, 1.02; first stage at 1.8 / 1.6 s against 2.2 / 1.0 s), two nodes of 1 CPU 0.79x (0.85, 0.73: the
two raylets' workers got more of the shared cores than the pool's two; not a gain a test could claim),
the private cluster 1.76x (1.54, 1.98): its own start, 6.8-7.6 s before the first stage (gcs, the
dashboard head Ray waits for, raylet and its agents, then the workers), is in the run, and so is its
shutdown (2.4-2.6 s after the last stage against 0.6-0.8 s). Earlier, before the executor started
ahead of loading the specs: 1.09x on the standing node under load 18-30, 1.26x in one quiet round.
What changed: apply starts its executor before it validates and plans, so a Ray actor's worker process
(python, `import ray`, core worker registration: ~2 s, the largest part of the gap) starts while the
driver works; the actors' spec workers get the driver's OMP_NUM_THREADS rather than the 1 Ray sets for a
one-CPU actor, so a stage uses the threads it uses under the local pool. Jobs and outcomes are a few KB
of JSON and pickles; nothing else moves through Ray.

Run: python bench/scale.py [--specs 2] [--targets cpu,intel-npu,qualcomm-htp-v73] [--skip-ray]
     python bench/scale.py --ray-rounds 3 --specs 4 --targets cpu,intel-npu   (the Ray comparison only)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import copy_digits, git  # noqa: E402
from tests.engine.ray_fixtures import ray_cluster  # noqa: E402

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: digits-{target}-b{batch}}}
spec:
  model: {{path: ../models/digits.onnx, version: v1}}
  target: {target}
  inputs: {{image: [{batch}, 1, 8, 8]}}
  evaluate: {{warmup: 1, runs: 5}}
  slo:
    size_mb: 1
"""


CPU: dict[str, float] = {}
"""CPU seconds (user + system) of each timed run's processes, children included: what the run costs
whatever the machine's load, as wall time does not."""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def npuctl(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    cpu = _children_cpu()
    done = subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "CI": "1", **(env or {})},
        check=False,
    )
    CPU[str(cwd)] = _children_cpu() - cpu  # Ray's own daemons are reaped by their raylet: not counted
    return time.perf_counter() - started, done


def _spin(count: int) -> float:
    started = time.process_time()
    total = 0
    for i in range(count):
        total += i
    return time.process_time() - started


def parallel_capacity(count: int = 20_000_000) -> float:
    """How many times one process's throughput two busy processes get right now (2.0 on an idle
    2-core machine): what -j2 can gain here at best, whatever npuctl does."""
    import multiprocessing

    walls = []
    for procs in (1, 2):
        started = time.perf_counter()
        with multiprocessing.Pool(procs) as pool:
            pool.map(_spin, [count] * procs)
        walls.append(time.perf_counter() - started)
    return 2 * walls[0] / walls[1]


def repo(path: Path, specs: int, targets: list[str]) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text(".npuctl/\n")
    (path / "specs").mkdir()
    copy_digits(path, eval_samples=8, calib_samples=8)
    for target in targets:
        for batch in range(1, specs + 1):
            text = SPEC.format(target=target, batch=batch)
            (path / "specs" / f"digits-{target}-b{batch}.yaml").write_text(text)
    return path


def built(done: subprocess.CompletedProcess[str]) -> int:
    try:
        data = json.loads(done.stdout)
    except ValueError:
        return -1
    return sum(
        1 for s in data["specs"] for st in s["stages"] if st["action"] == "built" and not st["identity"]
    )


def failure(done: subprocess.CompletedProcess[str]) -> str:
    """The first error or failed stage's message of a run, else its last line on stderr."""
    try:
        specs = json.loads(done.stdout)["specs"]
    except ValueError:
        specs = []
    for spec in specs:
        failed = [f"{st['name']}: {st['reason']}" for st in spec["stages"] if st["action"] == "failed"]
        if spec.get("errors") or failed:
            return f"{spec['name']}: {(spec.get('errors') or failed)[0][:300]}"
    return " ".join(done.stderr.strip().splitlines()[-1:])


def store_bytes(path: Path) -> int:
    store = path / ".npuctl" / "store"
    return sum(p.stat().st_size for p in store.glob("*/*") if p.is_file())


def _alternated(
    work: Path, rounds: int, specs: int, targets: list[str], runs: dict[str, tuple[list[str], dict[str, str]]]
) -> dict[str, list[float | None]]:
    """Each configuration's wall time per round (None: the run failed), run in turn `rounds` times,
    each from an empty state."""
    walls: dict[str, list[float | None]] = {name: [] for name in runs}
    for n in range(rounds):
        for name, (extra, env) in runs.items():
            path = repo(work / f"{re.sub(r'[^a-z0-9]+', '-', name)}{n}", specs, targets)
            started = time.time_ns()
            seconds, done = npuctl(path, "apply", "--json", "--remote", "none", *extra, env=env)
            if done.returncode != 0 or built(done) <= 0:
                walls[name].append(None)
                print(f"  round {n + 1}: {name:>22}: not counted, exit {done.returncode}: {failure(done)}")
            else:
                walls[name].append(seconds)
                before, span, after = phases(path, started, time.time_ns())
                print(
                    f"  round {n + 1}: {name:>22}: {seconds:6.1f} s = {before:5.1f} s to the first stage "
                    f"+ {span:5.1f} s of stages + {after:4.1f} s after the last",
                    flush=True,
                )
            shutil.rmtree(path, ignore_errors=True)
    return walls


def _against(walls: dict[str, list[float | None]], base: str) -> None:
    """Each configuration's median, and the median of its per-round ratios to `base` (each ratio
    taken within one round, so a load that drifts between rounds cancels out)."""
    for name, times in walls.items():
        counted = [t for t in times if t is not None]
        ratios = [t / b for t, b in zip(times, walls[base], strict=True) if t is not None and b is not None]
        ratio = f"{statistics.median(ratios):.2f}x {base} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})"
        median = f"{statistics.median(counted):6.1f} s" if counted else "   n/a  "
        print(f"  {name:>22}: median {median}  {ratio if ratios and name != base else ''}")


def phases(path: Path, started_ns: int, ended_ns: int) -> tuple[float, float, float]:
    """Where a run's wall time went, from its ledger: before the first stage started (interpreter,
    planning, workers, Ray's start), the stages, and after the last stage ended (shutdown)."""
    import sqlite3

    with sqlite3.connect(path / ".npuctl" / "state.db") as db:
        first, last = db.execute(
            "SELECT MIN(time_ns - duration_ms * 1e6), MAX(time_ns) FROM ledger WHERE action = 'built'"
        ).fetchone()
    return (first - started_ns) / 1e9, (last - first) / 1e9, (ended_ns - last) / 1e9


def ray_against_local(work: Path, rounds: int, specs: int, targets: list[str]) -> None:
    local = (["-j", "2"], {})
    print(f"Ray against local -j2 at 2 CPUs ({specs * len(targets)} spec x target chains, {rounds} rounds):")
    with ray_cluster(work, [{"num_cpus": 2}]) as one:
        ray = ["--executor", "ray", "-j", "2"]
        runs = {"local -j2": local, "ray, 1 node x 2 CPUs": ([*ray, "--address", one.address], one.env)}
        runs["ray, private cluster"] = (ray, {})
        first = _alternated(work, rounds, specs, targets, runs)
    with ray_cluster(work, [{"num_cpus": 1}, {"num_cpus": 1}]) as two:
        runs = {"local -j2": local, "ray, 2 nodes x 1 CPU": ([*ray, "--address", two.address], two.env)}
        second = _alternated(work, rounds, specs, targets, runs)
    _against(first, "local -j2")
    _against(second, "local -j2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", type=int, default=2, help="specs per target (each its own batch size)")
    parser.add_argument("--targets", default="cpu,intel-npu,qualcomm-htp-v73")
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument(
        "--ray-rounds", type=int, default=0, help="only Ray against local, alternated N times"
    )
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    capacity = parallel_capacity()
    print(f"parallel capacity now: two busy processes get {capacity:.2f}x one's throughput (2.00: idle)")
    targets = args.targets.split(",")
    chains = args.specs * len(targets)
    work = Path(tempfile.mkdtemp(prefix="npuctl-scale-"))
    if args.ray_rounds:
        try:
            ray_against_local(work, args.ray_rounds, args.specs, targets)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return
    rows: dict[str, tuple[float, int]] = {}
    try:
        runs = [("local -j1", ["-j", "1"]), ("local -j2", ["-j", "2"])]
        if not args.skip_ray:
            runs.append(("ray -j2", ["--executor", "ray", "-j", "2"]))
        for name, extra in runs:
            path = repo(work / name.replace(" ", ""), args.specs, targets)
            seconds, done = npuctl(path, "apply", "--json", "--remote", "none", *extra)
            if done.returncode not in (0, 3):
                print(f"{name}: apply exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
            rows[name] = (seconds, built(done))
            cpu = CPU[str(path)]
            print(
                f"{name:>10}: {seconds:7.1f} s wall, {cpu:7.1f} s CPU  ({built(done)} stages built, "
                f"{chains} spec x target)"
            )

        dev = repo(work / "dev", args.specs, targets)
        remote = work / "remote"
        (dev / ".npuctl.yaml").write_text(f"remote:\n  url: file://{remote}\n")
        seconds, done = npuctl(dev, "apply", "--json")
        print(f"{'developer':>10}: {seconds:7.1f} s  applies and pushes ({built(done)} stages)")
        git(dev, "add", "-A")
        git(dev, "commit", "-qm", "applied")
        with_remote = work / "clone-remote"
        git(work, "clone", "-q", str(dev), str(with_remote))
        t_remote, done_remote = npuctl(with_remote, "apply", "--json")
        b_remote = store_bytes(with_remote)
        without = work / "clone-plain"
        git(work, "clone", "-q", str(dev), str(without))
        for lock in (without / "specs").glob("*.lock.json"):
            lock.unlink()  # it needs the bytes: a pull request's CI that rebuilds the changed specs
        t_plain, done_plain = npuctl(without, "apply", "--json", "--remote", "none")
        b_plain = store_bytes(without)
        print(
            f"fresh clone with the remote: {t_remote:6.1f} s, {built(done_remote)} built, {b_remote} bytes downloaded"
        )
        print(
            f"fresh clone without it     : {t_plain:6.1f} s, {built(done_plain)} built, {b_plain} bytes built"
        )
        print(f"  ratio: {t_plain / t_remote:.1f}x faster with the remote cache")

        t1, t2 = rows["local -j1"][0], rows["local -j2"][0]
        c1, c2 = CPU[str(work / "local-j1")], CPU[str(work / "local-j2")]
        print(f"\n-j2 vs -j1: {t1 / t2:.2f}x wall; CPU {c2 / c1:.2f}x of -j1's (the workers' own cost)")
        print(
            f"  at best {capacity * c1 / c2:.2f}x with this capacity, {2 * c1 / c2:.2f}x with 2.00 (an upper "
            f"bound: -j2's CPU spread over two processes, serial parts ignored)"
        )
        if "ray -j2" in rows:
            print(
                f"ray -j2 vs -j1: {t1 / rows['ray -j2'][0]:.2f}x; ray vs local -j2: {t2 / rows['ray -j2'][0]:.2f}x"
            )
        t0, _ = npuctl(work / "local-j1", "apply", "--remote", "none")  # a no-op: the fixed cost
        t_spec = max(0.01, (t1 - t0) / chains)
        efficiency = min(1.0, (t1 - t0) / (2 * max(0.01, t2 - t0)))
        print(
            f"model: wall(S, W) = t0 + S * t_spec / (W * e); t0 = {t0:.1f} s (a no-op apply), "
            f"t_spec = {t_spec:.1f} s, e = {efficiency:.2f} (from -j2)"
        )
        for specs, workers in ((chains, 1), (chains, 2), (300, 2), (300, 32)):
            wall = t0 + specs * t_spec / (workers * (efficiency if workers > 1 else 1.0))
            print(f"  S = {specs:4d}, W = {workers:2d}: {wall:8.1f} s")
        print("  (W = 32: a 16-node cluster of 2-core nodes; Ray adds its start-up to t0)")
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
