"""cocotb tests of mlo_hw.hw.engine.activation_io: ``Regroup`` alone (``P["dut"] == "regroup"``), and a word
buffer between a ``BufferLoad`` and a ``BufferStore`` on one AXI4 port (``P["dut"] == "load_store"``).

Load/store: random transfers (length, DRAM address near 4 KiB pages, buffer word offset) with random
pauses on all five AXI channels and random ``ready`` on the loader's write stream; a Python model of the
buffer; every DRAM byte compared with a shadow after each store (bytes outside the transfer untouched).
Also: SLVERR/DECERR on a read beat and on a write burst (ERROR with the right address and code, no hang,
then a clean transfer), a misaligned base, ``cancel`` mid-transfer, and a negative check.
"""
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi.constants import AxiResp

from runner import tb_params
from streams import StreamSink, StreamSource

P = tb_params()
DUT = P["dut"]


# ================================ Regroup ===============================================================

def regroup_model(items, i_bits, o_bits):
    if i_bits >= o_bits:
        k, mask = i_bits // o_bits, (1 << o_bits) - 1
        return [(x >> (o_bits * j)) & mask for x in items for j in range(k)]
    k = o_bits // i_bits
    return [sum(items[n + j] << (i_bits * j) for j in range(k)) for n in range(0, len(items), k)]


@cocotb.test(skip=DUT != "regroup")
async def regroup_random_streams(dut):
    """Random items at random valid and ready rates: the output equals the model, nothing lost or repeated."""
    i_bits, o_bits = P["i_bits"], P["o_bits"]
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    for seed in range(6):
        rng = random.Random(seed)
        per = max(1, o_bits // i_bits)
        items = [rng.getrandbits(i_bits) for _ in range(per * rng.randint(1, 60))]
        want = regroup_model(items, i_bits, o_bits)
        src = StreamSource(dut, "i", rng, p_valid=rng.choice([1.0, 0.7, 0.3]))
        sink = StreamSink(dut, "o", random.Random(seed + 100), p_ready=rng.choice([1.0, 0.7, 0.3]))
        task = cocotb.start_soon(src.send(items))
        got = await sink.receive(len(want), timeout_cycles=20000)
        await task
        assert got == want, f"seed {seed}: first difference at item " \
                            f"{next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)}"
        if seed == 0:       # full rate: one output item a cycle once started
            span = sink.cycles[-1] - sink.cycles[0] + 1
            assert span <= len(want) + 1 or src.p_valid < 1 or sink.p_ready < 1, f"{len(want)} items in {span} cycles"
    # negative check: the model is not trivially satisfied
    assert regroup_model([1, 2], 16, 32) != regroup_model([2, 1], 16, 32)


# ================================ BufferLoad + BufferStore ==============================================

if DUT == "load_store":
    from tb_act_dma import Dram, near_page       # the shared-memory RAM models, burst checks, shadow

    DATA_BITS, WORD_BITS, WORDS = P["data_bits"], P["word_bits"], P["words"]
    BEAT, WB = DATA_BITS // 8, WORD_BITS // 8
    UNIT = max(1, BEAT // WB)                     # words per transfer unit (a whole number of beats)


class Bench:
    def __init__(self, dut, dram):
        self.dut, self.dram = dut, dram
        self.buffer = [bytes(WB)] * WORDS         # the model of the buffer
        self.rng = random.Random(0)
        self.p_ready = 1.0
        self.p_hold = 0.0                         # the store's hold (another reader's turn), at random
        self.follow = None                        # a word base: the store may read the words the load has written
        self.done = {"ld": 0, "st": 0}
        for s in ("ld", "st"):
            for n in ("start", "cancel", "clear"):
                getattr(dut, f"{s}_{n}").value = 0
        dut.st_hold.value = 0
        dut.st_avail.value = WORDS
        cocotb.start_soon(self._drive())

    async def _drive(self):
        dut = self.dut
        while True:
            dut.ld_ready.value = int(self.rng.random() < self.p_ready)
            dut.st_hold.value = int(self.rng.random() < self.p_hold)
            await ReadOnly()
            for s in ("ld", "st"):
                self.done[s] += int(getattr(dut, f"{s}_done").value)
            # the words the load has written by this cycle's end (none in its start cycle: the count clears then),
            # the store's avail in the next
            avail = None if self.follow is None else \
                self.follow + (0 if int(dut.ld_start.value) else int(dut.ld_written.value))
            await RisingEdge(dut.clk)
            if avail is not None and self.follow is not None:
                dut.st_avail.value = avail

    async def transfer(self, side, base, words, word_base, limit=200000):
        dut = self.dut
        getattr(dut, f"{side}_base").value = base
        getattr(dut, f"{side}_words").value = words
        getattr(dut, f"{side}_word_base").value = word_base
        getattr(dut, f"{side}_start").value = 1
        await RisingEdge(dut.clk)
        getattr(dut, f"{side}_start").value = 0
        await self.idle(side, limit)

    async def idle(self, side, limit=200000):
        busy = getattr(self.dut, f"{side}_busy")
        for _ in range(limit):
            await RisingEdge(self.dut.clk)
            await ReadOnly()
            if not int(busy.value):
                await RisingEdge(self.dut.clk)
                return
        raise AssertionError(f"{side}: busy after {limit} cycles")

    async def load(self, base, words, word_base):
        d0 = self.done["ld"]
        await self.transfer("ld", base, words, word_base)
        assert not int(self.dut.ld_error.value), "load: unexpected error"
        assert self.done["ld"] - d0 == 1, f"load: {self.done['ld'] - d0} done pulses"
        src = self.dram.wr.read(base, words * WB)
        for i in range(words):
            self.buffer[word_base + i] = src[i * WB:(i + 1) * WB]

    async def store(self, base, words, word_base):
        d0 = self.done["st"]
        await self.transfer("st", base, words, word_base)
        assert not int(self.dut.st_error.value), "store: unexpected error"
        assert self.done["st"] - d0 == 1, f"store: {self.done['st'] - d0} done pulses"
        self.dram.shadow[base:base + words * WB] = b"".join(self.buffer[word_base:word_base + words])
        self.dram.check(f"store of {words} words from word {word_base} at {base:#x}")

    def random_transfer(self, rng):
        words = UNIT * rng.randint(1, WORDS // UNIT)
        return near_page(rng, words * WB), words, rng.randint(0, WORDS - words)


async def start(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    b = Bench(dut, Dram(dut, dut.clk, dut.rst, reads=True))
    await b.load(24 * 4096, WORDS, 0)           # the buffer outlives a test: give the model its contents
    return b


@cocotb.test(skip=DUT != "load_store")
async def load_and_store_random(dut):
    """Random loads and stores, random stalls on all five AXI channels and on the buffer writes."""
    b = await start(dut)
    for seed in range(12):
        rng = random.Random(seed)
        b.rng = rng
        b.dram.set_pauses(rng, [rng.choice([0, 0.2, 0.5, 0.8]) for _ in range(5)])
        b.p_ready = rng.choice([1.0, 0.8, 0.4])
        for _ in range(2):
            await b.load(*b.random_transfer(rng))
        await b.store(*b.random_transfer(rng))
    b.dram.no_pauses()
    b.p_ready = 1.0
    # full rate: a whole buffer in about max(words, beats) cycles
    base, words = 8 * 4096, WORDS
    t0 = cocotb.utils.get_sim_time("ns")
    await b.load(base, words, 0)
    t1 = cocotb.utils.get_sim_time("ns")
    await b.store(base + 16 * 4096, words, 0)
    t2 = cocotb.utils.get_sim_time("ns")
    ideal = max(words, words * WB // BEAT)
    dut._log.info(f"load {words} words: {(t1 - t0) / 10:.0f} cycles, store {(t2 - t1) / 10:.0f} (ideal {ideal})")
    assert (t1 - t0) / 10 < 1.1 * ideal + 40 and (t2 - t1) / 10 < 1.1 * ideal + 40, "below full rate"


@cocotb.test(skip=DUT != "load_store")
async def store_follows_load(dut):
    """A store started with a load of the same words, its ``avail`` the words the load has written (``ld_written``),
    under random stalls, buffer backpressure and store holds: it stores the loaded words, never the ones before
    them (every word changes), and ends once the load has."""
    b = await start(dut)
    for seed in range(10):
        rng = random.Random(100 + seed)
        b.rng = rng
        b.dram.set_pauses(rng, [rng.choice([0, 0.2, 0.5]) for _ in range(5)])
        b.p_ready, b.p_hold = rng.choice([1.0, 0.5, 0.2]), rng.choice([0.0, 0.3, 0.7])
        src, words, word_base = b.random_transfer(rng)
        nbytes = words * WB
        dst = src
        while dst < src + nbytes and src < dst + nbytes:          # apart
            dst = near_page(rng, nbytes)
        new = bytes(rng.getrandbits(8) for _ in range(words * WB))
        old = b"".join(b.buffer[word_base:word_base + words])
        new = bytes(x ^ 0x5A if x == y else x for x, y in zip(new, old))      # every byte differs from the buffer's
        b.dram.wr.write(src, new)
        b.dram.shadow[src:src + len(new)] = new
        b.follow = word_base
        dut.st_avail.value = word_base            # (in the start cycle: none of the words yet)
        d0 = dict(b.done)
        for side, base in (("ld", src), ("st", dst)):
            getattr(dut, f"{side}_base").value = base
            getattr(dut, f"{side}_words").value = words
            getattr(dut, f"{side}_word_base").value = word_base
            getattr(dut, f"{side}_start").value = 1
        await RisingEdge(dut.clk)
        dut.ld_start.value = dut.st_start.value = 0
        await b.idle("ld")
        await b.idle("st")
        b.follow = None
        dut.st_avail.value = WORDS
        await RisingEdge(dut.clk)                 # (no follow value of this transfer reaches the next)
        assert not int(dut.ld_error.value) and not int(dut.st_error.value)
        assert b.done["ld"] - d0["ld"] == 1 and b.done["st"] - d0["st"] == 1
        for i in range(words):
            b.buffer[word_base + i] = new[i * WB:(i + 1) * WB]
        b.dram.shadow[dst:dst + len(new)] = new
        b.dram.check(f"store of {words} words behind their load, from word {word_base} (src {src:#x} dst {dst:#x})")
    b.p_hold = 0.0


@cocotb.test(skip=DUT != "load_store")
async def error_responses_and_bad_base(dut):
    """SLVERR/DECERR on a read beat or a write burst, and a misaligned base: ERROR names the address and the
    code, busy falls (no hang), and after ``clear`` the next transfer is exact."""
    b = await start(dut)
    for trial in range(6):
        rng = random.Random(500 + trial)
        b.rng = rng
        b.dram.set_pauses(rng, [rng.choice([0, 0.3]) for _ in range(5)])
        resp = rng.choice([AxiResp.SLVERR, AxiResp.DECERR])
        base, words, wb = b.random_transfer(rng)
        if trial % 2 == 0:          # a read beat fails
            bad = base + BEAT * rng.randrange(words * WB // BEAT)
            b.dram.rd.faults = {bad: resp}
            await b.transfer("ld", base, words, wb)
            assert int(dut.ld_error.value) == 1 and int(dut.ld_error_addr.value) == bad
            assert int(dut.ld_error_code.value) == int(resp)
            b.dram.rd.faults = {}
            await pulse(dut, dut.ld_clear)
            await b.load(base, words, wb)     # the words before the failing beat may have been written
        else:                       # a write burst fails
            await b.load(base, words, wb)
            dst = near_page(rng, words * WB)
            bad = dst + rng.randrange(words * WB)
            b.dram.wr.faults = {bad: resp}
            b.dram.aws.clear()
            await b.transfer("st", dst, words, wb)
            burst = max(a for a, _ in b.dram.aws if a <= bad)
            assert int(dut.st_error.value) == 1 and int(dut.st_error_addr.value) == burst
            assert int(dut.st_error_code.value) == int(resp)
            b.dram.wr.faults = {}
            b.dram.shadow[:] = b.dram.wr.read(0, len(b.dram.shadow))
            await pulse(dut, dut.st_clear)
            await b.store(dst, words, wb)
    for side in ("ld", "st"):       # a base that is not beat aligned: nothing moves
        b.dram.aws.clear()
        await b.transfer(side, 4096 + 1, UNIT, 0)
        assert int(getattr(dut, f"{side}_error").value) == 1 and int(getattr(dut, f"{side}_error_code").value) == 4
        assert int(getattr(dut, f"{side}_error_addr").value) == 4096 + 1 and not b.dram.aws
        await pulse(dut, getattr(dut, f"{side}_clear"))
    await b.load(2 * 4096, UNIT, 0)
    await b.store(3 * 4096, UNIT, 0)


@cocotb.test(skip=DUT != "load_store")
async def cancel_mid_transfer(dut):
    """``cancel`` during a load or a store: busy falls without error, no byte outside the transfer changes, and
    the next transfers are exact (nothing stale is left in the regroupers or the read queue)."""
    b = await start(dut)
    for trial in range(8):
        rng = random.Random(900 + trial)
        b.rng = rng
        b.dram.set_pauses(rng, [0.3] * 5)
        b.p_ready = 0.7
        side = ("ld", "st")[trial % 2]
        base, words, wb = b.random_transfer(rng)
        before = bytes(b.dram.shadow)
        getattr(dut, f"{side}_base").value = base
        getattr(dut, f"{side}_words").value = words
        getattr(dut, f"{side}_word_base").value = wb
        await pulse(dut, getattr(dut, f"{side}_start"))
        await ClockCycles(dut.clk, rng.randint(1, 3 * words))
        await pulse(dut, getattr(dut, f"{side}_cancel"))
        await b.idle(side)
        assert not int(getattr(dut, f"{side}_error").value)
        mem = b.dram.wr.read(0, len(before))
        assert mem[:base] == before[:base] and mem[base + words * WB:] == before[base + words * WB:]
        b.dram.shadow[:] = mem
        if side == "ld":
            await b.load(base, words, wb)       # some of its words were written: known contents again
        await b.load(*b.random_transfer(rng))
        await b.store(*b.random_transfer(rng))
    b.dram.no_pauses()


@cocotb.test(skip=DUT != "load_store")
async def corruption_is_detected(dut):
    """Negative check: a buffer model that disagrees with the hardware by one byte fails the comparison."""
    b = await start(dut)
    await b.load(4096, UNIT * 4, 0)
    w = bytearray(b.buffer[1])
    w[0] ^= 0x10
    b.buffer[1] = bytes(w)
    try:
        await b.store(6 * 4096, UNIT * 4, 0)
    except AssertionError:
        return
    raise AssertionError("a corrupted word was not detected")


async def pulse(dut, sig):
    sig.value = 1
    await RisingEdge(dut.clk)
    sig.value = 0
