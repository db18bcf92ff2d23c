"""The AXI4 read DMA: cocotb + Verilator against cocotbext-axi's AxiRamRead, lint and synthesis."""

import pytest

from mlo_hw.hw.axi import AxiParams
from mlo_hw.config import load_config
from mlo_hw.synth import synth_verilog
from mlo_hw.hw.weight_dma import ReadDma
from sim.runner import lint, simulate, to_verilog


def _dma(cfg_name, tag_bits=4):
    p = AxiParams.from_config(load_config(cfg_name))
    return p, ReadDma(p, beats_bits=16, tag_bits=tag_bits)


def _params(p, seeds, error_trials):
    return {"addr_bits": p.addr_bits, "data_bits": p.data_bits, "max_burst": p.max_burst_beats,
            "beats_bits": 16, "tag_bits": 4, "seeds": list(seeds), "error_trials": error_trials}


def test_port_names_follow_axi_conventions():
    _, dma = _dma("small")
    names = set(dma.signature.members.keys())
    for ch in ("araddr", "arlen", "arsize", "arburst", "arcache", "arprot", "arid", "arvalid", "arready",
               "rid", "rdata", "rresp", "rlast", "rvalid", "rready"):
        assert f"m_axi_{ch}" in names
    v = to_verilog(dma, "weight_dma_ports")
    assert "input m_axi_rlast;" in v and "output [31:0] m_axi_araddr;" in v


@pytest.mark.parametrize("cfg_name,seeds,trials", [
    pytest.param("small", range(12), 8, marks=pytest.mark.slow),   # small's weights stream in every default full-stack run
    ("bert_tiny", range(100, 102), 3)])
def test_dma_against_axi_ram(cfg_name, seeds, trials):
    p, dma = _dma(cfg_name)
    v = to_verilog(dma, f"weight_dma_{cfg_name}")
    assert lint(v, f"weight_dma_{cfg_name}") == []
    simulate(v, f"weight_dma_{cfg_name}", "tb_weight_dma", _params(p, seeds, trials))


@pytest.mark.slow      # the DMA is also synthesized inside the memory system (tests/test_memsys.py)
def test_dma_synthesizes_without_latches():
    _, dma = _dma("bert_tiny")
    r = synth_verilog(to_verilog(dma, "weight_dma_syn"), "weight_dma_syn")
    assert r.latches == 0
    assert r.used["DSP"] == 0 and r.used["LUT"] < 600, r.used


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError, match="outstanding"):
        ReadDma(AxiParams(), outstanding=0)
