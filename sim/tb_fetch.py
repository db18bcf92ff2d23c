"""cocotb test of mlo_hw.hw.loop_ctrl.LoopController alone: the commands it issues for a fetch program, under
random ``cmd.ready`` and random ``can_claim``, against the list the test computed from the schedule."""
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from runner import tb_params

P = tb_params()


@cocotb.test()
async def commands_follow_the_program(dut):
    want = [tuple(c) for c in P["commands"]]
    addr_bits, beats_bits = P["addr_bits"], P["beats_bits"]
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for n in ("start", "cancel", "dma_busy", "dma_error", "cmd__ready", "can_claim", "scratch_ready"):
        getattr(dut, n).value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    for seed in range(3):
        rng = random.Random(seed)
        p_ready, p_claim = rng.choice([1.0, 0.6, 0.3]), rng.choice([1.0, 0.5])
        dut.layers.value, dut.weight_base.value, dut.scratch_base.value = P["layers"], P["weight_base"], P["scratch_base"]
        dut.run_blocks.value = P["run_blocks"]
        dut.start.value = 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        got, done, cycles = [], 0, 0
        # scratch reads (K_h, V_h^T) wait for scratch_ready: low for a random number of cycles first
        ready_at = rng.randrange(3000)
        while not done:
            dut.scratch_ready.value = int(cycles >= ready_at)
            dut.cmd__ready.value = int(rng.random() < p_ready)
            dut.can_claim.value = int(rng.random() < p_claim)
            await ReadOnly()
            if int(dut.cmd__valid.value) and int(dut.cmd__ready.value):
                v = int(dut.cmd__payload.value)
                got.append((v & ((1 << addr_bits) - 1), (v >> addr_bits) & ((1 << beats_bits) - 1), v >> (addr_bits + beats_bits)))
                tile = P["tile_tags"][str(got[-1][2] & 15)]
                assert not tile or int(dut.claim.value), f"command {len(got)}: a tile command without claim"
                assert not tile or int(dut.can_claim.value), f"command {len(got)}: a tile command without a free bank"
                scratch = P["tile_tags"][str(got[-1][2] & 15)] and got[-1][0] >= P["scratch_base"] > P["weight_base"]
                assert not scratch or int(dut.scratch_ready.value), f"command {len(got)}: a scratch read before scratch_ready"
            done = int(dut.done.value)
            await RisingEdge(dut.clk)
            cycles += 1
            assert cycles < 200000, f"no done after {len(got)} commands"
        for i, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"seed {seed}: command {i}: (addr, beats, tag) {tuple(map(hex, g))}, expected {tuple(map(hex, w))}"
        assert len(got) == len(want), f"seed {seed}: {len(got)} commands, expected {len(want)}"
        await ClockCycles(dut.clk, 3)
    # negative check: the comparison sees a wrong address
    assert [(a + 64, b, t) for a, b, t in want[:1]] != want[:1]
