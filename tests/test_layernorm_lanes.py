"""The LayerNorm lanes alone (mlo_hw/hw/engine/layernorm_lanes.py): cocotb + Verilator bit-exact against
numerics.layernorm under random backpressure at 1 to 4 lanes (folding.ln_lanes) of 1 to 4 elements a cycle
(folding.ln_width), lint, and a slow synthesis."""
import pytest

from mlo_hw.config import load_config
from mlo_hw.hw.engine.layernorm_lanes import LayerNormLanes
from mlo_hw.hw.layer_engine import BUFFER_READ_LATENCY
from mlo_hw.synth import synth_verilog
from sim.runner import lint, simulate, to_verilog


@pytest.mark.parametrize("name,max_rows,lanes,width", [
    ("small", 8, 3, 1),                         # 3 lanes: rows 5 and 7 leave the lanes uneven
    ("small", 7, 1, 2),                         # 2 elements a cycle (bert_tiny_auto's LayerNorm)
    pytest.param("small", 8, 2, 1, marks=pytest.mark.slow),     # 2 (the default) runs in every full-stack test
    pytest.param("small", 8, 1, 1, marks=pytest.mark.slow), pytest.param("small", 8, 4, 1, marks=pytest.mark.slow),
    pytest.param("small", 8, 1, 4, marks=pytest.mark.slow),     # width = simd: a word a beat
    pytest.param("bert_tiny", 6, 2, 2, marks=pytest.mark.slow),
    pytest.param("bert_tiny", 6, 2, 1, marks=pytest.mark.slow), pytest.param("bert_tiny", 6, 4, 1, marks=pytest.mark.slow)])
def test_rows_are_layernormed_bit_exact(name, max_rows, lanes, width):
    cfg = load_config(name)
    read_latency = 1 if lanes == 1 and width == 1 else BUFFER_READ_LATENCY   # the engine's, and the unregistered read
    dut = LayerNormLanes(cfg.model.hidden, cfg.folding.simd, max_rows, lanes, read_latency=read_latency, width=width)
    top = f"ln_lanes_{name}_{lanes}_{width}"
    v = to_verilog(dut, top)
    assert lint(v, top) == []
    simulate(v, top, "tb_layernorm_lanes", {"hidden": cfg.model.hidden, "simd": cfg.folding.simd,
                                            "max_rows": max_rows, "lanes": lanes, "width": width,
                                            "read_latency": read_latency})


@pytest.mark.slow
def test_layernorm_lanes_synthesize_without_latches():
    cfg = load_config("bert_tiny")
    r = synth_verilog(to_verilog(LayerNormLanes.from_config(cfg), "ln_lanes_syn"), "ln_lanes_syn")
    print("LayerNormLanes bert_tiny:", r.used, "logic depth", r.logic_depth)
    assert r.latches == 0
