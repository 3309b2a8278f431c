"""The domains a config field's type cannot state: prompt templates, prompt text sizes, the CPU thread count and
files named by path. `config.py` runs these when a config is loaded, so a value that cannot work is refused (or,
for the thread count, clamped with a warning) before OUTDIR is touched, never found per trace after every trace
was rejected and committed under that config.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
import string
from collections.abc import Iterable

from masprism_batch.schema import DENSE_STEPS

log = logging.getLogger(__name__)

MAX_TEMPLATE_CHARS = 256  # a header / question template: the defaults are ~25 characters
MAX_MARKER_CHARS = 64  # the truncation marker is repeated in every cut step
MAX_PROMPT_TEXT_CHARS = 8192  # a preamble or the anomaly note: the defaults are ~150; 8,192 is ~2k tokens already
MAX_CONFIG_BYTES = 1024**2  # a config file: the full default config is ~3 kB
MAX_HEAD_WEIGHTS_BYTES = 16 * 1024**2  # a head-weights file is layers x heads numbers: ~100 kB for a 7B model
MIN_LOG_TOKENS = 64  # tokens a prompt must leave for the log after its fixed text (a header and a few tokens)


def check_template(value: str, fields: Iterable[str], name: str) -> str:
    """`value` as a `str.format` template that uses only `fields`, each plainly: no format spec (a width of
    100,000,000 builds gigabytes per header), no conversion, no attribute or index access."""
    fields = tuple(fields)
    allowed = " and ".join("{" + f + "}" for f in fields)
    if len(value) > MAX_TEMPLATE_CHARS:
        raise ValueError(f"{name}: {len(value)} characters, at most {MAX_TEMPLATE_CHARS}")
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError as e:  # an unmatched brace
        raise ValueError(f"{name} {value!r} is not a template ({e}); write a literal brace as {{{{ or }}}}") from None
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        if field not in fields:
            raise ValueError(f"{name} {value!r} may only use {allowed}, not {{{field}}}")
        if spec or conversion:
            raise ValueError(f"{name} {value!r}: {{{field}}} takes no format spec or conversion "
                             f"({'!' + conversion if conversion else ':' + spec!r})")
    return value


def check_text(value: str, limit: int, name: str) -> str:
    if len(value) > limit:
        raise ValueError(f"{name}: {len(value)} characters, at most {limit}")
    return value


def check_render_text(field: str, value: str) -> str:
    """One `render` prompt text by what it is: the templates parsed (header: {index} {agent}; question:
    {question}), the marker and the preambles bounded in length."""
    name = f"render.{field}"
    if field == "header_template":
        return check_template(value, ("index", "agent"), name)
    if field == "question_template":
        return check_template(value, ("question",), name)
    return check_text(value, MAX_MARKER_CHARS if field == "truncation_marker" else MAX_PROMPT_TEXT_CHARS, name)


def check_prompt_room(render, encode, model_context: int) -> None:
    """The fixed text of each pass's prompt (preamble, question template, anomaly note), in the model's own tokens,
    must leave MIN_LOG_TOKENS of the context for the log; else every trace would be rejected as too long, one by
    one, and the OUTDIR locked to that config. Checked when the model is loaded, before OUTDIR is touched.
    `encode`: texts -> token id lists in the model's tokenizer (render.encoding's encoder)"""
    context = min(render.max_context, model_context)
    pre_q, _, post_q = render.question_template.partition("{question}")
    texts = {"render.pass1_preamble": render.pass1_preamble + pre_q + post_q,
             "render.pass2_preamble (with render.anomaly_note)": render.pass2_preamble + render.anomaly_note + pre_q
             + post_q}
    for name, n in zip(texts, map(len, encode(list(texts.values()))), strict=True):
        if n > context - MIN_LOG_TOKENS:
            raise ValueError(f"{name}: the prompt's fixed text is {n} tokens of this model, which leaves fewer than "
                             f"{MIN_LOG_TOKENS} of the {context}-token context (render.max_context, the model's) "
                             f"for the log")


def machine_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which containers and `taskset` narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call on this platform
        return max(1, os.cpu_count() or 1)


def clamp_threads(value: int | None, name: str = "model.threads") -> int | None:
    """More intra-op threads than CPUs only adds contention (and 100,000 fails inside torch as an ImportError):
    clamped to the machine, with a warning naming both numbers."""
    cap = machine_cpus()
    if value is not None and value > cap:
        log.warning("%s = %d is more than the %d CPU(s) this process may use: %d used", name, value, cap, cap)
        return cap
    return value


# Peak memory of one trace: up to schema.DENSE_STEPS steps the step attention A is one dense N x N (the float64
# accumulator, its float32 copy, the learned-head view and step_scores.attention_pass1's rows: ~36 bytes per step
# pair, measured on the tiny-random model); above it A is kept by rows, each holding at most a window's steps, so
# what grows is linear: BYTES_PER_STEP a step, measured through `attribute` on the tiny-random model
# (benchmarks/pipeline/bench_memory_caps.py --cases steps-N, docs/formats.md) with a margin of about 2x.
BYTES_PER_STEP_PAIR = 36
BYTES_PER_STEP = 64 * 1024


def trace_memory(steps: int) -> int:
    """Bytes one trace of `steps` steps may need at peak (see BYTES_PER_STEP)."""
    dense = min(steps, DENSE_STEPS)
    return dense * dense * BYTES_PER_STEP_PAIR + steps * BYTES_PER_STEP


def machine_memory() -> int:
    """Bytes of memory this process may use: physical memory, or the container's cgroup limit when lower."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 1 << 62  # unknown: no bound from here
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit, encoding="ascii") as f:
                text = f.read(64).strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def check_max_steps(value: int, name: str = "ingest.max_steps") -> int:
    """A step count whose one trace would need more memory than the machine has (`trace_memory`: linear in the
    steps) is refused, naming both numbers, instead of the run being killed on its largest trace."""
    need, have = trace_memory(value), machine_memory()
    if need > have:
        lo, hi = 0, value  # the most steps that fit: trace_memory grows with the steps
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if trace_memory(mid) <= have else (lo, mid - 1)
        raise ValueError(f"{name} = {value}: one trace of that many steps needs ~{need / 1e9:.1f} GB (about "
                         f"{BYTES_PER_STEP // 1024} KiB a step), this machine has {have / 1e9:.1f} GB; at most "
                         f"{lo} steps fit")
    return value


class NotRegularFile(ValueError):
    """A path that is not a regular file (a FIFO, socket, device or folder)."""


def read_regular(path, limit: int) -> tuple[bytes, int]:
    """(at most `limit` + 1 bytes, the size) of `path`, read only if it is a regular file: opened with
    O_NONBLOCK so a FIFO never blocks, then checked on the descriptor (no check-then-open race). The open's
    OSError propagates; the callers name the file in their own words."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"{path}: not a regular file")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(limit + 1), st.st_size
    finally:
        os.close(fd)


def _regular_file(path: str, name: str) -> os.stat_result:
    # stat() follows a link and never blocks; a FIFO or device is refused before anything opens it
    try:
        st = os.stat(path)
    except OSError as e:
        raise ValueError(f"{name}: {path!r}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{name}: {path!r} is not a regular file")
    return st


def input_file_problem(path) -> str | None:
    """Why `path` cannot be read as an input file (`--ranker`, `--labels`), in the words `--config` uses: None when
    it is a regular file (links followed), "not found", or "is not a regular file (a FIFO)" for a FIFO, device,
    socket or folder, which is never opened (a FIFO would block, /dev/zero never ends)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "not found"
    except OSError as e:
        return str(e.strerror or e)
    if stat.S_ISREG(st.st_mode):
        return None
    kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or
            stat.S_ISBLK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode) else "a socket")
    return f"is not a regular file ({kind})"


def read_config_file(path: str, name: str = "--config") -> str:
    """A `--config` (or `--map`: `name`) file's text: a regular file (a FIFO is refused, never opened to block),
    at most MAX_CONFIG_BYTES, UTF-8."""
    _regular_file(path, name)
    try:
        data, _ = read_regular(path, MAX_CONFIG_BYTES)
    except OSError as e:
        raise ValueError(f"{name}: {path!r}: {e.strerror or e}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{name}: {path!r} is larger than a config file ({MAX_CONFIG_BYTES} bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{name}: {path!r} is not UTF-8 text (byte {e.start})") from None


def check_head_weights(path: str | None, name: str = "method.head_weights") -> str | None:
    """A head-weights file (`fit-heads` output) that exists, is a regular file of bounded size, and holds
    `model_id` and a rectangular layers x heads table of finite numbers. Whether its shape fits the model is
    checked when the model is loaded (method/heads.load_for)."""
    if path is None:
        return None
    st = _regular_file(os.path.expanduser(path), name)
    if st.st_size > MAX_HEAD_WEIGHTS_BYTES:
        raise ValueError(f"{name}: {path!r} is {st.st_size} bytes, more than a head-weights file "
                         f"({MAX_HEAD_WEIGHTS_BYTES})")
    try:
        doc = json.loads(read_regular(os.path.expanduser(path), MAX_HEAD_WEIGHTS_BYTES)[0].decode("utf-8"))
    except (OSError, ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"{name}: {path!r} is not a head-weights JSON file ({type(e).__name__})") from None
    weights = doc.get("weights") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(doc.get("model_id"), str) or not isinstance(weights, list):
        raise ValueError(f"{name}: {path!r} is not a head-weights file (needs \"model_id\" and \"weights\")")
    width = len(weights[0]) if weights and isinstance(weights[0], list) else 0
    ok = width > 0 and all(isinstance(row, list) and len(row) == width and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in row) for row in weights)
    if not ok:
        raise ValueError(f"{name}: {path!r}: \"weights\" must be a non-empty layers x heads table of finite numbers")
    return path


def check_folder(path: str | None, name: str) -> str | None:
    """A folder the run may create: absent, or a directory (not a file, FIFO or device)."""
    if path is not None:
        p = os.path.expanduser(path)
        if os.path.lexists(p) and not os.path.isdir(p):
            raise ValueError(f"{name}: {path!r} exists and is not a folder")
    return path


def renamed(data, old: str, new: str, section: str):
    """A config section's `data` with a key read under its former name `old` moved to `new`, said once as a
    warning; both names at once is an error (which one was meant cannot be told)."""
    if not isinstance(data, dict) or old not in data:
        return data
    if new in data:
        raise ValueError(f"{section}.{old} and {section}.{new} name one setting: keep {section}.{new}")
    log.warning("config: %s.%s is now called %s.%s (the old name is still read)", section, old, section, new)
    return {**{k: v for k, v in data.items() if k != old}, new: data[old]}
