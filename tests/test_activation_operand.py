"""The activation operand alone (mlo_hw/hw/engine/activation_operand.py): cocotb + Verilator against
numerics.narrow under backpressure, lint, and a slow synthesis."""
import pytest

from mlo_hw.hw.engine.activation_operand import ActivationOperand
from mlo_hw.hw.layer_engine import BUFFER_READ_LATENCY
from mlo_hw.synth import synth_verilog
from sim.runner import lint, simulate, to_verilog


@pytest.mark.parametrize("hidden,simd,read_latency,waits", [(32, 4, 1, 0), (128, 8, BUFFER_READ_LATENCY, 2)])
def test_vectors_are_narrowed_or_passed_bit_exact(hidden, simd, read_latency, waits):
    mem_words = 4 * hidden
    dut = ActivationOperand(hidden, simd, 12, hidden // simd + 2, 8, max_passes=3, read_latency=read_latency,
                            waits=waits)
    top = f"operand_{hidden}_{simd}_{read_latency}_{waits}"
    v = to_verilog(dut, top)
    assert lint(v, top) == []
    widths = {name: (f.offset, f.width) for name, f in dut.signature.members["cmd"].shape}
    simulate(v, top, "tb_activation_operand", {"hidden": hidden, "simd": simd, "mem_words": mem_words,
                                               "cmd_widths": widths, "max_passes": 3,
                                               "read_latency": read_latency, "waits": waits,
                                               "wait_bits": dut.waits.shape().elem_shape.size if waits else 0})


@pytest.mark.slow
def test_activation_operand_synthesizes_without_latches():
    r = synth_verilog(to_verilog(ActivationOperand(128, 8, 12, 64, 128), "operand_syn"), "operand_syn")
    print("ActivationOperand bert_tiny:", r.used, "logic depth", r.logic_depth)
    assert r.latches == 0
