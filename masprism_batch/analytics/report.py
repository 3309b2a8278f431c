"""`report`: one self-contained, offline HTML file of a run -- overview charts and a per-trace drill-down.

Overview: server-rendered SVG/HTML over every attributed trace (from the stats tables). Drill-down: a sample
of traces (report_data.DrillLimits) embedded as JSON in a <script type="application/json"> block and drawn by
assets/report.js with textContent / createElement only. No CDN, no network: CSS and JS are inlined and the
Content Security Policy allows exactly those two inline blocks (by hash), data: images, nothing else -- so a
payload that escaped the escaping still could not run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections import Counter, defaultdict
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

from masprism_batch.analytics import load, report_categories, report_rollup, svg
from masprism_batch.analytics.report_data import DrillLimits, payloads_by_id, sample_ids
from masprism_batch.analytics.stats import ATTR_COLS, cached_or_compute
from masprism_batch.analytics.svg import (
    escape,  # controls, bidi and other format characters, lone surrogates shown escaped, then markup escaped
)
from masprism_batch.outdir import parts as outdir_parts

log = logging.getLogger(__name__)
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def json_for_script(obj) -> str:
    """JSON that cannot end or confuse the <script> element it sits in (no '<', '>', '&', U+2028/9 left)."""
    s = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return "".join(_JSON_ESCAPES.get(ch, ch) for ch in s)


def _asset(name: str) -> str:
    return resources.files("masprism_batch.analytics").joinpath("assets", name).read_text(encoding="utf-8")


def _sha(s: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(s.encode("utf-8")).digest()).decode()


def build_report(outdir: Path | str, out: Path | str, limits: DrillLimits | None = None,
                 include: list[str] | None = None, csp: bool = True, strict_include: bool = False) -> dict:
    """Write the report; returns a summary (traces, drill-down size, bytes). `csp=False` only for tests that
    check the escaping on its own. `strict_include`: a trace id in `include` that is not in attributions/ is an
    error (AnalyticsInputError) instead of a warning."""
    outdir, limits = Path(outdir), limits or DrillLimits()
    if not Path(out).parent.is_dir():
        raise FileNotFoundError(f"output folder {Path(out).parent} does not exist (it is not created for you)")
    attr, _ = load.latest_per_trace(load.read(outdir, "attributions", columns=ATTR_COLS))
    if strict_include and include:
        include = [load.stored_trace_id(outdir, t) for t in include]  # an id as a terminal shows it: its trace
        known = set(attr["trace_id"].to_pylist())
        missing = [t for t in dict.fromkeys(include) if t not in known]
        if missing:
            raise load.AnalyticsInputError(
                f"--trace: {len(missing)} trace id(s) not in {outdir / 'attributions'}: "
                + ", ".join(repr(t) for t in missing[:5]) + (" …" if len(missing) > 5 else "")
                + " (ids are as in attributions/, e.g. " + repr(attr["trace_id"][0].as_py() if attr.num_rows else "")
                + ")")
    stats = cached_or_compute(outdir)
    errors = load.read(outdir, "errors", columns=["stage", "reason", "input_path", "record_id", "message"])
    examples = report_categories.examples(attr)  # "what fails most" links them: they join the drill-down sample
    wanted = list(dict.fromkeys([*(include or []), *(t for ts in examples.values() for t in ts)]))
    by_id = payloads_by_id(outdir, attr, sample_ids(attr, limits, wanted), limits)
    payloads = list(by_id.values())
    data = {"traces": payloads, "total": attr.num_rows, "limits": limits.__dict__}
    index_of = {tid: i for i, tid in enumerate(by_id)}  # the stored id: two logs' ids may show alike, escaped
    html = render_html(outdir, stats, attr, errors, data, csp,
                       first=report_categories.section(stats, examples, index_of)
                       or report_categories.blame_section(attr))
    out = Path(out)
    with outdir_parts.atomic_output(out) as f:
        f.write(html)
    size = out.stat().st_size
    log.info("report %s: %d traces, %d in the drill-down, %.1f MB", out, attr.num_rows, len(payloads), size / 1e6)
    return {"traces": attr.num_rows, "drilldown": len(payloads), "bytes": size, "path": str(out)}


def _by_source(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        out[r["source"] or ""].append(r)
    return dict(sorted(out.items()))


def _overview(stats, attr, errors) -> str:
    parts = []
    n = attr.num_rows
    models = Counter(attr["model_id"].to_pylist())
    tok = [(a or 0) + (b or 0) for a, b in zip(attr["tokens_pass1"].to_pylist(), attr["tokens_pass2"].to_pylist(),
                                              strict=True)]
    secs = sum((a or 0) + (b or 0) for a, b in zip(attr["seconds_pass1"].to_pylist(),
                                                   attr["seconds_pass2"].to_pylist(), strict=True))
    from masprism_batch.ingest.status import outcome_counts

    c = outcome_counts(n, dict(Counter(errors["reason"].to_pylist())))
    kpis = [("traces attributed", f"{n:,}"), ("rejected", f"{c['rejected']:,}"),
            ("set aside as succeeded", f"{c['succeeded']:,}"), ("warnings (traces kept)", f"{c['warnings']:,}"),
            ("sources", str(len(set(attr["source"].to_pylist())))),
            ("tokens per trace (mean)", f"{sum(tok) / n:,.0f}" if n else "-"),
            ("model seconds per trace", f"{secs / n:.2f}" if n else "-"),
            ("models", ", ".join(f"{m} ({c})" for m, c in models.most_common(3)))]
    parts.append('<div class="kpis">' + "".join(
        f'<div class="kpi"><div class="kv">{escape(v)}</div><div class="kl">{escape(k)}</div></div>'
        for k, v in kpis) + "</div>")
    if "run_status" in stats:  # which runs were attributed, by the status their logs record
        from masprism_batch.analytics.run_status import split_line

        parts.append(f'<p class="note">{escape(split_line(stats["run_status"]))}</p>')
    pos = _by_source(stats["step_position"].to_pylist())
    ag = _by_source(stats["blamed_agents"].to_pylist())
    keep = report_rollup.shown_sources(attr)
    parts.append(report_rollup.rollup(stats, pos, ag, keep))
    words = _by_source(stats["symptom_words"].to_pylist())
    nll = _by_source(stats["nll_by_agent"].to_pylist())
    for src in sorted((set(ag) | set(pos)) & keep):
        agents = Counter()
        for r in ag.get(src, []):
            agents[r["agent"]] += r["n_traces"]
        rel = {r["bin"]: r["n_traces"] for r in pos.get(src, []) if r["measure"] == "relative"}
        absolute = Counter()
        for r in pos.get(src, []):
            if r["measure"] == "absolute":
                absolute[min(r["bin"], 40)] += r["n_traces"]
        charts = [svg.hbar(agents.most_common(), "Blamed agent (traces)"),
                  svg.vbar([(f"{b / 10:.1f}", rel.get(b, 0)) for b in range(10)],
                           "Predicted step, relative position (0 = first, 1 = last)"),
                  svg.vbar([(str(b) if b < 40 else "40+", absolute.get(b, 0)) for b in range(max(absolute, default=0) + 1)],
                           "Predicted step index", color=svg.BAR2),
                  svg.hbar([(r["word"], r["n_symptom_steps"]) for r in words.get(src, [])],
                           "Failure words in symptom steps", color=svg.BAR2),
                  svg.hbar([(r["agent"], r["mean_nll_pass1"]) for r in nll.get(src, [])],
                           "Mean step NLL, pass 1 (agents by step count)")]
        parts.append(f'<section class="source"><h3>Source: {escape(src or "(none)")}</h3>'
                     f'<div class="charts">{"".join(charts)}</div></section>')
    if len(set(ag) | set(pos)) > len(keep):
        parts.append(f'<p class="note">{len(set(ag) | set(pos)) - len(keep):,} more sources, counted in the roll-up, '
                     "are not broken out here (their tables: <code>masprism-batch stats OUTDIR</code>, "
                     "OUTDIR/stats/)</p>")
    acc = [r for r in stats["accuracy"].to_pylist() if (r["source"] or "") in keep]
    if acc:
        parts.append("<h3>Accuracy where labels exist</h3>" + _accuracy_notes(acc) + svg.table(
            ["source", "metric", "traces", "value", "random baseline", "in-sample for the packaged weights?"],
            [[r["source"], r["metric"], r["n_traces"], r["value"], r["random_baseline"], r.get("sample") or "-"]
             for r in acc]))
    days = Counter()
    for r in stats["blamed_by_day"].to_pylist():
        days[str(r["day"])] += r["n_traces"]
    if len(days) > 1:
        cut, unit = report_categories.periods(days)  # a bar per day up to a year of them, else per month, year
        parts.append(svg.vbar(report_categories.by_period(days.items(), cut),
                              f"Attributed failures per {unit} (trace start, else attribution)", width=840))
    tp = stats["throughput"].to_pylist()
    if tp:
        parts.append("<h3>Throughput by hour</h3>" + svg.table(
            ["hour (UTC)", "model", "traces", "tokens", "model seconds", "traces/s", "tokens/s"],
            [[str(r["hour"])[:16], r["model_id"], r["n_traces"], r["tokens"], r["seconds"], r["traces_per_s"],
              r["tokens_per_s"]] for r in tp[-48:]]))
    runs = stats["runs"].to_pylist()
    if runs:
        parts.append("<h3>Runs (run.json; killed invocations from the committed shards)</h3>" + svg.table(
            ["#", "started (UTC)", "status", "engine", "model", "traces", "tokens", "seconds", "traces/s", "tokens/s"],
            [[r["run_index"], r["started_at"].strftime("%Y-%m-%d %H:%M:%S") if r["started_at"] else None,
              r.get("status"), r["engine"], r["model_id"], r["traces"], r["tokens"], r["seconds"],
              r["traces_per_s"], r["tokens_per_s"]] for r in runs[-20:]]))
    if errors.num_rows:
        parts.append(_errors_panel(errors))
    return "".join(parts)


ERROR_ROWS_SHOWN = 200


def _errors_panel(errors) -> str:
    """Counts by (stage, reason), then which files and records, with the reason and message of each."""
    from masprism_batch.ingest.common import WARNING_REASONS

    rows = errors.to_pylist()
    c = Counter((r["stage"], r["reason"]) for r in rows)
    head = "<h3>Rejected inputs and failed traces (errors/)</h3>" + svg.table(
        ["stage", "reason", "kind", "rows"],
        [[s, r, "warning: trace kept" if r in WARNING_REASONS else "rejected", k] for (s, r), k in c.most_common(30)])
    rows.sort(key=lambda r: (r["reason"] in WARNING_REASONS, r["reason"] or "", r["input_path"] or "",
                             str(r["record_id"] or "")))
    shown = rows[:ERROR_ROWS_SHOWN]
    more = (f"<p class=\"limits\">{len(rows) - len(shown):,} more rows: <code>masprism-batch show OUTDIR --errors "
            f"--limit 0</code></p>" if len(rows) > len(shown) else "")
    from masprism_batch.analytics.report_data import mark_bidi  # ids and paths: bidi controls shown escaped

    detail = svg.table(["reason", "stage", "file", "record", "message"],
                       [[r["reason"], r["stage"], mark_bidi(r["input_path"] or "-"), mark_bidi(r["record_id"] or "-"),
                         (r["message"] or "")[:500]] for r in shown], cls="data errors")
    return head + f"<h4>Files and records ({len(shown):,} of {len(rows):,})</h4>" + detail + more


def _accuracy_notes(acc: list[dict]) -> str:
    from masprism_batch.analytics.insample import note

    notes: dict[str, str] = {}
    for r in acc:
        if r["source"] not in notes or r["metric"] in ("step_top1", "precision@1"):
            notes[r["source"]] = note(r["n_traces"], r.get("n_in_sample"), r.get("sample") != "n/a: faithful method")
    by_note: dict[str, list[str]] = defaultdict(list)
    for src, n in sorted(notes.items()):
        by_note[n].append(src)
    return '<ul class="acc-notes">' + "".join(f"<li><b>{escape(', '.join(srcs))}</b>: {escape(n)}</li>"
                                              for n, srcs in by_note.items()) + "</ul>"


def render_html(outdir: Path, stats, attr, errors, data: dict, csp: bool = True, first: str = "") -> str:
    """first: the section shown before the overview ("What fails most", else "Where blame falls":
    report_categories.py)."""
    css, js = _asset("report.css"), _asset("report.js")
    policy = (f"default-src 'none'; script-src '{_sha(js)}'; style-src '{_sha(css)}'; img-src data:; "
              "base-uri 'none'; form-action 'none'")
    meta_csp = f'<meta http-equiv="Content-Security-Policy" content="{policy}">' if csp else ""
    lim = data["limits"]
    shown, total = len(data["traces"]), data["total"]
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">{meta_csp}
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>masprism-batch report</title><style>{css}</style></head>
<body>
<header><h1>Failure attribution report</h1>
<p class="meta">{escape(outdir.name or str(outdir))} &middot; generated {now} &middot; {total:,} traces</p></header>
<main>
{first}
<section id="overview"><h2>Overview (all traces)</h2>{_overview(stats, attr, errors)}</section>
<section id="drilldown"><h2>Trace drill-down</h2>
<p class="limits">Showing {shown:,} of {total:,} traces (deterministic sample, every source represented; at most
{lim['max_traces']:,} traces, {lim['step_chars']:,} characters per step, {lim['trace_chars']:,} per trace, heatmaps
up to {lim['heatmap_max_steps']} steps). Use <code>--trace ID</code> to include specific traces.</p>
<div class="controls"><input id="filter" type="search" placeholder="filter: trace id, source, agent" aria-label="filter">
<select id="outcome" aria-label="outcome"><option value="">all</option><option value="ok">correct top-1</option>
<option value="bad">wrong top-1</option><option value="none">unlabelled</option></select>
<button id="prev" type="button">&larr; prev</button><span id="page"></span><button id="next" type="button">next &rarr;</button></div>
<table id="trace-list" class="data"><thead><tr><th>trace</th><th>source</th><th>system</th><th>steps</th>
<th>blamed step</th><th>blamed agent</th><th>top-1</th></tr></thead><tbody></tbody></table>
<div id="detail" hidden></div>
</section></main>
<script type="application/json" id="report-data">{json_for_script(data)}</script>
<script>{js}</script>
</body></html>
"""
