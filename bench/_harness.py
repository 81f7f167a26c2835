"""Process-interleaved latency comparison with paired ratios.

Method (from ../shared/reference/onnx-optimizers-and-cpu-baselines.md): every configuration is
measured in its own fresh process; configurations are alternated A, B, ..., then reversed, for
several repetitions; each configuration is reported as the median of its per-process medians and
as the median of its ratios to the baseline measured in the same repetition (the paired ratio),
which cancels the machine's slow drift.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys
from pathlib import Path

from edgefuse.convert import convert
from edgefuse.models import get_entry

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
MODELS_DIR = RESULTS / "models"


@dataclasses.dataclass
class Config:
    name: str
    worker_args: list[str]


@dataclasses.dataclass
class Measured:
    name: str
    medians_ms: list[float] = dataclasses.field(default_factory=list)
    ratios: list[float] = dataclasses.field(default_factory=list)
    error: str | None = None

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.medians_ms) if self.medians_ms else None

    @property
    def paired_ratio(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None

    def to_json(self) -> dict:
        return {
            "median_ms": self.median_ms,
            "paired_ratio": self.paired_ratio,
            "ratio_min": min(self.ratios) if self.ratios else None,
            "ratio_max": max(self.ratios) if self.ratios else None,
            "medians_ms": self.medians_ms,
            "error": self.error,
        }


def measure_once(config: Config, runs: int, threads: int) -> float:
    command = [sys.executable, "-m", "bench._latency_worker", *config.worker_args,
               "--runs", str(runs), "--threads", str(threads)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
    return json.loads(done.stdout.strip().splitlines()[-1])["median_ms"]


def interleaved(configs: list[Config], *, reps: int, runs: int, threads: int = 2,
                log=print) -> dict[str, Measured]:
    """Measure ``configs`` (the first is the baseline) in fresh, alternating processes."""
    results = {c.name: Measured(c.name) for c in configs}
    for rep in range(reps):
        order = configs if rep % 2 == 0 else list(reversed(configs))
        this_rep: dict[str, float] = {}
        for config in order:
            if results[config.name].error:
                continue
            try:
                this_rep[config.name] = measure_once(config, runs, threads)
            except RuntimeError as exc:
                results[config.name].error = str(exc)
                continue
            results[config.name].medians_ms.append(this_rep[config.name])
            log(f"  rep {rep + 1}/{reps} {config.name}: {this_rep[config.name]:.1f} ms")
        baseline = this_rep.get(configs[0].name)
        if baseline:
            for name, value in this_rep.items():
                results[name].ratios.append(value / baseline)
    return results


def export_catalogue_model(name: str, variant: str) -> Path:
    """The catalogue model ``name`` converted by edgefuse (its default exporter), saved under
    bench/results/models for the next step to read."""
    entry = get_entry(name)
    path = MODELS_DIR / f"{name}.{variant}.fp32.onnx"
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    convert(entry.build(variant), inputs=entry.shapes(variant)[0], output=path)
    return path
