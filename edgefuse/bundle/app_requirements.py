"""Which of edgefuse's extras the bundle carries: everything its app imports on the board.

Why derived from the app and not listed by hand: the apps import OpenCV and SciPy lazily
(``edgefuse._cv``, ``require(...)``), so a bundle resolved from edgefuse's base requirements
alone installed and signed fine, then took the board image's OpenCV (outside the digests, built
against another NumPy) or failed at the first frame. The app's kind and its config, read as the
service will read it (``service.app_config``: apps/<kind>/config.yaml under the spec's keys),
say what runs:

- ``vision`` (opencv-python-headless, scipy): every camera app: sources, sinks, drawing,
  tracking.
- ``events`` (paho-mqtt): ``events.mqtt`` is set (a webhook needs only the standard library).
- ``serve`` (aiohttp, prometheus-client): ``serve`` is set, or the service declares a health or
  metrics port (``service.health``, ``service.metrics_port``), which only the live server
  answers.

``python.extras`` adds more (e.g. ``serve`` for a bundle without an app that is used from
Python). A spec without an app carries edgefuse's base requirements (ONNX Runtime, NumPy, ...).
"""

from __future__ import annotations

import yaml

from edgefuse.apps.config import from_mapping
from edgefuse.bundle.service import app_config
from edgefuse.bundle.spec import BuildSpec
from edgefuse.bundle.spec_checks import APP_CONFIGS


def bundle_extras(spec: BuildSpec) -> list[str]:
    """edgefuse's extras the board's environment needs, sorted."""
    extras = set(spec.python["extras"])
    if spec.app is not None:
        config = from_mapping(APP_CONFIGS[spec.app["kind"]], yaml.safe_load(app_config(spec)),
                              "app config")
        extras.add("vision")
        if (getattr(config, "events", None) or {}).get("mqtt") is not None:
            extras.add("events")
        service = spec.service
        if getattr(config, "serve", None) is not None or service.get("health") is not None \
                or service.get("metrics_port") is not None:
            extras.add("serve")
    return sorted(extras)
