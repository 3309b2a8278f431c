"""Host side of the step-mass pass (kernels/step_plan.py): which kernel a pack takes (the widest step span of a
key tile against the window) and the step-token lists the reduction kernel walks, against brute force on fresh
random ragged packs (odd lengths, -1 tokens, an empty and a 1-token sequence). No kernel runs here: the kernels'
numerics are in tests/signals/test_step_attention.py."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.kernel  # the kernels' tests (Triton interpreter, AOT compile, GPU runbook): -m 'not kernel' skips

step_plan = pytest.importorskip("masprism_batch.kernels.step_plan")


def _pack(seed: int, interleaved: bool):
    g = torch.Generator().manual_seed(seed)
    lengths = [47, 123, 0, 1, 1023]
    sids, n_steps = [], []
    for n in lengths:
        if interleaved:
            k = int(torch.randint(1, 40, (1,), generator=g))
            sid = torch.randint(-1, k, (n,), generator=g)
        else:  # contiguous runs of 1..20 tokens, some -1
            sid = torch.searchsorted(torch.randint(1, 21, (n,), generator=g).cumsum(0), torch.arange(n), right=True)
            sid = torch.where(torch.rand(n, generator=g) < 0.1, -1, sid)
            k = int(sid.max()) + 1 if n else 0
        sids.append(sid)
        n_steps.append(k)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return cu, torch.cat(sids).to(torch.int32), torch.tensor(n_steps, dtype=torch.int32)


@pytest.mark.parametrize("interleaved", [False, True])
def test_plan_spans_and_step_token_lists_match_brute_force(interleaved, seed):
    cu, sid, ns = _pack(seed, interleaved)
    plan = step_plan.Plan(cu, sid, ns, torch.device("cpu"))
    bounds, n_max = cu.tolist(), int(ns.max())
    for bn in (32, 64):
        worst = 0
        for s, e in zip(bounds[:-1], bounds[1:], strict=True):
            for a in range(s, e, bn):
                ids = [x for x in sid[a:min(a + bn, e)].tolist() if x >= 0]
                if ids:
                    worst = max(worst, max(ids) - min(ids) + 1)
        assert plan.max_span(bn) == worst, f"seed={seed} bn={bn}"
    off, tok = plan.offsets.tolist(), plan.tokens.tolist()
    assert len(off) == (len(bounds) - 1) * n_max + 1
    for b, (s, e) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        for i in range(n_max):
            seg = b * n_max + i
            want = [t for t in range(s, e) if int(sid[t]) == i]
            assert tok[off[seg]:off[seg + 1]] == want, f"seed={seed} sequence {b} step {i}"


def test_window_steps_picks_the_kernel():
    assert step_plan.window_steps(0, 64) == 16  # no step token in any tile: the smallest window
    assert step_plan.window_steps(9, 64) == 16
    assert step_plan.window_steps(17, 64) == 32
    assert step_plan.window_steps(64, 64) == 64
    assert step_plan.window_steps(65, 64) == 0  # wider than the window: the loop kernel
    assert step_plan.window_steps(5, 0) == 0  # STEPS=0 forces the loop kernel


def test_block_table_is_built_once_per_pack():
    """Both passes of every instrumented layer and the plain layers' varlen forward share the pack's block
    tables (one build per pack and tile height, not ~9 small device ops per layer); a new or modified cu_seqlens
    gets fresh ones, which equal a direct build."""
    from masprism_batch.kernels import step_attention as sa

    cu = torch.tensor([0, 47, 170, 171], dtype=torch.int32)
    first = sa._block_table(cu, 64, 171)
    assert sa._block_table(cu, 64, 171) is first
    other = sa._block_table(cu, 128, 171)  # the other pass's tile height: kept beside the first
    assert sa._block_table(cu, 64, 171) is first and sa._block_table(cu, 128, 171) is other
    cu2 = torch.tensor([0, 100, 171], dtype=torch.int32)
    fresh = sa._block_table(cu2, 64, 171)
    want = sa._build_block_table(cu2, 64, 171)
    assert fresh is not first and all(torch.equal(a, b) for a, b in zip(fresh[:2], want[:2], strict=True))
    cu2[1] = 90  # modified in place: the version counter changes, so the table is rebuilt
    assert torch.equal(sa._block_table(cu2, 64, 171)[1], sa._build_block_table(cu2, 64, 171)[1])


@pytest.mark.parametrize("interleaved", [False, True])
def test_plan_bound_from_host_arrays_equals_the_one_read_from_the_tensors(interleaved, seed):
    """The forward binds the plan from its host arrays (no sync): the same step counts, step-token lists and spans
    as the plan read from the device tensors, and block tables equal to the device-built ones' live programs."""
    from masprism_batch.kernels import step_attention

    cu, sid, ns = _pack(seed, interleaved)
    read = step_plan.Plan(cu, sid, ns, torch.device("cpu"))
    uploads = []

    def upload(a, device):
        uploads.append(a.dtype)
        return torch.from_numpy(a).to(device)
    bound = step_plan.Plan.bind(cu, sid, ns, torch.device("cpu"), (cu.numpy(), sid.numpy(), ns.numpy()), upload)
    assert step_plan.Plan.get(cu, sid, ns, torch.device("cpu")) is bound  # the layers find it
    assert (bound.n_list, bound.n_max, bound.bounds) == (read.n_list, read.n_max, read.bounds)
    assert torch.equal(bound.tokens, read.tokens) and torch.equal(bound.offsets, read.offsets)
    assert all(bound.max_span(bn) == read.max_span(bn) for bn in (32, 64))
    T = int(cu[-1])
    for bm in (64, 128):
        seq, start, n = bound.block_table(bm)
        dseq, dstart, dn = step_attention._build_block_table(cu, bm, T)
        live = dseq >= 0
        assert n == int(live.sum()) <= dn, f"seed={seed} bm={bm}"
        assert torch.equal(seq, dseq[live]) and torch.equal(start, dstart[live]), f"seed={seed} bm={bm}"
        assert step_attention._block_table(cu, bm, T)[2] == n  # the launchers take the bound, exact table
    assert len(uploads) >= 2
