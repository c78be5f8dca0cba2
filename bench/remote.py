"""The cache round trip against the transfer: `npuctl push` / `npuctl pull` of a few MB beside a plain
fsspec copy of the same files, in a fresh interpreter each, alternated run by run.

The repository: three digits specs and PP-OCRv4's detector at 128x128 on the cpu target (the tests'
real models and samples; ~8 MB in ~13 objects and ~11 records), applied once. Its first push to a
file:// folder gives the exact files a remote holds (records/*.json, objects/..); the fsspec side puts
those files to, or gets them from, the same kind of remote with `url_to_fs` and one put_file/get_file
each: the floor of moving them, interpreter and file system client included.

Remotes: file:// (a local folder) and an S3 API served by moto's ThreadedMotoServer on 127.0.0.1
(an emulator, not S3; the endpoint reaches both sides through FSSPEC_S3_ENDPOINT_URL).
Printed per remote: median wall and CPU (user + system of the process) of each side, the median of the
per-pair ratios npuctl / fsspec (goal, printed not asserted: <= 1.5), and a push with nothing new:
its median wall (goal < 0.5 s) and the remote calls it made (stats.remote_calls), plain (this
machine's record of the remote answers) and with `--verify` (the remote lists its records and objects).

Both sides run as installed code does: this checkout's npuctl (PYTHONPATH), from compiled bytecode
(a pycache folder of the bench's own, whatever PYTHONDONTWRITEBYTECODE says: pip compiles what it
installs, and compiling npuctl's modules on every run would be most of the difference), after one
untimed round that fills it.

Run: python bench/remote.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
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

from tests.backends.detector import write_det_repo  # noqa: E402
from tests.conftest import git  # noqa: E402
from tests.remote.conftest import digits_specs  # noqa: E402

GOAL_RATIO, GOAL_NOOP_S = 1.5, 0.5

COPY = """\
import sys
from pathlib import Path
from fsspec.core import url_to_fs
verb, url, local = sys.argv[1], sys.argv[2], Path(sys.argv[3])
fs, root = url_to_fs(url)
names = sys.argv[4:]
for name in names:
    if verb == "put":
        fs.makedirs((root + "/" + name).rsplit("/", 1)[0], exist_ok=True)
        fs.put_file(str(local / name), root + "/" + name)
    else:
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(root + "/" + name, str(local / name))
"""


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def make_repo(parent: Path) -> Path:
    repo = parent / "dev"
    (repo / "specs").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    digits_specs(repo, 3)
    write_det_repo(repo, "cpu", data="detdata")
    env = {**installed_env(parent), "NPUCTL_REMOTE": "none"}
    subprocess.run([sys.executable, "-m", "reconciler", "apply", "-j", "2"], cwd=repo, env=env, check=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "applied")
    return repo


def remote_files(repo: Path, parent: Path, env: dict[str, str]) -> tuple[Path, list[str]]:
    """What a remote holds after a first push: the folder and its files, relative."""
    golden = parent / "golden"
    npuctl = [sys.executable, "-m", "reconciler", "push", "--remote", f"file://{golden}"]
    subprocess.run(npuctl, cwd=repo, env=env, check=True, capture_output=True)
    names = sorted(str(p.relative_to(golden)) for p in golden.rglob("*") if p.is_file())
    return golden, names


def installed_env(parent: Path) -> dict[str, str]:
    """The environment of both sides: no remote but the one given, this checkout's code, bytecode
    written to and read from a folder of the bench's own."""
    env = {k: v for k, v in os.environ.items() if k not in ("NPUCTL_REMOTE", "PYTHONDONTWRITEBYTECODE")}
    path = [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return {**env, "PYTHONPATH": os.pathsep.join(path), "PYTHONPYCACHEPREFIX": str(parent / "pycache")}


def compare(kind: str, base_url: str, env: dict[str, str], repo: Path, parent: Path, runs: int) -> None:
    parent.mkdir(parents=True, exist_ok=True)
    golden, names = remote_files(repo, parent, env)
    size = sum((golden / n).stat().st_size for n in names)
    pushes, pulls, noops, calls, verified, verified_calls = [], [], [], [], [], []
    npuctl = [sys.executable, "-m", "reconciler"]
    copy = [sys.executable, "-c", COPY]
    for i in range(-1, runs):  # round -1: the warm-up, not counted
        url = f"{base_url}/run{i}"
        copy_url = f"{base_url}/copy{i}"
        ours = _timed([*npuctl, "push", "--remote", url], repo, env)
        theirs = _timed([*copy, "put", copy_url, str(golden), *names], repo, env)
        pushes.append((ours[:2], theirs[:2]))
        noop = _timed([*npuctl, "push", "--remote", url, "--json"], repo, env)
        noops.append(noop[:2])
        calls.append(json.loads(noop[2])["stats"]["remote_calls"])
        listed = _timed([*npuctl, "push", "--remote", url, "--verify", "--json"], repo, env)
        verified.append(listed[:2])
        verified_calls.append(json.loads(listed[2])["stats"]["remote_calls"])
        fresh = parent / f"fresh{i}"
        git(parent, "clone", "-q", str(repo), str(fresh))
        down = parent / f"down{i}"
        down.mkdir()
        theirs = _timed([*copy, "get", copy_url, str(down), *names], repo, env)
        ours = _timed([*npuctl, "pull", "--remote", url], fresh, env)
        pulls.append((ours[:2], theirs[:2]))
        shutil.rmtree(fresh)
        shutil.rmtree(down)
    pushes, pulls, noops, calls = pushes[1:], pulls[1:], noops[1:], calls[1:]
    verified, verified_calls = verified[1:], verified_calls[1:]
    med = statistics.median
    print(f"{kind}: {len(names)} files, {size / 1e6:.1f} MB")
    for verb, pairs in (("push", pushes), ("pull", pulls)):
        wall = med(o[0] / t[0] for o, t in pairs)
        cpu = med(o[1] / t[1] for o, t in pairs)
        print(
            f"  {verb}: npuctl {med(o[0] for o, _ in pairs):.2f} s wall / {med(o[1] for o, _ in pairs):.2f} s "
            f"CPU, fsspec copy {med(t[0] for _, t in pairs):.2f} s / {med(t[1] for _, t in pairs):.2f} s; "
            f"ratio wall {wall:.2f}x, CPU {cpu:.2f}x "
            f"(goal <= {GOAL_RATIO}: {'met' if max(wall, cpu) <= GOAL_RATIO else 'NOT met'})"
        )
    for label, timings, counts in (("", noops, calls), (" --verify", verified, verified_calls)):
        wall, cpu = med(n[0] for n in timings), med(n[1] for n in timings)
        print(
            f"  push{label} with nothing new: {wall:.2f} s wall, {cpu:.2f} s CPU (goal < {GOAL_NOOP_S} s: "
            f"{'met' if wall < GOAL_NOOP_S else 'NOT met'}), {max(counts)} remote call(s)",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="npuctl-remote-bench-") as tmp:
        parent = Path(tmp)
        repo = make_repo(parent)
        env = installed_env(parent)
        compare("file://", f"file://{parent / 'remote'}", env, repo, parent, args.runs)

        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the emulator's request log

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            endpoint = f"http://{host}:{port}"
            s3_env = {
                **env,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1",
                "FSSPEC_S3_ENDPOINT_URL": endpoint,
            }
            import boto3

            client = boto3.client(
                "s3",
                endpoint_url=endpoint,
                region_name="us-east-1",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )
            client.create_bucket(Bucket="npuctl-bench")
            compare("s3:// (moto on 127.0.0.1)", "s3://npuctl-bench", s3_env, repo, parent / "s3", args.runs)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
