"""Small SVG plots for the pages the commands write (``report``, ``tune``), and the units their
labels use (:mod:`lakecluster.sizes`). No plotting library: the pages open offline and the package
needs nothing more. Every function takes numbers already computed and returns markup."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

WIDTH, HEIGHT, PAD = 720, 260, 48
BLUE, ORANGE, RED, GREEN = "#4c78a8", "#f58518", "#e45756", "#54a24b"


def size_label(up_to: int | None) -> str:
    """A histogram bucket's label: ``≤64KiB``, ``≤1GiB``; ``more`` for the open one."""
    if up_to is None:
        return "more"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if up_to >= scale:
            return f"≤{up_to // scale}{unit}"
    return f"≤{up_to}B"


def svg(body: str, title: str, height: float = HEIGHT, *, background: bool = True) -> str:
    """A plot of ``WIDTH`` x ``height`` (on white unless ``background`` is off), labelled
    ``title`` for screen readers."""
    white = '<rect width="100%" height="100%" fill="#fff"/>' if background else ""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
            f'viewBox="0 0 {WIDTH} {height:.0f}" role="img" aria-label="{html.escape(title)}">'
            f'{white}{body}</svg>')  # fmt: skip


def axes(height: float, x_label: str, y_label: str) -> str:
    bottom = height - PAD
    return (f'<line x1="{PAD}" y1="{bottom}" x2="{WIDTH - 10}" y2="{bottom}" stroke="#333"/>'
            f'<line x1="{PAD}" y1="10" x2="{PAD}" y2="{bottom}" stroke="#333"/>'
            f'<text x="{WIDTH / 2}" y="{height - 10}" text-anchor="middle" font-size="12">{html.escape(x_label)}</text>'
            f'<text x="12" y="{height / 2}" font-size="12" transform="rotate(-90 12 {height / 2})" '
            f'text-anchor="middle">{html.escape(y_label)}</text>')  # fmt: skip


def bars(labels: Sequence[str], values: Sequence[float], title: str, y_label: str, color: str = BLUE) -> str:
    """Vertical bars with their value above and their label below."""
    if not values:
        return "<p>no data</p>"
    top = max(values) or 1
    plot_w, plot_h = WIDTH - PAD - 20, HEIGHT - 2 * PAD + 10
    w = plot_w / len(values)
    body = [axes(HEIGHT, "", y_label)]
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        h = plot_h * v / top
        x, y = PAD + i * w + 2, HEIGHT - PAD - h
        body.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w - 4, 1):.1f}" height="{h:.1f}" fill="{color}">'
                    f'<title>{html.escape(label)}: {v:,.1f}</title></rect>'
                    f'<text x="{x + w / 2 - 2:.1f}" y="{HEIGHT - PAD + 14}" font-size="10" text-anchor="middle">'
                    f'{html.escape(label)}</text>'
                    f'<text x="{x + w / 2 - 2:.1f}" y="{y - 3:.1f}" font-size="10" '
                    f'text-anchor="middle">{v:,.0f}</text>')
    return svg("".join(body), title)


def hbars(labels: Sequence[str], values: Sequence[float], highlighted: Sequence[bool], title: str,
          unit: str = "") -> str:  # fmt: skip
    """Horizontal bars, one per label, the highlighted ones red; ``unit`` follows the value in the
    tooltip. No background: the page's own shows through (one ``<rect>`` per bar)."""
    top = max(values, default=1.0) or 1.0
    bar_h = 18
    height = PAD + bar_h * len(values) + 20
    body = []
    for i, (label, v, hot) in enumerate(zip(labels, values, highlighted, strict=True)):
        y = PAD / 2 + i * bar_h
        w = (WIDTH - 2 * PAD - 220) * v / top
        body.append(f'<text x="4" y="{y + 13:.0f}" font-size="11">{html.escape(label)[:40]}</text>'
                    f'<rect x="260" y="{y + 2:.0f}" width="{max(w, 1):.1f}" height="{bar_h - 4}" '
                    f'fill="{RED if hot else BLUE}"><title>{html.escape(label)}: {v:,.1f}{unit}</title></rect>'
                    f'<text x="{264 + w:.0f}" y="{y + 13:.0f}" font-size="11">{v:,.1f}</text>')  # fmt: skip
    return svg("".join(body), title, height, background=False)


def ranges(segments: Sequence[tuple[float, float]], title: str, x_label: str, y_label: str) -> str:
    """One horizontal bar per segment from its start to its end, in 0..1 coordinates, stacked."""
    height = 300
    plot_w, plot_h = WIDTH - PAD - 20, height - 2 * PAD + 10
    row = plot_h / max(len(segments), 1)
    body = [axes(height, x_label, y_label)]
    for i, (lo, hi) in enumerate(segments):
        x = PAD + lo * plot_w
        body.append(f'<rect x="{x:.1f}" y="{10 + i * row:.2f}" width="{max((hi - lo) * plot_w, 1):.1f}" '
                    f'height="{max(row, 0.5):.2f}" fill="{RED}" fill-opacity="0.8"/>')  # fmt: skip
    return svg("".join(body), title, height)


def lines(xs: Sequence[float], series: Mapping[str, tuple[Sequence[float], str]], title: str, x_label: str,
          y_label: str, *, dots: str | None = None) -> str:  # fmt: skip
    """Lines over ``xs`` (each series: its values and colour, named in a legend); ``dots`` marks the
    points of one series."""
    span = max(xs[-1] - xs[0], 1.0)
    top = max((max(v) for v, _ in series.values()), default=1.0) or 1.0
    plot_w, plot_h = WIDTH - PAD - 20, HEIGHT - 2 * PAD + 10

    def points(values: Sequence[float]) -> list[tuple[float, float]]:
        return [(PAD + (x - xs[0]) / span * plot_w, HEIGHT - PAD - v / top * plot_h)
                for x, v in zip(xs, values, strict=True)]  # fmt: skip

    body = [axes(HEIGHT, x_label, y_label)]
    for values, colour in series.values():
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points(values))
        body.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
    if dots is not None:
        values, colour = series[dots]
        body += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in points(values)]
    for i, (name, (_, colour)) in enumerate(series.items()):
        body.append(f'<text x="{PAD + 10}" y="{24 + 16 * i}" font-size="12" fill="{colour}">{html.escape(name)}</text>')
    return svg("".join(body), title)


def scatter(points: Sequence[tuple[float, float, str, bool]], title: str, x_label: str, y_label: str) -> str:
    """Dots at (x, y) with a tooltip each; highlighted ones red."""
    x_top = max((p[0] for p in points), default=1.0) or 1.0
    y_top = max((p[1] for p in points), default=1.0) or 1.0
    plot_w, plot_h = WIDTH - PAD - 20, HEIGHT - 2 * PAD + 10
    dots = []
    for x, y, label, hot in points:
        cx, cy = PAD + x / x_top * plot_w * 0.95, HEIGHT - PAD - y / y_top * plot_h * 0.95
        dots.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{RED if hot else BLUE}">'
                    f'<title>{html.escape(label)}</title></circle>')  # fmt: skip
    return svg(axes(HEIGHT, x_label, y_label) + "".join(dots), title)
