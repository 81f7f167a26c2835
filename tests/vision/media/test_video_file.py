"""Video files: H.264 timed by the frames' own clock, written whole in a thread of its own, a
failing encoder leaving nothing behind, and OpenCV's writer as the fallback without PyAV."""

from __future__ import annotations

import logging
import sys

import pytest

from edgefuse._files import WriteFailedError
from edgefuse.vision.media import video_file
from edgefuse.vision.media.h264 import H264Encoder, h264_available
from edgefuse.vision.media.video_file import VideoFile
from tests.needs import optional
from tests.vision.media.clip_frames import decode, flat

pytestmark = pytest.mark.unit
av = optional("av")
cv2 = optional("cv2")


def test_frames_keep_their_own_spacing(tmp_path):
    """A file source read with stride or a camera that stalls: the times are the frames'."""
    video = VideoFile(tmp_path / "v.mp4", fps=10.0)
    times = [0.0, 0.1, 0.2, 0.5, 0.6, 1.4]
    for index, at in enumerate(times):
        video.write(flat(index), 100.0 + at)
    video.close()
    frames = decode(tmp_path / "v.mp4")
    assert [index for _, index in frames] == list(range(6))
    assert [t for t, _ in frames] == pytest.approx(times, abs=1e-3)
    with av.open(str(tmp_path / "v.mp4")) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.name, stream.codec_context.pix_fmt) == ("h264", "yuv420p")
    head = (tmp_path / "v.mp4").read_bytes()[:4096]
    assert head.find(b"moov") < head.find(b"mdat") or b"mdat" not in head  # +faststart


def test_a_failing_encoder_leaves_nothing_half_written(tmp_path, monkeypatch):
    real = H264Encoder.encode

    def failing(self, image, clock):
        if clock >= 100.5:
            raise OSError(28, "No space left on device")
        return real(self, image, clock)

    monkeypatch.setattr(H264Encoder, "encode", failing)
    video = VideoFile(tmp_path / "v.mp4", fps=10.0)
    with pytest.raises(WriteFailedError, match=r"error\[disk-full\]: cannot write '.*v\.mp4': "
                                               "ENOSPC: No space left"):
        for index in range(40):  # the error reaches a later write, or the close
            video.write(flat(index), 100.0 + index / 10)
        video.close()
    video.close()
    assert list(tmp_path.iterdir()) == []


def test_nothing_is_left_by_a_video_with_no_frame_or_a_discarded_one(tmp_path):
    VideoFile(tmp_path / "empty.mp4").close()
    video = VideoFile(tmp_path / "dropped.mp4")
    video.write(flat(0))
    video.discard()
    assert list(tmp_path.iterdir()) == []


def test_without_pyav_opencv_writes_mpeg4_part_2_and_says_so_once(tmp_path, monkeypatch,
                                                                   caplog, request):
    monkeypatch.setitem(sys.modules, "av", None)  # import av fails as where it is missing
    h264_available.cache_clear()
    request.addfinalizer(h264_available.cache_clear)  # after monkeypatch gives av back
    monkeypatch.setattr(video_file, "_warned_fallback", video_file.threading.Event())
    caplog.set_level(logging.WARNING, logger=video_file.__name__)
    for name in ("a.mp4", "b.mp4"):
        video = VideoFile(tmp_path / name, fps=10.0)
        for index in range(5):
            video.write(flat(index))
        video.close()
    warnings = [r.message for r in caplog.records if "PyAV is not installed" in r.message]
    assert len(warnings) == 1 and "pip install 'edgefuse[vision]'" in warnings[0]
    capture = cv2.VideoCapture(str(tmp_path / "a.mp4"))
    fourcc = int(capture.get(cv2.CAP_PROP_FOURCC)).to_bytes(4, "little").decode()
    capture.release()
    assert fourcc.lower() in ("mp4v", "fmp4")  # how FFmpeg names MPEG-4 Part 2 on reading
