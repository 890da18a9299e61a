"""The failover chart: bandwidth over one failover, stacked by traffic kind, with the link
and each tier's per-pod egress limit drawn. Hand-written SVG with fixed number formatting,
so the same plan gives the same bytes (it lives in out/)."""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape

from compiler import units
from compiler.failover import CONNECTIONS, HEALTH, WEIGHTS, FailoverPlan

WIDTH, HEIGHT = 820, 390
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 56, 84
MIN_PHASE = 0.16  # share of the plot width a phase gets at least, so short ones show
COLORS = {HEALTH: "#4e79a7", CONNECTIONS: "#f28e2b", WEIGHTS: "#59a14f"}
LIMIT_COLORS = {"hot": "#b07aa1", "warm": "#9c755f", "cold": "#bab0ac"}


def _f(x: float) -> str:
    return f"{x:.1f}"


def _text(x: float, y: float, body: str, **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    return f'<text x="{_f(x)}" y="{_f(y)}"{extra}>{escape(body)}</text>'


def _rect(x: float, y: float, w: float, h: float, fill: str) -> str:
    return f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(w)}" height="{_f(h)}" fill="{fill}"/>'


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str, *, dash: str = "") -> str:
    dashes = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" stroke="{stroke}"{dashes}/>'
    )


def _widths(seconds: Sequence[float], plot: float) -> list[float]:
    total = sum(seconds) or 1.0
    raw = [max(s / total, MIN_PHASE) for s in seconds]
    scale = plot / sum(raw)
    return [r * scale for r in raw]


def render(plan: FailoverPlan, *, title: str, link_bps: float, tier_egress: dict[str, int]) -> str:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    health = next((p.peak_bps for p in plan.phases if p.kind == HEALTH), 0.0)
    top = max([link_bps, *(p.peak_bps + health for p in plan.phases)]) * 1.08

    def y(bps: float) -> float:
        return TOP + plot_h * (1 - bps / top)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        _text(LEFT, 22, title, font_size="15", font_weight="bold"),
        _text(LEFT, 40, plan.verdict(), fill="#333333"),
    ]
    step = _nice_step(top / 4)
    tick = 0.0
    while tick <= top:
        out.append(_line(LEFT, y(tick), LEFT + plot_w, y(tick), "#e6e6e6"))
        out.append(_text(LEFT - 6, y(tick) + 4, units.human_bits(tick), text_anchor="end"))
        tick += step
    x = float(LEFT)
    widths = _widths([p.seconds for p in plan.phases], plot_w)
    for phase, w in zip(plan.phases, widths, strict=True):
        base = 0.0
        own = phase.peak_bps if phase.kind not in (None, HEALTH) else 0.0
        for kind, bps in ((HEALTH, health), (phase.kind, own)):
            if kind is not None and bps > 0:
                out.append(_rect(x, y(base + bps), w, y(base) - y(base + bps), COLORS[kind]))
                base += bps
        out.append(_line(x, TOP, x, TOP + plot_h, "#999999", dash="2,3"))
        lines = phase.name.split(" ", 1) if len(phase.name) > 8 else [phase.name]
        for n, line in enumerate([*lines, units.human_seconds(phase.seconds)]):
            out.append(_text(x + w / 2, TOP + plot_h + 16 + 13 * n, line, text_anchor="middle"))
        if phase.peak_bps > 0:
            peak = units.human_bits(phase.peak_bps)
            out.append(_text(x + w / 2, y(base) - 5, peak, text_anchor="middle", font_size="11"))
        x += w
    out.append(_line(LEFT, TOP, LEFT, TOP + plot_h, "#333333"))
    out.append(_line(LEFT, TOP + plot_h, LEFT + plot_w, TOP + plot_h, "#333333"))
    limits = [("link", float(link_bps), "#e15759")] + [
        (f"{t} pod limit", float(bps), LIMIT_COLORS.get(t, "#888888"))
        for t, bps in sorted(tier_egress.items(), key=lambda kv: -kv[1])
    ]
    label_y = 0.0
    for label, bps, color in limits:  # from the top down; labels kept 13 px apart
        out.append(_line(LEFT, y(bps), LEFT + plot_w, y(bps), color, dash="6,4"))
        label_y = max(y(bps) + 4, label_y + 13)
        out.append(
            _text(LEFT + plot_w + 6, label_y, f"{label} {units.human_bits(bps)}", fill=color)
        )
    legend_y = HEIGHT - 18
    lx = float(LEFT)
    for kind, color in COLORS.items():
        out.append(_rect(lx, legend_y - 10, 12, 12, color))
        out.append(_text(lx + 16, legend_y, kind))
        lx += 40 + 7 * len(kind)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _nice_step(raw: float) -> float:
    """1, 2, 2.5 or 5 times a power of ten, at least ``raw``."""
    if raw <= 0:
        return 1.0
    magnitude = 10.0 ** (len(str(int(raw))) - 1)
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if raw <= m * magnitude:
            return m * magnitude
    return 10.0 * magnitude
