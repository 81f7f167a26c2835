"""`edgefuse detect --event-media` with a counting line and clips, end to end on the trained
shapes detector over the sample clip: every crossing has its snapshot on disk, every clip_ready
names a clip of the right length, and the clip and the ``--save`` video play in Chromium."""

from __future__ import annotations

import json

import pytest

from edgefuse.cli.main import main
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from tests.browser import chromium, play, served_folder
from tests.needs import optional

pytestmark = pytest.mark.torch
optional("torch")
optional("cv2")
optional("scipy")
av = optional("av")
QUIET = ["--backend", "cpu", "--threads", "1", "--stats-every", "0"]


def test_crossings_have_snapshots_and_clips_and_the_videos_play(tmp_path, capsys):
    config = tmp_path / "detect.yaml"
    config.write_text(
        "lines:\n"
        "  - {name: middle, start: [160, 0], end: [160, 240], margin: 2, anchor: center}\n"
        "clips: {pre_s: 1.0, post_s: 1.0, keyframe_s: 0.5}\n")
    out, media = tmp_path / "out.jsonl", tmp_path / "events"
    code = main(["detect", "--config", str(config), "--model", "shapes_yolov8", "--source",
                 str(SAMPLE_CLIP), "--max-frames", "120", "--jsonl", str(out),
                 "--event-media", str(media), "--save", str(tmp_path / "all.mp4"), *QUIET])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    crossings = [e for r in records if "frame" in r for e in r.get("events", [])]
    ready = [e for r in records if "frame" not in r for e in r["events"]]
    assert crossings, "the clip's shapes cross the middle line"
    assert all((media / e["snapshot"]).is_file() for e in crossings)
    assert sorted(e["snapshot"] for e in ready) == sorted(e["snapshot"] for e in crossings)
    assert {e["type"] for e in ready} == {"clip_ready"}
    assert (f"event media in {media}: {len(crossings)} snapshot(s), {len(ready)} clip(s)"
            in captured.out)
    fps = 25.0  # the sample clip's
    for event in ready:
        clip = media / event["clip"]
        assert clip.parent.name == "stream0" and clip.is_file()
        with av.open(str(clip)) as container:
            frames = container.streams.video[0].frames
        # 1 s before (from a keyframe up to 0.5 s earlier) and up to 1 s after, less at the end
        assert 1.0 * fps <= frames <= 2.5 * fps + 1
    assert sorted(p.name for p in (media / "stream0").iterdir()) == sorted(
        [e["snapshot"].split("/")[1] for e in crossings]
        + [e["clip"].split("/")[1] for e in ready])
    with av.open(str(tmp_path / "all.mp4")) as container:
        stream = container.streams.video[0]
        assert stream.frames == 120 and stream.codec_context.name == "h264"
        assert float(stream.duration * stream.time_base) == pytest.approx(120 / fps, abs=0.01)
    driver = chromium()
    try:
        with served_folder(tmp_path) as url:
            states = [play(driver, url, name) for name in (f"events/{ready[0]['clip']}",
                                                           "all.mp4")]
    finally:
        driver.quit()
    assert all(s["why"] == "playing" and s["readyState"] >= 2 for s in states), states
