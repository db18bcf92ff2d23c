"""A decoder's KV cache in the DRAM-tiled engine RTL (docs/decode.md): a prefill (CACHE_LEN 0) writes every layer's K and
V^T into the scratch; each decode step (CACHE_LEN = the new token's position rounded down to lcm(pe, simd), its input
the rows from there on) computes one block against the cached keys and appends its own. Greedy generation with a
random vocabulary (sim/decode_run.py), the golden model's prefill + decode_step as the reference: the RTL's outputs
and its cache in DRAM are bit exact and its generated tokens the same. CACHE_LEN that is misaligned, too large or
above 0 with more than a block of tokens is refused with ERROR_CODE.bad_cache and no run."""
import numpy as np
import pytest

from mlo_hw.config import load_config
from mlo_hw.model.quantize import build_model
from mlo_hw.plan import kv_cache
from sim.decode_run import check_generation, engine_runs, golden_generation
from sim.harness import small_gpt2_tiled_config


def test_rtl_prefill_then_decode_steps_generate_the_golden_tokens():
    """Prompt of 45 tokens (a full block and a partial one), then 8 steps: positions 45..52, CACHE_LEN 44, 48 and 52
    (a step from a multiple of four on recomputes the group's earlier tokens, which the engine's block computes
    anyway); from CACHE_LEN 36 on a block's 32 keys would pass the 64-key capacity, so K_h and V_h^T are stored up
    to it. Between the prefill and the steps, three bad CACHE_LEN runs."""
    from sim.harness import EngineSim, Run
    prompt_len, steps = 45, 8
    cfg = small_gpt2_tiled_config()
    kv = kv_cache(cfg)
    assert (kv.capacity, kv.unit, kv.block) == (64, 4, 32)
    model = build_model(cfg)[1]
    gen = golden_generation(cfg, model, prompt_len, steps, np.random.default_rng(7))
    runs, starts = engine_runs(cfg, gen, prompt_len, dump_last=True)
    assert sorted(set(starts)) == [44, 48, 52]
    zeros = np.zeros((cfg.model.seq_len, cfg.model.hidden), np.int64)
    bad = [(1, 45), (33, 4), (5, 60)]          # (TOKENS, CACHE_LEN): misaligned, > a block, > the capacity
    runs[1:1] = [Run(zeros, t, cache_len=c, trace=False) for t, c in bad]
    sim = EngineSim(cfg, model)
    results = sim.run_many(runs, stall=0.3, seed=5)
    bit = sim.h.bit
    for (t, c), r in zip(bad, results[1:4]):
        assert r.status & bit("STATUS", "error") and r.error_code == bit("ERROR_CODE", "bad_cache"), \
            f"CACHE_LEN {c} TOKENS {t}: STATUS {r.status:#x} ERROR_CODE {r.error_code:#x}"
    check_generation(sim, gen, runs[0], starts, results[:1] + results[4:], prompt_len)
    assert len(set(gen.tokens[prompt_len:])) > 1, "a degenerate generation (one token repeated) tests little"


@pytest.mark.slow
def test_rtl_gpt2_tiny_decode_prefill_then_eight_steps():
    """gpt2_tiny_decode (4 layers, hidden 128, 4 heads, blocks of 8): a 60-token prefill, then 8 steps (positions
    60..67, CACHE_LEN 56 and 64) under random stalls."""
    from sim.harness import EngineSim
    cfg = load_config("gpt2_tiny_decode")
    model = build_model(cfg)[1]
    gen = golden_generation(cfg, model, 60, 8, np.random.default_rng(3))
    runs, starts = engine_runs(cfg, gen, 60, dump_last=True)
    assert sorted(set(starts)) == [56, 64]
    sim = EngineSim(cfg, model)
    check_generation(sim, gen, runs[0], starts, sim.run_many(runs, stall=0.2, seed=2), 60)
    assert len(set(gen.tokens[60:])) > 1, "a degenerate generation (one token repeated) tests little"


def test_runtime_decode_on_the_golden_and_rtl_backends(tmp_path):
    """The host runtime's run(..., cache_len=): the same prefill and decode steps on the golden backend (which models
    the cache in its DRAM, docs/decode.md) and on the RTL give the golden model's outputs, bit for bit; a bad
    CACHE_LEN is refused by both with ERROR_CODE.bad_cache (a build without a KV cache refusing cache_len: test_runtime)."""
    from mlo_hw.elaborate import write_build
    from mlo_hw.runtime import Accelerator, DeviceError, RuntimeInputError
    cfg = small_gpt2_tiled_config()
    out = tmp_path / "build"
    out.mkdir()
    write_build(cfg, out)
    model = build_model(cfg)[1]
    prompt_len = 30
    gen = golden_generation(cfg, model, prompt_len, 4, np.random.default_rng(11))
    runs, starts = engine_runs(cfg, gen, prompt_len)
    with Accelerator(out, backend="golden") as g, Accelerator(out, backend="sim", stall=0.3, seed=4) as s:
        for acc in (g, s):
            y = acc.run(runs[0].x, runs[0].tokens, cache_len=0)
            assert np.array_equal(y[:prompt_len], gen.outputs[0]), acc.backend.name
            for i, (run, a) in enumerate(zip(runs[1:], starts)):
                y = acc.run(run.x, run.tokens, cache_len=a)
                n = prompt_len + i
                assert np.array_equal(y[n - a], gen.outputs[i + 1][0]), f"{acc.backend.name} step {i}"
            with pytest.raises(DeviceError, match=rf"^engine ERROR: ERROR_CODE 0x20 \(bad_cache\) \[{acc.backend.name} "):
                acc.run(runs[0].x, 1, cache_len=6)
        for kw, message in (({"cache_len": -4}, r"^cache_len: expected a non-negative integer, got -4$"),
                            ({"cache_len": 4.0}, r"^cache_len: expected a non-negative integer, got 4.0$"),
                            ({"cache_len": 0, "per_layer": True}, r"^cache_len: a KV cache run keeps every layer's")):
            with pytest.raises(RuntimeInputError, match=message):
                g.run(runs[0].x, 4, **kw)


@pytest.mark.slow
def test_rtl_post_ln_decoder_decode_steps():
    """The KV cache does not depend on the layer kind: a post-LN causal model (a BERT decoder; small at 64 tokens in
    blocks of 32) through a 45-token prefill and 4 steps."""
    import dataclasses
    from sim.harness import EngineSim, small_tiled_config
    base = small_tiled_config()
    cfg = dataclasses.replace(base, name="small_tiled_causal", model=dataclasses.replace(base.model, causal=True))
    assert kv_cache(cfg) is not None and cfg.model.norm == "post"
    model = build_model(cfg)[1]
    gen = golden_generation(cfg, model, 45, 4, np.random.default_rng(9))
    runs, starts = engine_runs(cfg, gen, 45, dump_last=True)
    sim = EngineSim(cfg, model)
    check_generation(sim, gen, runs[0], starts, sim.run_many(runs, stall=0.3, seed=6), 45)
    assert len(set(gen.tokens[45:])) > 1, "a degenerate generation (one token repeated) tests little"
