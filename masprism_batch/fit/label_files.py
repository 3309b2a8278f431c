"""What both readers of `fit --labels` share (fit/labels.py: our own rows; fit/tool_labels.py: an annotation
tool's export): the label of one trace, the unreadable-file error and the one checked read of the file's bytes.
Its own module so the two readers depend on it, never on each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


class LabelsFileError(ValueError):
    """The labels file cannot be read at all (not JSON lines / CSV, no trace_id column)."""


@dataclass
class Gold:
    steps: list[int] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)
    kinds: dict[int, list[str]] = field(default_factory=dict)  # step -> its labelled categories, as written
    # what each list holds, for a lookup per row (a list scan per row made a file naming thousands quadratic)
    _seen: dict = field(default_factory=dict, repr=False, compare=False)

    def add_step(self, step: int) -> None:
        self._add("steps", self.steps, step)

    def add_agent(self, agent: str) -> None:
        self._add("agents", self.agents, agent)

    def add_kind(self, step: int, kind: str | None) -> None:
        if kind and kind.strip():
            self._add(("kind", step), self.kinds.setdefault(step, []), kind.strip())

    def _add(self, key, values: list, value) -> None:
        seen = self._seen.get(key)
        if seen is None:  # built from the list as it is (a Gold made with lists already)
            seen = self._seen[key] = set(values)
        if value not in seen:
            seen.add(value)
            values.append(value)


MAX_LABELS_BYTES = 1 << 30  # a labels file: 1 GiB, tens of millions of rows; /dev/zero would never end


def read_labels_bytes(path: Path | str, cap: int = MAX_LABELS_BYTES) -> bytes:
    """A labels file's bytes, read only when it is a regular file (`config_checks.read_regular`: a FIFO never
    blocks, /dev/zero is refused) of at most `cap` bytes: else LabelsFileError naming it. The open's OSError
    propagates."""
    from masprism_batch.config_checks import NotRegularFile, read_regular

    try:
        raw, size = read_regular(path, cap)
    except NotRegularFile:
        raise LabelsFileError(f"{path}: not a regular file (a FIFO, device or folder is never read)") from None
    if max(size, len(raw)) > cap:
        raise LabelsFileError(f"{path}: {max(size, len(raw)):,} bytes; a labels file is at most {cap:,} (split it)")
    return raw
