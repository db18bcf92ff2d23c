"""cocotb tests of sim/hdl/axi_dram.sv (the C++ harness's DRAM model), cross-checked against cocotbext-axi.

The top (``axi_dram_tb``, tests/test_axi_dram.py) has the model on slave port ``s0_axi`` and a plain
pass-through from ``s1_axi`` to ``m1_axi``, where cocotbext-axi's ``AxiRam`` serves. Two ``AxiMaster``s run
the same random operations on both; every read must agree between the two and with a Python shadow
memory. A monitor on ``s0`` records every handshake with the model's cycle number and checks the slave's
AXI obligations (RVALID/BVALID never retracted, payload stable until the handshake). Further tests:
error injection, the timing model (exact latencies, and every beat's cycle against a Python reference of
the documented schedule), stall probabilities and seeds, counters, 1 beat/cycle in ideal mode, and the
protocol checker against hand-driven violations.
"""
import logging
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiBus, AxiMaster, AxiRam
from cocotbext.axi.constants import AxiResp

from runner import tb_params

P = tb_params()
DATA_BITS, ADDR_BITS, ID_BITS = P["data_bits"], P["addr_bits"], P["id_bits"]
MEM_BYTES = P["mem_bytes"]
BYTES = DATA_BITS // 8
SIZE = (BYTES - 1).bit_length()
MAX_BURST_BYTES = 256 * BYTES

CTRL_DEFAULTS = dict(seed=1, reseed=0, stall_ar=0, stall_r=0, stall_aw=0, stall_w=0, stall_b=0, err_en=0,
                     err_addr=0, timing_en=0, t_read=0, t_write=0, t_rcd=0, t_rp=0, t_refi=0, t_rfc=0, t_turn=0,
                     col_bits=11, bank_bits=3, beat_cost=256)
STALLS = ("stall_ar", "stall_r", "stall_aw", "stall_w", "stall_b")


def pauses(rng, p):
    while True:
        yield rng.random() < p


class Monitor:
    """Every handshake on ``s0`` with the model's cycle number (``dram.now``), and the slave-side rules of
    AXI A3.2.1 checked every cycle: once RVALID/BVALID is up it stays up, with the same payload, until
    the handshake."""

    def __init__(self, dut):
        self.dut = dut
        self.ar, self.aw, self.r, self.w, self.b = [], [], [], [], []   # (cycle, ...)
        self.violations = []
        self.now = 0
        cocotb.start_soon(self._run())

    def counts(self):
        return len(self.ar), len(self.aw), len(self.r), len(self.w), len(self.b)

    async def _run(self):
        d = self.dut

        def s(n):
            return getattr(d, f"s0_axi_{n}")
        arv, arr, awv, awr, wv, wr, rv, rr, bv, br = (s(n) for n in (
            "arvalid", "arready", "awvalid", "awready", "wvalid", "wready", "rvalid", "rready", "bvalid", "bready"))
        araddr, arlen, arid, awaddr, awlen, awid = (s(n) for n in ("araddr", "arlen", "arid", "awaddr", "awlen",
                                                                   "awid"))
        rid, rdata, rresp, rlast, wlast, bid, bresp = (s(n) for n in ("rid", "rdata", "rresp", "rlast", "wlast",
                                                                     "bid", "bresp"))
        now_sig = d.dram.now
        pend_r = pend_b = None
        last_t = None
        while True:
            await ReadOnly()
            if int(d.rst.value):
                pend_r = pend_b = last_t = None
            else:
                t = self.now = int(now_sig.value)
                if last_t is not None and t != last_t + 1:
                    self.violations.append(f"cycle counter jumped {last_t} -> {t}")
                last_t = t
                if int(arv.value) and int(arr.value):
                    self.ar.append((t, int(araddr.value), int(arlen.value), int(arid.value)))
                if int(awv.value) and int(awr.value):
                    self.aw.append((t, int(awaddr.value), int(awlen.value), int(awid.value)))
                if int(wv.value) and int(wr.value):
                    self.w.append((t, int(wlast.value)))
                valid = int(rv.value)
                pl = (int(rid.value), int(rdata.value), int(rresp.value), int(rlast.value)) if valid else None
                if pend_r is not None and pl != pend_r:
                    self.violations.append(f"cycle {t}: R beat {pend_r} retracted or changed to {pl}")
                pend_r = None
                if valid:
                    if int(rr.value):
                        self.r.append((t, *pl))
                    else:
                        pend_r = pl
                valid = int(bv.value)
                pl = (int(bid.value), int(bresp.value)) if valid else None
                if pend_b is not None and pl != pend_b:
                    self.violations.append(f"cycle {t}: B {pend_b} retracted or changed to {pl}")
                pend_b = None
                if valid:
                    if int(br.value):
                        self.b.append((t, *pl))
                    else:
                        pend_b = pl
            await RisingEdge(d.clk)


class Bench:
    def __init__(self, dut, masters=True):
        self.dut = dut
        for prefix in ("s0_axi", "s1_axi", "m1_axi"):
            logging.getLogger(f"cocotb.{dut._name}.{prefix}").setLevel(logging.WARNING)
        for name, v in CTRL_DEFAULTS.items():
            getattr(dut, name).value = v
        self.mon = Monitor(dut)
        if masters:
            self.m0 = AxiMaster(AxiBus.from_prefix(dut, "s0_axi"), dut.clk, dut.rst)
            self.m1 = AxiMaster(AxiBus.from_prefix(dut, "s1_axi"), dut.clk, dut.rst)
            self.ram = AxiRam(AxiBus.from_prefix(dut, "m1_axi"), dut.clk, dut.rst, size=MEM_BYTES)
            for x in (self.m0, self.m1, self.ram):
                for part in (x.write_if, x.read_if):
                    part.log.setLevel(logging.WARNING)

    def ctrl(self, **kw):
        for name, v in kw.items():
            getattr(self.dut, name).value = v

    async def reseed(self, seed):
        self.dut.seed.value = seed
        self.dut.reseed.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.reseed.value = 0

    def ram_pauses(self, rng, probs):
        """AxiRam's five channels paused with probabilities ``probs`` (AR, R, AW, W, B)."""
        chans = (self.ram.read_if.ar_channel, self.ram.read_if.r_channel, self.ram.write_if.aw_channel,
                 self.ram.write_if.w_channel, self.ram.write_if.b_channel)
        for ch, p in zip(chans, probs):
            ch.set_pause_generator(pauses(random.Random(rng.random()), p) if p else None)
            if not p:
                ch.pause = False

    def master_pauses(self, rng, probs):
        """Both masters' five channels paused with probabilities ``probs`` (AR, R, AW, W, B)."""
        for m in (self.m0, self.m1):
            chans = (m.read_if.ar_channel, m.read_if.r_channel, m.write_if.aw_channel, m.write_if.w_channel,
                     m.write_if.b_channel)
            for ch, p in zip(chans, probs):
                ch.set_pause_generator(pauses(random.Random(rng.random()), p) if p else None)
                if not p:
                    ch.pause = False

    async def idle(self, cycles=5):
        await ClockCycles(self.dut.clk, cycles)

    def check_clean(self):
        assert not self.mon.violations, self.mon.violations[:5]
        assert int(self.dut.protocol_error.value) == 0, "protocol_error raised by legal traffic"


async def start(dut, masters=True):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    b = Bench(dut, masters)
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return b


async def gather(tasks):
    return [await t for t in tasks]


# ---------------------------------------------------------------------------------------------------------
# The cross-check against AxiRam
# ---------------------------------------------------------------------------------------------------------
def random_length(rng):
    kind = rng.random()
    if kind < 0.3:
        return rng.randint(1, 2 * BYTES)
    if kind < 0.6:
        return rng.randint(1, 40 * BYTES)
    if kind < 0.9:
        return rng.randint(1, 2 * MAX_BURST_BYTES + 3 * BYTES)
    return MAX_BURST_BYTES


def random_round(rng):
    """1..5 operations; a write's range overlaps no other operation of the round (so the result of the
    round does not depend on how the bus interleaves them)."""
    ops, ranges = [], []
    for _ in range(rng.randint(1, 5)):
        for _attempt in range(20):
            n = random_length(rng)
            if n == MAX_BURST_BYTES and rng.random() < 0.5:
                a = rng.randrange(0, MEM_BYTES - n + 1, BYTES)      # exactly one full 256-beat burst, aligned
            else:
                a = rng.randrange(0, MEM_BYTES - n + 1)
            write = rng.random() < 0.5
            clash = any(a < e and s < a + n and (write or w) for s, e, w in ranges)
            if not clash:
                break
        else:
            continue
        ranges.append((a, a + n, write))
        alias = MEM_BYTES * rng.randint(1, 3) if rng.random() < 0.15 else 0   # the memory wraps
        ops.append(("w", a, alias, rng.randbytes(n)) if write else ("r", a, alias, n))
    return ops


@cocotb.test()
async def cross_check_against_axi_ram(dut):
    """The same random reads and writes (unaligned, partial strobes, 1..256-beat bursts, several in flight,
    aliased addresses) on the model (random stalls) and on AxiRam (random pauses): equal results, equal
    to a shadow memory, and the whole memory equal at the end."""
    b = await start(dut)
    rng = random.Random(P.get("seed", 1))
    init = rng.randbytes(MEM_BYTES)
    b.ram.write(0, init)
    resp = await b.m0.write(0, init)              # the model's memory through the bus (no backdoor here)
    assert resp.resp == AxiResp.OKAY
    shadow = bytearray(init)
    stats = {"r": 0, "w": 0, "bytes": 0}
    for rnd in range(P["rounds"]):
        if rnd % 6 == 0:                          # a new stall mix: none at first, then random per channel
            stalls = [0] * 5 if rnd == 0 else [rng.choice([0, 40, 128, 220]) for _ in range(5)]
            b.ctrl(**dict(zip(STALLS, stalls)))
            await b.reseed(rng.getrandbits(32))
            b.ram_pauses(rng, [0] * 5 if rnd == 0 else [rng.choice([0, 0.1, 0.5, 0.85]) for _ in range(5)])
            # the masters pause too (R/B backpressure on the model: its RVALID/BVALID must then hold)
            master_p = [0] * 5 if rnd == 0 else [rng.choice([0, 0.2, 0.6]) for _ in range(5)]
            b.master_pauses(rng, master_p)
            dut._log.info(f"round {rnd}: model stalls {stalls}, master pauses {master_p}")
        ops = random_round(rng)
        tasks = []
        for op in ops:
            kind, a, alias, x = op
            for m in (b.m0, b.m1):
                tasks.append(cocotb.start_soon(m.write(a + alias, x) if kind == "w" else m.read(a + alias, x)))
        results = await gather(tasks)
        for i, (kind, a, alias, x) in enumerate(ops):
            r0, r1 = results[2 * i], results[2 * i + 1]
            where = f"round {rnd} op {i}: {kind} {a + alias:#x}+{len(x) if kind == 'w' else x}"
            assert r0.resp == AxiResp.OKAY and r1.resp == AxiResp.OKAY, f"{where}: resp {r0.resp} {r1.resp}"
            if kind == "r":
                want = bytes(shadow[a:a + x])
                assert r1.data == want, f"{where}: AxiRam disagrees with the shadow memory"
                if r0.data != want:
                    bad = next(j for j in range(x) if r0.data[j] != want[j])
                    raise AssertionError(f"{where}: model differs from AxiRam first at byte {a + bad:#x}: "
                                         f"{r0.data[bad]:#04x} != {want[bad]:#04x}")
                stats["r"] += 1
            else:
                stats["w"] += 1
            stats["bytes"] += len(x) if kind == "w" else x
        for kind, a, alias, x in ops:
            if kind == "w":
                shadow[a:a + len(x)] = x
    b.ctrl(**{n: 0 for n in STALLS})
    b.ram_pauses(rng, [0] * 5)
    b.master_pauses(rng, [0] * 5)
    full0, full1 = await gather([cocotb.start_soon(b.m0.read(0, MEM_BYTES)),
                                 cocotb.start_soon(b.m1.read(0, MEM_BYTES))])
    assert full1.data == bytes(shadow), "AxiRam's final contents differ from the shadow memory"
    assert full0.data == full1.data, "the model's final contents differ from AxiRam's"
    await b.idle()
    b.check_clean()
    n_ar, n_aw, n_r, n_w, n_b = b.mon.counts()
    dut._log.info(f"{stats['r']} reads, {stats['w']} writes, {stats['bytes']} bytes per bus; on the model "
                  f"{n_ar} AR, {n_aw} AW, {n_r} R, {n_w} W beats, {b.mon.now} cycles")
    assert n_aw == n_b and stats["r"] > 20 and stats["w"] > 20


# ---------------------------------------------------------------------------------------------------------
# Error injection
# ---------------------------------------------------------------------------------------------------------
@cocotb.test()
async def error_injection(dut):
    """err_addr's beat answers SLVERR on a read (that beat only, also inside a multi-burst read) and a
    write over it gets SLVERR and leaves exactly that beat unwritten; err_en = 0 turns it off."""
    b = await start(dut)
    base = 0x3000
    old = bytes(range(256)) * (MAX_BURST_BYTES // 128)
    await b.m0.write(base, old[:64 * BYTES])
    err = base + 5 * BYTES + 3                      # a byte inside beat 5
    b.ctrl(err_en=1, err_addr=err)

    async def read_resps(addr, n):
        k = len(b.mon.r)
        r = await b.m0.read(addr, n)
        return r, [x[3] for x in b.mon.r[k:]]

    r, resps = await read_resps(base, 16 * BYTES)
    assert resps == [2 if i == 5 else 0 for i in range(16)], resps
    assert r.resp == AxiResp.SLVERR and r.data == old[:16 * BYTES]
    r, resps = await read_resps(base + 6 * BYTES - 2, 2)        # the beat's last two bytes
    assert resps == [2] and r.resp == AxiResp.SLVERR
    r, resps = await read_resps(base + 6 * BYTES, 8 * BYTES)     # just after it
    assert resps == [0] * 8 and r.resp == AxiResp.OKAY
    r, resps = await read_resps(base - 5 * BYTES + 1, 10 * BYTES)  # ends on it (unaligned)
    assert resps == [0] * 10 + [2] and r.resp == AxiResp.SLVERR, resps
    # a multi-burst read that crosses a 4 KiB page (split by the master) with the bad beat in a later burst
    b.ctrl(err_addr=0x4000 + 20 * BYTES)
    r, resps = await read_resps(0x4000 - 7 * BYTES, 300 * BYTES)
    assert resps == [2 if i == 27 else 0 for i in range(300)] and r.resp == AxiResp.SLVERR
    # writes: the burst over err_addr gets SLVERR and its beat 5 keeps the old data
    b.ctrl(err_addr=err)
    new = bytes((x * 7 + 1) & 0xFF for x in range(32 * BYTES))
    k = len(b.mon.b)
    w = await b.m0.write(base, new)
    assert w.resp == AxiResp.SLVERR and [x[2] for x in b.mon.b[k:]] == [2]
    w = await b.m0.write(base + 40 * BYTES, new[:8])
    assert w.resp == AxiResp.OKAY
    b.ctrl(err_en=0)
    r = await b.m0.read(base, 32 * BYTES)
    assert r.resp == AxiResp.OKAY
    want = new[:5 * BYTES] + old[5 * BYTES:6 * BYTES] + new[6 * BYTES:]
    assert r.data == want, "beat 5 must keep its old data, every other beat the new"
    w = await b.m0.write(base, new)                  # err_en = 0: the same write is fine
    assert w.resp == AxiResp.OKAY and (await b.m0.read(base, 32 * BYTES)).data == new
    await b.idle()
    b.check_clean()


# ---------------------------------------------------------------------------------------------------------
# The timing model
# ---------------------------------------------------------------------------------------------------------
TIMING = dict(timing_en=1, t_read=20, t_write=7, t_rcd=5, t_rp=6, t_turn=3, col_bits=11, bank_bits=3,
              beat_cost=256, t_refi=0, t_rfc=0)


@cocotb.test()
async def timing_latencies(dut):
    """Exact latencies of single bursts on an idle DRAM: row hit, closed bank, other row open, turnaround,
    write response; ideal mode 1 cycle."""
    b = await start(dut)
    m = b.mon

    async def read_latency(addr, n=BYTES):
        k, j = len(m.ar), len(m.r)
        await b.m0.read(addr, n)
        await b.idle(3)
        return m.r[j][0] - m.ar[k][0]

    async def write_latencies(addr, n):
        k, j, i = len(m.aw), len(m.w), len(m.b)
        await b.m0.write(addr, bytes(n))
        await b.idle(3)
        return m.b[i][0] - m.aw[k][0], m.b[i][0] - m.w[j + (n + BYTES - 1) // BYTES - 1][0]

    assert await read_latency(0x100) == 1, "ideal memory: first beat the cycle after AR"
    assert await write_latencies(0x100, 4 * BYTES) == (5, 1), "ideal memory: B the cycle after the last W"
    b.ctrl(**TIMING)
    await b.idle(50)
    lat = {}
    lat["closed"] = await read_latency(0x0000)           # bank 0, no open row: t_rcd + t_read
    lat["hit"] = await read_latency(0x0100)              # the same row
    lat["other_row"] = await read_latency(0x4000)        # bank 0 again (2 KiB rows, 8 banks), another row
    lat["other_bank"] = await read_latency(0x0800)       # bank 1, closed
    lat["hit2"] = await read_latency(0x0808)
    dut._log.info(f"read latencies {lat}")
    assert lat == {"closed": 25, "hit": 20, "other_row": 31, "other_bank": 25, "hit2": 20}, lat
    assert lat["other_row"] > lat["closed"] > lat["hit"] >= TIMING["t_read"]
    # write to bank 0's closed-then-reopened row 0 (row 0x4000 is open): t_rp + t_rcd + t_turn = 14 before
    # its slot of 4 beats; B = slot end + t_write = AW + 14 + 4 + 7
    aw_to_b, w_to_b = await write_latencies(0x0100, 4 * BYTES)
    assert (aw_to_b, w_to_b) == (25, 21), (aw_to_b, w_to_b)
    aw_to_b, w_to_b = await write_latencies(0x0180, 4 * BYTES)   # row hit, no turnaround: last W + t_write
    assert w_to_b == TIMING["t_write"], w_to_b
    assert await read_latency(0x0100) == 20 + 3, "turnaround after a write"
    # a 2-row burst (crosses a 2 KiB row, both banks closed after a refresh-free idle: bank 2 and 3)
    assert await read_latency(0x1000 + 0x800 - 2 * BYTES, 4 * BYTES) == 20 + 5 + 5
    b.ctrl(timing_en=0)
    await b.idle()
    assert await read_latency(0x4000) == 1
    b.check_clean()


async def sustained_rate(b, cost, beats=2048, t_rcd=2, bank_bits=3):
    """Beats per cycle of one long sequential read from 0 (first to last beat)."""
    b.ctrl(**{**TIMING, "beat_cost": cost, "t_rcd": t_rcd, "t_rp": t_rcd, "bank_bits": bank_bits})
    await b.idle(20)
    j = len(b.mon.r)
    await b.m0.read(0, beats * BYTES)
    t = [x[0] for x in b.mon.r[j:]]
    b.ctrl(timing_en=0)
    await b.idle()
    return (len(t) - 1) / (t[-1] - t[0])


@cocotb.test()
async def timing_sustained_rate(dut):
    """A long read runs at 256 / beat_cost beats a cycle (at most one), minus the row openings."""
    b = await start(dut)
    for cost, lo, hi in ((128, 0.97, 1.0), (256, 0.97, 1.0), (384, 0.64, 0.667), (512, 0.48, 0.5),
                         (1024, 0.24, 0.25)):
        rate = await sustained_rate(b, cost)
        dut._log.info(f"beat_cost {cost}: {rate:.4f} beats/cycle")
        assert lo <= rate <= hi + 1e-9, f"beat_cost {cost}: {rate:.4f} beats/cycle, expected {lo}..{hi}"
    # row openings: with 16 banks of 2 KiB rows every row of the stream opens in a closed bank (t_rcd = 40,
    # paid before its burst's data); those after the first burst's rows are in the first-to-last-beat time
    beats = 2048
    slow = await sustained_rate(b, 256, beats=beats, t_rcd=40, bank_bits=4)
    rows = -(-beats * BYTES // 2048) - -(-MAX_BURST_BYTES // 2048)
    want = (beats - 1) / (beats - 1 + 40 * rows)
    dut._log.info(f"t_rcd 40: {slow:.4f} beats/cycle (expected {want:.4f})")
    assert abs(slow - want) < 0.002, (slow, want)
    b.check_clean()


def reference_schedule(cfg, t_on, ars, aws):
    """The documented timeline, in Python, for the bursts accepted at the given cycles (timing on from
    cycle t_on): per read burst (accept, first-beat time t0, cost, beats), per write burst its slot end."""
    refi, col, bank_mask = cfg["t_refi"], cfg["col_bits"], (1 << min(cfg["bank_bits"], 4)) - 1
    events = sorted([(t, 0, a, ln) for t, a, ln, _ in ars] + [(t, 1, a, ln) for t, a, ln, _ in aws])
    free, rows, last_dir = 0, {}, None
    next_refresh = t_on + refi - 1 if refi else None
    reads, writes = [], []
    for t, is_write, addr, ln in events:
        while next_refresh is not None and next_refresh <= t:
            free = max(free, next_refresh) + cfg["t_rfc"]
            rows.clear()
            next_refresh += refi
        a0 = addr & ~(BYTES - 1)
        a1 = a0 + (ln + 1) * BYTES - 1
        pen = 0
        for tag in sorted({a0 >> col, a1 >> col}, key=lambda x: x != a0 >> col):
            bank = tag & bank_mask
            if bank not in rows:
                pen += cfg["t_rcd"]
            elif rows[bank] != tag:
                pen += cfg["t_rcd"] + cfg["t_rp"]
            rows[bank] = tag
        if last_dir is not None and last_dir != is_write:
            pen += cfg["t_turn"]
        last_dir = is_write
        start = max(t, free) + pen
        free = start + -(-(ln + 1) * cfg["beat_cost"] // 256)
        if is_write:
            writes.append(free)
        else:
            reads.append((t, start + cfg["t_read"], cfg["beat_cost"], ln + 1))
    return reads, writes


@cocotb.test()
async def timing_matches_reference(dut):
    """Random concurrent reads and writes with the timing model, refresh and row effects on and no stalls:
    every R beat and every B comes exactly in the cycle the documented schedule (recomputed in Python
    from the observed AR/AW acceptance cycles) says."""
    b = await start(dut)
    m = b.mon
    rng = random.Random(7)
    same_cycle = 0                                     # AR and AW accepted in one cycle (AR goes first)
    on_refresh = 0                                     # a burst accepted in a refresh cycle (refresh first)
    for trial, cfg in enumerate([
            {**TIMING, "t_refi": 300, "t_rfc": 40, "col_bits": 10, "bank_bits": 2, "beat_cost": 384},
            {**TIMING, "t_read": 3, "t_write": 0, "t_refi": 97, "t_rfc": 13, "col_bits": 9, "bank_bits": 5,
             "beat_cost": 200, "t_turn": 9},
            {**TIMING, "t_read": 9, "t_write": 2, "t_refi": 7, "t_rfc": 1, "col_bits": 12, "bank_bits": 0,
             "beat_cost": 256, "t_rcd": 1, "t_rp": 1, "t_turn": 0},
    ]):
        b.ctrl(**cfg)                                  # just after a clock edge
        await ReadOnly()
        t_on = int(dut.dram.now.value)                 # the first cycle with these inputs
        await RisingEdge(dut.clk)
        k_ar, k_aw, k_r, k_w, k_b = m.counts()
        tasks = []
        for _ in range(40):
            n = rng.choice([rng.randint(1, 4 * BYTES), rng.randint(1, MAX_BURST_BYTES + 100)])
            a = rng.randrange(0, MEM_BYTES - n)
            if rng.random() < 0.5:
                tasks.append(cocotb.start_soon(b.m0.write(a, rng.randbytes(n))))
            else:
                tasks.append(cocotb.start_soon(b.m0.read(a, n)))
            if len(tasks) == 4:
                await gather(tasks)
                tasks = []
        await gather(tasks)
        await b.idle(10)
        reads, writes = reference_schedule(cfg, t_on, m.ar[k_ar:], m.aw[k_aw:])
        same_cycle += len({x[0] for x in m.ar[k_ar:]} & {x[0] for x in m.aw[k_aw:]})
        on_refresh += sum((x[0] - t_on + 1) % cfg["t_refi"] == 0 for x in m.ar[k_ar:] + m.aw[k_aw:])
        prev = -1
        want_r = []
        for t_ar, t0, cost, beats in reads:
            for k in range(beats):
                prev = max(t_ar + 1, t0 + k * cost // 256, prev + 1)
                want_r.append(prev)
        got_r = [x[0] for x in m.r[k_r:]]
        assert len(got_r) == len(want_r)
        bad = [(i, g, w) for i, (g, w) in enumerate(zip(got_r, want_r)) if g != w]
        assert not bad, f"config {trial}: R beats off the reference schedule (index, got, want): {bad[:5]}"
        w_times = [x[0] for x in m.w[k_w:]]
        prev, pos, want_b = -1, 0, []
        for (_, _, ln, _), fin in zip(m.aw[k_aw:], writes):
            pos += ln + 1
            last_w = w_times[pos - 1]
            prev = max(max(last_w, fin) + cfg["t_write"], last_w + 1, prev + 1)
            want_b.append(prev)
        got_b = [x[0] for x in m.b[k_b:]]
        assert got_b == want_b, f"config {trial}: B off the reference schedule: {list(zip(got_b, want_b))[:8]}"
        dut._log.info(f"config {trial}: {len(reads)} read and {len(writes)} write bursts, {len(got_r)} R beats "
                      f"on the reference schedule over {m.now - t_on} cycles")
        b.ctrl(timing_en=0)
        await b.idle()
    dut._log.info(f"{same_cycle} cycles accepted an AR and an AW together, {on_refresh} bursts in a refresh cycle")
    assert same_cycle >= 3 and on_refresh >= 3, "the same-cycle orders were not exercised"
    b.check_clean()


# ---------------------------------------------------------------------------------------------------------
# Throughput, stalls, seeds, counters
# ---------------------------------------------------------------------------------------------------------
def consecutive(times):
    return all(b - a == 1 for a, b in zip(times, times[1:]))


@cocotb.test()
async def ideal_one_beat_per_cycle(dut):
    """timing_en = 0, no stalls: 16 back-to-back 256-beat reads stream one beat every cycle (the next AR
    is accepted while R streams), writes take one W beat a cycle, B comes the cycle after the last W;
    1-beat and 4-beat bursts also run at one beat a cycle."""
    b = await start(dut)
    m = b.mon
    beats = 16 * 256
    k_ar, k_r = len(m.ar), len(m.r)
    await b.m0.read(0, beats * BYTES)
    t = [x[0] for x in m.r[k_r:]]
    ars = [x[0] for x in m.ar[k_ar:]]
    assert len(t) == beats and len(ars) == 16
    dut._log.info(f"{beats} R beats in {t[-1] - ars[0] + 1} cycles from the first AR")
    assert t[0] == ars[0] + 1 and consecutive(t), "a dead cycle in the R stream"
    assert all(ars[i + 1] < t[256 * i + 255] for i in range(15)), "next AR not accepted while R streams"
    k_w, k_b = len(m.w), len(m.b)
    await b.m0.write(0, bytes(beats * BYTES))
    tw = [x[0] for x in m.w[k_w:]]
    assert len(tw) == beats and consecutive(tw), "a dead cycle in the W stream"
    assert [x[0] for x in m.b[k_b:]] == [tw[256 * i + 255] + 1 for i in range(16)]
    for burst in (1, 4):
        b.m0.read_if.max_burst_len = burst
        b.m0.write_if.max_burst_len = burst
        k_r, k_w = len(m.r), len(m.w)
        await b.m0.read(0, 512 * BYTES)
        await b.m0.write(0, bytes(512 * BYTES))
        t, tw = [x[0] for x in m.r[k_r:]], [x[0] for x in m.w[k_w:]]
        rate_r, rate_w = (len(t) - 1) / (t[-1] - t[0]), (len(tw) - 1) / (tw[-1] - tw[0])
        dut._log.info(f"{burst}-beat bursts: R {rate_r:.3f}, W {rate_w:.3f} beats/cycle")
        assert rate_r == 1.0, f"{burst}-beat reads: {rate_r:.3f} beats/cycle"
        assert rate_w >= (0.99 if burst > 1 else 0.9), f"{burst}-beat writes: {rate_w:.3f} beats/cycle"
    b.check_clean()


@cocotb.test()
async def stalls_follow_their_probability(dut):
    """Each channel's stall input alone slows exactly that channel to about 1 - stall/256, and the stall
    pattern is a function of the seed: the same seed repeats it, another seed does not."""
    b = await start(dut)
    m = b.mon
    b.m0.read_if.max_burst_len = 1           # one AR / AW / B per beat: every channel carries 512 events
    b.m0.write_if.max_burst_len = 1
    n = 512
    for chan, value in (("stall_ar", 128), ("stall_r", 192), ("stall_aw", 128), ("stall_w", 64), ("stall_b", 128)):
        b.ctrl(**{chan: value})
        await b.reseed(0x1234 + value)
        c0 = m.counts()
        if chan in ("stall_ar", "stall_r"):
            await b.m0.read(0, n * BYTES)
        else:
            await b.m0.write(0, bytes(n * BYTES))
        idx = {"stall_ar": 0, "stall_r": 2, "stall_aw": 1, "stall_w": 3, "stall_b": 4}[chan]
        lst = (m.ar, m.aw, m.r, m.w, m.b)[idx]
        t = [x[0] for x in lst[c0[idx]:]]
        rate = (len(t) - 1) / (t[-1] - t[0])
        want = 1 - value / 256
        dut._log.info(f"{chan} = {value}: {rate:.3f} events/cycle (expected {want:.3f})")
        assert abs(rate - want) < 0.07, f"{chan} = {value}: rate {rate:.3f}, expected {want:.3f}"
        b.ctrl(**{chan: 0})
    b.m0.read_if.max_burst_len = 256

    async def pattern(seed):
        await b.idle(3)
        await b.reseed(seed)
        k_ar, k_r = len(m.ar), len(m.r)
        await b.m0.read(0, 300 * BYTES)
        t0 = m.ar[k_ar][0]
        return [x[0] - t0 for x in m.r[k_r:]]

    b.ctrl(stall_r=128, stall_ar=100)
    p1, p2, p3 = await pattern(99), await pattern(99), await pattern(100)
    assert p1 == p2, "the same seed must give the same stalls"
    assert p1 != p3, "another seed must give other stalls"
    b.ctrl(stall_r=0, stall_ar=0)
    b.check_clean()


@cocotb.test()
async def counters_count_and_reseed_clears(dut):
    """rd_beats/wr_beats count R/W handshakes, rd_bursts/wr_bursts AR/AW handshakes; reseed clears them."""
    b = await start(dut)
    d = b.dut

    async def counters():
        await ReadOnly()
        c = tuple(int(getattr(d, n).value) for n in ("rd_beats", "wr_beats", "rd_bursts", "wr_bursts"))
        await RisingEdge(d.clk)
        return c

    b.ctrl(stall_r=50, stall_w=50)
    await b.m0.write(0x0ff5, bytes(1000))            # unaligned: beats 0xff0..0x13dc, 2 bursts (4 KiB page)
    await b.m0.read(0x2000, 3000 * BYTES)           # 12 bursts: 11 x 256 + 184
    await b.m0.read(0x7, 1)
    await b.idle(10)
    want_w = (0x0ff5 + 1000 + BYTES - 1) // BYTES - 0x0ff5 // BYTES
    c = await counters()
    assert c == (3001, want_w, 13, 2), c
    n_ar, n_aw, n_r, n_w, _ = b.mon.counts()
    assert c == (n_r, n_w, n_ar, n_aw)
    await b.reseed(3)
    c = await counters()
    assert c == (0, 0, 0, 0), f"reseed must clear the counters: {c}"
    await b.m0.read(0x100, 2 * BYTES)
    await b.idle(3)
    c = await counters()
    assert c == (2, 0, 1, 0), c
    b.check_clean()


# ---------------------------------------------------------------------------------------------------------
# The protocol checker, driven by hand
# ---------------------------------------------------------------------------------------------------------
class HandMaster:
    """Drives s0's master signals directly (no cocotbext-axi), one channel at a time."""

    def __init__(self, dut):
        self.d = dut
        for n in ("awid", "awaddr", "awlen", "awlock", "awcache", "awprot", "awvalid", "wdata", "wstrb", "wlast",
                  "wvalid", "arid", "araddr", "arlen", "arlock", "arcache", "arprot", "arvalid"):
            self.s(n).value = 0
        self.s("awsize").value = self.s("arsize").value = SIZE
        self.s("awburst").value = self.s("arburst").value = 1
        self.s("rready").value = self.s("bready").value = 1

    def s(self, n):
        return getattr(self.d, f"s0_axi_{n}")

    async def cycle(self):
        await RisingEdge(self.d.clk)

    async def handshake(self, ch, limit=50):
        """Wait for ``ch``valid & ``ch``ready, then drop valid."""
        for _ in range(limit):
            await ReadOnly()
            done = int(self.s(f"{ch}ready").value)
            await RisingEdge(self.d.clk)
            if done:
                self.s(f"{ch}valid").value = 0
                return
        raise AssertionError(f"no {ch} handshake")

    def addr(self, ch, addr, ln, size=SIZE, burst=1, id_=0):
        for n, v in (("addr", addr), ("len", ln), ("size", size), ("burst", burst), ("id", id_), ("valid", 1)):
            self.s(f"{ch}{n}").value = v

    async def ar(self, addr, ln, **kw):
        self.addr("ar", addr, ln, **kw)
        await self.handshake("ar")

    async def aw(self, addr, ln, **kw):
        self.addr("aw", addr, ln, **kw)
        await self.handshake("aw")

    async def w(self, beats, last_at=None):
        last_at = beats - 1 if last_at is None else last_at
        for i in range(beats):
            self.s("wdata").value = 0x0101010101010101 * (i + 1) & ((1 << DATA_BITS) - 1)
            self.s("wstrb").value = (1 << BYTES) - 1
            self.s("wlast").value = int(i == last_at)
            self.s("wvalid").value = 1
            await self.handshake("w")


@cocotb.test()
async def protocol_checker_catches_violations(dut):
    """Legal bursts (also ones ending exactly on a 4 KiB boundary) leave protocol_error low; each kind of
    violation raises it (sticky until rst). The messages are checked by the pytest wrapper."""
    b = await start(dut, masters=False)
    d = dut

    async def reset():
        d.rst.value = 1
        h = HandMaster(d)                              # every master signal idle before rst falls
        await ClockCycles(d.clk, 2)
        d.rst.value = 0
        await RisingEdge(d.clk)
        return h

    async def expect(flag, what):
        await ClockCycles(d.clk, 2)
        await ReadOnly()
        got = int(d.protocol_error.value)
        assert got == flag, f"{what}: protocol_error {got}, expected {flag}"
        await RisingEdge(d.clk)

    h = await reset()
    await h.ar(0x0f00, 4096 // BYTES - 0x0f00 // BYTES - 1)   # ends exactly at 0x0fff
    await h.ar(0x1ffc, 0)                                      # unaligned start, one beat, same page
    await h.aw(0x1f00, 256 // BYTES - 1)                        # ends exactly at 0x1fff
    await h.w(256 // BYTES)
    await h.aw(0x2000, 255 if 256 * BYTES <= 4096 else 4096 // BYTES - 1)
    await h.w(256 if 256 * BYTES <= 4096 else 4096 // BYTES)
    await ClockCycles(d.clk, 300)
    await expect(0, "legal bursts")

    async def case(what, drive):
        nonlocal h
        h = await reset()
        await expect(0, f"{what} (after reset)")
        await drive(h)
        await expect(1, what)
        await ClockCycles(d.clk, 5)
        await expect(1, f"{what} (sticky)")

    async def ar_4k(h):
        await h.ar(0x1000 - BYTES, 1)                 # two beats: the second in the next page

    async def aw_4k(h):
        await h.aw(0x2000 - 2 * BYTES, 2)

    async def ar_size(h):
        await h.ar(0x100, 0, size=SIZE - 1)

    async def aw_fixed(h):
        await h.aw(0x100, 0, burst=0)

    async def ar_wrap(h):
        await h.ar(0x100, 3, burst=2)

    async def fill_reads(h):                          # RREADY low: four accepted bursts fill the read queue
        h.s("rready").value = 0
        for i in range(4):
            await h.ar(0x100 * i, 0)
        h.addr("ar", 0x800, 0)
        for _ in range(3):
            await h.cycle()
        assert int(h.s("arready").value) == 0, "the read queue should be full"

    async def ar_drop(h):
        await fill_reads(h)
        h.s("arvalid").value = 0

    async def ar_change(h):
        await fill_reads(h)
        h.s("araddr").value = 0x808

    async def aw_change(h):                           # no W data: four AWs fill the write queue
        for i in range(4):
            await h.aw(0x100 * i, 0)
        h.addr("aw", 0x800, 0, id_=1)
        for _ in range(3):
            await h.cycle()
        assert int(h.s("awready").value) == 0, "the write queue should be full"
        h.s("awid").value = 0

    async def w_pending(h):                           # W before any AW: WREADY stays low
        h.s("wdata").value, h.s("wstrb").value, h.s("wlast").value, h.s("wvalid").value = 5, 1, 1, 1
        for _ in range(3):
            await h.cycle()
        assert int(h.s("wready").value) == 0

    async def w_change(h):
        await w_pending(h)
        h.s("wstrb").value = 3

    async def w_drop(h):
        await w_pending(h)
        h.s("wvalid").value = 0

    async def wlast_early(h):
        await h.aw(0x100, 3)
        await h.w(4, last_at=1)

    async def wlast_missing(h):
        await h.aw(0x100, 3)
        await h.w(4, last_at=9)

    for what, drive in (("AR across 4 KiB", ar_4k), ("AW across 4 KiB", aw_4k), ("narrow ARSIZE", ar_size),
                        ("FIXED AW", aw_fixed), ("WRAP AR", ar_wrap), ("ARVALID dropped", ar_drop),
                        ("AR payload changed", ar_change), ("AW payload changed", aw_change),
                        ("W payload changed", w_change), ("WVALID dropped", w_drop), ("early WLAST", wlast_early),
                        ("missing WLAST", wlast_missing)):
        await case(what, drive)
    h = await reset()
    await expect(0, "rst clears protocol_error")
    assert not b.mon.violations, b.mon.violations[:5]
