"""The live view's one page, a dashboard: a grid of camera tiles that fills the window (1, 4 or 9
streams in 1280x720 without scrolling), each with its state, fps and latency under it; a counts
table per stream (lines in/out per class, zones now/entered) and the latest events, with their
snapshots, in a side panel.

Plain HTML, CSS and a little JavaScript: the tiles' frames over one WebSocket (``/api/frames``;
the server module says why not an MJPEG stream per tile), ``/api/state`` and
``/api/events?after=`` polled: nothing to build, nothing fetched from elsewhere (a camera box is
often offline), the same numbers as ``/metrics``. Everything a stream or an event brings in
(names, classes, details) is set as text, never as HTML. A poll rewrites a counts table only
when its numbers changed and appends only the events it has not shown, so an idle page costs
the browser next to nothing.
"""

from __future__ import annotations

import html
import json
import math
import urllib.parse

POLL_MS = 1000
EVENTS_SHOWN = 40

_STYLE = """
:root { --bg: #0f1216; --panel: #171b21; --line: #262c35; --text: #e6e9ee; --muted: #8a94a3;
        --live: #2fbf71; --warn: #f0a33a; --bad: #e5484d; --done: #6b7686; --accent: #4c8dff; }
* { box-sizing: border-box; }
html, body { height: 100%; margin: 0; }
body { display: flex; flex-direction: column; overflow: hidden; background: var(--bg);
       color: var(--text); font: 13px/1.35 system-ui, -apple-system, "Segoe UI", sans-serif; }
header { display: flex; align-items: center; gap: 12px; height: 40px; padding: 0 14px;
         background: var(--panel); border-bottom: 1px solid var(--line); flex: none; }
header .brand { font-weight: 650; letter-spacing: .02em; }
header .brand b { color: var(--accent); }
header .summary { color: var(--muted); }
header .brand, header .summary { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
header .health { margin-left: auto; }
main { flex: 1; min-height: 0; display: grid; grid-template-columns: minmax(0, 1fr) 280px; }
.grid { display: grid; gap: 8px; padding: 8px; min-height: 0;
        grid-template-columns: repeat(var(--cols), minmax(0, 1fr));
        grid-template-rows: repeat(var(--rows), minmax(0, 1fr)); }
.tile { display: flex; flex-direction: column; min-height: 0; min-width: 0;
        background: var(--panel); border: 1px solid var(--line); border-radius: 8px;
        overflow: hidden; }
.tile .view { flex: 1; min-height: 0; position: relative; background: #000; }
.tile .view img { position: absolute; inset: 0; width: 100%; height: 100%;
                  object-fit: contain; }
.tile .view img:not([src]) { visibility: hidden; }
.tile.ended .view img, .tile.lost .view img { opacity: .45; filter: grayscale(.8); }
.tile.lost, .tile.stalled, .tile.reconnecting { border-color: var(--bad); }
.tile footer { display: flex; align-items: center; gap: 10px; height: 28px; padding: 0 8px;
               flex: none; white-space: nowrap; overflow: hidden; }
.tile .name { font-weight: 600; overflow: hidden; text-overflow: ellipsis; }
.tile .numbers { margin-left: auto; color: var(--muted); font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 1px 7px; border-radius: 9px; font-size: 11px;
         font-weight: 600; text-transform: uppercase; letter-spacing: .04em;
         background: var(--done); color: #0b0d10; }
.badge.live, .badge.ok { background: var(--live); }
.badge.starting { background: var(--muted); }
.badge.reconnecting, .badge.stalled { background: var(--warn); }
.badge.lost, .badge.unhealthy { background: var(--bad); color: #fff; }
aside { display: flex; flex-direction: column; min-height: 0; border-left: 1px solid var(--line);
        background: var(--panel); }
aside h2 { margin: 0; padding: 10px 12px 6px; font-size: 11px; font-weight: 650;
           color: var(--muted); text-transform: uppercase; letter-spacing: .08em; }
.scroll { overflow-y: auto; min-height: 0; padding: 0 12px 8px; }
#counts { flex: 0 1 auto; max-height: 50%; }
#events { margin: 0; padding: 0; list-style: none; }
table.counts { width: 100%; border-collapse: collapse; margin-bottom: 10px;
               font-variant-numeric: tabular-nums; }
table.counts caption { text-align: left; font-weight: 600; padding: 2px 0 4px; }
table.counts th { color: var(--muted); font-weight: 500; text-align: right; padding: 1px 4px; }
table.counts th:first-child, table.counts td:first-child { text-align: left; }
table.counts td { text-align: right; padding: 2px 4px; border-top: 1px solid var(--line); }
table.counts tr.group td { color: var(--muted); border-top: none; padding-top: 6px;
                           font-size: 11px; text-transform: uppercase; letter-spacing: .05em; }
.empty { color: var(--muted); }
#events li { display: flex; gap: 8px; align-items: center; padding: 6px 0;
             border-top: 1px solid var(--line); }
#events li .thumb { width: 64px; height: 40px; flex: none; border-radius: 4px;
                    background: #000 center / cover no-repeat; }
#events li .mark { width: 4px; align-self: stretch; flex: none; border-radius: 2px;
                   background: var(--accent); }
#events li .mark.zone { background: var(--live); }
#events li .mark.stream { background: var(--warn); }
#events li .what { font-weight: 600; }
#events li .when { color: var(--muted); font-size: 11px; }
#events li a { color: var(--accent); }
@media (max-width: 760px) {  /* a phone: tiles in one column, then the panel; the page scrolls */
  body { overflow: auto; display: block; }
  main { display: block; }
  .grid { grid-template-columns: 1fr; grid-template-rows: none; grid-auto-rows: 56vw; }
  aside { border-left: none; }
  #counts { max-height: none; }
}
"""

_SCRIPT = """
const $ = (id) => document.getElementById(id);
function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}
function withToken(url) { return url + QUERY; }

const shownCounts = {};
function countsTable(name, counts) {
  const table = el("table", "counts");
  table.id = "counts-" + name;
  table.appendChild(el("caption", "", name));
  const lines = Object.entries(counts.lines || {});
  const zones = Object.entries(counts.zones || {});
  if (!lines.length && !zones.length) {
    const row = table.insertRow();
    row.appendChild(el("td", "empty", "no lines or zones"));
    return table;
  }
  function group(title, first, second) {
    const row = table.insertRow();
    row.className = "group";
    for (const text of [title, "class", first, second]) row.appendChild(el("td", "", text));
  }
  let previous = null;
  function add(kind, name, cls, fields) {
    const row = table.insertRow();
    Object.assign(row.dataset, {kind: kind, name: name, class: cls});
    row.appendChild(el("td", "", previous === kind + name ? "" : name));
    previous = kind + name;
    row.appendChild(el("td", "", cls || "-"));
    for (const [field, value] of fields) {
      const cell = el("td", "", String(value));
      cell.dataset.field = field;
      row.appendChild(cell);
    }
  }
  if (lines.length) group("line", "in", "out");
  for (const [line, totals] of lines) {
    const classes = [...new Set([...Object.keys(totals.in || {}),
                                 ...Object.keys(totals.out || {})])].sort();
    if (!classes.length) add("line", line, "", [["in", 0], ["out", 0]]);
    for (const cls of classes)
      add("line", line, cls, [["in", (totals.in || {})[cls] || 0],
                              ["out", (totals.out || {})[cls] || 0]]);
  }
  if (zones.length) group("zone", "now", "entered");
  for (const [zone, totals] of zones) {
    const now = totals.occupancy || {}, entered = totals.entries || {};
    const classes = [...new Set([...Object.keys(now), ...Object.keys(entered)])].sort();
    if (!classes.length) add("zone", zone, "", [["now", 0], ["entered", 0]]);
    for (const cls of classes)
      add("zone", zone, cls, [["now", now[cls] || 0], ["entered", entered[cls] || 0]]);
  }
  return table;
}

function showState(state) {
  let unhealthy = 0, fps = 0, counted = false;
  for (const [name, view] of Object.entries(state)) {
    const stats = view.stats || {};
    const running = view.state !== "ended" && view.state !== "lost";
    const badge = $("state-" + name);
    badge.textContent = view.state;
    badge.className = "badge " + view.state;
    $("tile-" + name).className = "tile " + view.state;
    $("fps-" + name).textContent =
      running && stats.fps !== undefined ? stats.fps.toFixed(1) + " fps" : "- fps";
    $("latency-" + name).textContent = running && stats.latency_p50_ms !== undefined
      ? stats.latency_p50_ms.toFixed(0) + " ms" : "- ms";
    if (running) fps += stats.fps || 0;
    if (view.stalled) unhealthy += 1;
    const counts = view.counts || {};
    counted = counted || Object.keys(counts.lines || {}).length > 0
      || Object.keys(counts.zones || {}).length > 0;
    const key = JSON.stringify(counts);
    if (shownCounts[name] !== key) {
      shownCounts[name] = key;
      $("counts-" + name).replaceWith(countsTable(name, view.counts || {}));
    }
  }
  $("counts-title").hidden = $("counts").hidden = !counted;  // a segmenter counts nothing
  const health = $("health");
  health.textContent = unhealthy ? unhealthy + " need attention" : "healthy";
  health.className = "badge health " + (unhealthy ? "unhealthy" : "ok");
  $("total-fps").textContent = fps.toFixed(1) + " fps in all";
}

function describe(event) {
  const who = [event.class, event.track_id !== undefined ? "#" + event.track_id : ""]
    .filter(Boolean).join(" ");
  switch (event.type) {
    case "line_crossed": return [event.line + " " + event.direction, who];
    case "zone_entered": return ["entered " + event.zone, who];
    case "zone_left": return ["left " + event.zone, who + (event.dwell_s !== undefined
                                ? " after " + event.dwell_s.toFixed(1) + " s" : "")];
    case "stream_down": case "stream_up": case "stream_lost":
      return [event.type.replace("_", " "), event.detail || ""];
    default: return [String(event.type || "event").replace(/_/g, " "), who];
  }
}

function connectFrames() {
  const base = location.href.replace(/^http/, "ws").replace(/[?#].*$/, "").replace(/[^/]*$/, "");
  const tile = document.querySelector(".tile .view");
  const width = Math.round((tile ? tile.clientWidth : 640) * (window.devicePixelRatio || 1));
  const socket = new WebSocket(base + "api/frames?width=" + width + QUERY.replace("?", "&"));
  socket.binaryType = "blob";  // the JPEG stays out of the script's heap: no copy, no parsing
  let name = null;
  socket.onmessage = (message) => {
    if (typeof message.data === "string") { name = message.data; return; }
    const image = $("image-" + name);
    if (!image) return;
    const previous = image.src;
    image.onload = () => { if (previous.startsWith("blob:")) URL.revokeObjectURL(previous); };
    image.src = URL.createObjectURL(message.data);
  };
  socket.onclose = () => setTimeout(connectFrames, POLL_MS);
}
connectFrames();

let lastEvent = 0;
function showEvents(answer) {
  const list = $("events");
  for (const event of answer.events) {
    const item = el("li");
    item.dataset.seq = event.seq;
    item.dataset.type = event.type;
    const kind = String(event.type || "").split("_")[0];
    if (event.snapshot_url) {
      const thumb = el("a", "thumb");
      thumb.href = withToken(event.snapshot_url);
      thumb.target = "_blank";
      thumb.style.backgroundImage = "url(" + JSON.stringify(withToken(event.snapshot_url)) + ")";
      item.appendChild(thumb);
    } else {
      item.appendChild(el("div", "mark " + kind));
    }
    const text = el("div");
    const [what, detail] = describe(event);
    text.appendChild(el("div", "what", what));
    if (detail) text.appendChild(el("div", "", detail));
    const when = event.time ? new Date(event.time * 1000).toLocaleTimeString() : "";
    text.appendChild(el("div", "when", [event.stream, when].filter(Boolean).join(" · ")));
    if (event.clip_url) {
      const link = el("a", "", "clip");
      link.href = withToken(event.clip_url);
      link.target = "_blank";
      text.appendChild(link);
    }
    item.appendChild(text);
    list.prepend(item);
  }
  while (list.children.length > EVENTS_SHOWN) list.lastChild.remove();
  if (answer.events.length) lastEvent = answer.last;
  $("no-events").hidden = list.children.length > 0;
}

async function poll(path, show) {
  const response = await fetch(path);
  if (response.ok) show(await response.json());
}

async function refresh() {
  try {
    await Promise.all([
      poll(withToken("api/state"), showState),
      poll("api/events?after=" + lastEvent + QUERY.replace("?", "&"), showEvents)]);
    document.body.dataset.updates = Number(document.body.dataset.updates || 0) + 1;
  } catch (error) { /* the next poll tries again */ }
  setTimeout(refresh, POLL_MS);
}
refresh();
"""


def grid_shape(count: int) -> tuple[int, int]:
    """Columns and rows for ``count`` tiles: the smallest square-ish grid (1, 2x2, 3x3, ...)."""
    columns = max(1, math.ceil(math.sqrt(count)))
    return columns, max(1, math.ceil(count / columns))


def render_page(streams: list[str], token: str | None) -> str:
    query = "?" + urllib.parse.urlencode({"token": token}) if token else ""
    columns, rows = grid_shape(len(streams))
    tiles, tables = [], []
    for name in streams:
        safe = html.escape(name)
        tiles.append(
            f'<div class="tile starting" id="tile-{safe}">'
            f'<div class="view"><img id="image-{safe}" alt="{safe}"></div>'
            f'<footer><span class="name">{safe}</span>'
            f'<span class="badge starting" id="state-{safe}">starting</span>'
            f'<span class="numbers"><span id="fps-{safe}">- fps</span> · '
            f'<span id="latency-{safe}">- ms</span></span></footer></div>')
        tables.append(f'<table class="counts" id="counts-{safe}"></table>')
    plural = "s" if len(streams) != 1 else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>edgefuse live</title><style>{_STYLE}</style></head><body>"
        '<header><span class="brand"><b>edge</b>fuse live</span>'
        f'<span class="summary">{len(streams)} stream{plural} · '
        '<span id="total-fps">- fps in all</span></span>'
        '<span class="badge health starting" id="health">starting</span></header>'
        f'<main><section class="grid" id="grid" style="--cols:{columns};--rows:{rows}">'
        f"{''.join(tiles)}</section>"
        f'<aside><h2 id="counts-title">Counts</h2>'
        f'<div class="scroll" id="counts">{"".join(tables)}</div>'
        '<h2>Events</h2><div class="scroll" style="flex:1">'
        '<p class="empty" id="no-events">no events yet</p><ol id="events"></ol></div>'
        "</aside></main>"
        f"<script>const QUERY = {json.dumps(query)}; const POLL_MS = {POLL_MS};"
        f" const EVENTS_SHOWN = {EVENTS_SHOWN};{_SCRIPT}</script></body></html>")
