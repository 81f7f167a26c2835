"""What the exporter tests share: the photos, detections as rows, and the comparison."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

HERE = Path(__file__).resolve().parent
PHOTOS = sorted((HERE.parent.parent / "photos").glob("*.jpg"))


def photo(path: Path) -> np.ndarray:
    image = cv2.imread(str(path))
    if image is None:
        raise FileNotFoundError(path)
    return image


def rows_of(result) -> np.ndarray:
    """Detections as rows (x1, y1, x2, y2, score, class)."""
    return np.concatenate([result.boxes, result.scores[:, None],
                           result.classes[:, None].astype(np.float32)], 1)


def sorted_rows(rows: np.ndarray, image: np.ndarray) -> np.ndarray:
    """Rows clipped to the frame (edgefuse clips, as Ultralytics' scale_boxes does), by score
    then class."""
    rows = np.array(rows, dtype=np.float64).reshape(-1, 6)
    rows[:, [0, 2]] = rows[:, [0, 2]].clip(0, image.shape[1])
    rows[:, [1, 3]] = rows[:, [1, 3]].clip(0, image.shape[0])
    return rows[np.lexsort((rows[:, 5], -rows[:, 4]))]


def assert_same(ours: np.ndarray, theirs: np.ndarray, image: np.ndarray, *, least: int = 1,
                atol: float = 2e-3) -> None:
    """The same detections, one for one: each of ours paired with the closest of theirs of
    its class (scores that tie to the last bits may be listed in either order)."""
    ours, theirs = sorted_rows(ours, image), sorted_rows(theirs, image)
    assert len(theirs) >= least, "the model gives too few detections to compare"
    assert len(ours) == len(theirs), f"{len(ours)} detections, the project's code has " \
                                     f"{len(theirs)}"
    left = list(range(len(theirs)))
    for row in ours:
        gaps = [np.abs(theirs[i] - row).max() if theirs[i, 5] == row[5] else np.inf
                for i in left]
        best = int(np.argmin(gaps))
        np.testing.assert_allclose(row, theirs[left.pop(best)], rtol=1e-4, atol=atol)
