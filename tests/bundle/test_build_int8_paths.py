"""A calibration file the build cannot read is named as the spec writes its folder: `frames/`
in the spec gives `frames/broken.jpg` in the error, the path a user can paste, not the resolved
folder's text glued to the spec's (`frames//broken.jpg`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefuse.cli.main import main
from tests.bundle.test_build_int8 import _spec

pytestmark = pytest.mark.ort

PHOTOS = Path(__file__).parents[1] / "vision" / "photos"


def test_an_undecodable_calibration_image_is_named_as_the_spec_writes_it(tmp_path, capsys):
    spec = _spec(tmp_path / "spec", frames=sorted(PHOTOS.glob("*.jpg"))[:1])
    (tmp_path / "spec" / "frames" / "broken.jpg").write_bytes(b"not a jpeg")
    assert main(["build", str(spec), "-o", str(tmp_path / "out"), "--cache",
                 str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert "models[0].precision.calibration: OpenCV cannot decode the image " \
           "'frames/broken.jpg'" in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists()
