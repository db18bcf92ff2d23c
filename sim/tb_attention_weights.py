"""cocotb test of mlo_hw.hw.engine.attention_weights.AttentionWeights: random walks (base, cols, rows, stride)
with ``en`` at random; every address against (nf, sf) -> base + nf * stride + sf; a negative check."""
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from runner import tb_params

P = tb_params()
W = P["cfg_widths"]


@cocotb.test()
async def addresses_follow_the_mvau(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = dut.en.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    rng = random.Random(2)
    for trial in range(20):
        cols, rows = rng.randint(1, P["max_cols"]), rng.randint(1, P["max_rows"])
        stride = rng.randint(cols, 2 * cols)
        base = rng.randrange(P["max_addr"] - rows * stride + 1) if rows * stride <= P["max_addr"] else 0
        fields = {"base": base, "cols": cols, "rows": rows, "stride": stride}
        dut.cfg.value = sum(v << W[k][0] for k, v in fields.items())
        dut.start.value = 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        reads = rng.randint(1, 3) * rows * cols + rng.randrange(rows * cols)
        k = 0
        while k < reads:
            en = rng.random() < 0.7
            dut.en.value = int(en)
            await ReadOnly()
            if en:
                nf, sf = (k // cols) % rows, k % cols
                want = base + nf * stride + sf
                got = int(dut.addr.value)
                assert got == want, f"trial {trial}: read {k} (nf {nf}, sf {sf}) at {got}, expected {want}"
                k += 1
            await RisingEdge(dut.clk)
        dut.en.value = 0
    assert 1 * 4 + 2 != 2 * 4 + 1          # negative check: (nf, sf) are not interchangeable
