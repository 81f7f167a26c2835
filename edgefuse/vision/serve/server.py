"""The live view's web server: ``/`` (the page), ``/api/frames`` (every stream's frames over one
WebSocket), ``/stream/<name>.mjpg`` (one stream, for players), ``/api/state``, ``/api/events``,
``/snapshots/<path>``, ``/metrics`` (Prometheus) and ``/healthz``, on aiohttp in a thread of its
own.

Why the page's tiles come over one WebSocket and not one MJPEG stream each: a browser opens at
most six HTTP/1.1 connections to a host, and each MJPEG stream holds one for good, so from six
tiles on the page's own polls of ``/api/state`` waited forever (and each stream held a thread of
the server's executor). One WebSocket carries every tile: a text message naming the stream, then
a binary one with its latest JPEG (the page hands it to an image as it is, never copying it into
script memory), at most ``page_fps`` a second per stream: a dashboard tile needs no more, and a
slow browser gets the latest frames, not a backlog. ``?width=`` asks for frames reduced to about
that width (``preview.py``), which the page sets to its tiles' width.

Why a thread with its own event loop: the pipeline is threads and blocking calls; aiohttp serves
many slow MJPEG clients from one thread without touching them. Access: no login on the loopback
address (the default, 127.0.0.1); bound anywhere else a token is required (``?token=`` or
``Authorization: Bearer``) and refused when missing, except ``/healthz``, which says no more
than whether streams stall and whether the live file sinks record (``recording``: each one's
``recording`` or the reason a failed write stopped it; still 200). A port in use is a clear
error before the first frame.

``/api/events?after=SEQ`` gives the latest events as the analytics emitted them (whatever their
fields), each with its ``seq``; an event whose ``snapshot`` or ``clip`` is a file inside the app's
snapshot folder also gets ``snapshot_url`` / ``clip_url``, served by ``/snapshots/<path>``, which
serves files inside that folder and nothing else: the path is resolved (``..``, absolute paths
and symbolic links included) and refused unless it stays inside the folder.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import json
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from edgefuse._deps import require
from edgefuse.errors import InputError, Ref
from edgefuse.vision.serve import metrics
from edgefuse.vision.serve.page import render_page
from edgefuse.vision.serve.preview import Previews
from edgefuse.vision.serve.state import LiveState

BOUNDARY = "edgefuseframe"
_STARTUP_TIMEOUT_S = 30.0
MEDIA_TYPES = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png",
               ".mp4": "video/mp4"}
MEDIA_FIELDS = {"snapshot": "snapshot_url", "clip": "clip_url"}
PAGE_FPS = 10.0
WAITERS = 64  # viewers (MJPEG streams, pages) served at once


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LiveServer:
    def __init__(self, state: LiveState, host: str = "127.0.0.1", port: int = 8080, *,
                 token: str | None = None, snapshot_dir: str | Path | None = None,
                 page_fps: float = PAGE_FPS) -> None:
        self.web = require("aiohttp.web", extra="serve", purpose="the live view (--serve)")
        if not is_loopback(host) and not token:
            raise InputError(f"--serve on {host} would show the cameras to the network without "
                             "a login", hint="set serve_token (or EDGEFUSE_SERVE_TOKEN), or "
                             "serve on 127.0.0.1", reference=Ref.BAD_CONFIG)
        self.state, self.host, self.port, self.token = state, host, port, token
        self.snapshot_dir = Path(snapshot_dir).resolve() if snapshot_dir is not None else None
        self.page_fps = page_fps
        self.previews = Previews()
        self.registry = metrics.registry_for(state)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: Any = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def start(self) -> None:
        started: dict[str, Any] = {}
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            # every MJPEG viewer and page waits for frames in an executor thread: the default
            # pool (cores + 4 threads) would leave the seventh viewer waiting for a free one
            loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(
                max_workers=WAITERS, thread_name_prefix="edgefuse-serve-wait"))
            self._loop = loop
            try:
                loop.run_until_complete(self._open())
            except OSError as exc:
                started["error"] = exc
                if self._runner is not None:
                    loop.run_until_complete(self._runner.cleanup())
                loop.close()
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="edgefuse-serve", daemon=True)
        self._thread.start()
        if not ready.wait(_STARTUP_TIMEOUT_S):
            raise RuntimeError("the live view did not start within 30 s")
        if "error" in started:
            self._thread.join()
            self._loop = self._thread = None  # nothing to stop: stop() after this does nothing
            raise InputError(f"cannot serve the live view on {self.host}:{self.port}: "
                             f"{started['error'].strerror or started['error']}",
                             hint="choose another port with --serve HOST:PORT",
                             reference=Ref.BAD_CONFIG) from started["error"]

    def stop(self) -> None:
        self._stopping.set()
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    async def _open(self) -> None:
        web = self.web
        app = web.Application(middlewares=[self._auth])
        app.add_routes([web.get("/", self._page), web.get("/api/state", self._api_state),
                        web.get("/api/events", self._api_events),
                        web.get("/api/frames", self._frames),
                        web.get("/snapshots/{path:.+}", self._snapshot),
                        web.get("/metrics", self._metrics), web.get("/healthz", self._healthz),
                        web.get("/stream/{name}.mjpg", self._mjpeg)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:  # the OS chose: tell the caller which
            self.port = self._runner.addresses[0][1]

    @property
    def _auth(self):
        web = self.web

        @web.middleware
        async def check(request, handler):
            if self.token and request.path != "/healthz":
                given = request.query.get("token") or request.headers.get(
                    "Authorization", "").removeprefix("Bearer ").strip()
                if given != self.token:
                    return web.Response(status=401, text="a token is required\n")
            return await handler(request)
        return check

    async def _page(self, request):
        return self.web.Response(text=render_page(self.state.streams, self.token),
                                 content_type="text/html")

    async def _api_state(self, request):
        return self.web.json_response(self.state.snapshot())

    async def _api_events(self, request):
        try:
            after = int(request.query.get("after", "0"))
            limit = int(request.query.get("limit", "50"))
        except ValueError:
            raise self.web.HTTPBadRequest(text="after and limit are integers\n") from None
        newest, events = self.state.events(after, limit)
        return self.web.json_response({"last": newest,
                                       "events": [self._with_urls(e) for e in events]})

    def _with_urls(self, event: dict[str, Any]) -> dict[str, Any]:
        """``event`` with a URL for each of its media files that ``/snapshots/`` will serve (an
        event names its files relative to the snapshot folder, as the event media write them,
        or absolute)."""
        for field, url_field in MEDIA_FIELDS.items():
            value = event.get(field)
            inside = (self._servable(self.snapshot_dir / value)
                      if isinstance(value, str) and value and self.snapshot_dir else None)
            if inside is not None:
                event[url_field] = "snapshots/" + urllib.parse.quote(
                    inside.relative_to(self.snapshot_dir).as_posix())
        return event

    def _servable(self, path: Path) -> Path | None:
        """``path`` resolved, when it names a media file inside the snapshot folder."""
        if self.snapshot_dir is None or "\0" in str(path):
            return None
        resolved = path.resolve()  # "..", symbolic links: where the file really is
        if (not resolved.is_relative_to(self.snapshot_dir)
                or resolved.suffix.lower() not in MEDIA_TYPES or not resolved.is_file()):
            return None
        return resolved

    async def _snapshot(self, request):
        if self.snapshot_dir is None:
            raise self.web.HTTPNotFound(text="no snapshot folder\n")
        # lstrip: "/etc/passwd" joined to the folder would replace it (and then be refused)
        found = self._servable(self.snapshot_dir / request.match_info["path"].lstrip("/"))
        if found is None:
            raise self.web.HTTPNotFound(text="no such snapshot\n")
        return self.web.FileResponse(found, headers={
            "Content-Type": MEDIA_TYPES[found.suffix.lower()], "Cache-Control": "max-age=3600",
            "X-Content-Type-Options": "nosniff"})

    async def _metrics(self, request):
        body = metrics.render(self.registry)
        return self.web.Response(body=body, headers={
            "Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def _healthz(self, request):
        health = self.state.health()
        body: dict[str, Any] = {"ok": health.ok, "stalled": health.stalled}
        recording = self.state.recording()
        if recording:  # a live run's file sinks: "recording", or why a failed write stopped it
            body["recording"] = recording
        return self.web.Response(status=200 if health.ok else 503,
                                 content_type="application/json", text=json.dumps(body))

    async def _frames(self, request):
        web = self.web
        socket = web.WebSocketResponse(heartbeat=30.0)
        await socket.prepare(request)
        try:
            wanted = int(request.query.get("width", "0"))
        except ValueError:
            wanted = 0
        loop = asyncio.get_running_loop()
        versions: dict[str, int] = {}
        while not self._stopping.is_set() and not socket.closed:
            newer = await loop.run_in_executor(None, self._next_frames, versions, wanted)
            try:
                for name, (version, jpeg) in newer.items():
                    versions[name] = version
                    await socket.send_str(name)
                    await socket.send_bytes(jpeg)
            except (ConnectionResetError, RuntimeError):
                break  # the browser went away
            if newer:
                await asyncio.sleep(1.0 / self.page_fps)  # the page's frame rate, not faster
        return socket

    def _next_frames(self, versions: dict[str, int], wanted: int) -> dict[str, tuple[int, bytes]]:
        """The streams' frames newer than ``versions`` (waiting up to a second), reduced to about
        ``wanted`` pixels wide (in the executor: decoding must not hold up the event loop)."""
        return {name: (version, self.previews.get(name, version, jpeg, width, wanted))
                for name, (version, jpeg, width) in
                self.state.wait_any_newer(versions, 1.0).items()}

    async def _mjpeg(self, request):
        name = request.match_info["name"]
        if name not in self.state.streams:
            raise self.web.HTTPNotFound(text=f"no stream {name!r}\n")
        response = self.web.StreamResponse(headers={
            "Content-Type": f"multipart/x-mixed-replace; boundary={BOUNDARY}",
            "Cache-Control": "no-store"})
        await response.prepare(request)
        # each part ends with the next boundary: browsers show a part once they see its end
        await response.write(f"--{BOUNDARY}\r\n".encode())
        loop = asyncio.get_running_loop()
        version = -1
        while not self._stopping.is_set():
            newer, jpeg = await loop.run_in_executor(
                None, self.state.wait_newer, name, version, 1.0)
            if jpeg is None:
                continue
            # nothing new within a second: the same frame again, as a keep-alive and because a
            # browser shows a part only once the next one starts
            version = newer
            try:
                await response.write(
                    f"Content-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n".encode()
                    + jpeg + f"\r\n--{BOUNDARY}\r\n".encode())
            except (ConnectionResetError, RuntimeError):
                break  # the browser went away
        return response
