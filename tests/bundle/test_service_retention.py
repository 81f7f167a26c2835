"""The service config `edgefuse build` writes keeps each output within a retention by default (a
board's card is small), unless the spec's app config sets its own or null."""

from __future__ import annotations

import pytest
import yaml

from edgefuse.apps.config import from_mapping
from edgefuse.bundle.service import app_config
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.spec_checks import APP_CONFIGS
from edgefuse.vision.media.retention import Retention
from tests.bundle.models import write_spec

pytestmark = pytest.mark.unit


def service_config(tmp_path, app_config_text: str | None = None):
    spec_path = write_spec(tmp_path / "spec")
    if app_config_text is not None:
        backend = "  backend: [acl, cpu]\n"
        text = spec_path.read_text().replace(backend,
                                             f"{backend}  config: {app_config_text}\n")
        spec_path.write_text(text)
    spec = load_spec(spec_path)
    return from_mapping(APP_CONFIGS[spec.app["kind"]], yaml.safe_load(app_config(spec)), "app")


def test_the_service_config_retains_a_week_4_gib_per_output_and_keeps_2_gib_free(tmp_path):
    assert service_config(tmp_path).retain == Retention(
        max_bytes=4 << 30, max_age_s=7 * 86400.0, min_free_bytes=2 << 30)


@pytest.mark.parametrize(("given", "expected"), [
    ("{retain: null}", None),
    ("{retain: {max_age: 36h}}", Retention(max_age_s=36 * 3600.0))])
def test_the_specs_own_retain_replaces_the_default(tmp_path, given, expected):
    assert service_config(tmp_path, given).retain == expected
