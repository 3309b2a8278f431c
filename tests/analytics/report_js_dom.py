"""A minimal DOM for running the report's script (masprism_batch/analytics/assets/report.js) under Node in tests:
`stub(tail)` is a Node script that reads the page's data and the script (argv[2], argv[3]), runs the script
against the stub, then runs `tail`, which prints what the test reads (`els`: the elements the script asked for by
id or selector; `drawn`: every text a canvas was asked to draw). The Chromium tests cover the real page."""

PRELUDE = r"""
const fs = require('fs');
const [data, js] = [fs.readFileSync(process.argv[2], 'utf8'), fs.readFileSync(process.argv[3], 'utf8')];
const drawn = [];
function mk(tag) {
  return {tag, children: [], style: {}, attrs: {}, classList: {add() {}, remove() {}, toggle() {}},
    appendChild(c) { this.children.push(c); return c; }, replaceChildren() { this.children = []; },
    setAttribute(k, v) { this.attrs[k] = v; }, addEventListener() {}, removeAttribute() {},
    getBoundingClientRect() { return {left: 0, top: 0}; }, querySelectorAll() { return []; },
    querySelector() { return mk('x'); }, scrollIntoView() {},
    set textContent(v) { this._t = v; }, get textContent() { return this._t || (tag === 'script' ? data : ''); },
    getContext() { return new Proxy({}, {get(t, k) { return k === 'fillText' ? (s) => drawn.push(String(s))
      : (k in t ? t[k] : () => {}); }, set(t, k, v) { t[k] = v; return true; }}); }};
}
const els = {};
global.document = {createElement: mk, createTextNode: (t) => ({text: t}), querySelectorAll() { return []; },
  getElementById(id) { return els[id] || (els[id] = mk(id === 'report-data' ? 'script' : 'div')); },
  querySelector(s) { return els[s] || (els[s] = mk('tbody')); }, body: mk('body')};
global.location = {hash: ''};
global.history = {replaceState() {}};
global.atob = (s) => Buffer.from(s, 'base64').toString('latin1');
eval(js);
"""


def run_page(html: str, tail: str, tmp) -> object:
    """The report page `html`'s script run in the stub under Node, then `tail`; what its last line printed, as
    JSON. `tmp`: a folder for the three files Node reads."""
    import json
    import re
    import subprocess

    (tmp / "data.json").write_text(
        re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S).group(1))
    (tmp / "report.js").write_text(re.findall(r"<script>(.*?)</script>", html, re.S)[-1])
    (tmp / "stub.js").write_text(stub(tail))
    out = subprocess.run(["node", str(tmp / "stub.js"), str(tmp / "data.json"), str(tmp / "report.js")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def stub(tail: str) -> str:
    """The Node script: the DOM stub, the report's script run in it, then `tail`."""
    return PRELUDE + tail.strip() + "\n"
