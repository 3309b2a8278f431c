// Drill-down of the masprism-batch report. Data comes from the JSON block #report-data; every data string
// reaches the page through textContent or a text node, never innerHTML, so markup in traces stays text.
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("report-data").textContent);
  var TRACES = DATA.traces, PAGE = 25, page = 0, view = TRACES.slice();

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmt(v) { return v === null || v === undefined ? "-" : (Math.round(v * 1000) / 1000).toString(); }
  function outcome(t) { return t.ok === null ? "none" : (t.ok ? "ok" : "bad"); }

  // Confidence (issue 23): a column, a minimum and a sort, added here so a team reviews the confident verdicts
  // first; the list opens sorted so (issue 60), log order one choice away. Traces without a confidence (older
  // runs) sort last and pass no minimum above 0.
  function addConfidenceControls() {
    var head = document.querySelector("#trace-list thead tr"), controls = document.querySelector(".controls");
    if (head) { head.appendChild(el("th", null, "verdict by")); head.appendChild(el("th", null, "confidence")); }
    if (!controls) return;
    var sort = el("select");
    sort.id = "sort";
    sort.setAttribute("aria-label", "sort");
    [["desc", "most confident first"], ["", "log order"], ["asc", "least confident first"]].forEach(function (o) {
      var opt = el("option", null, o[1]);
      opt.value = o[0];
      sort.appendChild(opt);
    });
    var min = el("input");
    min.id = "minconf";
    min.type = "number";
    min.min = "0"; min.max = "1"; min.step = "0.05";
    min.placeholder = "min confidence";
    min.setAttribute("aria-label", "minimum confidence");
    controls.appendChild(sort);
    controls.appendChild(min);
    sort.addEventListener("change", applyFilter);
    min.addEventListener("input", applyFilter);
  }

  function applyFilter() {
    var q = (document.getElementById("filter").value || "").toLowerCase();
    var o = document.getElementById("outcome").value || "";
    var sortEl = document.getElementById("sort"), minEl = document.getElementById("minconf");
    var dir = sortEl && typeof sortEl.value === "string" ? sortEl.value : "desc", min = minEl && minEl.value !== "" ? parseFloat(minEl.value) : null;
    view = TRACES.filter(function (t) {
      if (o && outcome(t) !== o) return false;
      if (min !== null && !isNaN(min) && min > 0 && !(t.conf !== null && t.conf !== undefined && t.conf >= min)) return false;
      if (!q) return true;
      return [t.id, t.src, t.sys, t.agent, t.by].some(function (s) { return s && String(s).toLowerCase().indexOf(q) >= 0; });
    });
    if (dir) {
      var sign = dir === "desc" ? -1 : 1;
      view.sort(function (a, b) {
        var x = a.conf === null || a.conf === undefined, y = b.conf === null || b.conf === undefined;
        if (x || y) return x === y ? 0 : (x ? 1 : -1);
        return sign * (a.conf - b.conf);
      });
    }
    page = 0;
    drawList();
  }

  function drawList() {
    var body = document.querySelector("#trace-list tbody");
    body.replaceChildren();
    var pages = Math.max(1, Math.ceil(view.length / PAGE));
    page = Math.min(Math.max(0, page), pages - 1);
    view.slice(page * PAGE, page * PAGE + PAGE).forEach(function (t) {
      var tr = el("tr");
      tr.tabIndex = 0;
      tr.appendChild(el("td", "id", t.id));
      [t.src, t.sys, t.n, t.pred, t.agent, t.ok === null ? "unlabelled" : (t.ok ? "correct" : "wrong"),
        t.by || "-", t.conf === null || t.conf === undefined ? "-" : t.conf.toFixed(2)]
        .forEach(function (v) { tr.appendChild(el("td", null, v === null ? "-" : v)); });
      function open() { showTrace(TRACES.indexOf(t), tr); }
      tr.addEventListener("click", open);
      tr.addEventListener("keydown", function (ev) { if (ev.key === "Enter") open(); });
      body.appendChild(tr);
    });
    document.getElementById("page").textContent =
      "page " + (page + 1) + " / " + pages + " (" + view.length + " traces)";
  }

  function badge(cls, text) { return el("span", "badge " + cls, text); }

  function showTrace(idx, row) {
    var t = TRACES[idx], box = document.getElementById("detail");
    if (!t) return;
    document.querySelectorAll("#trace-list tr.sel").forEach(function (r) { r.classList.remove("sel"); });
    if (row) row.classList.add("sel");
    box.hidden = false;
    box.replaceChildren();
    if (location.hash !== "#t=" + idx) history.replaceState(null, "", "#t=" + idx);
    box.appendChild(el("h3", null, t.id));
    var info = el("p");
    info.appendChild(document.createTextNode("source " + t.src + " · system " + (t.sys || "-") + " · " + t.n +
      " steps · blamed step " + t.pred + " (written by " + (t.pa || "-") + ") · blamed agent " + (t.agent || "-") +
      (t.why && t.agent !== t.pa ? " (" + t.why + ")" :
        t.rule === "aggregate" ? " (step probabilities summed per agent)" : "") +
      (t.by ? " · decided by " + t.by : "") +
      (t.conf !== null && t.conf !== undefined ? " · confidence " + t.conf.toFixed(2) : "") +
      (t.cat ? " · failure kind " + t.cat + (t.catc !== null && t.catc !== undefined ?
        " (" + t.catc.toFixed(2) + ")" : "") : "")));
    if (t.gold) {
      var g = t.gold.step !== null && t.gold.step !== undefined ? "step " + t.gold.step + " (" + (t.gold.agent || "-") + ")"
        : t.gold.locs.length + " labelled error span(s)";
      info.appendChild(document.createTextNode(" · label: " + g));
    }
    box.appendChild(info);
    if (t.q) { box.appendChild(el("p", "nv", "Question: " + t.q + (t.qc ? " […]" : ""))); }
    var inSet = {};
    if (t.set && t.set.length) {  // the verdict's steps to read, best first: what to open before anything else
      t.set.forEach(function (s, r) { inSet[s] = r + 1; });
      var rs = el("p", "readfirst");
      rs.appendChild(el("strong", null, "Read these first: "));
      rs.appendChild(document.createTextNode("step " + t.set.join(", ") + " (" + t.set.length + " of " + t.n +
        " steps" + (t.setc !== null && t.setc !== undefined ? "; they hold the failure's source in " +
        Math.round(t.setc * 100) + "% of held-out logs" : "") + (t.setb ? ", calibrated by " + t.setb : "") + ")" +
        (t.loc === false ? ". Not localised: the set spans most of the log." : ".")));
      box.appendChild(rs);
    }

    box.appendChild(el("h4", null, "Ranked candidates"));
    var ct = el("table", "data"), hr = el("tr");
    ["rank", "step", "agent", "score", "supporting symptoms"].forEach(function (h) { hr.appendChild(el("th", null, h)); });
    ct.appendChild(hr);
    t.cands.forEach(function (c, r) {
      var tr = el("tr");
      [r + 1, c[0], c[2] || "-", fmt(c[1]), c[3].join(", ")].forEach(function (v) { tr.appendChild(el("td", null, v)); });
      ct.appendChild(tr);
    });
    box.appendChild(ct);

    var heat = el("div", "heat");
    box.appendChild(el("h4", null, "Step × step attention, pass 1 (row-normalised; hover for values)"));
    box.appendChild(heat);
    drawHeat(heat, t);

    box.appendChild(el("h4", null, "Steps"));
    // locs is keyed by span ids from the log: no prototype, so "constructor" or "__proto__" finds nothing
    var sym = {}, rank = {}, locs = Object.create(null);
    t.sym.forEach(function (s) { sym[s] = true; });
    t.cands.forEach(function (c, r) { rank[c[0]] = r + 1; });
    if (t.gold) t.gold.locs.forEach(function (l) { locs[l] = true; });
    // Bars span the trace's own NLL range (min..max), so small differences between steps stay visible.
    var lo = Infinity, hi = -Infinity;
    t.steps.forEach(function (s) {
      [s.n1, s.n2].forEach(function (v) { if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    });
    function pct(v) { return v === null || !(hi > lo) ? (v === null ? 0 : 100) : 5 + 95 * (v - lo) / (hi - lo); }
    box.appendChild(el("p", "nv", "NLL bars: blue pass 1, orange pass 2, scaled from the trace's lowest (" + fmt(lo) +
      ") to highest (" + fmt(hi) + ") step NLL."));
    var st = el("table", "steps");
    t.steps.forEach(function (s, i) {
      var tr = el("tr");
      var gold = t.gold && (t.gold.step === i || (s.sp && locs[s.sp]));
      if (i === t.pred) tr.classList.add("pred");
      if (inSet[i]) tr.classList.add("inset");
      if (gold) tr.classList.add("gold");
      tr.appendChild(el("td", "i", i));
      var ag = el("td", "ag", s.a || "-");
      ag.appendChild(el("div", "nv", (s.k || "") + (s.sp ? " · span " + s.sp : "")));
      tr.appendChild(ag);
      var nl = el("td", "nl"), b1 = el("div", "bar"), b2 = el("div", "bar2");
      b1.style.width = pct(s.n1) + "%";
      b2.style.width = pct(s.n2) + "%";
      nl.appendChild(b1);
      if (s.n2 !== null) nl.appendChild(b2);
      nl.appendChild(el("div", "nv", "NLL " + fmt(s.n1) + (s.n2 !== null ? " → " + fmt(s.n2) : "") + " · H " + fmt(s.h)));
      tr.appendChild(nl);
      var tx = el("td");
      if (i === t.pred) tx.appendChild(badge("b-pred", "blamed"));
      if (sym[i]) tx.appendChild(badge("b-sym", "symptom"));
      if (rank[i]) tx.appendChild(badge("b-cand", "candidate #" + rank[i]));
      if (inSet[i]) tx.appendChild(badge("b-set", "read #" + inSet[i]));
      if (gold) tx.appendChild(badge("b-gold", "labelled"));
      if (s.fw) tx.appendChild(badge("b-fw", "failure word"));
      tx.appendChild(el("pre", "txt", s.t));
      if (s.c) tx.appendChild(el("span", "cut", "[text cut for the report]"));
      tr.appendChild(tx);
      st.appendChild(tr);
    });
    box.appendChild(st);
  }

  function drawHeat(box, t) {
    if (!t.attn) { box.appendChild(el("p", "nv", "no heatmap for this trace (no step scores, or over the step limit)")); return; }
    // Axes: rows = attending step i (left, top to bottom), columns = attended step j (top, left to right);
    // step numbers on both axes (every k-th when cells are small), axis titles in the margins.
    var raw = atob(t.attn), n = t.n, cell = Math.max(2, Math.min(28, Math.floor(480 / n)));
    var L = 44, T = 34, every = Math.max(1, Math.ceil(14 / cell));
    var cv = el("canvas"), ctx;
    cv.width = L + n * cell + 4;
    cv.height = T + n * cell + 4;
    ctx = cv.getContext("2d");
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, cv.width, cv.height);
    var off = 0, i, j, v;
    for (i = 0; i < n; i++) {
      for (j = 0; j <= i; j++) {
        v = raw.charCodeAt(off + j) / 255;
        ctx.fillStyle = "rgb(" + Math.round(255 - 220 * v) + "," + Math.round(255 - 180 * v) + "," + Math.round(255 - 90 * v) + ")";
        ctx.fillRect(L + j * cell, T + i * cell, cell, cell);
      }
      off += i + 1;
    }
    ctx.fillStyle = "#334e68";
    ctx.font = "10px sans-serif";
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (i = 0; i < n; i += every) { ctx.fillText(String(i), L - 4, T + i * cell + cell / 2); }
    ctx.textAlign = "center";
    ctx.textBaseline = "bottom";
    for (j = 0; j < n; j += every) { ctx.fillText(String(j), L + j * cell + cell / 2, T - 3); }
    ctx.font = "11px sans-serif";
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.fillText("attended step j →", L, 2);
    ctx.save();
    ctx.translate(2, T + n * cell);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText("attending step i →", 0, 0);
    ctx.restore();
    cv.setAttribute("aria-label", "step by step attention: rows attending step i, columns attended step j");
    var info = el("div");
    info.id = "heat-info";
    info.textContent = "row i = attending step, column j = attended step";
    cv.addEventListener("mousemove", function (ev) {
      var r = cv.getBoundingClientRect(), x = Math.floor((ev.clientX - r.left - L) / cell), y = Math.floor((ev.clientY - r.top - T) / cell);
      if (x < 0 || y < 0 || y >= n || x > y) return;
      info.textContent = "A[" + y + " → " + x + "] = " + (raw.charCodeAt(y * (y + 1) / 2 + x) / 255).toFixed(3) + " of row max" +
        " (step " + y + " " + (t.steps[y] && t.steps[y].a || "-") + " → step " + x + " " + (t.steps[x] && t.steps[x].a || "-") + ")";
    });
    box.appendChild(cv);
    box.appendChild(info);
  }

  addConfidenceControls();
  document.getElementById("filter").addEventListener("input", applyFilter);
  document.getElementById("outcome").addEventListener("change", applyFilter);
  document.getElementById("prev").addEventListener("click", function () { page--; drawList(); });
  document.getElementById("next").addEventListener("click", function () { page++; drawList(); });
  applyFilter();  // the default sort (most confident first), then the list
  var m = /^#t=(\d+)$/.exec(location.hash);
  showTrace(m ? parseInt(m[1], 10) : (view.length ? TRACES.indexOf(view[0]) : 0), null);
  // "What fails most" links a kind's example traces as #t=<index>: open them without a reload
  if (typeof window !== "undefined" && window.addEventListener) {  // absent in the node stub the tests run it in
    window.addEventListener("hashchange", function () {
      var h = /^#t=(\d+)$/.exec(location.hash);
      if (h) { showTrace(parseInt(h[1], 10), null); document.getElementById("detail").scrollIntoView(); }
    });
  }
  document.body.setAttribute("data-ready", "1");
})();
