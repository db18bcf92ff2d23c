"""The tile parameter latch alone (mlo_hw/hw/engine/tile_params.py): overlapping jobs under cocotb + Verilator,
lint, and a slow synthesis."""
import pytest

from mlo_hw.config import load_config
from mlo_hw.hw.buffers import TileBuffer
from mlo_hw.hw.engine.tile_params import TileParamLatch
from mlo_hw.hw.mvau import BIAS_BITS, MVAUParams
from mlo_hw.synth import synth_verilog
from sim.runner import lint, simulate, to_verilog


@pytest.mark.parametrize("name,vectors,latency", [("small", 8, 1), ("bert_tiny", 16, 1),
                                                  ("bert_tiny", 16, TileBuffer.PARAM_READ_LATENCY)])
def test_jobs_overlap_without_overwriting(name, vectors, latency):
    """The source's data ``latency`` cycles after its address: 1, and the tile buffer's."""
    cfg = load_config(name)
    mp = MVAUParams.from_config(cfg)
    dut = TileParamLatch(mp, cfg.folding.tile_rows, vectors, src_latency=latency)
    top = f"tile_params_{name}_{latency}"
    v = to_verilog(dut, top)
    assert lint(v, top) == []
    simulate(v, top, "tb_tile_params", {"pe": mp.pe, "groups": dut.groups, "vectors": vectors,
                                        "bias_bits": BIAS_BITS, "mult_bits": mp.mult_bits, "src_latency": latency})


@pytest.mark.slow
def test_tile_params_synthesize_without_latches():
    cfg = load_config("bert_tiny")
    dut = TileParamLatch(MVAUParams.from_config(cfg), cfg.folding.tile_rows, cfg.seq_padded)
    r = synth_verilog(to_verilog(dut, "tile_params_syn"), "tile_params_syn")
    print("TileParamLatch bert_tiny:", r.used, "logic depth", r.logic_depth)
    assert r.latches == 0
