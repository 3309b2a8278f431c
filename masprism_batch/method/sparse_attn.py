"""The step attention A [N, N] of a long log, stored by rows (CSR) instead of whole.

A log read in windows (render/windows.py) gives a query step mass only on the steps inside its window(s):
its own recent past read in full and the digest of older steps. Each row of A therefore holds at most about
as many non-zero entries as a window holds steps, whatever N is, and a row-sparse A is exact: every cell left
out is exactly 0. Memory is O(N x steps per window) where the whole matrix would be O(N^2).

`stage/combine.py` keeps A dense up to `schema.DENSE_STEPS` steps (every labelled benchmark log, so what they compute is
unchanged) and stores it as `SparseAttn` above; the method reads either through `row_of` / `dense_row`.

The `step_scores.attention_pass1` column writes row i as a *tail*: A[i, lo:i+1] where every entry before `lo`
is 0 (`lo = 0` for a dense log, so the row is complete). `full_row` turns a stored tail back into the whole row
A[i, :i+1]; every reader of the column goes through it.
"""

from __future__ import annotations

import numpy as np


class SparseAttn:
    """A [n, n] float32 by rows: row i's columns are indices[indptr[i]:indptr[i+1]] (ascending), its values
    data[indptr[i]:indptr[i+1]]; every other cell is 0."""

    def __init__(self, n: int, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray):
        self.n, self.indptr, self.indices, self.data = n, indptr, indices, data

    @property
    def shape(self) -> tuple[int, int]:
        return self.n, self.n

    @property
    def nnz(self) -> int:
        return int(self.data.size)

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.indices.nbytes + self.data.nbytes

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        s, e = self.indptr[i], self.indptr[i + 1]
        return self.indices[s:e], self.data[s:e]

    def dense_row(self, i: int) -> np.ndarray:
        out = np.zeros(self.n, dtype=self.data.dtype)
        c, v = self.row(i)
        out[c] = v
        return out

    def toarray(self) -> np.ndarray:
        """The whole matrix (tests and small logs only: this is the N x N the class exists to avoid)."""
        out = np.zeros((self.n, self.n), dtype=self.data.dtype)
        rows = np.repeat(np.arange(self.n), np.diff(self.indptr))
        out[rows, self.indices] = self.data
        return out

    @classmethod
    def from_dense(cls, A: np.ndarray) -> SparseAttn:
        r, c = np.nonzero(A)
        return cls(A.shape[0], _indptr(r, A.shape[0]), c.astype(np.int64), A[r, c])


class Accumulator:
    """Sums (row, column, value) entries in float64 like `dense[row, col] += value` would, entry by entry in the
    order they were added (so a cell two windows write gets the same rounding as the dense sum), then divides
    each row by its denominator into a float32 `SparseAttn`."""

    def __init__(self, n: int):
        self.n = n
        self._keys: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []

    def add(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
        """rows [r, 1], cols [1, c], vals [r, c] (broadcast); exact zeros are dropped (adding 0 changes no sum)."""
        keys = (rows.astype(np.int64) * self.n + cols.astype(np.int64))
        keys, vals = np.broadcast_arrays(keys, vals)
        keep = vals != 0
        self._keys.append(keys[keep])
        self._vals.append(vals[keep].astype(np.float64, copy=False))

    def finish(self, denom: np.ndarray) -> SparseAttn:
        keys = np.concatenate(self._keys) if self._keys else np.zeros(0, dtype=np.int64)
        vals = np.concatenate(self._vals) if self._vals else np.zeros(0, dtype=np.float64)
        self._keys, self._vals = [], []
        uniq, inv = np.unique(keys, return_inverse=True)
        del keys
        acc = np.zeros(uniq.size, dtype=np.float64)
        np.add.at(acc, inv, vals)  # unbuffered, in the order added: the dense path's rounding
        del inv, vals
        rows, cols = np.divmod(uniq, self.n)
        data = (acc / denom[rows]).astype(np.float32)
        return SparseAttn(self.n, _indptr(rows, self.n), cols, data)


def _indptr(rows: np.ndarray, n: int) -> np.ndarray:
    """CSR row starts of entries sorted by row."""
    return np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))]).astype(np.int64)


def row_of(A, i: int) -> np.ndarray:
    """Row i of A as a dense vector (a view for a dense A)."""
    return A[i] if isinstance(A, np.ndarray) else A.dense_row(i)


def row_tail(A, i: int) -> np.ndarray:
    """What `attention_pass1` stores for step i: A[i, :i+1] for a dense A; for a sparse A the row from its
    first non-zero column up to i (all of it when that is column 0; [0.0] when the row has no mass)."""
    if isinstance(A, np.ndarray):
        return A[i, : i + 1]
    c, v = A.row(i)
    keep = c <= i
    c, v = c[keep], v[keep]
    if not c.size:  # no mass at all: the tail [A[i, i]] = [0] still says "a row of zeros"
        return np.zeros(1, dtype=A.data.dtype)
    out = np.zeros(i + 1 - int(c[0]), dtype=A.data.dtype)
    out[c - c[0]] = v
    return out


def full_row(stored, step: int) -> np.ndarray:
    """The whole row A[step, :step+1] (float64) from a stored `attention_pass1` value: a shorter list is the
    row's tail (the entries before it are 0). None or empty: nothing is known, an empty array."""
    a = np.asarray(stored if stored is not None else [], dtype=np.float64)
    if a.size == 0 or a.size >= step + 1:
        return a
    return np.concatenate([np.zeros(step + 1 - a.size), a])
