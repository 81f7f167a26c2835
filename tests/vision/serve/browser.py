"""The live view's page read as a person reads it: its counts tables, in the form the run's
counters give them, and a browser whose page is exactly the viewport a dashboard must fit."""

from __future__ import annotations

from tests.browser import chromium


def browser(width: int = 1280, height: int = 720):
    """Headless Chromium whose page is exactly ``width`` x ``height``."""
    return chromium(width, height, exact_viewport=True)


_READ_COUNTS = """
const table = document.getElementById("counts-" + arguments[0]);
const shown = {lines: {}, zones: {}};
for (const row of table.querySelectorAll("tr[data-kind]")) {
  const kind = row.dataset.kind + "s";
  const item = shown[kind][row.dataset.name] = shown[kind][row.dataset.name] || {};
  for (const cell of row.querySelectorAll("td[data-field]")) {
    const field = item[cell.dataset.field] = item[cell.dataset.field] || {};
    const value = Number(cell.textContent);
    if (row.dataset.class && value) field[row.dataset.class] = value;
  }
}
return shown;
"""


def shown_counts(chrome, stream: str) -> dict:
    """The stream's counts table as the page shows it: ``{"lines": {line: {"in": {class: n},
    "out": ...}}, "zones": {zone: {"now": ..., "entered": ...}}}`` (zeros left out)."""
    return chrome.execute_script(_READ_COUNTS, stream)


def as_shown(counts: dict) -> dict:
    """``Tracked.counts`` in the form ``shown_counts`` reads, for comparison."""
    def nonzero(per_class: dict) -> dict:
        return {cls: n for cls, n in per_class.items() if n}

    return {"lines": {name: {"in": nonzero(totals.get("in", {})),
                             "out": nonzero(totals.get("out", {}))}
                      for name, totals in counts.get("lines", {}).items()},
            "zones": {name: {"now": nonzero(totals.get("occupancy", {})),
                             "entered": nonzero(totals.get("entries", {}))}
                      for name, totals in counts.get("zones", {}).items()}}
