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
    """The same detections, one for one."""
    ours, theirs = sorted_rows(ours, image), sorted_rows(theirs, image)
    assert len(theirs) >= least, "the model gives too few detections to compare"
    assert len(ours) == len(theirs), f"{len(ours)} detections, the project's code has " \
                                     f"{len(theirs)}"
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=atol)
