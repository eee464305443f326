#!/usr/bin/env python3
"""Builds a self-contained HTML page approximating a Grafana dashboard from real data.

Input: the JSON that tests/tests/t96_dashboards.rs writes when STATESTORE_DASHBOARD_RENDER is
set (every panel's gridPos, type, unit, thresholds and mappings, and each query's query_range
result from the live Prometheus). Output: an HTML page with uPlot inlined, which
scripts/render-dashboard.sh screenshots with headless chromium. This is not Grafana's
renderer: it shows that the queries return plausible data in the dashboard's layout.

    render_page.py DATA.json UPLOT_DIR OUT.html
"""

import html
import json
import re
import sys
from pathlib import Path

COLORS = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0",
          "#508642", "#cca300", "#447ebc", "#c15c17", "#890f02", "#0a437c", "#6d1f62", "#584477"]
NAMED = {"green": "#56a64b", "yellow": "#f2cc0c", "orange": "#ff9830", "red": "#e02f44", "blue": "#3274d9"}
CELL_W, CELL_H = 1560 / 24, 32


def legend(fmt, labels):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: str(labels.get(m.group(1), "")), fmt).strip() or "value"


def threshold_color(value, thresholds):
    color = "green"
    for step in thresholds.get("steps", []):
        if step["value"] is None or (value is not None and value >= step["value"]):
            color = step["color"]
    return NAMED.get(color, color)


def fmt_value(value, unit):
    if value is None:
        return "no data"
    if unit == "percentunit":
        return f"{value * 100:.1f}%"
    if unit == "bytes":
        for suffix in ["B", "KiB", "MiB", "GiB", "TiB"]:
            if abs(value) < 1024:
                return f"{value:.1f} {suffix}"
            value /= 1024
    if unit == "s":
        return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "reqps":
        return f"{value:.1f} req/s"
    return f"{value:g}" if abs(value) < 1e6 else f"{value:.3g}"


def main():
    data = json.loads(Path(sys.argv[1]).read_text())
    uplot = Path(sys.argv[2])
    out = Path(sys.argv[3])
    start, end = data["start"], data["end"]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in data["panels"]) * CELL_H + 60
    boxes, scripts = [], []
    for n, panel in enumerate(data["panels"]):
        g = panel["gridPos"]
        style = (f"left:{g['x'] * CELL_W + 8:.0f}px;top:{g['y'] * CELL_H + 48:.0f}px;"
                 f"width:{g['w'] * CELL_W - 6:.0f}px;height:{g['h'] * CELL_H - 6:.0f}px")
        title = html.escape(panel["title"])
        if panel["type"] in ("stat", "gauge"):
            cells = []
            for target in panel["targets"]:
                for series in target["result"]:
                    last = series["values"][-1] if series["values"] else None
                    value = None if last is None else float(last[1])
                    text = fmt_value(value, panel["unit"])
                    for mapping in panel.get("mappings", []):
                        hit = mapping.get("options", {}).get(f"{value:g}" if value is not None else "")
                        if hit:
                            text = hit["text"]
                    name = legend(target["legend"], series["metric"])
                    color = threshold_color(value, panel["thresholds"])
                    cells.append(f'<div class="cell" style="background:{color}"><div class="v">{html.escape(text)}'
                                 f'</div><div class="n">{html.escape(name)}</div></div>')
            boxes.append(f'<div class="panel" style="{style}"><div class="t">{title}</div>'
                         f'<div class="cells">{"".join(cells) or "no data"}</div></div>')
            continue
        log = (panel.get("custom") or {}).get("scaleDistribution", {}).get("type") == "log"
        xs = list(range(int(start), int(end) + 1, int(data["step"])))
        series_js, values_js = [], [xs]
        # Legend sorted by each series' maximum, descending (as the Grafana legend is).
        ordered = [(target, series) for target in panel["targets"] for series in target["result"]]
        ordered.sort(key=lambda ts: -max([float(v) for _, v in ts[1]["values"] if float(v) == float(v)] or [0]))
        for target, series in ordered:
            points = {int(float(t)): float(v) for t, v in series["values"]}
            # NaN (no data) and, on a log scale, zero are drawn as gaps.
            values_js.append([points[x] if x in points and points[x] == points[x]
                              and (points[x] > 0 or not log) else None for x in xs])
            color = COLORS[(len(series_js)) % len(COLORS)]
            series_js.append({"label": legend(target["legend"], series["metric"]), "stroke": color,
                              "width": 1.5})
        boxes.append(f'<div class="panel" style="{style}"><div class="t">{title}</div><div id="p{n}"></div></div>')
        scripts.append(
            f"mk('p{n}', {json.dumps(series_js)}, {json.dumps(values_js)}, {json.dumps(panel['unit'])},"
            f" {g['w'] * CELL_W - 18:.0f}, {g['h'] * CELL_H - 76:.0f}, {json.dumps(log)});")
    marks = json.dumps(data.get("marks", []))
    page = f"""<!doctype html><html><head><meta charset="utf-8"><style>
{(uplot / 'uPlot.min.css').read_text()}
body{{margin:0;background:#111217;color:#ccccdc;font:12px sans-serif;width:1580px;height:{height:.0f}px;position:relative}}
h1{{font-size:16px;margin:0;padding:12px 10px;font-weight:500}}
.panel{{position:absolute;background:#181b1f;border:1px solid #2c3235;border-radius:2px;overflow:hidden}}
.t{{padding:4px 8px;font-weight:500}}
.cells{{display:flex;gap:4px;padding:4px;height:calc(100% - 30px)}}
.cell{{flex:1;border-radius:2px;display:flex;flex-direction:column;justify-content:center;align-items:center;color:#fff}}
.v{{font-size:22px;font-weight:600}} .n{{font-size:10px;opacity:.85}}
.u-legend{{font-size:10px;color:#ccccdc;max-height:40px;overflow:hidden;text-align:left}} .u-legend .u-series{{padding:0 4px}} .u-legend th{{font-weight:400}}
</style><script>{(uplot / 'uPlot.iife.min.js').read_text()}</script></head><body>
<h1>{html.escape(data['title'])} <span style="font-size:11px;opacity:.6">{html.escape(data['caption'])}</span></h1>
{''.join(boxes)}
<script>
const marks = {marks};
function si(v, base, units) {{
  let i = 0; while (Math.abs(v) >= base && i < units.length - 1) {{ v /= base; i++; }}
  return +v.toFixed(1) + units[i];
}}
function fmt(unit, log) {{
  return (self, ticks) => ticks.map(v => v == null || (log && Math.abs(Math.log10(v) % 1) > 1e-9) ? ''
    : unit == 's' ? (v >= 1 ? +v.toFixed(2) + 's' : (v * 1000).toFixed(0) + 'ms')
    : unit == 'bytes' ? si(v, 1024, ['B', 'KiB', 'MiB', 'GiB', 'TiB'])
    : unit == 'reqps' ? v.toFixed(0) + '/s' : si(v, 1000, ['', 'k', 'M', 'G']));
}}
function mk(id, series, data, unit, w, h, log) {{
  new uPlot({{width: w, height: h, legend: {{show: true, live: false}},
    scales: {{y: log ? {{distr: 3}} : {{}}}},
    series: [{{}}].concat(series),
    axes: [{{stroke: '#999', grid: {{stroke: '#2c3235'}}}}, {{stroke: '#999', grid: {{stroke: '#2c3235'}}, size: 52, values: fmt(unit, log)}}],
    hooks: {{draw: [u => {{ const c = u.ctx; c.save(); c.strokeStyle = '#e02f44'; c.setLineDash([4, 3]);
      for (const m of marks) {{ const x = u.valToPos(m, 'x', true); c.beginPath(); c.moveTo(x, u.bbox.top);
        c.lineTo(x, u.bbox.top + u.bbox.height); c.stroke(); }} c.restore(); }}]}}
  }}, data, document.getElementById(id));
}}
{chr(10).join(scripts)}
</script></body></html>"""
    out.write_text(page)


if __name__ == "__main__":
    main()
