"""Issue 60 item 7: the GGUF conversion's announcement states a measured time only for the file it was measured
on (Gemma 3 270M's said "(36 s for SmolLM2-135M ...)" and took 69 s); any other file is told the time taken is
logged when done."""

from __future__ import annotations

import logging

import pytest

from masprism_batch.model import loader


@pytest.mark.parametrize("name,said", [("gemma-3-270m-it-Q4_K_M.gguf", "the time taken is logged when done"),
                                       ("SmolLM2-135M-Instruct.Q4_1.gguf", "36 s on a 2-core CPU for this file")])
def test_the_conversion_states_only_its_own_measured_time(tmp_path, caplog, name, said):
    gguf = tmp_path / "src" / name
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF" + b"\0" * 60)  # not a model: the conversion fails after its announcement
    caplog.set_level(logging.INFO, logger=loader.log.name)
    with pytest.raises(Exception):  # noqa: B017 - whatever transformers raises on a file that is no model
        loader.convert_gguf(gguf, str(tmp_path / "cache"))
    said_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("converting ")]
    assert len(said_lines) == 1 and said in said_lines[0]
    if "gemma" in name:
        assert "SmolLM2" not in said_lines[0] and "36 s" not in said_lines[0]
