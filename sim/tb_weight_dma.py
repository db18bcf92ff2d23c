"""cocotb tests of mlo_hw.hw.weight_dma.ReadDma against cocotbext-axi's AxiRamRead as the DRAM.

Every delivered beat is compared with the memory contents at the address it must come from; the
AR channel is checked for page crossings and burst lengths; SLVERR/DECERR are injected on chosen
beats; cancel and a hard reset are applied in the middle of transfers.
"""
import logging
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiReadBus
from cocotbext.axi.constants import AxiResp

from axi_faults import FaultyRam, check_burst, pauses
from runner import tb_params

P = tb_params()
ADDR_BITS, DATA_BITS, MAX_BURST = P["addr_bits"], P["data_bits"], P["max_burst"]
BEATS_BITS, TAG_BITS = P["beats_bits"], P["tag_bits"]
BYTES = DATA_BITS // 8
MEM_BYTES = 1 << 17


class Bench:
    def __init__(self, dut):
        self.dut = dut
        self.ram = FaultyRam(AxiReadBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=MEM_BYTES)
        self.ram.log.setLevel(logging.WARNING)
        self.ram.write(0, random.Random(99).randbytes(MEM_BYTES))
        self.received = []              # (data, last, tag)
        self.p_ready = 1.0
        self.rng = random.Random(0)
        self.ars = []                   # (addr, len)
        self.cycle = 0
        dut.cmd__valid.value = 0
        dut.beats__ready.value = 0
        dut.cancel.value = 0
        dut.clear.value = 0
        cocotb.start_soon(self._sink())
        cocotb.start_soon(self._ar_monitor())

    def set_pauses(self, rng, p_ar, p_r):
        for ch, p in ((self.ram.ar_channel, p_ar), (self.ram.r_channel, p_r)):
            ch.set_pause_generator(pauses(rng, p) if p else None)
            if not p:
                ch.pause = False        # clearing a generator leaves the last pause value in place

    async def _sink(self):
        dut = self.dut
        while True:
            ready = self.rng.random() < self.p_ready
            dut.beats__ready.value = int(ready)
            await ReadOnly()
            if ready and int(dut.beats__valid.value) and not int(dut.rst.value):
                v = int(dut.beats__payload.value)
                self.received.append((v & ((1 << DATA_BITS) - 1), (v >> DATA_BITS) & 1, v >> (DATA_BITS + 1)))
            await RisingEdge(dut.clk)
            self.cycle += 1

    async def _ar_monitor(self):
        dut = self.dut
        while True:
            await ReadOnly()
            if int(dut.m_axi_arvalid.value) and int(dut.m_axi_arready.value) and not int(dut.rst.value):
                addr, ln = int(dut.m_axi_araddr.value), int(dut.m_axi_arlen.value) + 1
                check_burst("AR", addr, ln, int(dut.m_axi_arsize.value), int(dut.m_axi_arburst.value), BYTES, MAX_BURST)
                self.ars.append((addr, ln))
            await RisingEdge(dut.clk)

    async def send(self, cmds, p_valid=1.0):
        dut = self.dut
        for addr, beats, tag in cmds:
            while True:
                offer = self.rng.random() < p_valid
                dut.cmd__valid.value = int(offer)
                dut.cmd__payload.value = addr | (beats << ADDR_BITS) | (tag << (ADDR_BITS + BEATS_BITS))
                await ReadOnly()
                taken = offer and int(dut.cmd__ready.value)
                await RisingEdge(dut.clk)
                if taken:
                    break
        dut.cmd__valid.value = 0

    def expected(self, cmds):
        out = []
        for addr, beats, tag in cmds:
            for i in range(beats):
                a = addr + i * BYTES
                out.append((int.from_bytes(self.ram.read(a, BYTES), "little"), int(i == beats - 1), tag))
        return out

    async def wait_idle(self, limit=20000):
        for _ in range(limit):
            await RisingEdge(self.dut.clk)
            await ReadOnly()
            if not int(self.dut.busy.value):
                await RisingEdge(self.dut.clk)
                return
        raise AssertionError(f"DMA still busy after {limit} cycles")

    async def wait_count(self, n, limit=200000):
        for _ in range(limit):
            if len(self.received) >= n:
                return
            await RisingEdge(self.dut.clk)
        d = self.dut
        state = {k: int(getattr(d, k).value) for k in ("busy", "error", "m_axi_arvalid", "m_axi_arready",
                                                       "m_axi_rvalid", "m_axi_rready", "beats__valid")}
        raise AssertionError(f"{len(self.received)} of {n} beats after {limit} cycles; {state}")

    async def run(self, cmds, p_valid=1.0):
        self.received.clear()
        want = self.expected(cmds)
        await self.send(cmds, p_valid)
        await self.wait_count(len(want))
        await self.wait_idle()
        assert len(self.received) == len(want), f"{len(self.received)} beats, expected {len(want)}"
        for i, (g, w) in enumerate(zip(self.received, want)):
            assert g == w, f"beat {i}: got {g}, expected {w}"
        assert not int(self.dut.error.value)


async def start(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    b = Bench(dut)
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return b


def near_page(rng, beats):
    """A beat-aligned address within a few bursts of a 4 KiB boundary (or anywhere)."""
    span = beats * BYTES
    page = rng.randrange(1, MEM_BYTES // 4096 - (span // 4096) - 2)
    if rng.random() < 0.8:
        return page * 4096 - rng.randint(0, 2 * MAX_BURST) * BYTES
    return page * 4096 + rng.randrange(0, 4096 // BYTES) * BYTES


@cocotb.test()
async def every_burst_length(dut):
    """A command of every length 1..max_burst at a page start: exactly one burst each."""
    b = await start(dut)
    cmds = [((n % 24 + 1) * 4096, n, n % (1 << TAG_BITS)) for n in range(1, MAX_BURST + 1)]
    await b.run(cmds)
    assert sorted(ln for _, ln in b.ars) == list(range(1, MAX_BURST + 1))


@cocotb.test()
async def random_commands_many_seeds(dut):
    """Random commands near 4 KiB boundaries, random AR/R pauses and sink backpressure, per seed."""
    b = await start(dut)
    lengths = set()
    for seed in P["seeds"]:
        rng = random.Random(seed)
        b.rng = rng
        b.set_pauses(rng, rng.choice([0, 0.2, 0.5, 0.8]), rng.choice([0, 0.2, 0.5, 0.8]))
        b.p_ready = rng.choice([1.0, 0.9, 0.5, 0.2])
        cmds = []
        for _ in range(rng.randint(2, 6)):
            beats = rng.choice([rng.randint(1, MAX_BURST), rng.randint(1, 3 * MAX_BURST + 5), 4096 // BYTES + 1])
            cmds.append((near_page(rng, beats), beats, rng.randrange(1 << TAG_BITS)))
        b.ars.clear()
        dut._log.info(f"seed {seed}: {cmds}")
        await b.run(cmds, p_valid=rng.choice([1.0, 0.5]))
        lengths |= {ln for _, ln in b.ars}
        assert sum(ln for _, ln in b.ars) == sum(c[1] for c in cmds)
    b.set_pauses(None, 0, 0)
    dut._log.info(f"{len(P['seeds'])} seeds, {len(lengths)} distinct burst lengths")


@cocotb.test()
async def full_bandwidth_from_ready_memory(dut):
    """An always-ready memory and sink: one beat per cycle after the first latency."""
    b = await start(dut)
    beats = 8 * MAX_BURST + 4096 // BYTES
    b.received.clear()
    t0 = b.cycle
    await b.send([(4096 - 3 * BYTES, beats, 0)])
    await b.wait_count(beats)
    cycles = b.cycle - t0
    frac = beats / cycles
    dut._log.info(f"{beats} beats in {cycles} cycles: {frac:.3f}")
    assert frac >= 0.95, f"bandwidth fraction {frac:.3f} < 0.95"
    await b.wait_idle()


@cocotb.test()
async def error_responses_stop_the_transfer(dut):
    """SLVERR/DECERR on a random beat: flag, failing address, nothing forwarded after it, no hang."""
    b = await start(dut)
    for trial in range(P["error_trials"]):
        rng = random.Random(1000 + trial)
        b.rng = rng
        b.set_pauses(rng, rng.choice([0, 0.3]), rng.choice([0, 0.3]))
        b.p_ready = rng.choice([1.0, 0.5])
        beats = rng.randint(1, 4 * MAX_BURST)
        addr = near_page(rng, beats)
        k = rng.randrange(beats)
        bad = addr + k * BYTES
        resp = rng.choice([AxiResp.SLVERR, AxiResp.DECERR])
        b.ram.faults = {bad: resp}
        cmd = (addr, beats, 1 % (1 << TAG_BITS))
        b.received.clear()
        await b.send([cmd])
        await b.wait_idle()
        await ClockCycles(dut.clk, 20)
        assert int(dut.error.value) == 1, "error flag not raised"
        assert int(dut.error_addr.value) == bad, f"error_addr {int(dut.error_addr.value):#x}, expected {bad:#x}"
        assert int(dut.error_code.value) == int(resp)
        want = b.expected([cmd])[:k]
        assert b.received == want, f"trial {trial}: {len(b.received)} beats forwarded, expected the {k} before the error"
        assert int(dut.cmd__ready.value) == 0
        b.ram.faults = {}
        dut.clear.value = 1
        await RisingEdge(dut.clk)
        dut.clear.value = 0
        await b.run([(addr, 3, 0)])
    b.set_pauses(None, 0, 0)


@cocotb.test()
async def bad_command_is_flagged(dut):
    b = await start(dut)
    for addr, beats in ((4096 + 1, 4), (8192, 0)):
        if BYTES == 1 and beats:
            continue
        await b.send([(addr, beats, 0)])
        await ClockCycles(dut.clk, 5)
        assert int(dut.error.value) == 1 and int(dut.error_code.value) == 4
        assert int(dut.error_addr.value) == addr
        assert not b.ars
        dut.clear.value = 1
        await RisingEdge(dut.clk)
        dut.clear.value = 0
    await b.run([(8192, 5, 0)])


@cocotb.test()
async def cancel_and_reset_mid_transfer(dut):
    """cancel drains without error; a hard reset mid-burst leaves the DMA (and DRAM model) usable."""
    b = await start(dut)
    for trial in range(6):
        rng = random.Random(2000 + trial)
        b.rng = rng
        b.set_pauses(rng, 0.3, 0.3)
        b.p_ready = 0.7
        beats = 6 * MAX_BURST
        cmd = (near_page(rng, beats), beats, 0)
        b.received.clear()
        await b.send([cmd])
        await ClockCycles(dut.clk, rng.randint(1, 3 * MAX_BURST))
        if trial % 2 == 0:
            dut.cancel.value = 1
            await RisingEdge(dut.clk)
            dut.cancel.value = 0
            n = len(b.received)
            await b.wait_idle()
            assert len(b.received) <= n + 1, "beats forwarded after cancel"
            assert int(dut.error.value) == 0
        else:
            dut.rst.value = 1
            await ClockCycles(dut.clk, 3)
            dut.rst.value = 0
            await RisingEdge(dut.clk)
            assert int(dut.busy.value) == 0
        assert b.received == b.expected([cmd])[:len(b.received)], "a prefix of the data must be correct"
        await b.run([(near_page(rng, 2 * MAX_BURST), 2 * MAX_BURST + 1, 1 % (1 << TAG_BITS))])
    b.set_pauses(None, 0, 0)


@cocotb.test()
async def a_corrupted_beat_is_detected(dut):
    """Negative check: the comparison catches one flipped byte in the memory."""
    b = await start(dut)
    cmd = (3 * 4096 - 2 * BYTES, 5, 0)
    want = b.expected([cmd])
    b.ram.write(cmd[0] + 3 * BYTES + 1, bytes([b.ram.read(cmd[0] + 3 * BYTES + 1, 1)[0] ^ 0x40]))
    b.received.clear()
    await b.send([cmd])
    await b.wait_count(5)
    assert b.received != want and b.received[:3] == want[:3]
