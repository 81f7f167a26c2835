"""Make the photos the exporter tests run on, from scikit-image's bundled sample data.

Real photos, kept as JPEG (quality 92), in the aspect ratios detectors meet: square, 3:2
landscape and portrait crops, a 4:1 strip, a 2:1 portrait strip and odd sizes (where rounding
``w * r`` and truncating it differ). All four sources carry no copyright restrictions (see
README.md). Run with scikit-image installed (nothing downloads: these files ship in its wheel)::

    python tests/vision/photos/make_photos.py
"""

from __future__ import annotations

from pathlib import Path

import cv2
from skimage import data

HERE = Path(__file__).resolve().parent
# name: (scikit-image loader, rows, columns) - a crop of the loaded photo
PHOTOS = {
    "astronaut": (data.astronaut, slice(None), slice(None)),        # 512 x 512
    "chelsea": (data.chelsea, slice(None), slice(None)),            # 300 x 451
    "coffee": (data.coffee, slice(None), slice(None)),              # 400 x 600
    "rocket": (data.rocket, slice(None), slice(None)),              # 427 x 640
    "rocket_tall": (data.rocket, slice(None), slice(213, 426)),     # 427 x 213
    "coffee_strip": (data.coffee, slice(125, 276), slice(None)),    # 151 x 600
    "astronaut_odd": (data.astronaut, slice(3, 502), slice(17, 350)),  # 499 x 333
}


def main() -> None:
    for name, (load, rows, columns) in PHOTOS.items():
        rgb = load()[rows, columns]
        path = HERE / f"{name}.jpg"
        cv2.imwrite(str(path), rgb[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 92])
        print(f"{path.name}: {rgb.shape[1]} x {rgb.shape[0]}, {path.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
