"""Server-rendered SVG charts for the report's overview: no charting library, no script, escaped text.

Colours are presentation attributes (fill=...), never style attributes, so the report's Content Security
Policy can forbid inline styles. Every label passes through `escape` (html.escape after `visible`): labels
are data (agent names, sources) and may hold markup, NUL and other control characters (invalid in XML: a
browser drops the whole SVG), bidirectional controls (U+202E turns the text around it: a name that reads as
another), other format characters (zero widths, U+FEFF: a name that looks like another) or lone surrogates
(unencodable): each of those is shown as a visible `\\uXXXX` escape instead.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence
from html import escape as _html_escape

# C0/C1 controls (tab and newline kept), DEL, bidirectional controls, lone surrogates -> visible \uXXXX text
_INVISIBLE = [*range(0, 9), 11, 12, *range(14, 32), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F,
              *range(0x202A, 0x202F), *range(0x2066, 0x206A), *range(0xD800, 0xE000)]
_VISIBLE = {c: f"\\u{c:04X}" for c in _INVISIBLE}


@functools.cache
def _table() -> dict[int, str]:
    """`_VISIBLE` and the other characters a terminal is shown escaped too (schema.terminal) that hide text or
    change its look: Unicode Cf (zero widths, U+FEFF, soft hyphen, tag characters); U+10000 and above as
    `\\UXXXXXXXX`. Built on first use (80 ms)."""
    hidden = (c for c in range(0xA0, 0x110000) if unicodedata.category(chr(c)) == "Cf")
    return {**{c: f"\\u{c:04X}" if c <= 0xFFFF else f"\\U{c:08X}" for c in hidden}, **_VISIBLE}


def visible(text: object) -> str:
    """`text` with every control, bidi control, other format character (zero widths, U+FEFF, tags) and lone
    surrogate replaced by its visible `\\uXXXX` escape."""
    return str(text).translate(_table())


def escape(text: object, quote: bool = True) -> str:
    """HTML/SVG text of a data value: invisible or unsafe characters made visible, then markup escaped."""
    return _html_escape(visible(text), quote)

BAR = "#4c78a8"
BAR2 = "#f58518"
MUTED = "#9aa5b1"


def _fmt(v: float) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000 or float(v).is_integer():
        return f"{v:,.0f}"
    return f"{v:.3g}"


def _clip(label: str | None, n: int = 28) -> str:
    s = "(none)" if label is None else str(label)
    return s if len(s) <= n else s[: n - 1] + "…"


def _wrap(label: str, n: int = 26) -> list[str]:
    """Whole label over lines of at most n characters (breaking at spaces/punctuation when possible): a long
    agent or tool name is shown in full, never cut."""
    lines, rest = [], label
    while len(rest) > n:
        cut = max(rest.rfind(c, 0, n + 1) for c in " _-./:")
        cut = cut + 1 if cut >= n // 2 else n
        lines.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    return lines + [rest]


def hbar(items: Sequence[tuple[str | None, float]], title: str, width: int = 420, max_items: int = 12,
         color: str = BAR) -> str:
    """Horizontal bars, largest first as given; long labels wrap onto more lines (full label also in a tooltip)."""
    items = list(items)[:max_items]
    line, left, top = 13, 170, 26
    wrapped = [_wrap("(none)" if label is None else str(label)) for label, _ in items]
    rows = [max(20, 7 + line * len(w)) for w in wrapped]
    height = top + (sum(rows) if rows else 20) + 8
    vmax = max((v for _, v in items if v is not None), default=0) or 1
    out = [f'<svg class="chart" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
           f'<text class="chart-title" x="0" y="16">{escape(title)}</text>']
    if not items:
        out.append(f'<text x="0" y="{top + 14}" fill="{MUTED}">no data</text>')
    y = top
    for (label, v), lines, row in zip(items, wrapped, rows, strict=True):
        w = 0 if v is None else max(1.0, (width - left - 60) * v / vmax)
        spans = "".join(f'<tspan x="{left - 6}" dy="{0 if k == 0 else line}">{escape(t)}</tspan>'
                        for k, t in enumerate(lines))
        out.append(f'<g><title>{escape("(none)" if label is None else str(label))}: {escape(_fmt(v))}</title>'
                   f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{spans}</text>'
                   f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="14" fill="{color}"/>'
                   f'<text x="{left + w + 4:.1f}" y="{y + 14}">{escape(_fmt(v))}</text></g>')
        y += row
    out.append("</svg>")
    return "".join(out)


def vbar(items: Sequence[tuple[str, float]], title: str, width: int = 420, height: int = 170,
         color: str = BAR) -> str:
    """Vertical bars in the given order (histograms, days)."""
    items = list(items)
    top, bottom = 26, 34
    plot_h = height - top - bottom
    vmax = max((v for _, v in items), default=0) or 1
    n = max(1, len(items))
    bw = (width - 10) / n
    out = [f'<svg class="chart" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
           f'<text class="chart-title" x="0" y="16">{escape(title)}</text>']
    if not items:
        out.append(f'<text x="0" y="{top + 14}" fill="{MUTED}">no data</text>')
    label_every = max(1, n // 10)
    for i, (label, v) in enumerate(items):
        h = plot_h * v / vmax
        x = 5 + i * bw
        out.append(f'<g><title>{escape(str(label))}: {escape(_fmt(v))}</title>'
                   f'<rect x="{x + 1:.1f}" y="{top + plot_h - h:.1f}" width="{max(1.0, bw - 2):.1f}" '
                   f'height="{h:.1f}" fill="{color}"/></g>')
        if i % label_every == 0:
            out.append(f'<text class="tick" x="{x + bw / 2:.1f}" y="{height - bottom + 14}" '
                       f'text-anchor="middle">{escape(_clip(str(label), 10))}</text>')
    out.append(f'<text class="tick" x="{width - 5}" y="{top - 2}" text-anchor="end">max {escape(_fmt(vmax))}</text>')
    out.append("</svg>")
    return "".join(out)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], cls: str = "data") -> str:
    """An HTML table with every cell escaped; floats shown to 3 significant digits."""
    def cell(v: object) -> str:
        return escape(_fmt(v) if isinstance(v, float) else "-" if v is None else str(v))
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
