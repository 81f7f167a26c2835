"""The edgefuse pytest plugin: fixtures for sessions on builds, for frames and for recordings.

Installed with edgefuse (entry point ``pytest11: edgefuse``), so a project's tests use them with
no conftest. ``pytest --edgefuse-backend acl`` runs the same tests on a board: every session a
test opens without naming a backend takes it (default ``sim``, the board simulated).

Fixtures:
- ``edgefuse_session(model, backend=None, **options)``: ``open_session`` on one backend, strict
  (a session that cannot open fails the test, it never falls back), closed after the test;
- ``edgefuse_detector(model, backend=None, **options)`` / ``edgefuse_segmenter(...)``: the apps'
  ``Detector`` / ``Segmenter`` on such a session (the build's preprocessing and decoding);
- ``edgefuse_frames(source, count=None, size=None, seed=0)``: BGR frames from an image, a folder,
  a glob or a video, or ``"scenes"`` from the procedural scene generator;
- ``edgefuse_recording(path)``: a recording from ``edgefuse run --record``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from edgefuse.reference.recording import Recording, load_recording
from edgefuse.runtime import BACKENDS, open_session
from edgefuse.session import Session
from edgefuse.testing.frames import (
    DEFAULT_SCENE_SIZE,
    DEFAULT_SCENES,
    SCENES,
    read_frames,
    scene_frames,
)
from edgefuse.vision.detect.detector import Detector
from edgefuse.vision.segment.segmenter import Segmenter

DEFAULT_TEST_BACKEND = "sim"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("edgefuse")
    group.addoption(
        "--edgefuse-backend", default=None, choices=BACKENDS, metavar="NAME",
        help=f"backend of edgefuse sessions a test opens without naming one (default "
             f"{DEFAULT_TEST_BACKEND}; on a board: acl)")


def _backend(request: pytest.FixtureRequest, backend: str | None) -> str:
    return backend or request.config.getoption("edgefuse_backend") or DEFAULT_TEST_BACKEND


@pytest.fixture
def edgefuse_session(request: pytest.FixtureRequest) -> Iterator[Callable[..., Session]]:
    """``edgefuse_session(model, backend=None, **options)`` -> an open Session (closed after)."""
    opened: list[Session] = []

    def open_one(model: Any, backend: str | None = None, **options: Any) -> Session:
        session = open_session(model, backends=(_backend(request, backend),), **options)
        opened.append(session)
        return session

    yield open_one
    for session in reversed(opened):
        session.close()


@pytest.fixture
def edgefuse_detector(request: pytest.FixtureRequest) -> Iterator[Callable[..., Detector]]:
    """``edgefuse_detector(model, backend=None, **options)`` -> a Detector (closed after)."""
    yield from _vision(request, Detector)


@pytest.fixture
def edgefuse_segmenter(request: pytest.FixtureRequest) -> Iterator[Callable[..., Segmenter]]:
    """``edgefuse_segmenter(model, backend=None, **options)`` -> a Segmenter (closed after)."""
    yield from _vision(request, Segmenter)


def _vision(request: pytest.FixtureRequest, kind: type) -> Iterator[Callable[..., Any]]:
    opened: list[Any] = []

    def open_one(model: Any, backend: str | None = None, *,
                 session_options: dict[str, Any] | None = None, **task_options: Any) -> Any:
        task = kind.open(model, backends=(_backend(request, backend),), strict=True,
                         session_options=session_options, **task_options)
        opened.append(task)
        return task

    yield open_one
    for task in reversed(opened):
        task.close()


@pytest.fixture
def edgefuse_frames() -> Callable[..., list[np.ndarray]]:
    """``edgefuse_frames(source, count=None, size=None, seed=0)`` -> BGR uint8 frames."""

    def frames(source: Any, count: int | None = None, size: tuple[int, int] | None = None,
               seed: int = 0) -> list[np.ndarray]:
        if isinstance(source, str) and source == SCENES:
            return scene_frames(count or DEFAULT_SCENES, size or DEFAULT_SCENE_SIZE, seed)
        return read_frames(source, count)

    return frames


@pytest.fixture
def edgefuse_recording() -> Callable[..., Recording]:
    """``edgefuse_recording(path)`` -> the Recording (inputs, outputs, meta)."""
    return load_recording
