"""Tokenization for rendering: one cached encoder per tokenizer.

Rendering tokenizes every piece (headers, step contents) on its own; pass 2 re-renders the same steps, so
the ids are cached by exact text (bounded by characters, LRU). Thread-safe: Ray render tasks and the local
engine share one encoder per tokenizer object.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

_CACHE_MAX_CHARS = 32_000_000  # per tokenizer: ~one shard of long traces; ids stored as int32 (~1 B/char)


class Encoder:
    """Tokenizer adapter (HF fast/slow tokenizer or a bare `tokenizers.Tokenizer`) with a bounded LRU cache.

    The cache is keyed by exact text, so pass 2 reuses pass 1's tokenization of the same steps.
    """

    def __init__(self, tok):
        self.tok = tok
        backend = getattr(tok, "backend_tokenizer", None)
        if backend is None and hasattr(tok, "encode_batch") and hasattr(tok, "get_vocab_size"):
            backend = tok  # a bare tokenizers.Tokenizer
        self.backend = backend
        self.cache: OrderedDict[str, np.ndarray] = OrderedDict()  # int32 ids: a 9x smaller footprint than lists
        self.chars = 0
        self.lock = threading.Lock()
        self.bos = self._bos_ids()

    def _bos_ids(self) -> list[int]:
        bos = getattr(self.tok, "bos_token_id", None)
        if bos is None or self.backend is self.tok:
            return []
        ids = self.tok.encode("a")  # default special tokens: does this tokenizer prepend BOS itself?
        return [bos] if ids and ids[0] == bos else []

    def _raw(self, texts: list[str]) -> list[list[int]]:
        if self.backend is not None:
            return [e.ids for e in self.backend.encode_batch(texts, add_special_tokens=False)]
        return [list(self.tok.encode(t, add_special_tokens=False)) for t in texts]

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        with self.lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        fresh = dict(zip(missing, self._raw(missing), strict=True)) if missing else {}
        out = []
        with self.lock:
            for t in texts:
                ids = fresh.get(t)
                if ids is None:
                    arr = self.cache.get(t)
                    if arr is not None:
                        self.cache.move_to_end(t)
                        ids = arr.tolist()
                if ids is None:  # evicted between the two locks
                    ids = self._raw([t])[0]
                if t not in self.cache and len(t) <= _CACHE_MAX_CHARS // 4:
                    self.cache[t] = np.asarray(ids, dtype=np.int32)
                    self.chars += len(t)
                out.append(ids)
            while self.chars > _CACHE_MAX_CHARS and self.cache:
                old, _ = self.cache.popitem(last=False)
                self.chars -= len(old)
        return out

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids)


_ENCODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_ENCODERS_LOCK = threading.Lock()


def encoder_for(tok) -> Encoder:
    with _ENCODERS_LOCK:
        try:
            enc = _ENCODERS.get(tok)
        except TypeError:  # unhashable / not weak-referenceable tokenizer: cache within this call only
            return Encoder(tok)
        if enc is None:
            enc = _ENCODERS[tok] = Encoder(tok)
        return enc
