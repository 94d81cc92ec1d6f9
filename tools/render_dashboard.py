"""Draws a Grafana dashboard (dashboards/*.json) from a Prometheus into one PNG, without Grafana.

For looking at what a dashboard shows (a benchmark's or a test's Prometheus, a bug report)
where no Grafana runs. It reads the dashboard's panels in their grid positions, runs their
PromQL against Prometheus' HTTP API over a time range, substituting Grafana's variables
($namespace, $group, $__rate_interval, $__interval, $__range), and draws the timeseries
panels as lines, state timelines as steps between their mapped values, stat panels as
their last value and bar gauges as bars; tables keep their place with their title only.

    python tools/render_dashboard.py dashboards/kgroups-group.json \\
        --prometheus http://127.0.0.1:9090 --from now-1h --group billing --out group.png

$__rate_interval is Grafana's: max($__interval + scrape interval, 4 x scrape interval),
with $__interval the step (the range over about 250 points, at least the scrape interval);
pass --scrape-interval as the datasource's. Stdlib and matplotlib only.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DRAWN = ("timeseries", "state-timeline", "stat", "bargauge")
POINTS = 250
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def seconds(text: str) -> float:
    """ "1m30s" -> 90.0."""
    parts = DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * UNIT_SECONDS[u] for n, u in parts)


def when(text: str, now: float) -> float:
    """ "now", "now-3h" or unix seconds."""
    if text == "now":
        return now
    if text.startswith("now-"):
        return now - seconds(text[4:])
    return float(text)


def duration(value: float) -> str:
    """A whole number of seconds in PromQL's duration syntax."""
    return f"{max(1, math.ceil(value))}s"


def regex_of(values: list[str]) -> str:
    """Grafana's formatting of a multi-value variable for a =~ matcher."""
    if not values:
        return ".*"
    escaped = [re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


@dataclass
class Window:
    start: float
    end: float
    scrape_interval: float
    step: float = 0.0
    variables: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.step = max(self.scrape_interval, (self.end - self.start) / POINTS)
        rate = max(self.step + self.scrape_interval, 4 * self.scrape_interval)
        self.variables |= {"__interval": duration(self.step), "__rate_interval": duration(rate),
                           "__range": duration(self.end - self.start)}  # fmt: skip

    def substitute(self, expr: str) -> str:
        def one(m: re.Match[str]) -> str:
            name = m.group(1) or m.group(2)
            if name not in self.variables:
                raise KeyError(f"no value for ${name} in {expr!r}")
            return self.variables[name]

        return VARIABLE.sub(one, expr)


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as r:
                answer = json.load(r)
        except urllib.error.HTTPError as e:
            answer = json.load(e)
        if answer.get("status") != "success":
            raise RuntimeError(f"{answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]["result"]

    def range(self, expr: str, w: Window) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.get("query_range", query=expr, start=str(w.start),
                                                end=str(w.end), step=str(w.step))  # fmt: skip
        return result

    def instant(self, expr: str, at: float) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.get("query", query=expr, time=str(at))
        return result


def legend(fmt: str, labels: dict[str, str]) -> str:
    if fmt in ("", "__auto"):
        shown = {k: v for k, v in labels.items() if k != "__name__"}
        return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()


def human(value: float, unit: str) -> str:
    if math.isnan(value):
        return "NaN"
    if unit == "s":
        for scale, suffix in ((3600, "h"), (60, "min"), (1, "s"), (0.001, "ms")):
            if abs(value) >= scale or scale == 0.001:
                return f"{value / scale:.3g} {suffix}"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


@dataclass
class PanelResult:
    title: str
    type: str
    series: int = 0
    error: str = ""


def panels_of(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def render(
    dashboard: dict[str, Any], prometheus: Prometheus, window: Window, out: Path
) -> list[PanelResult]:
    """Draws every panel into `out` (PNG); says per panel how many series it drew."""
    from matplotlib.figure import Figure  # imported here: `--help` works without it

    panels = panels_of(dashboard)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig = Figure(figsize=(24, rows * 0.42), dpi=80, layout="constrained")
    grid = fig.add_gridspec(rows, 24)
    span = time.strftime("%Y-%m-%d %H:%M", time.gmtime(window.start))
    span += time.strftime(" - %H:%M UTC", time.gmtime(window.end))
    fig.suptitle(f"{dashboard['title']}  ({span})", fontsize=16)
    results = []
    for panel in panels:
        pos = panel["gridPos"]
        ax = fig.add_subplot(grid[pos["y"] : pos["y"] + pos["h"], pos["x"] : pos["x"] + pos["w"]])
        result = PanelResult(panel.get("title", ""), panel["type"])
        results.append(result)
        if panel["type"] == "row":
            ax.axis("off")
            ax.text(0, 0.5, panel["title"], fontsize=15, fontweight="bold", va="center")
            continue
        ax.set_title(panel["title"], fontsize=11, loc="left")
        if panel["type"] not in DRAWN:
            ax.set_xticks([])
            ax.set_yticks([])
            ax.text(0.5, 0.5, f"({panel['type']}: not drawn)", ha="center", va="center",
                    transform=ax.transAxes, color="grey")  # fmt: skip
            continue
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        try:
            if panel["type"] in ("timeseries", "state-timeline"):
                result.series = _timeseries(ax, panel, prometheus, window, unit)
            else:
                result.series = _values(ax, panel, prometheus, window, unit)
        except (RuntimeError, KeyError, urllib.error.URLError) as e:
            result.error = str(e)
            ax.text(0.5, 0.5, f"error: {e}"[:120], ha="center", va="center", wrap=True,
                    transform=ax.transAxes, color="red")  # fmt: skip
        if not result.series and not result.error:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes,
                    color="grey")  # fmt: skip
    fig.savefig(out)
    return results


def _timeseries(ax: Any, panel: dict[str, Any], prom: Prometheus, w: Window, unit: str) -> int:
    """Lines; a state timeline as steps, its value mappings (state names) on the y axis."""
    span = w.end - w.start
    scale, scale_name = next((s, n) for s, n in ((1, "seconds"), (60, "minutes"), (3600, "hours"))
                             if span / s <= 600)  # fmt: skip
    steps = panel["type"] == "state-timeline"
    drawn = 0
    for target in panel["targets"]:
        for s in prom.range(w.substitute(target["expr"]), w):
            xs = [(float(t) - w.end) / scale for t, _ in s["values"]]
            ys = [float(v) for _, v in s["values"]]
            name = legend(target.get("legendFormat", ""), s["metric"])
            style = {"linewidth": 2, "drawstyle": "steps-post"} if steps else {"linewidth": 1.2}
            ax.plot(xs, ys, label=name, **style)
            drawn += 1
    ax.set_xlim(-span / scale, 0)
    ax.set_xlabel(f"{scale_name} before the end", fontsize=8)
    if steps:
        mappings = panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", [])
        names = {float(k): v["text"] for m in mappings for k, v in m.get("options", {}).items()}
        ax.set_yticks(sorted(names), [names[k] for k in sorted(names)])
        ax.set_ylim(min(names, default=0) - 0.5, max(names, default=1) + 0.5)
    elif unit:
        ax.set_ylabel(unit, fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7, loc="upper left", ncol=2 if drawn > 6 else 1)
    return drawn


def _values(ax: Any, panel: dict[str, Any], prom: Prometheus, w: Window, unit: str) -> int:
    """A stat panel's last values as big numbers, a bar gauge's as horizontal bars."""
    values: list[tuple[str, float]] = []
    for target in panel["targets"]:
        for s in prom.instant(w.substitute(target["expr"]), w.end):
            label = legend(target.get("legendFormat", ""), s["metric"])
            values.append((label, float(s["value"][1])))
    ax.set_xticks([])
    ax.set_yticks([])
    if panel["type"] == "bargauge" and values:
        ax.barh([n for n, _ in values], [v for _, v in values], color="tab:orange")
        ax.set_yticks(range(len(values)), [n for n, _ in values], fontsize=8)
        ax.invert_yaxis()
        for i, (_, v) in enumerate(values):
            ax.text(v, i, f" {human(v, unit)}", va="center", fontsize=8)
    else:
        text_mode = panel.get("options", {}).get("textMode", "auto")
        for i, (name, v) in enumerate(values[:4]):
            y = 1 - (i + 0.5) / min(len(values), 4)
            shown = name if text_mode == "name" else human(v, unit)
            ax.text(0.5, y, shown, ha="center", va="center", fontsize=20, fontweight="bold",
                    transform=ax.transAxes, color="tab:green")  # fmt: skip
            if len(values) > 1 and text_mode != "name":
                ax.text(0.5, y - 0.22 / len(values[:4]), name, ha="center", va="center",
                        fontsize=8, transform=ax.transAxes)  # fmt: skip
    return len(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dashboard", type=Path, help="a dashboard JSON (Grafana's classic model)")
    parser.add_argument("--prometheus", required=True, help="the Prometheus' URL")
    parser.add_argument("--from", dest="start", default="now-1h", help="now-DURATION or unix s")
    parser.add_argument("--to", dest="end", default="now", help="now, now-DURATION or unix s")
    parser.add_argument("--group", action="append", default=[], help="$group (repeatable)")
    parser.add_argument("--namespace", action="append", default=[], help="$namespace")
    parser.add_argument("--scrape-interval", default="15s", help="the datasource's (15s)")
    parser.add_argument("--out", type=Path, default=None, help="PNG (default: <dashboard>.png)")
    parser.add_argument("--require-data", action="store_true",
                        help="exit 1 when a drawn panel has no data")  # fmt: skip
    args = parser.parse_args(argv)
    now = time.time()
    window = Window(when(args.start, now), when(args.end, now), seconds(args.scrape_interval),
                    variables={"group": regex_of(args.group),
                               "namespace": regex_of(args.namespace)})  # fmt: skip
    out = args.out or Path(args.dashboard.stem + ".png")
    dashboard = json.loads(args.dashboard.read_text())
    results = render(dashboard, Prometheus(args.prometheus), window, out)
    for r in results:
        if r.type != "row":
            state = "error" if r.error else ("ok" if r.series else "empty")
            print(f"{state:5} {r.type:14} {r.title} ({r.series} series) {r.error}".rstrip())
    print(f"wrote {out}")
    empty = args.require_data and any(not r.series for r in results if r.type in DRAWN)
    return 1 if empty or any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
