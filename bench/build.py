"""``edgefuse build``: first build, no-change rebuild, one-model-changed rebuild, reproducibility.

Each build runs as its own ``edgefuse build`` process (the wall time includes Python's start and
imports, as a CI job sees it):

1. clean build A: a copy of the spec's folder, an empty cache A;
2. clean build B: another copy in another folder, an empty cache B, at least two worker
   processes and the default thread counts -> the archives' sha256 must be equal;
3. rebuild A with nothing changed (cache A) -> its time against build 1 (the goal: <= 10%);
4. rebuild A after changing one model's options (the last model's ``verify.seed``) -> which
   models rebuilt (from build-log.json) and its time.

    python -m bench.build [--spec examples/tiny-camera.yaml] [--jobs N] [--repeat R]

Prints a table and writes bench/results/build.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def _build(spec: Path, out: Path, cache: Path, jobs: int,
           threads: str | None = "1") -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "edgefuse", "build", str(spec), "-o", str(out),
                           "--cache", str(cache), "--jobs", str(jobs), "--no-progress"],
                          capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"edgefuse build failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, json.loads((out / "build-log.json").read_text())


def _change_last_model(spec: Path) -> str:
    data = yaml.safe_load(spec.read_text())
    model = data["models"][-1]
    verify = model.setdefault("verify", {})
    verify["seed"] = int(verify.get("seed", 0)) + 1
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return model["name"]


def _rebuilt(log: dict) -> list[str]:
    return [name for name, stages in log["models"].items()
            if any(not stage["cached"] for stage in stages.values())]


def run_once(spec: Path, jobs: int, work: Path) -> dict:
    copies = {}
    for name in ("a", "b"):
        copies[name] = work / name / "spec"
        shutil.copytree(spec.parent, copies[name])
    spec_a, spec_b = copies["a"] / spec.name, copies["b"] / spec.name
    first, log_first = _build(spec_a, work / "a" / "out1", work / "a" / "cache", jobs)
    # B differs in all it may: folder, cache, worker processes, thread counts
    other, log_other = _build(spec_b, work / "b" / "out1", work / "b" / "cache", max(2, jobs),
                              threads=None)
    again, log_again = _build(spec_a, work / "a" / "out2", work / "a" / "cache", jobs)
    changed_model = _change_last_model(spec_a)
    changed, log_changed = _build(spec_a, work / "a" / "out3", work / "a" / "cache", jobs)
    return {
        "first_s": first, "clean_b_s": other, "no_change_s": again, "one_changed_s": changed,
        "sha256_a": log_first["archive_sha256"], "sha256_b": log_other["archive_sha256"],
        "no_change_sha256": log_again["archive_sha256"],
        "rebuilt_first": _rebuilt(log_first), "rebuilt_no_change": _rebuilt(log_again),
        "changed_model": changed_model, "rebuilt_one_changed": _rebuilt(log_changed),
        "stages_one_changed": log_changed["models"][changed_model],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(ROOT / "examples" / "tiny-camera.yaml"))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1, help="repetitions (medians reported)")
    args = parser.parse_args()
    spec = Path(args.spec).resolve()
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="edgefuse-bench-build-") as work:
            runs.append(run_once(spec, args.jobs, Path(work)))
    med = {key: statistics.median(r[key] for r in runs)
           for key in ("first_s", "clean_b_s", "no_change_s", "one_changed_s")}
    last = runs[-1]
    same = all(r["sha256_a"] == r["sha256_b"] == r["no_change_sha256"] for r in runs)
    rows = [
        ("first build (clean cache A)", med["first_s"], ", ".join(last["rebuilt_first"])),
        ("clean build B (other folder, cache, jobs)", med["clean_b_s"],
         "same sha256 as A" if same else "DIFFERENT sha256"),
        ("no-change rebuild (cache A)", med["no_change_s"],
         f"{100 * med['no_change_s'] / med['first_s']:.1f}% of first; rebuilt: "
         f"{', '.join(last['rebuilt_no_change']) or 'none'}"),
        (f"rebuild, {last['changed_model']}.verify.seed changed", med["one_changed_s"],
         f"rebuilt: {', '.join(last['rebuilt_one_changed']) or 'none'}"),
    ]
    print(f"spec: {spec.relative_to(ROOT) if spec.is_relative_to(ROOT) else spec}  "
          f"jobs: {args.jobs}  repeat: {args.repeat}")
    print(f"{'run':<44} {'seconds':>8}  notes")
    for name, seconds, note in rows:
        print(f"{name:<44} {seconds:8.2f}  {note}")
    print(f"archive sha256: {last['sha256_a']}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "build.json"
    out.write_text(json.dumps({"spec": str(spec), "jobs": args.jobs, "runs": runs,
                               "median": med, "reproducible": same,
                               "no_change_ratio": med["no_change_s"] / med["first_s"]},
                              indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
