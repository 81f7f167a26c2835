"""What starting the app before signing adds to ``edgefuse build``: warm rebuilds with and without.

Every model stage is cached (one priming build first), so a rebuild is what CI and a developer
pay again and again: the wheel and wheels from the cache, the bundle assembled, the app's trial
run (``edgefuse.bundle.app_trial``), the archive. Each build is its own process, alternating
"with" and "without" (``try_app`` replaced by a stub that runs nothing), reversed every other
repetition; reported as medians and as the median of the paired differences and ratios.

    python -m bench.app_trial [--spec examples/tiny-camera.yaml] [--repeat 3]

Prints a table and writes bench/results/app_trial.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
# The build with the trial stubbed out: the same CLI, in its own process.
_WITHOUT = ("import sys; import edgefuse.bundle.builder as builder; "
            "builder.try_app = lambda *args, **kwargs: None; "
            "from edgefuse.cli.main import main; sys.exit(main(sys.argv[1:]))")


def _build(spec: Path, out: Path, cache: Path, trial: bool) -> float:
    head = ["-m", "edgefuse"] if trial else ["-c", _WITHOUT]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *head, "build", str(spec), "-o", str(out), "--cache",
                           str(cache), "--force", "--no-progress"], capture_output=True,
                          text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"edgefuse build failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(ROOT / "examples" / "tiny-camera.yaml"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    spec = Path(args.spec).resolve()
    times: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="edgefuse-bench-trial-") as work:
        cache = Path(work) / "cache"
        _build(spec, Path(work) / "out", cache, True)  # primes the cache
        for rep in range(args.repeat):
            for trial in ((True, False) if rep % 2 == 0 else (False, True)):
                times[trial].append(_build(spec, Path(work) / "out", cache, trial))
    differences = [a - b for a, b in zip(times[True], times[False], strict=True)]
    ratios = [a / b for a, b in zip(times[True], times[False], strict=True)]
    rows = [("warm rebuild without the app's trial", statistics.median(times[False]), ""),
            ("warm rebuild with the app's trial", statistics.median(times[True]),
             f"+{statistics.median(differences):.2f} s, x{statistics.median(ratios):.2f} "
             "(paired medians)")]
    print(f"spec: {spec}  repeat: {args.repeat}")
    print(f"{'run':<40} {'seconds':>8}  notes")
    for name, seconds, note in rows:
        print(f"{name:<40} {seconds:8.2f}  {note}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "app_trial.json"
    out.write_text(json.dumps({"spec": str(spec), "with_s": times[True],
                               "without_s": times[False], "added_s": differences,
                               "ratio": ratios,
                               "median_added_s": statistics.median(differences)},
                              indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
