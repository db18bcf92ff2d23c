"""The attention weight-address walk alone (mlo_hw/hw/engine/attention_weights.py): cocotb + Verilator, lint,
and a slow synthesis."""
import pytest

from mlo_hw.hw.engine.attention_weights import AttentionWeights
from mlo_hw.synth import synth_verilog
from sim.runner import lint, simulate, to_verilog


def test_addresses_follow_the_mvau():
    dut = AttentionWeights(max_addr=1024, max_cols=16, max_rows=16)
    v = to_verilog(dut, "attention_weights")
    assert lint(v, "attention_weights") == []
    widths = {name: (f.offset, f.width) for name, f in dut.signature.members["cfg"].shape}
    simulate(v, "attention_weights", "tb_attention_weights",
             {"max_addr": 1024, "max_cols": 16, "max_rows": 16, "cfg_widths": widths})


@pytest.mark.slow
def test_attention_weights_synthesize_without_latches():
    r = synth_verilog(to_verilog(AttentionWeights(4096, 64, 64), "attention_weights_syn"), "attention_weights_syn")
    assert r.latches == 0
