"""The soak's curve as a small SVG (drawn here, no plotting library), converted to PNG by
ImageMagick's `convert` when it is installed (it is in the test packages of scripts/setup.sh)."""

import os
import shutil
import subprocess
import tempfile

W, H = 760, 520
LEFT, RIGHT = 70, 20


def _nice(v):
    """The next round number at or above `v` that splits into four round ticks."""
    for m in (4, 8, 12, 20, 40, 60, 80, 100, 120, 160, 200, 400, 800, 1200, 2000, 4000):
        if v <= m:
            return m
    return v


def _panel(out, top, height, samples, series, unit, x_max, warmup, heading):
    """One chart: `series` = [(key, scale, colour, label)]."""
    values = [s[k] / f for k, f, _, _ in series for s in samples]
    y_max = _nice(max(values) * 1.1 if values else 1)
    left, right, bottom = LEFT, W - RIGHT, top + height

    def x(v):
        return left + (right - left) * v / x_max

    def y(v):
        return bottom - height * v / y_max

    out.append(f'<text x="{left}" y="{top - 8}" font-size="13" font-weight="bold">{heading}</text>')
    legend_x = right
    for key, f, colour, label in reversed(series):
        out.append(f'<text x="{legend_x}" y="{top - 8}" font-size="11" fill="{colour}" text-anchor="end">■ {label}</text>')
        legend_x -= 24 + 7 * len(label)
    out.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{height}" fill="none" stroke="#999"/>')
    for i in range(5):
        v = y_max * i / 4
        out.append(f'<line x1="{left}" x2="{right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end">{v:.0f}</text>')
    out.append(f'<text x="14" y="{top + height / 2:.0f}" font-size="11" transform="rotate(-90 14 {top + height / 2:.0f})" '
               f'text-anchor="middle">{unit}</text>')
    step = 30 if x_max > 90 else 10 if x_max > 20 else 2
    for m in range(0, int(x_max) + 1, step):
        out.append(f'<text x="{x(m):.1f}" y="{bottom + 14}" font-size="11" text-anchor="middle">{m}</text>')
    out.append(f'<line x1="{x(warmup):.1f}" x2="{x(warmup):.1f}" y1="{top}" y2="{bottom}" stroke="#c66" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{x(warmup) + 4:.1f}" y="{top + 12}" font-size="10" fill="#c66">warm-up</text>')
    for key, f, colour, _ in series:
        pts = " ".join(f"{x(s['minute']):.1f},{y(s[key] / f):.1f}" for s in samples)
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.6"/>')


def plot(samples, prefix, warmup, title):
    """Writes `prefix.svg` (and `prefix.png` when `convert` exists); returns the PNG path or None."""
    if not samples:
        return None
    x_max = max(s["minute"] for s in samples) or 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="DejaVu Sans, sans-serif">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" font-size="14" text-anchor="middle">StageWhisper soak: {title}</text>']
    _panel(out, 50, 180, samples,
           [("VmRSS", 1024, "#1f6fb4", "RSS"), ("RssAnon", 1024, "#6aa84f", "anonymous RSS")],
           "MiB", x_max, warmup, "memory")
    _panel(out, 290, 180, samples,
           [("fds", 1, "#b45f06", "open file descriptors"), ("Threads", 1, "#674ea7", "threads")],
           "count", x_max, warmup, "descriptors and threads")
    out.append(f'<text x="{W / 2}" y="{H - 8}" font-size="11" text-anchor="middle">call-minute (sampled every minute)</text>')
    out.append("</svg>")
    svg = prefix + ".svg"
    with open(svg, "w") as f:
        f.write("\n".join(out))
    png = os.path.abspath(prefix + ".png")
    if os.path.exists(png):
        os.remove(png)
    # Chromium renders SVG faithfully (ImageMagick 6 needs a delegate for it, often missing).
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        with tempfile.TemporaryDirectory(prefix="sw-plot-") as profile:
            subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            f"--user-data-dir={profile}", f"--window-size={W},{H}", f"--screenshot={png}",
                            "file://" + os.path.abspath(svg)], capture_output=True, timeout=60)
    if not os.path.exists(png) and shutil.which("convert"):
        subprocess.run(["convert", svg, png], capture_output=True, timeout=60)
    return png if os.path.exists(png) else None


if __name__ == "__main__":
    # Re-draws a run's plot from its CSV: plot.py PREFIX WARMUP TITLE
    import csv
    import sys

    prefix, warmup, title = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    with open(prefix + ".csv") as f:
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    print(plot(rows, prefix, warmup, title) or prefix + ".svg")
