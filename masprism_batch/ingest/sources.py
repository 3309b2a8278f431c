"""Finding input files: directories are walked, links and special files held to one policy, ids taken from paths.

Nothing here interprets content; `detect.py` decides the format. Input paths are only ever *read*.

Input policy (every command reads inputs through here: `ingest`, `run`/`attribute` staging, `eval`):
- Only regular files are read. A FIFO, socket or device (named directly or found in a folder, or reached
  through a link) becomes an error row `not_a_regular_file`; nothing is opened that could block.
- Symbolic links: a path named on the command line is followed (the user chose it). Inside a walked folder a
  link is followed only if its target, fully resolved, lies inside that input folder; a link pointing
  outside it (a file or a folder) is an error row `symlink_outside_input`. Links to folders are never
  descended (no loops); a folder link that stays inside is skipped silently, its target is walked under its
  own name.
- Reading a file's bytes (`file_bytes.py`) allocates what the file holds, never a fixed reservation.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from masprism_batch.schema import error_row

log = logging.getLogger(__name__)

# Files picked up when walking a directory (explicitly named files are always tried).
# .traj: SWE-agent trajectories (JSON); .zip / .eval: zip containers (Inspect AI logs), read as their members
DATA_SUFFIXES = (".json", ".jsonl", ".ndjson", ".parquet", ".traj", ".zip", ".eval", ".af")  # .af: Letta agent files


def readable_names() -> str:
    """The names a folder walk reads, as every message says them: one list (DATA_SUFFIXES), one wording."""
    return (f"{', '.join(DATA_SUFFIXES)}, optionally .gz; .txt/.log only when they are a CrewAI output log or an "
            "AgentEval response log")


def _is_data_file(name: str) -> bool:
    base = name[:-3] if name.endswith(".gz") else name
    return base.endswith(DATA_SUFFIXES)


_SIDECARS = {"annotations", "errors", "attributions", "step_scores"}


def _label_sidecar_dir(dirpath: str, name: str) -> bool:
    # TRAIL keeps labels in `annotations/` beside `traces/`: those files are read with their trace
    # (openinference.py), never as traces of their own. Likewise an OUTDIR given as input means its
    # `traces/` dataset, not the errors/attributions/step_scores tables beside it.
    return name in _SIDECARS and os.path.isdir(os.path.join(dirpath, "traces"))


def _not_regular(path: str) -> str | None:
    """Why `path` (links followed) is not a readable regular file, or None. stat() never blocks on a FIFO."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"cannot stat: {e.strerror or e}"
    if stat.S_ISREG(st.st_mode):
        return None
    kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
            else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file")
    return f"{kind}, not a regular file: not read"


# text logs a known format writes (CrewAI's output_log_file; AG2 AgentEval's response logs, JSON whose first key is
# "problem"): read from a folder when their first bytes say so
TEXT_LOG_SUFFIXES = (".txt", ".log")
_TEXT_LOG_HEAD = re.compile(rb'^(?:\xef\xbb\xbf)?(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d: [a-z_]{2,12}="|\s*\{\s*"problem"\s*:)')


def _is_text_log(path: str, name: str) -> bool:
    if not name.lower().endswith(TEXT_LOG_SUFFIXES) or name.startswith((".", "_")) or _not_regular(path):
        return False
    from masprism_batch.ingest.common import IngestError
    from masprism_batch.ingest.file_bytes import regular_file

    try:  # opened as every input is (O_NONBLOCK, fstat on the descriptor): a FIFO swapped in is no hang
        with regular_file(path) as f:
            return _TEXT_LOG_HEAD.match(f.read(64)) is not None
    except (OSError, IngestError):
        return False


def skipped_row(path: str, name: str) -> dict:
    """The `errors/` row (a warning, `skipped_file`) of a file a folder walk does not read, with the reason."""
    ext = os.path.splitext(name[:-3] if name.endswith(".gz") else name)[1] or "(none)"
    why = f"extension {ext} is not a data file (read: {readable_names()}): not read; name the file to read it anyway"
    return error_row(input_path=path, stage="ingest", reason="skipped_file", message=why)


def _inside(path: str, root: str) -> bool:
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def expand(paths: list[str], on_error: Callable[[dict], None], skipped: list[str] | None = None) -> Iterator[str]:
    """Yield the regular data files under `paths` in a stable (sorted) order; missing paths, special files and
    links leaving an input folder become error rows (module docstring: input policy)."""
    for p in paths:
        p = str(p)
        if os.path.isdir(p):
            root = os.path.realpath(p)
            for dirpath, dirnames, filenames in os.walk(p):  # does not follow symlinked dirs: no loops
                keep = []
                for d in sorted(dirnames):
                    if d.startswith((".", "_")) or _label_sidecar_dir(dirpath, d):
                        continue
                    full = os.path.join(dirpath, d)
                    if os.path.islink(full):
                        if not _inside(full, root):
                            on_error(error_row(input_path=full, stage="ingest", reason="symlink_outside_input",
                                               message="link to a folder outside the input folder: not followed"))
                        continue
                    keep.append(d)
                dirnames[:] = keep
                for name in sorted(filenames):
                    full = os.path.join(dirpath, name)
                    if name.startswith((".", "_")) or not (_is_data_file(name) or _is_text_log(full, name)):
                        if skipped is not None:
                            skipped.append(full)
                        if not name.startswith((".", "_")):  # hidden / '_' names are housekeeping (_SUCCESS)
                            on_error(skipped_row(full, name))  # listed: nothing in a folder goes unread unsaid
                        continue
                    if os.path.islink(full) and not _inside(full, root):
                        on_error(error_row(input_path=full, stage="ingest", reason="symlink_outside_input",
                                           message="link to a file outside the input folder: not followed"))
                        continue
                    why = _not_regular(full)
                    if why is not None:
                        on_error(error_row(input_path=full, stage="ingest", reason="not_a_regular_file", message=why))
                        continue
                    yield full
        elif os.path.lexists(p):
            why = _not_regular(p)
            if why is not None:
                log.error("input %s: %s", p, why)
                on_error(error_row(input_path=p, stage="ingest", reason="not_a_regular_file", message=why))
                continue
            yield p
        else:
            log.error("input not found: %s", p)
            on_error(error_row(input_path=p, stage="ingest", reason="not_found", message="no such file or directory"))


def base_name(path: str) -> str:
    """File name without `.gz` and without the data suffix: 'traces/abc.json.gz' -> 'abc'."""
    name = os.path.basename(path)
    if name.endswith(".gz"):
        name = name[:-3]
    stem, dot, ext = name.rpartition(".")
    return stem if dot and ("." + ext) in DATA_SUFFIXES else name


def file_size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def path_ids(files: list[str]) -> dict[str, str]:
    """A trace id for each file whose format takes its id from the path (Who&When): `<parent>/<stem>`, with more
    leading folders only where two files of this input would otherwise share it, so two folders holding the same
    file names give distinct ids, and a benchmark folder keeps the short id its published results use
    (`Algorithm-Generated/0`). Depends on the set of files only, never on their order (a resumed run gets the
    same ids); the same file named twice keeps one id (ingest then rejects the copy as a duplicate)."""
    full = {f: os.path.normpath(os.path.abspath(f)) for f in files}
    stems: dict[tuple[str, str], set[str]] = {}
    for p in full.values():
        stems.setdefault((os.path.dirname(p), base_name(p)), set()).add(p)
    # one folder holding x.json and x.json.gz: no folder tells them apart, their whole file names do
    name = {f: base_name(p) if len(stems[(os.path.dirname(p), base_name(p))]) == 1 else os.path.basename(p)
            for f, p in full.items()}
    parts = {f: tuple(c for c in os.path.dirname(p).split(os.sep) if c) + (name[f],) for f, p in full.items()}
    depth = dict.fromkeys(parts, 2)

    def owners() -> dict[tuple[str, ...], set[str]]:
        out: dict[tuple[str, ...], set[str]] = {}
        for f, comps in parts.items():
            out.setdefault(comps[-depth[f]:], set()).add(full[f])
        return out

    while True:
        own = owners()
        clash = [f for f, comps in parts.items() if len(own[comps[-depth[f]:]]) > 1 and depth[f] < len(comps)]
        if not clash:
            break
        for f in clash:  # only the colliding ids grow, one folder at a time
            depth[f] += 1
    return {f: "/".join(comps[-depth[f]:]) for f, comps in parts.items()}
