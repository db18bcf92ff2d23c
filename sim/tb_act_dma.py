"""cocotb tests of mlo_hw.hw.act_dma: WriteDma (``P["dut"] == "write_dma"``) and the activation reader +
writer pair (``P["dut"] == "act_io"``), against cocotbext-axi RAM models as the DRAM.

Every byte of DRAM is compared with a Python shadow after each transfer (bytes outside the transfer
must be untouched, partial strobes included); AW/AR are checked for 4 KiB crossings and burst
lengths and W for WLAST placement; BRESP/RRESP errors are injected on chosen beats; cancel and a
hard reset are applied mid-transfer; random pauses on every AXI channel and random stream
valid/ready throughout.
"""
import logging
import random
from collections import deque

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiRamWrite, AxiReadBus, AxiWriteBus
from cocotbext.axi.constants import AxiResp

from axi_faults import FaultyRam, check_burst, pauses
from runner import tb_params

P = tb_params()
DUT = P["dut"]
ADDR_BITS, DATA_BITS, MAX_BURST = P["addr_bits"], P["data_bits"], P["max_burst"]
BEATS_BITS = P.get("beats_bits", 16)
BYTES = DATA_BITS // 8
MEM_BYTES = 1 << 17
MAX_BYTES = P.get("max_bytes", 0)


class FaultyWriteRam(AxiRamWrite):
    """AxiRamWrite that answers a burst containing a chosen byte address with SLVERR/DECERR
    (``faults[addr] = resp``) and does not write that beat."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.faults = {}
        self._fault = None
        send = self.b_channel.send

        async def send_with_fault(b):
            if self._fault is not None:
                b.bresp, self._fault = self._fault, None
            await send(b)
        self.b_channel.send = send_with_fault

    async def _write(self, address, data):
        for a in range(address, address + len(data)):
            if a in self.faults:
                self._fault = self.faults[a]
                return
        self.write(address % self.size, data)


def near_page(rng, nbytes):
    """A beat-aligned address within a few bursts of a 4 KiB boundary (or anywhere)."""
    page = rng.randrange(1, MEM_BYTES // 4096 - (nbytes // 4096) - 2)
    if rng.random() < 0.8:
        return page * 4096 - rng.randint(0, 2 * MAX_BURST) * BYTES
    return page * 4096 + rng.randrange(0, 4096 // BYTES) * BYTES


class Dram:
    """Write (and read) RAM models sharing one memory, a shadow of what it must hold, channel monitors."""

    def __init__(self, dut, clk, rst, reads: bool):
        self.dut = dut
        self.wr = FaultyWriteRam(AxiWriteBus.from_prefix(dut, "m_axi"), clk, rst, size=MEM_BYTES)
        self.wr.log.setLevel(logging.WARNING)
        self.rd = None
        if reads:
            self.rd = FaultyRam(AxiReadBus.from_prefix(dut, "m_axi"), clk, rst, size=MEM_BYTES, mem=self.wr.mem)
            self.rd.log.setLevel(logging.WARNING)
        init = random.Random(99).randbytes(MEM_BYTES)
        self.wr.write(0, init)
        self.shadow = bytearray(init)
        self.aws = []
        self.w_lens = deque()       # lengths of AW bursts whose W beats have not all been seen
        self.w_early = deque()      # lengths of W bursts that ended before their AW was seen
        self.clk, self.rst = clk, rst
        cocotb.start_soon(self._monitor())

    def channels(self):
        chans = [self.wr.aw_channel, self.wr.w_channel, self.wr.b_channel]
        if self.rd:
            chans += [self.rd.ar_channel, self.rd.r_channel]
        return chans

    def set_pauses(self, rng, probs):
        for ch, p in zip(self.channels(), probs):
            ch.set_pause_generator(pauses(rng, p) if p else None)
            if not p:
                ch.pause = False

    def no_pauses(self):
        self.set_pauses(None, [0] * len(self.channels()))

    async def _monitor(self):
        dut, beats = self.dut, 0
        while True:
            await ReadOnly()
            in_reset = int(self.rst.value)
            if not in_reset and int(dut.m_axi_awvalid.value) and int(dut.m_axi_awready.value):
                addr, ln = int(dut.m_axi_awaddr.value), int(dut.m_axi_awlen.value) + 1
                check_burst("AW", addr, ln, int(dut.m_axi_awsize.value), int(dut.m_axi_awburst.value), BYTES, MAX_BURST)
                self.aws.append((addr, ln))
                if self.w_early:        # the n-th W burst belongs to the n-th AW
                    got = self.w_early.popleft()
                    assert got == ln, f"a {got}-beat W burst (WLAST before its AW) for a {ln}-beat AW"
                else:
                    self.w_lens.append(ln)
            if not in_reset and int(dut.m_axi_wvalid.value) and int(dut.m_axi_wready.value):
                beats += 1
                if self.w_lens:         # W may lead AW (A3.3.1): checked beat by beat once the AW is seen
                    assert int(dut.m_axi_wlast.value) == (beats == self.w_lens[0]), \
                        f"WLAST {int(dut.m_axi_wlast.value)} at beat {beats} of a {self.w_lens[0]}-beat burst"
                if int(dut.m_axi_wlast.value):
                    if self.w_lens:
                        self.w_lens.popleft()
                    else:               # ... or as a whole burst when its AW comes
                        self.w_early.append(beats)
                    beats = 0
            if in_reset:
                beats = 0
                self.w_lens.clear()
                self.w_early.clear()
            if not in_reset and self.rd and int(dut.m_axi_arvalid.value) and int(dut.m_axi_arready.value):
                addr, ln = int(dut.m_axi_araddr.value), int(dut.m_axi_arlen.value) + 1
                check_burst("AR", addr, ln, int(dut.m_axi_arsize.value), int(dut.m_axi_arburst.value), BYTES, MAX_BURST)
            await RisingEdge(self.clk)

    def check(self, what=""):
        mem = self.wr.read(0, MEM_BYTES)
        if mem != bytes(self.shadow):
            bad = [i for i in range(MEM_BYTES) if mem[i] != self.shadow[i]]
            raise AssertionError(f"{what}: {len(bad)} DRAM bytes differ, first at {bad[0]:#x}: "
                                 f"{mem[bad[0]]:#04x}, expected {self.shadow[bad[0]]:#04x}")


async def clock_and_reset(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def hard_reset(dut):
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def pulse(dut, sig):
    sig.value = 1
    await RisingEdge(dut.clk)
    sig.value = 0


async def wait_for(dut, cond, limit, what):
    for _ in range(limit):
        await RisingEdge(dut.clk)
        await ReadOnly()
        if cond():
            await RisingEdge(dut.clk)
            return
    ports = ("busy", "error", "m_axi_awvalid", "m_axi_awready", "m_axi_wvalid", "m_axi_wready", "m_axi_bvalid",
             "data__valid", "data__ready", "cmd__ready", "wr_busy", "rd_busy", "drop", "active", "remaining", "w_beat")
    state = [f"{n}={int(getattr(dut, n).value)}" for n in ports if hasattr(dut, n)]
    if DUT == "write_dma":      # FIFO levels of the WriteDma
        state += [f"w_bursts={int(dut.w_bursts.level.value)}", f"b_bursts={int(dut.b_bursts.level.value)}"]
    raise AssertionError(f"{what} not reached after {limit} cycles; " + ", ".join(state))


# ================================ WriteDma ==============================================================

class WriteBench:
    def __init__(self, dut):
        self.dut = dut
        self.dram = Dram(dut, dut.clk, dut.rst, reads=False)
        self.rng = random.Random(0)
        self.p_valid = 1.0
        self.beats = deque()         # (data, strb) to offer on ``data``
        self.dones = 0
        self.cycle = 0
        dut.cmd__valid.value = 0
        dut.data__valid.value = 0
        dut.cancel.value = 0
        dut.clear.value = 0
        cocotb.start_soon(self._source())

    async def _source(self):
        dut = self.dut
        while True:
            offer = bool(self.beats) and self.rng.random() < self.p_valid
            dut.data__valid.value = int(offer)
            if offer:
                item = self.beats[0]
                d, s = item
                dut.data__payload.value = d | (s << DATA_BITS)
            await ReadOnly()
            taken = offer and int(dut.data__ready.value) and not int(dut.rst.value)
            if int(dut.done.value):
                self.dones += 1
            await RisingEdge(dut.clk)
            self.cycle += 1
            if taken and self.beats and self.beats[0] is item:    # the test may have refilled the queue
                self.beats.popleft()

    async def send_cmd(self, addr, beats):
        dut = self.dut
        while True:
            offer = self.rng.random() < self.p_valid
            dut.cmd__valid.value = int(offer)
            dut.cmd__payload.value = addr | (beats << ADDR_BITS)
            await ReadOnly()
            taken = offer and int(dut.cmd__ready.value)
            await RisingEdge(dut.clk)
            if taken:
                break
        dut.cmd__valid.value = 0

    def queue(self, addr, beats, random_strobes):
        """Queue the data of one command and update the shadow with what it must write."""
        for i in range(beats):
            d = self.rng.getrandbits(DATA_BITS)
            s = self.rng.getrandbits(BYTES) if random_strobes else (1 << BYTES) - 1
            self.beats.append((d, s))
            raw = d.to_bytes(BYTES, "little")
            for j in range(BYTES):
                if s >> j & 1:
                    self.dram.shadow[addr + i * BYTES + j] = raw[j]

    async def wait_idle(self, limit=100000):
        await wait_for(self.dut, lambda: not int(self.dut.busy.value) and not self.beats, limit, "WriteDma idle")

    async def run(self, cmds, random_strobes=True, what=""):
        d0 = self.dones
        for addr, beats in cmds:
            self.queue(addr, beats, random_strobes)
        for addr, beats in cmds:
            await self.send_cmd(addr, beats)
        try:
            await self.wait_idle()
        except AssertionError as e:
            raise AssertionError(f"{e}; AWs {self.dram.aws}; cmds {cmds}") from None
        await ClockCycles(self.dut.clk, 2)
        assert not int(self.dut.error.value), f"{what}: unexpected error"
        assert self.dones - d0 == len(cmds), f"{what}: {self.dones - d0} done pulses for {len(cmds)} commands"
        self.dram.check(what)


async def start_write(dut):
    await clock_and_reset(dut)
    return WriteBench(dut)


@cocotb.test(skip=DUT != "write_dma")
async def write_every_burst_length(dut):
    """A command of every length 1..max_burst at a page start: exactly one burst each, full strobes."""
    b = await start_write(dut)
    cmds = [((n % 24 + 1) * 4096, n) for n in range(1, MAX_BURST + 1)]
    for c in cmds:          # one at a time: later commands overwrite the same pages
        await b.run([c], random_strobes=False, what=f"cmd {c}")
    assert sorted(ln for _, ln in b.dram.aws) == list(range(1, MAX_BURST + 1))


@cocotb.test(skip=DUT != "write_dma")
async def write_random_commands_many_seeds(dut):
    """Random commands near 4 KiB boundaries, random strobes, random AW/W/B pauses and data gaps."""
    b = await start_write(dut)
    for seed in P["seeds"]:
        rng = random.Random(seed)
        b.rng = rng
        b.dram.set_pauses(rng, [rng.choice([0, 0.2, 0.5, 0.8]) for _ in range(3)])
        b.p_valid = rng.choice([1.0, 0.9, 0.5, 0.2])
        cmds = []
        for _ in range(rng.randint(1, 4)):
            beats = rng.choice([rng.randint(1, MAX_BURST), rng.randint(1, 3 * MAX_BURST + 5), 4096 // BYTES + 1])
            cmds.append((near_page(rng, beats * BYTES), beats))
        b.dram.aws.clear()
        await b.run(cmds, what=f"seed {seed}")
        assert sum(ln for _, ln in b.dram.aws) == sum(c[1] for c in cmds)
    b.dram.no_pauses()


@cocotb.test(skip=DUT != "write_dma")
async def write_full_bandwidth(dut):
    """Always-ready memory and source: about one beat per cycle."""
    b = await start_write(dut)
    beats = 8 * MAX_BURST
    t0 = b.cycle
    await b.run([(4096 - 3 * BYTES, beats)], random_strobes=False)
    frac = beats / (b.cycle - t0)
    dut._log.info(f"{beats} beats in {b.cycle - t0} cycles (incl. command and idle detection): {frac:.3f}")
    assert frac >= 0.9, f"bandwidth fraction {frac:.3f} < 0.9"


@cocotb.test(skip=DUT != "write_dma")
async def write_error_responses(dut):
    """SLVERR/DECERR on a random beat: error flag with the burst's address, no hang, nothing after it."""
    b = await start_write(dut)
    for trial in range(P["error_trials"]):
        rng = random.Random(1000 + trial)
        b.rng = rng
        b.dram.set_pauses(rng, [rng.choice([0, 0.3]) for _ in range(3)])
        b.p_valid = rng.choice([1.0, 0.5])
        beats = rng.randint(1, 4 * MAX_BURST)
        addr = near_page(rng, beats * BYTES)
        k = rng.randrange(beats)
        bad = addr + k * BYTES
        resp = rng.choice([AxiResp.SLVERR, AxiResp.DECERR])
        b.dram.wr.faults = {bad + rng.randrange(BYTES): resp}
        before = bytes(b.dram.shadow)
        b.dram.aws.clear()
        b.queue(addr, beats, random_strobes=False)
        want = bytes(b.dram.shadow)
        d0 = b.dones
        await b.send_cmd(addr, beats)
        await b.wait_idle()
        await ClockCycles(dut.clk, 5)
        assert int(dut.error.value) == 1, "error flag not raised"
        burst = max(a for a, _ in b.dram.aws if a <= bad)
        assert int(dut.error_addr.value) == burst, f"error_addr {int(dut.error_addr.value):#x}, expected {burst:#x}"
        assert int(dut.error_code.value) == int(resp)
        assert b.dones == d0, "done pulsed for a failed command"
        assert int(dut.cmd__ready.value) == 0
        mem = b.dram.wr.read(0, MEM_BYTES)
        assert mem[:addr] == before[:addr] and mem[addr + beats * BYTES:] == before[addr + beats * BYTES:], \
            "bytes outside the command were written"
        assert mem[addr:burst] == want[addr:burst], "bursts before the failing one must be written"
        assert mem[bad:bad + BYTES] == before[bad:bad + BYTES], "the failing beat was written"
        issued_end = max(a + n * BYTES for a, n in b.dram.aws)
        assert mem[issued_end:addr + beats * BYTES] == before[issued_end:addr + beats * BYTES]
        b.dram.shadow[:] = mem      # bursts issued before the error completed with real or no data
        b.dram.wr.faults = {}
        await pulse(dut, dut.clear)
        await b.run([(addr, 3)], what=f"after error trial {trial}")
    b.dram.no_pauses()


@cocotb.test(skip=DUT != "write_dma")
async def write_bad_command_is_flagged(dut):
    b = await start_write(dut)
    for addr, beats in ((4096 + 1, 4), (8192, 0)):
        if BYTES == 1 and beats:
            continue
        await b.send_cmd(addr, beats)
        await ClockCycles(dut.clk, 5)
        assert int(dut.error.value) == 1 and int(dut.error_code.value) == 4
        assert int(dut.error_addr.value) == addr
        assert not b.dram.aws
        await pulse(dut, dut.clear)
    await b.run([(8192, 5)])


@cocotb.test(skip=DUT != "write_dma")
async def write_cancel_and_reset_mid_transfer(dut):
    """cancel completes the issued bursts without error; a hard reset leaves DMA and DRAM model usable."""
    b = await start_write(dut)
    for trial in range(6):
        rng = random.Random(2000 + trial)
        b.rng = rng
        b.dram.set_pauses(rng, [0.3, 0.3, 0.3])
        b.p_valid = 0.7
        beats = 3 * MAX_BURST + 7
        addr = near_page(rng, beats * BYTES)
        before = bytes(b.dram.shadow)
        b.queue(addr, beats, random_strobes=True)
        want = bytes(b.dram.shadow)
        await b.send_cmd(addr, beats)
        await ClockCycles(dut.clk, rng.randint(1, 2 * MAX_BURST))
        if trial % 2 == 0:
            await pulse(dut, dut.cancel)
            await wait_for(dut, lambda: not int(dut.busy.value), 100000, "idle after cancel")
            assert int(dut.error.value) == 0
        else:
            await hard_reset(dut)
            b.beats.clear()
            await RisingEdge(dut.clk)
            assert int(dut.busy.value) == 0
        mem = b.dram.wr.read(0, MEM_BYTES)
        for i in range(MEM_BYTES):      # every byte is either the old or the new value
            if mem[i] != before[i]:
                assert mem[i] == want[i], f"trial {trial}: byte {i:#x} is neither old nor new"
        assert mem[:addr] == before[:addr] and mem[addr + beats * BYTES:] == before[addr + beats * BYTES:]
        b.beats.clear()
        b.dram.shadow[:] = mem
        dut._log.info(f"trial {trial}: {len(b.beats)} beats left in the source")
        b.dram.aws.clear()
        await b.run([(near_page(rng, 2 * MAX_BURST * BYTES), 2 * MAX_BURST + 1)], what=f"after trial {trial}")
    b.dram.no_pauses()


@cocotb.test(skip=DUT != "write_dma")
async def write_corruption_is_detected(dut):
    """Negative check: a shadow that disagrees with DRAM by one byte fails the comparison."""
    b = await start_write(dut)
    await b.run([(3 * 4096 - 2 * BYTES, 5)])
    b.dram.shadow[3 * 4096 - 2 * BYTES + 1] ^= 0x40
    try:
        b.dram.check("corrupted")
    except AssertionError:
        return
    raise AssertionError("a corrupted byte was not detected")


# ================================ ActReader + ActWriter ================================================

class ActBench:
    """The reader (``rd_*``) and writer (``wr_*``) on one AXI4 port; lanes carried through the testbench."""

    def __init__(self, dut):
        self.dut = dut
        self.dram = Dram(dut, dut.clk, dut.rst, reads=True)
        self.rng = random.Random(0)
        self.p_ready, self.p_valid = 1.0, 1.0
        self.dones = {"rd": 0, "wr": 0}
        for s in ("rd_start", "rd_cancel", "wr_start", "wr_cancel", "wr_lanes__valid", "rd_lanes__ready"):
            getattr(dut, s).value = 0
        cocotb.start_soon(self._count_dones())

    async def _count_dones(self):
        while True:
            await ReadOnly()
            for k in self.dones:
                self.dones[k] += int(getattr(self.dut, f"{k}_done").value)
            await RisingEdge(self.dut.clk)

    async def start(self, side, base, length):
        dut = self.dut
        getattr(dut, f"{side}_base").value = base
        getattr(dut, f"{side}_length").value = length
        await pulse(dut, getattr(dut, f"{side}_start"))

    async def read_lanes(self, count, limit=200000):
        """Collect ``count`` beats (data, last) from ``rd_lanes`` with random ready."""
        dut, out = self.dut, []
        for _ in range(limit):
            ready = self.rng.random() < self.p_ready
            dut.rd_lanes__ready.value = int(ready)
            await ReadOnly()
            if ready and int(dut.rd_lanes__valid.value):
                v = int(dut.rd_lanes__payload.value)
                out.append((v & ((1 << DATA_BITS) - 1), v >> DATA_BITS))
            await RisingEdge(dut.clk)
            if len(out) == count:
                dut.rd_lanes__ready.value = 0
                return out
        raise AssertionError(f"{len(out)} of {count} lane beats after {limit} cycles")

    async def write_lanes(self, beats):
        dut, i = self.dut, 0
        while i < len(beats):
            offer = self.rng.random() < self.p_valid
            dut.wr_lanes__valid.value = int(offer)
            dut.wr_lanes__payload.value = beats[i]
            await ReadOnly()
            taken = offer and int(dut.wr_lanes__ready.value)
            await RisingEdge(dut.clk)
            i += bool(taken)
        dut.wr_lanes__valid.value = 0

    def expected_lanes(self, base, length):
        nbeats = -(-length // BYTES)
        raw = bytes(self.dram.shadow[base:base + length]) + bytes(nbeats * BYTES - length)   # padding reads 0
        return [(int.from_bytes(raw[k * BYTES:(k + 1) * BYTES], "little"), int(k == nbeats - 1))
                for k in range(nbeats)]

    async def loopback(self, in_base, length, out_base, what):
        """Read ``length`` bytes at in_base, check every lane, write them back at out_base, check DRAM."""
        d0 = dict(self.dones)
        want = self.expected_lanes(in_base, length)
        await self.start("rd", in_base, length)
        got = await self.read_lanes(len(want))
        await wait_for(self.dut, lambda: not int(self.dut.rd_busy.value), 10000, f"{what}: reader idle")
        assert got == want, f"{what}: lanes differ at beat {next(k for k in range(len(want)) if got[k] != want[k])}"
        assert not int(self.dut.rd_error.value) and self.dones["rd"] - d0["rd"] == 1, f"{what}: reader done/error"
        self.dram.shadow[out_base:out_base + length] = self.dram.shadow[in_base:in_base + length]
        await self.start("wr", out_base, length)
        # the last beat's padding lanes carry junk: the partial WSTRB must keep them out of DRAM
        beats = [d | ((self.rng.getrandbits(8 * BYTES) << (8 * (length % BYTES))) & ((1 << DATA_BITS) - 1)
                      if last and length % BYTES else d) for d, last in got]
        await self.write_lanes(beats)
        await wait_for(self.dut, lambda: not int(self.dut.wr_busy.value), 100000, f"{what}: writer idle")
        await ClockCycles(self.dut.clk, 2)
        assert not int(self.dut.wr_error.value) and self.dones["wr"] - d0["wr"] == 1, f"{what}: writer done/error"
        self.dram.check(what)


async def start_act(dut):
    await clock_and_reset(dut)
    return ActBench(dut)


def two_regions(rng, length):
    while True:
        a, b = near_page(rng, length), near_page(rng, length)
        if a + length <= b or b + length <= a:
            return a, b


LENGTHS = (1, 7, BYTES, 32, 37, 256, MAX_BYTES)
LONG = min(MAX_BYTES, 3 * MAX_BURST * BYTES)     # random lengths: up to three full bursts (sim time)


@cocotb.test(skip=DUT != "act_io")
async def act_loopback_many_seeds(dut):
    """Lengths incl. partial last beats and seq_len=1 (32 bytes), bases near 4 KiB, random pauses everywhere."""
    b = await start_act(dut)
    for seed in P["seeds"]:
        rng = random.Random(seed)
        b.rng = rng
        b.dram.set_pauses(rng, [rng.choice([0, 0.2, 0.5, 0.8]) for _ in range(5)])
        b.p_ready, b.p_valid = rng.choice([1.0, 0.7, 0.3]), rng.choice([1.0, 0.7, 0.3])
        for length in (rng.choice(LENGTHS), rng.randint(1, LONG)):
            src, dst = two_regions(rng, length)
            await b.loopback(src, length, dst, f"seed {seed} length {length} {src:#x} -> {dst:#x}")
    b.dram.no_pauses()
    for length in LENGTHS:
        await b.loopback(4096 - BYTES, length, 8 * 4096 - 2 * BYTES, f"length {length}")


@cocotb.test(skip=DUT != "act_io")
async def act_error_responses(dut):
    """RRESP error on the reader, BRESP error on the writer: flags, addresses, no hang; start again works."""
    b = await start_act(dut)
    for trial in range(P["error_trials"]):
        rng = random.Random(3000 + trial)
        b.rng = rng
        b.dram.set_pauses(rng, [rng.choice([0, 0.3]) for _ in range(5)])
        length = rng.randint(1, LONG)
        nbeats = -(-length // BYTES)
        src, dst = two_regions(rng, length)
        k = rng.randrange(nbeats)
        resp = rng.choice([AxiResp.SLVERR, AxiResp.DECERR])
        # reader
        b.dram.rd.faults = {src + k * BYTES: resp}
        await b.start("rd", src, length)
        got = await b.read_lanes(k) if k else []
        await wait_for(dut, lambda: not int(dut.rd_busy.value), 100000, "reader idle after error")
        assert int(dut.rd_error.value) == 1 and int(dut.rd_error_addr.value) == src + k * BYTES
        assert int(dut.rd_error_code.value) == int(resp)
        assert got == b.expected_lanes(src, length)[:k]
        b.dram.rd.faults = {}
        # writer: the producer delivers every beat even after the error (they are dropped), no hang
        b.dram.wr.faults = {dst + k * BYTES: resp}
        await b.start("wr", dst, length)
        await b.write_lanes([rng.getrandbits(DATA_BITS) for _ in range(nbeats)])
        await wait_for(dut, lambda: not int(dut.wr_busy.value), 100000, "writer idle after error")
        assert int(dut.wr_error.value) == 1 and int(dut.wr_error_code.value) == int(resp)
        burst = max(a for a, _ in b.dram.aws if a <= dst + k * BYTES)
        assert int(dut.wr_error_addr.value) == burst
        b.dram.wr.faults = {}
        b.dram.aws.clear()
        b.dram.shadow[:] = b.dram.wr.read(0, MEM_BYTES)
        b.dram.no_pauses()
        await b.loopback(src, length, dst, f"after error trial {trial}")     # start clears the error


@cocotb.test(skip=DUT != "act_io")
async def act_bad_base_and_length(dut):
    b = await start_act(dut)
    for side in ("rd", "wr"):
        for base, length in ((4096 + 1, 64), (4096, 0)):
            if BYTES == 1 and length:
                continue
            await b.start(side, base, length)
            await ClockCycles(dut.clk, 5)
            assert int(getattr(dut, f"{side}_error").value) == 1 and int(getattr(dut, f"{side}_error_code").value) == 4
            assert int(getattr(dut, f"{side}_error_addr").value) == base
    await b.loopback(4096, 40, 3 * 4096, "after bad commands")


@cocotb.test(skip=DUT != "act_io")
async def act_reset_mid_transfer(dut):
    """A hard reset while both are moving data: afterwards a full loopback is exact."""
    b = await start_act(dut)
    for trial in range(3):
        rng = random.Random(4000 + trial)
        b.rng = rng
        b.dram.set_pauses(rng, [0.3] * 5)
        length = LONG
        src, dst = two_regions(rng, length)
        await b.start("rd", src, length)
        await b.start("wr", dst, length)
        reader = cocotb.start_soon(b.read_lanes(10 ** 6))
        writer = cocotb.start_soon(b.write_lanes([rng.getrandbits(DATA_BITS) for _ in range(-(-length // BYTES))]))
        await ClockCycles(dut.clk, rng.randint(5, 600))
        reader.cancel()
        writer.cancel()
        dut.wr_lanes__valid.value = 0
        dut.rd_lanes__ready.value = 0
        await hard_reset(dut)
        assert not int(dut.rd_busy.value) and not int(dut.wr_busy.value)
        b.dram.shadow[:] = b.dram.wr.read(0, MEM_BYTES)      # a part of dst was written: take it as is
        await b.loopback(src, length, dst, f"after reset {trial}")
    b.dram.no_pauses()
