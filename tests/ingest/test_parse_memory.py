"""Issue 46 findings 8, 9 and 10: memory is bounded by what is parsed, not only by the bytes read. Each case reads a
hostile input in a fresh subprocess (its peak RSS is its own) and bounds that peak. Before: JSON of small
containers expanded ~20x under the byte cap (a 128 KB .json.gz -> 3.4 GB), every member of a zip was held at
once, a UTF-16 JSON-lines file was decoded and split whole (a 743 KB .jsonl.gz -> 7 GB), and a zip's central
directory of millions of entries was parsed before the 100,000-member check. The sizes here keep each case to a
second or two; the bounds are the baseline (the interpreter with ingest imported, measured in the same child)
plus what the case may hold, with the pre-fix peak several times above."""

from __future__ import annotations

import gzip
import io
import json
import struct
import subprocess
import sys
import zipfile

import pytest
from peak_rss import HWM

pytestmark = pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="peak RSS is read from "
                                "/proc/self/status (Linux)")

# the peak from /proc (VmHWM: this process image's own), not ru_maxrss, which Linux carries over from the parent
# across fork + exec (the child would start at pytest's peak and every bound would pass)
CHILD = r"""
import json, sys
from masprism_batch.config import IngestConfig
from masprism_batch.ingest import read_inputs
""" + HWM + r"""base = hwm()
errors = []
n = sum(1 for _ in read_inputs([sys.argv[1]], "auto", errors.append, limits=IngestConfig(max_file_bytes=int(sys.argv[2]))))
peak = hwm()
print(json.dumps({"traces": n, "reasons": sorted({e["reason"] for e in errors}), "errors": len(errors),
                  "base_mb": base, "peak_mb": peak}))
"""
MiB = 1024**2


def _run(path, max_file_bytes: int) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, str(path), str(max_file_bytes)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_json_of_small_containers_is_refused_before_it_is_parsed(tmp_path):
    """24 MiB of `{},` parses to ~600 MB of dicts; the estimate (4 x max_file_bytes = 128 MiB) refuses it."""
    n = 8 * MiB
    (tmp_path / "bomb.json.gz").write_bytes(gzip.compress(b"[" + b"{}," * n + b"{}]", 1))
    got = _run(tmp_path / "bomb.json.gz", 32 * MiB)
    assert got["reasons"] == ["file_too_large"] and got["traces"] == 0, got
    assert got["peak_mb"] - got["base_mb"] < 150, got  # bytes + text of 24 MiB, never the parsed objects


def test_zip_members_are_read_one_at_a_time(tmp_path):
    """20 members of 6 MiB of text each (120 MB decompressed, well under the archive's cap of 4 x 32 MiB): held at
    once before, one member (bytes, text, parsed) at a time now."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for i in range(20):
            steps = [{"agent": "a", "content": chr(97 + (i + k) % 26) * (200 * 1024)} for k in range(30)]
            z.writestr(f"m{i}.json", json.dumps({"trace_id": f"t{i}", "source": "s", "steps": steps}))
    (tmp_path / "big.zip").write_bytes(buf.getvalue())
    got = _run(tmp_path / "big.zip", 32 * MiB)
    assert got["traces"] == 20, got
    assert got["peak_mb"] - got["base_mb"] < 90, got


def test_utf16_json_lines_stream_line_by_line(tmp_path):
    """1M short lines in UTF-16 (6 MB): split whole before (1M string objects, ~60 MB), one line at a time now."""
    text = "\ufeff" + json.dumps({"trace_id": "t0", "source": "s", "steps": [{"agent": "a", "content": "x"}]}) \
           + "\n" + "  \n" * 10**6
    (tmp_path / "wide.jsonl.gz").write_bytes(gzip.compress(text.encode("utf-16-le"), 1))
    got = _run(tmp_path / "wide.jsonl.gz", 64 * MiB)
    assert got["traces"] == 1 and got["errors"] == 0, got
    assert got["peak_mb"] - got["base_mb"] < 25, got


def _many_entries_zip(n: int) -> bytes:
    """A zip whose central directory lists `n` entries (one local member; the others point at it): what a
    hostile archive looks like to the directory parser."""
    name = b"a.json"
    body = b'{"trace_id": "z", "source": "s", "steps": [{"agent": "a", "content": "x"}]}'
    crc = zipfile.crc32(body) if hasattr(zipfile, "crc32") else __import__("zlib").crc32(body)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, len(body), len(body), len(name), 0) + name + body
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, crc, len(body), len(body), len(name),
                          0, 0, 0, 0, 0, 0) + name
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(n, 0xFFFF), min(n, 0xFFFF), len(central) * n, len(local), 0)
    return local + central * n + eocd


def test_zip_member_count_is_checked_before_the_directory_is_parsed(tmp_path):
    """2M directory entries (104 MB, a 100 KB .zip.gz): refused from the end record, before ~1 GB of ZipInfo."""
    (tmp_path / "many.zip.gz").write_bytes(gzip.compress(_many_entries_zip(2 * 10**6), 6))
    got = _run(tmp_path / "many.zip.gz", 256 * MiB)
    assert got["reasons"] == ["file_too_large"] and got["traces"] == 0, got
    assert got["peak_mb"] - got["base_mb"] < 260, got  # the archive's bytes, read under max_file_bytes


@pytest.mark.parametrize("n", [3, 2000])  # the directory parse is only skipped above the member cap
def test_zip_with_entries_under_the_cap_is_read(tmp_path, n):
    (tmp_path / "ok.zip").write_bytes(_many_entries_zip(n))
    got = _run(tmp_path / "ok.zip", 64 * MiB)
    assert got["traces"] == 1 and got["reasons"] == ["duplicate_trace_id"], got  # every entry is the same member
