"""The live view's web server: ``/`` (the page), ``/stream/<name>.mjpg``, ``/api/state``,
``/metrics`` (Prometheus) and ``/healthz``, on aiohttp in a thread of its own.

Why a thread with its own event loop: the pipeline is threads and blocking calls; aiohttp serves
many slow MJPEG clients from one thread without touching them. Access: no login on the loopback
address (the default, 127.0.0.1); bound anywhere else a token is required (``?token=`` or
``Authorization: Bearer``) and refused when missing, except ``/healthz``, which says no more
than whether streams stall. A port in use is a clear error before the first frame.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import threading
from typing import Any

from edgefuse._deps import require
from edgefuse.errors import InputError, Ref
from edgefuse.vision.serve import metrics
from edgefuse.vision.serve.page import render_page
from edgefuse.vision.serve.state import LiveState

BOUNDARY = "edgefuseframe"
_STARTUP_TIMEOUT_S = 30.0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LiveServer:
    def __init__(self, state: LiveState, host: str = "127.0.0.1", port: int = 8080, *,
                 token: str | None = None) -> None:
        self.web = require("aiohttp.web", extra="serve", purpose="the live view (--serve)")
        if not is_loopback(host) and not token:
            raise InputError(f"--serve on {host} would show the cameras to the network without "
                             "a login", hint="set serve_token (or EDGEFUSE_SERVE_TOKEN), or "
                             "serve on 127.0.0.1", reference=Ref.BAD_CONFIG)
        self.state, self.host, self.port, self.token = state, host, port, token
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

    async def _metrics(self, request):
        body = metrics.render(self.registry)
        return self.web.Response(body=body, headers={
            "Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def _healthz(self, request):
        stalled = self.state.stalled()
        return self.web.Response(status=503 if stalled else 200, content_type="application/json",
                                 text=json.dumps({"ok": not stalled, "stalled": stalled}))

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
