"""The live view's one page: a tile per stream (its annotated MJPEG), live counts, fps, latency.

Plain HTML and a few lines of JavaScript polling ``/api/state``: nothing to build, nothing fetched
from elsewhere (a camera box is often offline), and the same numbers as ``/metrics``.
"""

from __future__ import annotations

import html
import json
import urllib.parse

_STYLE = """
body { font-family: sans-serif; background: #111; color: #eee; margin: 1em; }
.tiles { display: flex; flex-wrap: wrap; gap: 1em; }
.tile { background: #222; padding: .5em; border-radius: 6px; }
.tile img { display: block; max-width: 640px; }
.stalled { outline: 3px solid #c33; }
pre { margin: .3em 0 0; font-size: 12px; }
"""

_SCRIPT = """
async function refresh() {
  try {
    const response = await fetch("api/state" + QUERY);
    const state = await response.json();
    for (const [name, view] of Object.entries(state)) {
      const stats = view.stats || {};
      document.getElementById("frames-" + name).textContent = view.frames;
      document.getElementById("fps-" + name).textContent = (stats.fps || 0).toFixed(1);
      document.getElementById("latency-" + name).textContent =
        stats.latency_p50_ms === undefined ? "-" : stats.latency_p50_ms.toFixed(1);
      document.getElementById("counts-" + name).textContent = JSON.stringify(view.counts);
      document.getElementById("tile-" + name).classList.toggle("stalled", view.stalled);
    }
  } catch (error) { /* the next poll tries again */ }
  setTimeout(refresh, 500);
}
refresh();
"""


def render_page(streams: list[str], token: str | None) -> str:
    query = "?" + urllib.parse.urlencode({"token": token}) if token else ""
    tiles = []
    for name in streams:
        safe = html.escape(name)
        source = html.escape(f"stream/{urllib.parse.quote(name)}.mjpg{query}")
        tiles.append(
            f'<div class="tile" id="tile-{safe}"><h3>{safe}</h3>'
            f'<img id="image-{safe}" src="{source}" alt="{safe}">'
            f'<div>frames <span id="frames-{safe}">0</span> · fps <span id="fps-{safe}">-</span>'
            f' · latency p50 <span id="latency-{safe}">-</span> ms</div>'
            f'<pre id="counts-{safe}">{{}}</pre></div>')
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>edgefuse</title>"
            f"<style>{_STYLE}</style></head><body><h2>edgefuse live</h2>"
            f"<div class=\"tiles\">{''.join(tiles)}</div>"
            f"<script>const QUERY = {json.dumps(query)};{_SCRIPT}</script></body></html>")
