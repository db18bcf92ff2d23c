"""LayerNorm block (residual add + LayerNorm): cocotb + Verilator bit-exact against numerics, lint, synthesis."""

import pytest

from mlo_hw.config import load_config
from mlo_hw.layernorm import LayerNorm
from mlo_hw.synth import synth_verilog
from sim.runner import lint, simulate, to_verilog


def _verilog(cfg_name):
    top = f"layernorm_{cfg_name}"
    return to_verilog(LayerNorm.from_config(load_config(cfg_name)), top), top


@pytest.mark.parametrize("cfg_name,rows", [("small", 12), ("bert_tiny", 4)])   # H = 32 and 128
def test_layernorm_bit_exact_under_backpressure(cfg_name, rows):
    v, top = _verilog(cfg_name)
    assert lint(v, top) == []
    simulate(v, top, "tb_layernorm", {"config": cfg_name, "seed": 5, "rows": rows})


def test_layernorm_testbench_catches_a_wrong_result():
    v, top = _verilog("small")
    with pytest.raises(AssertionError, match="realistic_rows"):
        simulate(v, top, "tb_layernorm", {"config": "small", "seed": 5, "rows": 8, "corrupt": True},
                 testcase="realistic_rows")


@pytest.mark.slow
def test_layernorm_synthesizes_without_latches():
    v, top = _verilog("small")
    r = synth_verilog(v, top)
    assert r.latches == 0
    assert r.logic_depth <= 20, f"logic depth {r.logic_depth}"
    assert r.used["LUT"] > 0


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_layernorm_rejects_bad_parameters():
    with pytest.raises(ValueError, match="hidden"):
        LayerNorm(hidden=0)
    with pytest.raises(ValueError, match="act_bits"):
        LayerNorm(hidden=32, act_bits=9)
