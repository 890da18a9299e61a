"""The failover chart: bandwidth over one failover, stacked by traffic kind, on a time axis
in proportion (a phase's width is its time), with the objective (failover.rto) marked and
the link and each tier's per-pod egress limit drawn. Hand-written SVG with fixed number
formatting, so the same plan gives the same bytes (it lives in out/).

When every phase's traffic is a sliver of the link (a tier that is already current moves
only health checks and handshakes), the bandwidth axis is scaled to the traffic and the
limits above it are named instead of drawn: at the link's scale nothing would show."""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape

from compiler import units
from compiler.failover import CONNECTIONS, HEALTH, WEIGHTS, FailoverPlan, Phase

WIDTH, HEIGHT = 820, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 56, 114
COLORS = {HEALTH: "#4e79a7", CONNECTIONS: "#f28e2b", WEIGHTS: "#59a14f"}
LIMIT_COLORS = {"hot": "#b07aa1", "warm": "#9c755f", "cold": "#bab0ac"}
MET, MISSED = "#2e7d32", "#e15759"
ZOOM_BELOW = 0.05  # traffic under this share of the link is drawn on its own scale
MIN_BAR = 1.5  # px: traffic that is there is drawn, however small
CHAR = 6.2  # px per character of 11 px text, to keep labels apart
LABEL_ROWS = 4


def _f(x: float) -> str:
    return f"{x:.1f}"


def _text(x: float, y: float, body: str, **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    return f'<text x="{_f(x)}" y="{_f(y)}"{extra}>{escape(body)}</text>'


def _rect(x: float, y: float, w: float, h: float, fill: str) -> str:
    return f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(w)}" height="{_f(h)}" fill="{fill}"/>'


def _line(
    x1: float, y1: float, x2: float, y2: float, stroke: str, *, dash: str = "", width: str = ""
) -> str:
    dashes = f' stroke-dasharray="{dash}"' if dash else ""
    thick = f' stroke-width="{width}"' if width else ""
    return (
        f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" '
        f'stroke="{stroke}"{dashes}{thick}/>'
    )


@dataclass(frozen=True)
class _Scale:
    """Seconds to x and bit/s to y over the plot area."""

    span_s: float  # the time axis: the failover, or the objective when it is longer
    top_bps: float  # the bandwidth axis
    zoomed: bool  # the traffic's own scale, the link far above it

    @property
    def width(self) -> float:
        return WIDTH - LEFT - RIGHT

    @property
    def height(self) -> float:
        return HEIGHT - TOP - BOTTOM

    def x(self, seconds: float) -> float:
        return LEFT + self.width * seconds / self.span_s

    def y(self, bps: float) -> float:
        return TOP + self.height * (1 - bps / self.top_bps)


def _stack(phase: Phase, health: float) -> list[tuple[str, float]]:
    """What a phase sends, bottom up: the health checks, which run throughout, then its own."""
    own = phase.peak_bps if phase.kind not in (None, HEALTH) else 0.0
    return [(k, b) for k, b in ((HEALTH, health), (phase.kind, own)) if k is not None and b > 0]


def _scale(plan: FailoverPlan, link_bps: float) -> _Scale:
    health = next((p.peak_bps for p in plan.phases if p.kind == HEALTH), 0.0)
    peak = max([0.0, *(sum(b for _, b in _stack(p, health)) for p in plan.phases)])
    rto = (plan.rto_ms or 0) / 1000
    span = max(plan.seconds, rto) or 1.0
    if 0 < peak < ZOOM_BELOW * link_bps:
        return _Scale(span, peak * 1.3, True)
    return _Scale(span, max(link_bps, peak) * 1.08, False)


def _y_axis(s: _Scale) -> list[str]:
    out = []
    step = _nice_step(s.top_bps / 4)
    tick = 0.0
    while tick <= s.top_bps:
        out.append(_line(LEFT, s.y(tick), LEFT + s.width, s.y(tick), "#e6e6e6"))
        out.append(_text(LEFT - 6, s.y(tick) + 4, units.human_bits(tick), text_anchor="end"))
        tick += step
    return out


def _bars(s: _Scale, plan: FailoverPlan) -> list[str]:
    health = next((p.peak_bps for p in plan.phases if p.kind == HEALTH), 0.0)
    out = []
    start = 0.0
    for phase in plan.phases:
        x, w = s.x(start), s.x(start + phase.seconds) - s.x(start)
        base_y, level = s.y(0), 0.0
        for kind, bps in _stack(phase, health):
            h = max(s.y(level) - s.y(level + bps), MIN_BAR)
            out.append(_rect(x, base_y - h, max(w, MIN_BAR * 2), h, COLORS[kind]))
            base_y, level = base_y - h, level + bps
        if start > 0:
            out.append(_line(x, TOP, x, TOP + s.height, "#999999", dash="2,3"))
        if phase.peak_bps > 0:  # beside a phase too short to hold its number
            peak = units.human_bits(phase.peak_bps)
            wide = w >= CHAR * (len(peak) + 2)
            at = x + w / 2 if wide else x + max(w, MIN_BAR * 2) + 3
            anchor = "middle" if wide else "start"
            out.append(_text(at, base_y - 5, peak, text_anchor=anchor, font_size="11"))
        start += phase.seconds
    return out


def _time_axis(s: _Scale, plan: FailoverPlan) -> list[str]:
    """Seconds along the bottom, then each phase named under where it runs, on as many rows
    as keep the names apart (a phase of a few milliseconds still gets its name)."""
    base = TOP + s.height
    out = [_line(LEFT, base, LEFT + s.width, base, "#333333")]
    minutes = s.span_s >= 600  # one unit along the whole axis
    step = _nice_step(s.span_s / (60 if minutes else 1) / 6) * (60 if minutes else 1)
    tick = 0.0
    while tick <= s.span_s + 1e-9:
        label = f"{tick / 60:g} min" if minutes else f"{tick:g} s"
        out.append(_line(s.x(tick), base, s.x(tick), base + 4, "#333333"))
        out.append(_text(s.x(tick), base + 15, label, text_anchor="middle"))
        tick += step
    ends = [float("-inf")] * LABEL_ROWS
    start = 0.0
    for phase in plan.phases:
        label = f"{phase.name} {units.human_seconds(phase.seconds)}"
        half = len(label) * CHAR / 2
        mid = min(max(s.x(start + phase.seconds / 2), LEFT + half), LEFT + s.width - half)
        row = next((r for r, end in enumerate(ends) if end < mid - half), LABEL_ROWS - 1)
        ends[row] = mid + half + CHAR
        y = base + 32 + 13 * row
        out.append(_line(s.x(start + phase.seconds / 2), base, mid, y - 10, "#bbbbbb"))
        out.append(_text(mid, y, label, text_anchor="middle", font_size="11"))
        start += phase.seconds
    out.append(_line(LEFT, TOP, LEFT, base, "#333333"))
    return out


def _limits(s: _Scale, link_bps: float, tier_egress: dict[str, int]) -> list[str]:
    limits = [("link", float(link_bps), "#e15759")] + [
        (f"{t} pod limit", float(bps), LIMIT_COLORS.get(t, "#888888"))
        for t, bps in sorted(tier_egress.items(), key=lambda kv: -kv[1])
    ]
    out = []
    label_y = 0.0
    above = [f"{label} {units.human_bits(bps)}" for label, bps, _ in limits if bps > s.top_bps]
    if above:  # at the traffic's scale, the limits would be far above the plot
        out.append(_text(LEFT + s.width + 6, TOP + 4, "above this scale:", fill="#555555"))
        label_y = TOP + 4
        for line in above:
            label_y += 13
            out.append(_text(LEFT + s.width + 6, label_y, line, fill="#555555"))
    for label, bps, color in limits:  # from the top down; labels kept 13 px apart
        if bps > s.top_bps:
            continue
        out.append(_line(LEFT, s.y(bps), LEFT + s.width, s.y(bps), color, dash="6,4"))
        label_y = max(s.y(bps) + 4, label_y + 13)
        out.append(
            _text(LEFT + s.width + 6, label_y, f"{label} {units.human_bits(bps)}", fill=color)
        )
    return out


def _objective(s: _Scale, plan: FailoverPlan) -> list[str]:
    if plan.rto_ms is None:
        return []
    x = s.x(plan.rto_ms / 1000)
    color = MET if plan.met else MISSED
    label = f"failover.rto {units.prom_duration(plan.rto_ms)}"
    anchor = "end" if x + len(label) * CHAR > LEFT + s.width + RIGHT - 4 else "start"
    return [
        _line(x, TOP - 6, x, TOP + s.height, color, dash="5,3", width="2"),
        _text(x + (-4 if anchor == "end" else 4), TOP - 8, label, fill=color, text_anchor=anchor),
    ]


def render(plan: FailoverPlan, *, title: str, link_bps: float, tier_egress: dict[str, int]) -> str:
    s = _scale(plan, link_bps)
    verdict = plan.verdict() + (" (bandwidth axis scaled to the traffic)" if s.zoomed else "")
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        _text(LEFT, 22, title, font_size="15", font_weight="bold"),
        _text(LEFT, 40, verdict, fill="#333333"),
        *_y_axis(s),
        *_bars(s, plan),
        *_time_axis(s, plan),
        *_limits(s, link_bps, tier_egress),
        *_objective(s, plan),
        *_legend(),
        "</svg>",
    ]
    return "\n".join(out) + "\n"


def _legend() -> list[str]:
    out = []
    legend_y = HEIGHT - 14
    lx = float(LEFT)
    for kind, color in COLORS.items():
        out.append(_rect(lx, legend_y - 10, 12, 12, color))
        out.append(_text(lx + 16, legend_y, kind))
        lx += 40 + 7 * len(kind)
    return out


def _nice_step(raw: float) -> float:
    """1, 2, 2.5 or 5 times a power of ten, at least ``raw``."""
    if raw <= 0:
        return 1.0
    magnitude = 10.0 ** _exponent(raw)
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if raw <= m * magnitude:
            return m * magnitude
    return 10.0 * magnitude


def _exponent(raw: float) -> int:
    """The power of ten just at or below ``raw`` (also for values under 1)."""
    e = 0
    while 10.0 ** (e + 1) <= raw:
        e += 1
    while 10.0**e > raw:
        e -= 1
    return e
