"""Pre-LN (GPT-2) layers in the engine RTL: LN1 before Q/K/V, O and FFN down added into the int16 residual stream
with saturation (the result writer's writes through ResidualAdd), LN2 before FFN up; bit exact against the golden
model tensor by tensor, on chip and through the DRAM-tiled schedule, causal, under random stalls and DDR3 timing."""
import random

import numpy as np
import pytest

from mlo_hw.config import load_config
from mlo_hw.model import numerics as nx
from mlo_hw.model.golden import int_stack
from mlo_hw.model.quantize import build_model, random_inputs
from mlo_hw.model.tiled import tiled_stack
from mlo_hw.plan import plan
from sim.harness import gpt2_like, small_gpt2_tiled_config


def test_the_plan_counts_the_layernorm_output_buffer():
    post = load_config("small")
    pre = gpt2_like(post)
    names = lambda p: {b.name: b for b in p.buffers}      # noqa: E731
    assert "r" not in names(plan(post)) and names(plan(pre))["r"].bytes == names(plan(pre))["x"].bytes
    tiled = plan(small_gpt2_tiled_config())
    assert (tiled.mode, tiled.block) == ("tiled", 32)
    assert names(tiled)["r"].bytes == 32 * pre.model.hidden * 2


def test_tiled_schedule_of_pre_ln_layers_equals_the_golden_model():
    cfg = small_gpt2_tiled_config()
    model = build_model(cfg)[1]
    s = cfg.seq_padded
    x, mask = random_inputs(cfg, np.random.default_rng(3), 2)[1]
    xi = model.quantize_input(x)
    want = int_stack(xi, model.layers, nx.attention_mask(mask, True), cfg.model.heads)
    for block in (16, 32):
        got = tiled_stack(cfg, model.layers, xi, mask, block).output
        assert np.array_equal(got, want), f"block {block}"
    assert s == 64


# ---- the engine RTL (sim/harness.py) ------------------------------------------------------------------------

def _rtl_runs(cfg, runs):
    """Runs of (tokens, stall, scale) in one simulation; ``scale`` multiplies the input (clipped to int16) so that
    the residual adds saturate, which the run then asserts happened."""
    from sim.engine_check import check_run_rejects_corruption
    from sim.harness import EngineSim, random_input
    sim = EngineSim(cfg, build_model(cfg)[1])
    rng = random.Random(11)
    lo, hi = -(1 << (nx.RES_BITS - 1)), (1 << (nx.RES_BITS - 1)) - 1
    for i, (tokens, stall, scale) in enumerate(runs):
        x = np.clip(random_input(cfg, sim.model, 40 + i) * scale, lo, hi)
        r, want, traces = sim.run_checked(x, tokens, seed=i + 1, stall=stall)
        check_run_rejects_corruption(cfg, r, want, traces, tokens, cfg.model.layers, rng)
        if scale > 1:
            unsaturated = x[:tokens] + traces[0]["attn_out"][:tokens]
            assert ((unsaturated > hi) | (unsaturated < lo)).any(), "no residual add saturated"


@pytest.mark.slow    # 45 s; the default suite runs pre-LN layers through the DRAM-tiled engine (tests/test_kv_cache.py)
def test_rtl_pre_ln_on_chip_bit_exact():
    """Two layers of small as GPT-2 layers, all on chip: full length under stalls, and an input large enough that
    x + O saturates in int16."""
    cfg = gpt2_like(load_config("small"))
    assert plan(cfg).mode == "on-chip"
    _rtl_runs(cfg, [(cfg.model.seq_len, 0.3, 1), (5, 0.0, 64)])


@pytest.mark.slow
@pytest.mark.parametrize("tokens, stall", [(45, 0.3), (64, 0.0)])
def test_rtl_pre_ln_through_dram_tiled_blocks_bit_exact(tokens, stall):
    """Pass 1 runs LN1 on each block before Q, K, V; pass 2 adds O into the block's residual, LN2, the FFN, and
    adds FFN down: 45 tokens (a full block and a partial one) under stalls, and the full length. In -m slow: the
    default run checks the same engine's 45-token prefill tensor by tensor (tests/test_kv_cache.py)."""
    _rtl_runs(small_gpt2_tiled_config(), [(tokens, stall, 1)])
