"""The DRAM-tiled engine at scale (issue 12, "Activations beyond on-chip memory"): real model sizes whose
activations do not fit the part's block RAM, run through the whole RTL in the full-stack harness
(sim/harness.py) and checked bit for bit against the golden model, and BERT-base sized configs planned and
elaborated. All slow: `pytest -m slow tests/test_tiled_scale.py` (all-MiniLM-L6-v2 on the XC7A35T with real
sentences is `tests/test_harness.py::test_minilm_seq128_bit_exact_on_real_sentences[minilm_l6_arty-16]`).

Every run is checked tensor by tensor (sim/engine_check.py gathers the tiled engine's tensors block by block)
and on the output in DRAM; a corrupted output element and a corrupted on-chip tensor must both be caught."""
import random
import time

import pytest

from mlo_hw.config import load_config
from mlo_hw.hw.layer_engine import with_seq_len
from mlo_hw.model.quantize import build_model
from mlo_hw.plan import plan
from sim.engine_check import check_run_rejects_corruption
from sim.harness import EngineSim, random_input

pytestmark = pytest.mark.slow

TIMEOUT_CYCLES = 400_000_000


def _tiled(cfg, block):
    p = plan(cfg)
    assert (p.mode, p.block) == ("tiled", block), f"{cfg.name}: plan {p.mode} with blocks of {p.block}"
    return p


def _run_checked(cfg, sim, x, tokens, *, stall, memory, seed):
    """One run of every layer, checked tensor by tensor and in DRAM (``EngineSim.run_checked``), with the negative
    checks, and the scratch traffic: at least the residual stream written once per layer beyond the output."""
    t0 = time.time()
    r, want, traces = sim.run_checked(x, tokens, stall=stall, memory=memory, seed=seed, timeout_cycles=TIMEOUT_CYCLES)
    seq, layers = cfg.model.seq_len, cfg.model.layers
    check_run_rejects_corruption(cfg, r, want, traces, tokens, layers, random.Random(seed))
    assert r.stats["wr_beats"] > layers * seq * cfg.model.hidden * 2 // cfg.axi_data_bytes
    print(f"{cfg.name} tokens={tokens} stall={stall} memory={memory}: {r.cycles} cycles, {time.time() - t0:.0f} s")
    return r


def test_bert_tiny_seq512_on_the_xc7a35t_bit_exact_under_random_stalls_and_ddr3():
    """bert_tiny at 512 tokens on the XC7A35T plans tiled (blocks of 32 rows, 16 per pass): all 512 tokens
    under random stalls on all five AXI channels, then a padded input with the DDR3 timing model."""
    cfg = with_seq_len(load_config("bert_tiny"), 512)
    assert cfg.target.part.startswith("xc7a35t")
    _tiled(cfg, 32)
    assert load_config("bert_tiny_s512") == cfg        # the shipped file is the same config
    sim = EngineSim(cfg, build_model(cfg)[1])
    _run_checked(cfg, sim, random_input(cfg, sim.model, 3), 512, stall=0.3, memory="ideal", seed=1)
    _run_checked(cfg, sim, random_input(cfg, sim.model, 4), 389, stall=0.0, memory="ddr3", seed=2)


def test_bert_tiny_auto_with_128_mac_lanes_bit_exact_under_random_stalls():
    """``folding: auto`` fills the XC7A35T with 128 MAC lanes (PE 8 x SIMD 16; the activations then need the
    DRAM-tiled plan): all 128 tokens under random stalls on all five AXI channels, checked tensor by tensor."""
    cfg = load_config("bert_tiny_auto")
    assert cfg.target.part.startswith("xc7a35t")
    assert cfg.folding.pe * cfg.folding.simd == 128
    _tiled(cfg, 32)
    sim = EngineSim(cfg, build_model(cfg)[1])
    _run_checked(cfg, sim, random_input(cfg, sim.model, 5), 128, stall=0.3, memory="ideal", seed=3)


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
    _run_checked(cfg, sim, random_input(cfg, sim.model, 5), 64, stall=0.0, memory="ideal", seed=1)
