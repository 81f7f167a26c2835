"""Draw a trace file written by `edgefuse profile --trace` as a PNG, one row per track.

Why: docs/profile.md shows what the trace holds, and no headless browser is installed here to
screenshot a trace viewer; this draws the same events (the first timed run of each process, its
kernels and the floor track) with matplotlib.

    python -m bench.trace_picture trace.json docs/profile-trace.png
"""

from __future__ import annotations

import argparse
import json

from edgefuse._files import atomic_output


def draw(trace_path: str, picture_path: str) -> None:
    import matplotlib  # noqa: PLC0415 - optional, only for this picture

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    events = json.loads(open(trace_path, encoding="utf-8").read())["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    rows, ticks = [], []
    figure, axes = plt.subplots(figsize=(11, 1.2 + 0.5 * len(names)))
    for pid, process in sorted(processes.items()):
        runs = sorted((e for e in spans if e["pid"] == pid and e["cat"] == "run"),
                      key=lambda e: e["ts"])
        if not runs:
            continue
        start, end = runs[0]["ts"], runs[0]["ts"] + runs[0]["dur"]
        for (event_pid, tid), track in sorted(names.items()):
            if event_pid != pid or track == "session":
                continue
            row = len(rows)
            rows.append(track)
            ticks.append(f"{process.split('/')[-1][:28]}: {track}")
            for event in spans:
                in_run = start <= event["ts"] <= end or event["cat"] == "floor"
                if event["pid"] == pid and event["tid"] == tid and in_run:
                    axes.broken_barh([((event["ts"] - start) / 1e3, event["dur"] / 1e3)],
                                     (row - 0.4, 0.8), edgecolor="white", linewidth=0.3)
    axes.set_yticks(range(len(ticks)), ticks)
    axes.invert_yaxis()
    axes.set_xlabel("ms from the start of the first timed run")
    axes.set_title("edgefuse profile --trace: one timed run, its kernels, and the board's floor "
                   "(a lower bound)", fontsize=9)
    figure.tight_layout()
    with atomic_output(picture_path, suffix=".png") as tmp:
        figure.savefig(tmp, dpi=110, format="png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("picture")
    args = parser.parse_args()
    draw(args.trace, args.picture)
    print(f"wrote {args.picture}")


if __name__ == "__main__":
    main()
