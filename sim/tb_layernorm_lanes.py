"""cocotb test of mlo_hw.hw.engine.layernorm_lanes.LayerNormLanes: rows of (a, b) int16 pairs in a memory model
(read ``read_latency`` cycles late), random gains/biases/shift through the broadcast parameter port, random ``ready`` on the
word-write stream; every written word compared with ``numerics.layernorm(a + b, ...)``, row counts below the
maximum, rows made available a few at a time through ``avail`` (a read beyond it returns garbage), the taps (row r in
lane r % lanes, a beat of ``width`` elements each), ``rows_done`` (never a row not yet written whole; every row at the
end), ``rd_done`` (never before the trial's last read, no read after it, high at the end), and a negative check."""
import math
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from mlo_hw.model import numerics as nx
from runner import tb_params

P = tb_params()
H, SIMD, MAX_ROWS, LANES = P["hidden"], P["simd"], P["max_rows"], P["lanes"]
WIDTH = P.get("width", 1)      # elements a lane takes a cycle (a tap is a beat of them)
RW, RB = H // SIMD, nx.RES_BITS
LO, HI = -(1 << (RB - 1)), (1 << (RB - 1)) - 1
GMAX = (1 << (nx.LN_GAIN_BITS - 1)) - 1


def params(nrng, shift):
    s_out = 8.0 / (1 << (RB - 1))
    gain = np.clip(np.round(nrng.normal(1.0, 0.2, H) * math.sqrt(H) / s_out * 2.0 ** (shift - 15)), -GMAX, GMAX)
    bias = np.clip(np.round(nrng.normal(0.0, 0.3, H) / s_out * 2.0 ** shift), -(1 << 31), (1 << 31) - 1)
    return gain.astype(np.int64), bias.astype(np.int64)


class Bench:
    def __init__(self, dut):
        self.dut, self.mem, self.out, self.taps = dut, [], {}, []
        self.p_ready = 1.0
        self.avail = 0                    # pair words the DUT may read; a read beyond them returns garbage
        self.rows = self.whole = self.most = 0   # the trial's rows (0: rows_done not checked), rows written whole
        self.reads, self.read_all = 0, False     # the trial's reads, rd_done seen
        self.rng = random.Random(0)
        cocotb.start_soon(self._run())

    async def _run(self):
        dut, data = self.dut, 0
        requests = [(0, 0, 0)] * (P.get("read_latency", 1) - 1)     # registered in front of the block RAM
        while True:
            dut.rd_data.value = data
            dut.avail.value = self.avail
            ready = int(self.rng.random() < self.p_ready)
            dut.w__ready.value = ready
            await ReadOnly()
            requests.append((int(dut.rd_en.value), int(dut.rd_addr.value), self.avail))
            en, a, avail = requests.pop(0)
            if en:
                data = self.mem[a] if a < min(len(self.mem), avail) else self.rng.getrandbits(32 * SIMD)
            if self.rows:                 # all_written: high from the cycle after the last word's write, not before
                complete = len(self.out) == self.rows * RW
                assert int(dut.all_written.value) == complete, \
                    f"all_written {int(dut.all_written.value)} after {len(self.out)} of {self.rows * RW} words"
            if int(dut.w__valid.value) and ready:
                v = int(dut.w__payload.value)
                addr_bits = len(dut.w__payload) - RB * SIMD
                addr, word = v & ((1 << addr_bits) - 1), v >> addr_bits
                assert addr not in self.out, f"word {addr} written twice"
                self.out[addr] = [((word >> (RB * i)) & 0xFFFF) - (1 << 16) * ((word >> (RB * i + 15)) & 1)
                                  for i in range(SIMD)]
            if self.rows:                 # rd_done: every read issued (none after it)
                if int(dut.rd_en.value):
                    assert not self.read_all, f"a read (word {int(dut.rd_addr.value)}) after rd_done"
                    self.reads += 1
                if int(dut.rd_done.value):
                    assert self.reads == self.rows * RW, f"rd_done after {self.reads} of {self.rows * RW} reads"
                    self.read_all = True
            if self.rows:                 # rows_done never counts a row with a word not yet written
                while self.whole < self.rows and all((self.whole * RW + c) in self.out for c in range(RW)):
                    self.whole += 1
                done = int(dut.rows_done.value)
                assert done <= self.whole, f"rows_done {done} but {self.whole} rows written whole"
                self.most = max(self.most, done)
            tv = int(dut.taps.value)
            for lane in range(LANES):
                if tv >> lane & 1:
                    self.taps.append(lane)
            await RisingEdge(dut.clk)


@cocotb.test()
async def random_rows_under_backpressure(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = dut.param__en.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    b = Bench(dut)
    for trial in range(4):
        nrng = np.random.default_rng(trial)
        b.rng = random.Random(trial)
        b.p_ready = [1.0, 0.6, 0.3, 0.9][trial]
        rows = [MAX_ROWS, max(1, MAX_ROWS // 2 + 1), 1, MAX_ROWS - 1 or 1][trial]
        shift = int(nrng.integers(3, 13))
        sigma = nrng.uniform(500, 3000, (rows, 1))
        a = np.clip(np.round(nrng.normal(0, 1, (rows, H)) * sigma), LO, HI).astype(np.int64)
        bb = np.clip(np.round(nrng.normal(0, 0.5, (rows, H)) * sigma), LO, HI).astype(np.int64)
        gain, bias = params(nrng, shift)
        for addr, word in enumerate([*gain, *bias]):
            dut.param__addr.value, dut.param__data.value, dut.param__en.value = addr, int(word) & 0xFFFFFFFF, 1
            await RisingEdge(dut.clk)
        dut.param__en.value = 0
        b.mem = []
        for r in range(rows):
            for c in range(RW):
                w = 0
                for i in range(SIMD):
                    ch = c * SIMD + i
                    w |= ((int(a[r, ch]) & 0xFFFF) | (int(bb[r, ch]) & 0xFFFF) << 16) << (32 * i)
                b.mem.append(w)
        b.out, b.taps = {}, []
        gradual = trial % 2 == 1                 # rows come a row at a time, a random while apart (the engine's overlap)
        b.avail = 0 if gradual else rows * RW
        dut.shift.value, dut.rows.value, dut.start.value = shift, rows, 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        b.rows, b.whole, b.most, b.reads, b.read_all = rows, 0, 0, 0, False
        next_row = 0
        for _ in range(rows * (5 * H + 400) + 1000):
            await RisingEdge(dut.clk)
            if gradual and b.avail < rows * RW and next_row <= 0:
                b.avail += RW
                next_row = b.rng.choice([0, 3, RW, H, 2 * H])
            next_row -= 1
            if len(b.out) == rows * RW:
                break
        await ClockCycles(dut.clk, 20)
        assert int(dut.written.value) == rows * RW == len(b.out), \
            f"trial {trial}: {len(b.out)} words written, counter {int(dut.written.value)}, expected {rows * RW}"
        assert b.most == int(dut.rows_done.value) == rows, f"trial {trial}: rows_done {int(dut.rows_done.value)}"
        assert b.read_all and int(dut.rd_done.value), f"trial {trial}: rd_done low at the end"
        assert int(dut.all_written.value), f"trial {trial}: all_written low at the end"
        b.rows = 0
        want = nx.layernorm(a + bb, gain, bias, shift, RB)
        got = np.array([sum((b.out[r * RW + c] for c in range(RW)), []) for r in range(rows)])
        bad = np.argwhere(got != want)
        assert len(bad) == 0, f"trial {trial}: {len(bad)} elements differ, first at {bad[0]}"
        assert [b.taps.count(i) for i in range(LANES)] == [len(range(i, rows, LANES)) * H // WIDTH
                                                            for i in range(LANES)], "taps"
    # negative check: a one-off expectation is caught
    want[0, 0] += 1
    assert (got != want).any()
