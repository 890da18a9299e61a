"""The failover chart: what the takeover tier sends over one failover, per failure mode, on
a time axis in proportion, with the tier's QoS caps and the objective (failover.rto) marked,
and under it one lane per mode: when its traffic is not served, and when the takeover serves
it. Hand-written SVG with fixed number formatting, so the same plan gives the same bytes (it
lives in out/)."""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape

from compiler import units
from compiler.failover import FailoverPlan

WIDTH, HEIGHT = 820, 420
LEFT, RIGHT, TOP = 70, 170, 56
PLOT_H = 200
LANE_TOP = TOP + PLOT_H + 34
LANE_H, LANE_GAP = 16, 8
MODE_COLORS = {"crash": "#4e79a7", "hang": "#f28e2b", "nodeLoss": "#59a14f"}
DOWN, UP = "#e15759", "#8cd17d"
CAP, LINK = "#b07aa1", "#9c755f"
MET, MISSED = "#2e7d32", "#e15759"
CHAR = 6.2  # px per character of 11 px text, to keep labels apart


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
    span_s: float
    top_bps: float

    @property
    def width(self) -> float:
        return WIDTH - LEFT - RIGHT

    def x(self, seconds: float) -> float:
        return LEFT + self.width * min(seconds, self.span_s) / self.span_s

    def y(self, bps: float) -> float:
        return TOP + PLOT_H * (1 - bps / self.top_bps)


def _scale(plan: FailoverPlan) -> _Scale:
    times = [m.serving for m in plan.modes if m.serving is not None]
    rto = (plan.rto_ms or 0) / 1000
    span = max([10.0, rto * 1.15, *(t * 1.3 for t in times)])
    e = plan.egress
    top = max(e.burst_total, e.cap * e.replicas, 1.0) * 1.15
    return _Scale(span, top)


def _y_axis(s: _Scale) -> list[str]:
    out = []
    step = _nice_step(s.top_bps / 4)
    tick = 0.0
    while tick <= s.top_bps:
        out.append(_line(LEFT, s.y(tick), LEFT + s.width, s.y(tick), "#e6e6e6"))
        out.append(_text(LEFT - 6, s.y(tick) + 4, units.human_bits(tick), text_anchor="end"))
        tick += step
    return out


def _traffic(s: _Scale, plan: FailoverPlan) -> list[str]:
    """Each mode's takeover traffic: nothing until it is served again, then the failed
    pods' traffic held to the caps; a tick marks the retried answers on top at first."""
    e = plan.egress
    steady = min(e.per_pod, e.cap) * e.replicas
    burst = min(e.burst_per_pod, e.cap) * e.replicas
    out = []
    for n, m in enumerate(plan.modes):
        color = MODE_COLORS[m.mode]
        if m.serving is None:
            continue
        x0, x1 = s.x(m.serving), s.x(s.span_s)
        lift = n * 2.0  # modes that coincide stay visible
        out.append(
            f'<polyline points="{_f(LEFT)},{_f(s.y(0) - lift)} {_f(x0)},{_f(s.y(0) - lift)} '
            f'{_f(x0)},{_f(s.y(steady) - lift)} {_f(x1)},{_f(s.y(steady) - lift)}" fill="none" '
            f'stroke="{color}" stroke-width="2"/>'
        )
        if burst > steady:
            out.append(_line(x0, s.y(steady), x0, s.y(burst), color, dash="2,2", width="2"))
    if burst > steady:
        out.append(_text(LEFT + 4, s.y(burst) - 4,
                         f"at first, with the retried answers: {units.human_bits(burst)}",
                         fill="#555555", font_size="11"))  # fmt: skip
    return out


def _limits(s: _Scale, plan: FailoverPlan, link_bps: float) -> list[str]:
    e = plan.egress
    limits = [(f"{e.tier} caps {e.replicas} x {units.human_bits(e.cap)}", e.cap * e.replicas,
               CAP), ("link", link_bps, LINK)]  # fmt: skip
    out, label_y = [], 0.0
    for label, bps, color in sorted(limits, key=lambda item: -item[1]):
        text = f"{label}: {units.human_bits(bps)}" if label == "link" else label
        if bps > s.top_bps:
            label_y = TOP + 4 if not label_y else label_y + 13
            out.append(_text(LEFT + s.width + 6, label_y, f"above: {text}", fill=color))
            continue
        out.append(_line(LEFT, s.y(bps), LEFT + s.width, s.y(bps), color, dash="6,4"))
        label_y = max(s.y(bps) + 4, label_y + 13)
        out.append(_text(LEFT + s.width + 6, label_y, text, fill=color))
    return out


def _time_axis(s: _Scale) -> list[str]:
    base = TOP + PLOT_H
    out = [_line(LEFT, base, LEFT + s.width, base, "#333333"),
           _line(LEFT, TOP, LEFT, base, "#333333")]  # fmt: skip
    minutes = s.span_s >= 600
    step = _nice_step(s.span_s / (60 if minutes else 1) / 6) * (60 if minutes else 1)
    tick = 0.0
    while tick <= s.span_s + 1e-9:
        label = f"{tick / 60:g} min" if minutes else f"{tick:g} s"
        out.append(_line(s.x(tick), base, s.x(tick), base + 4, "#333333"))
        out.append(_text(s.x(tick), base + 15, label, text_anchor="middle"))
        tick += step
    return out


def _lanes(s: _Scale, plan: FailoverPlan) -> list[str]:
    out = []
    for n, m in enumerate(plan.modes):
        y = LANE_TOP + n * (LANE_H + LANE_GAP)
        served = s.span_s if m.serving is None else m.serving
        out.append(_rect(LEFT, y, max(s.x(served) - LEFT, 1.5), LANE_H, DOWN))
        if m.serving is not None and m.serving < s.span_s:
            out.append(_rect(s.x(served), y, LEFT + s.width - s.x(served), LANE_H, UP))
        when = "never by itself" if m.serving is None else units.human_seconds(m.serving)
        out.append(_text(LEFT + s.width + 6, y + 12, f"{m.title}: {when}",
                         fill=MODE_COLORS[m.mode]))  # fmt: skip
    y = LANE_TOP + len(plan.modes) * (LANE_H + LANE_GAP) + 24
    out.append(_rect(LEFT, y, 12, 12, DOWN))
    out.append(_text(LEFT + 16, y + 10, "its traffic not served"))
    out.append(_rect(LEFT + 180, y, 12, 12, UP))
    out.append(_text(LEFT + 196, y + 10, "served by the takeover tier"))
    return out


def _objective(s: _Scale, plan: FailoverPlan) -> list[str]:
    """The objective's line through the plot and the lanes, named under them."""
    if plan.rto_ms is None:
        return []
    x = s.x(plan.rto_ms / 1000)
    color = MET if plan.met else MISSED
    label = f"failover.rto {units.prom_duration(plan.rto_ms)}"
    bottom = LANE_TOP + len(plan.modes) * (LANE_H + LANE_GAP)
    anchor = "end" if x + len(label) * CHAR > LEFT + s.width + RIGHT - 4 else "start"
    return [
        _line(x, TOP, x, bottom + 4, color, dash="5,3", width="2"),
        _text(x + (-4 if anchor == "end" else 4), bottom + 16, label, fill=color,
              text_anchor=anchor),
    ]  # fmt: skip


def render(plan: FailoverPlan, *, title: str, link_bps: float) -> str:
    s = _scale(plan)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        _text(LEFT, 22, title, font_size="15", font_weight="bold"),
        _text(LEFT, 40, plan.verdict(), fill="#333333", font_size="11"),
        *_y_axis(s),
        *_limits(s, plan, link_bps),
        *_traffic(s, plan),
        *_time_axis(s),
        *_lanes(s, plan),
        *_objective(s, plan),
        "</svg>",
    ]
    return "\n".join(out) + "\n"


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
