"""The parameter copier alone (mlo_hw/hw/engine/param_copier.py): cocotb + Verilator against a ParamStore model,
lint, and a slow synthesis."""
import pytest

from mlo_hw.hw.buffers import PARAM_SECTIONS
from mlo_hw.config import load_config
from mlo_hw.hw.engine.param_copier import ParamCopier
from mlo_hw.synth import synth_verilog
from sim.runner import lint, simulate, to_verilog


@pytest.mark.parametrize("name", ["small", "bert_tiny"])
def test_every_copy_lands_in_its_destination(name):
    cfg = load_config(name)
    dut = ParamCopier.from_config(cfg)
    top = f"param_copier_{name}"
    v = to_verilog(dut, top)
    assert lint(v, top) == []
    simulate(v, top, "tb_param_copier", {
        "hidden": cfg.model.hidden, "lanes": cfg.folding.simd, "slot_words": dut.pgeo.slot_bytes // 4,
        "sections": list(PARAM_SECTIONS), "offsets": dut.pgeo.offsets})


@pytest.mark.slow
def test_param_copier_synthesizes_without_latches():
    cfg = load_config("bert_tiny")
    r = synth_verilog(to_verilog(ParamCopier.from_config(cfg), "param_copier_syn"), "param_copier_syn")
    print("ParamCopier bert_tiny:", r.used, "logic depth", r.logic_depth)
    assert r.latches == 0
