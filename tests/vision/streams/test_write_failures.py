"""Writes that fail are never silent: on a real full tmpfs, a JSON Lines file keeps only whole
lines, a staged file whose size differs is not renamed, the error names the errno, and a live
recording stops and resumes on the disk's free space."""

from __future__ import annotations

import errno

import pytest

from edgefuse._files import WriteFailedError
from edgefuse.vision.streams import recording as recording_module
from edgefuse.vision.streams.live_files import AppendedLines
from edgefuse.vision.streams.recording import Recordings
from edgefuse.vision.streams.staging import Staged
from tests.full_disk import fill, tmpfs_fixture

pytestmark = pytest.mark.unit


full = tmpfs_fixture("full", "256k")


def test_a_line_the_full_disk_cut_is_cut_back_and_the_error_names_the_file(full):
    fill(full, leave=8192)
    lines = AppendedLines(full / "live.jsonl")
    record = '{"frame": 1, "detections": [' + ", ".join(['"x"'] * 200) + "]}\n"
    with pytest.raises(WriteFailedError, match=r"error\[disk-full\]: cannot write "
                                               r"'.*live\.jsonl': ENOSPC: No space left"):
        for _ in range(100):
            lines.write(record)
    text = (full / "live.jsonl").read_text()
    assert text and text.endswith("\n") and set(text.splitlines()) == {record.strip()}
    assert lines.size == len(text)


def test_a_staged_file_whose_size_differs_is_removed_not_renamed(tmp_path):
    staged = Staged(tmp_path / "out.jsonl", ".tmp")
    staged.tmp.write_bytes(b"abc")
    with pytest.raises(WriteFailedError, match=r"cannot write '.*out\.jsonl': 3 bytes reached "
                                               r"the disk of the 5 written"):
        staged.commit(size=5)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("code", "reference", "reason"), [
    (errno.ENOSPC, "disk-full", "disk-full"), (errno.EDQUOT, "disk-full", "disk-full"),
    (errno.EIO, "write-failed", "EIO"), (errno.EROFS, "write-failed", "EROFS")])
def test_the_reference_says_disk_full_or_names_the_errno(tmp_path, code, reference, reason):
    error = WriteFailedError(tmp_path / "out.mp4", OSError(code, "as the kernel says"))
    assert (error.reference, error.reason) == (reference, reason)
    assert error.render().startswith(
        f"error[{reference}]: cannot write '{tmp_path / 'out.mp4'}': "
        f"{errno.errorcode[code]}: as the kernel says")


def test_a_recording_stops_on_a_failed_write_and_resumes_when_its_folder_has_room(
        tmp_path, monkeypatch, caplog):
    now = [0.0]
    free = [0]
    monkeypatch.setattr(recording_module, "free_bytes", lambda folder: free[0])
    recordings = Recordings()
    recording = recordings.add("cam", "video", tmp_path, clock=lambda: now[0])
    written = []

    def fails() -> None:
        raise WriteFailedError(tmp_path / "x.mp4", OSError(errno.ENOSPC, "No space left"))

    recording.guard(fails)
    assert recordings.states()[0].reason == "disk-full" and not recording.recording
    now[0] = 10.0  # long past RETRY_S, but the disk is still full: not even tried
    recording.guard(lambda: written.append(1))
    free[0] = recording.resume_free_bytes
    recording.guard(lambda: written.append(2))
    assert written == [2] and recording.recording
    state = recordings.states()[0]
    assert state.errors == {"disk-full": 1} and state.skipped == 1
    assert state.summary() == ("cam video: 1 failed write(s) (1 disk-full), 1 frame(s) not "
                               "recorded, recording at the end")
    messages = [r.getMessage() for r in caplog.records]
    assert any("cam video: recording stopped: cannot write" in m for m in messages)
    assert any("cam video: recording resumed after 10.0 s (1 frame(s) not recorded)" in m
               for m in messages)
