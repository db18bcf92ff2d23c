"""cocotb test of mlo_hw.hw.engine.param_copier.ParamCopier: a ParamStore slot modelled in Python (random words, the
read one cycle late), each section's ``loaded`` bit arriving at a random time (before, at or after the request),
every kind of copy; the destination images (LayerNorm params, GELU table, shift memory) compared with the
sections; ``waiting``, ``done`` and ``release`` checked cycle by cycle; a flush mid-copy; a negative check."""
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from runner import tb_params

P = tb_params()
H, LANES, WORDS = P["hidden"], P["lanes"], P["slot_words"]
SECTIONS, OFFSETS = P["sections"], P["offsets"]        # PARAM_SECTIONS order; byte offsets in the slot
KINDS = {"ln1": 0, "gelu": 1, "ln2": 2, "narrow": 3}
COUNT = {"ln1": 2 * H, "ln2": 2 * H, "gelu": 256, "narrow": 2 * H}


class Bench:
    def __init__(self, dut):
        self.dut = dut
        self.rng = random.Random(5)
        self.mem = [self.rng.getrandbits(32) for _ in range(WORDS)]
        self.loaded = 0
        self.ln, self.gelu, self.shift = {}, {}, {}
        self.releases = 0
        self.cycle = 0
        self.log = []          # (cycle, busy, loaded, waiting)
        cocotb.start_soon(self._run())

    async def _run(self):
        dut = self.dut
        data = 0
        while True:
            dut.param_data.value = data
            applied = self.loaded
            dut.loaded.value = applied
            await ReadOnly()
            addr = int(dut.param_addr.value)
            data = self.mem[addr] if addr < WORDS else 0
            if int(dut.ln__en.value):
                self.ln[int(dut.ln__addr.value)] = int(dut.ln__data.value) & 0xFFFFFFFF
            if int(dut.gelu__en.value):
                self.gelu[int(dut.gelu__addr.value)] = int(dut.gelu__data.value)
            en = int(dut.shift__en.value)
            for lane in range(LANES):
                if en >> lane & 1:
                    v = int(dut.shift__data.value) >> (4 * lane) & 0xF
                    self.shift[int(dut.shift__addr.value) * LANES + lane] = v
            self.releases += int(dut.release.value)
            self.log.append((self.cycle, int(dut.busy.value), int(dut.loaded.value), int(dut.waiting.value)))
            await RisingEdge(dut.clk)
            self.cycle += 1

    def section_bytes(self, name):
        raw = b"".join(w.to_bytes(4, "little") for w in self.mem)
        return raw[OFFSETS[name]:]

    def expected(self, name):
        raw = self.section_bytes(name)
        if name in ("ln1", "ln2"):
            return {i: int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(2 * H)}
        if name == "gelu":
            return {i: raw[i] for i in range(256)}
        return {c: raw[c] & 0xF for c in range(2 * H)}

    def got(self, name):
        return {"ln1": self.ln, "ln2": self.ln, "gelu": self.gelu, "narrow": self.shift}[name]


@cocotb.test()
async def every_kind_with_random_arrival(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.request.value = dut.flush.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    b = Bench(dut)
    for trial in range(16):
        rng = random.Random(trial)
        name = list(KINDS)[trial % 4]
        bit = 1 << SECTIONS.index(name)
        b.mem = [rng.getrandbits(32) for _ in range(WORDS)]
        b.ln.clear(), b.gelu.clear(), b.shift.clear()
        arrival = rng.choice([-1, 0, rng.randint(1, 40)])      # loaded before, with, or after the request
        b.loaded = bit if arrival < 0 else 0
        r0 = b.releases
        dut.kind.value = KINDS[name]
        dut.request.value = 1
        await RisingEdge(dut.clk)
        dut.request.value = 0
        start = b.cycle
        for _ in range(10000):
            if arrival >= 0 and b.cycle - start >= arrival:
                b.loaded = bit
            await RisingEdge(dut.clk)
            await ReadOnly()
            if int(dut.done.value):
                break
        await RisingEdge(dut.clk)
        assert int(dut.done.value) and not int(dut.busy.value), f"trial {trial}: no done"
        want, got = b.expected(name), b.got(name)
        assert got == want, f"trial {trial} ({name}): {sum(got.get(k) != v for k, v in want.items())} of " \
                            f"{len(want)} elements differ, extra {set(got) - set(want)}"
        assert b.releases - r0 == (name == "ln2"), f"trial {trial}: {b.releases - r0} release pulses"
        for cyc, busy, loaded, waiting in b.log[-(b.cycle - start + 2):]:
            assert waiting == (busy and not (loaded & bit)), f"trial {trial}: waiting {waiting} at cycle {cyc}"
        span = b.cycle - start - max(arrival, 0)
        per = 4 if name == "narrow" and LANES % 4 == 0 else 1        # the shifts: a word of four a cycle
        assert span <= COUNT[name] // per + 4, f"trial {trial}: {span} cycles for {COUNT[name]} elements"
    # a flush mid-copy: busy and done fall, nothing more is written
    b.loaded = (1 << len(SECTIONS)) - 1
    dut.kind.value = KINDS["gelu"]
    dut.request.value = 1
    await RisingEdge(dut.clk)
    dut.request.value = 0
    await ClockCycles(dut.clk, 20)
    dut.flush.value = 1
    await RisingEdge(dut.clk)
    dut.flush.value = 0
    await ClockCycles(dut.clk, 2)
    n = len(b.gelu)
    await ClockCycles(dut.clk, 300)
    assert not int(dut.busy.value) and not int(dut.done.value) and len(b.gelu) == n < 256
    # negative check: one wrong element is seen
    want = b.expected("ln1")
    want[3] ^= 1
    assert want != b.expected("ln1")
