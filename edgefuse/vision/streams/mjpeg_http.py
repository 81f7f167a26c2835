"""An IP camera's MJPEG over HTTP (``multipart/x-mixed-replace``), read part by part.

Why not OpenCV's FFmpeg for these: FFmpeg's MJPEG demuxer hides a broken part (a truncated JPEG,
garbage between parts) or ends the whole stream on it: one bad frame becomes a reconnect with
backoff, and nothing counts what was lost. Reading the parts here tells the two failures apart:
- a part that is no decodable JPEG (no SOI/EOI marker, OpenCV cannot decode it), and bytes
  between parts that are no part (garbage on the connection), are skipped and counted in
  ``decode_errors``: the next part is the next frame, the connection stays;
- the transport breaking (the connection closed or reset, no byte for ``timeout_s``) ends the
  device: ``read`` returns ``(False, None)`` and the live source reconnects with backoff.
Parts with a ``Content-Length`` are read by it (a part shorter than it says, cut by the next
boundary, is a decode error), parts without by the next boundary. Every frame carries its own
size, so a camera that switches resolution mid-stream just delivers frames of the new size.

A JPEG whose entropy-coded data is damaged but whose markers are intact decodes to a damaged
picture (libjpeg only warns): that is not caught here.

A server that answers with anything but a multipart stream (an MP4 or HLS over HTTP), with
another status than 200 (a digest login), or whose TLS certificate does not verify (a camera's
self-signed one; FFmpeg does not verify by default) is left to OpenCV's FFmpeg, as before:
``NotMjpeg`` tells the caller so.
"""

from __future__ import annotations

import base64
import http.client
import logging
import ssl
import urllib.parse
from collections.abc import Callable
from typing import Any

import numpy as np

from edgefuse._cv import cv2
from edgefuse.errors import InputError, Ref

log = logging.getLogger(__name__)

CHUNK = 65536
MAX_PART = 32 * 1024 * 1024  # bytes: a bigger part is no camera frame (a 8K JPEG is ~10 MB)
MAX_HEADERS = 16384
_TRANSPORT_ERRORS = (OSError, http.client.HTTPException)


class NotMjpeg(Exception):  # noqa: N818 - a signal to the caller, not an error
    """The URL answers, but not with a multipart JPEG stream."""


class MjpegDevice:
    """One connection to an MJPEG URL (see the module docstring); ``read`` as OpenCV's."""

    def __init__(self, url: str, timeout_s: float, *,
                 decode: Callable[[bytes], Any] | None = None) -> None:
        """``decode``: a part's bytes to the frame ``read`` returns, None for a part that is no
        frame (default: OpenCV's JPEG decode; a DVPP source keeps the JPEG whole)."""
        self.url = url
        self.decode_errors = 0
        self._decode = decode or decode_jpeg
        self._buffer = bytearray()
        self._connection, response = _connect(url, timeout_s)
        self._response = response
        boundary = _boundary(response.getheader("Content-Type", ""))
        if boundary is None:
            self.release()
            raise NotMjpeg(response.getheader("Content-Type", ""))
        self._marker = b"--" + boundary
        self._first: Any = None
        ok, self._first = self.read()  # the size before the run; the first frame is kept
        if not ok:
            self.release()
            raise InputError(f"the MJPEG stream '{url}' sent no decodable frame",
                             hint="check the camera's URL and that it serves JPEG frames",
                             reference=Ref.BAD_SOURCE)

    def get(self, prop: int) -> float:
        """What OpenCV's capture answers for the frame size (the first frame's) and the frame
        rate (0: unknown, as a camera's own pace)."""
        shape = getattr(self._first, "shape", None)
        if shape is not None and prop == cv2().CAP_PROP_FRAME_WIDTH:
            return float(shape[1])
        if shape is not None and prop == cv2().CAP_PROP_FRAME_HEIGHT:
            return float(shape[0])
        return 0.0

    def read(self) -> tuple[bool, Any]:
        if self._first is not None:
            first, self._first = self._first, None
            return True, first
        while True:
            try:
                part = self._next_part()
            except _TRANSPORT_ERRORS as exc:
                log.warning("%s: the connection broke: %s", self.url, exc)
                return False, None
            if part is None:
                return False, None
            image = self._decode(part)
            if image is not None:
                return True, image
            self._error(f"a part of {len(part)} bytes is no decodable JPEG")

    def release(self) -> None:
        self._connection.close()

    def _error(self, why: str) -> None:
        self.decode_errors += 1
        if self.decode_errors in (1, 10, 100, 1000) or self.decode_errors % 10000 == 0:
            log.warning("%s: %s, skipped (%d decode error(s) on this connection)", self.url, why,
                        self.decode_errors)

    def _fill(self) -> bool:
        """Read more of the stream into the buffer; False at its end."""
        data = self._response.read1(CHUNK)
        self._buffer += data
        return bool(data)

    def _next_part(self) -> bytes | None:
        """The next part's body (None at the end of the stream), garbage before it counted."""
        buffer, marker = self._buffer, self._marker
        skipped = 0
        while True:
            at = buffer.find(marker)
            if at < 0:
                cut = max(len(buffer) - len(marker), 0)
                skipped += len(bytes(buffer[:cut]).strip())
                del buffer[:cut]
                if not self._fill():
                    return None
                continue
            skipped += len(bytes(buffer[:at]).strip())
            del buffer[:at + len(marker)]
            if skipped:  # the CRLF between parts is not garbage; anything else is
                self._error(f"{skipped} bytes of garbage between parts")
                skipped = 0
            headers = self._headers()
            if headers is None:
                return None
            if headers is False:
                continue
            return self._body(headers.get("content-length"))

    def _headers(self) -> dict[str, str] | bool | None:
        """The part's headers (lower-case names); False when they are garbage (resync on the
        next boundary), None at the end of the stream."""
        buffer = self._buffer
        while True:
            end = buffer.find(b"\r\n\r\n")
            size = 4
            if end < 0:
                end, size = buffer.find(b"\n\n"), 2
            if end >= 0:
                break
            if len(buffer) > MAX_HEADERS:
                self._error("a part's headers never end")
                return False
            if not self._fill():
                return None
        lines = bytes(buffer[:end]).decode("latin-1").splitlines()
        del buffer[:end + size]
        headers = {}
        for line in lines:
            name, colon, value = line.partition(":")
            if colon:
                headers[name.strip().lower()] = value.strip()
        return headers

    def _body(self, length_text: str | None) -> bytes | None:
        buffer = self._buffer
        length = int(length_text) if length_text and length_text.strip().isdigit() else None
        if length is not None and length <= MAX_PART:
            while len(buffer) < length:
                if buffer.find(self._marker) >= 0:  # shorter than it said: cut at the boundary
                    break
                if not self._fill():
                    return None
            body = bytes(buffer[:length])
            cut = body.find(self._marker)
            if cut >= 0:
                body = body[:cut]
            del buffer[:len(body)]
            return body
        while (end := buffer.find(self._marker)) < 0:
            if len(buffer) > MAX_PART:
                self._error(f"a part longer than {MAX_PART} bytes")
                del buffer[:-len(self._marker)]
            if not self._fill():
                return None
        body = bytes(buffer[:end])
        del buffer[:end]
        return body


def whole_jpeg(data: bytes) -> bytes | None:
    """The part's JPEG, None when it is not a whole one (no start or end marker: cut, or not a
    JPEG)."""
    data = data.strip(b"\r\n")
    return data if data.startswith(b"\xff\xd8") and data.endswith(b"\xff\xd9") else None


def decode_jpeg(data: bytes) -> np.ndarray | None:
    """A BGR frame from a whole JPEG, None when it is not one (``whole_jpeg``) or OpenCV cannot
    decode it."""
    whole = whole_jpeg(data)
    if whole is None:
        return None
    return cv2().imdecode(np.frombuffer(whole, np.uint8), cv2().IMREAD_COLOR)


def _connect(url: str, timeout_s: float) -> tuple[http.client.HTTPConnection, Any]:
    """An open GET on ``url`` (Basic auth from its user:password@), status 200 checked."""
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    try:
        connection = kind(parts.hostname or "", parts.port, timeout=timeout_s)
    except ValueError as exc:  # a port that is no number
        raise InputError(f"cannot open the stream '{url}': {exc}",
                         reference=Ref.BAD_SOURCE) from exc
    headers = {"User-Agent": "edgefuse", "Accept": "multipart/x-mixed-replace, image/jpeg"}
    if parts.username is not None:
        user, password = parts.username, parts.password or ""
        token = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
        headers["Authorization"] = "Basic " + base64.b64encode(token.encode()).decode()
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request("GET", target, headers=headers)
        response = connection.getresponse()
    except ssl.SSLError as exc:  # e.g. a camera's self-signed certificate: FFmpeg's, as before
        connection.close()
        raise NotMjpeg(f"TLS: {exc}") from exc
    except _TRANSPORT_ERRORS as exc:  # TimeoutError is an OSError
        connection.close()
        raise InputError(f"cannot open the stream '{url}': {exc}",
                         hint="check the URL, the network and that the server is up",
                         reference=Ref.BAD_SOURCE) from exc
    if response.status != 200:
        connection.close()
        raise NotMjpeg(f"HTTP {response.status}")
    return connection, response


def _boundary(content_type: str) -> bytes | None:
    """The boundary of a ``multipart/x-mixed-replace`` content type, None for any other."""
    kind, _, parameters = content_type.partition(";")
    if kind.strip().lower() != "multipart/x-mixed-replace":
        return None
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "boundary" and value.strip().strip('"'):
            boundary = value.strip().strip('"')
            return boundary[2:].encode() if boundary.startswith("--") else boundary.encode()
    return None
