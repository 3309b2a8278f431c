"""The two signal ops and their backend dispatch. Knows nothing of traces: tensors in, tensors out.

See `reference.py` for exact shapes and semantics. `backends.py` chooses the backend (torch reference, the C++
op in `cpp.py`, the Triton kernels in `triton.py`), `packed_batch.py` checks and binds a packed batch once,
`dispatch.py` holds the ops' entry points. The kernels are registered torch ops: torch.ops.masprism.step_attention
(C++) and torch.ops.masprism_triton.{step_attention,token_nll} (Triton), each with a fake kernel.
"""

from masprism_batch.signals import reference
from masprism_batch.signals.backends import (
    BACKENDS,
    _backend_module,
    cpp_available,
    resolve_backend,
    triton_available,
    triton_supports,
)
from masprism_batch.signals.dispatch import COMPACT_NLL_SHARE, step_attention, token_nll
from masprism_batch.signals.packed_batch import _already_checked, bind_pack, to_device

__all__ = ["BACKENDS", "COMPACT_NLL_SHARE", "_already_checked", "_backend_module", "bind_pack", "cpp_available",
           "reference", "resolve_backend", "step_attention", "to_device", "token_nll", "triton_available",
           "triton_supports"]
