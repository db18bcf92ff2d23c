"""cocotb tests of mlo_hw.hw.engine.block_mover.BlockMover (``tests/test_block_mover.py``'s ``MoverTop``: the
mover with X, Y and WORK as real memories, a backdoor to preload and read them back).

The model is the tiled schedule's numpy layouts, not the mover's logic: int16 rows in DRAM are X's lanes in
order (``'<i2'``), a Q row is int8 (sign-extended into Y, Y's low bytes out), and a STORE_K / STORE_VT run is
``weight_image.pack_tile_weights`` of a head's K [rows, dh] / of ``pe`` channels of V^T, at the addresses
``tiled.tiled_stack`` writes them; K and V^T are placed in WORK's banks as ``ResultWriter`` places them (K:
token s in bank s % pe at word (s // pe) * words(H) + channel word; V^T: channel c in bank c % pe at word
(c // pe) * words(rows) + token word). Every DRAM byte is compared with a shadow after each store and the whole
target buffer is read back after each load. Random stalls on all five AXI channels (cocotbext-axi RAM).
"""
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi.constants import AxiResp

from mlo_hw.hw.engine.block_mover import Transfer
from mlo_hw.model.weight_image import pack_tile_weights
from runner import tb_params

P = tb_params()
if P.get("dut") == "mover":
    from tb_act_dma import Dram, near_page       # the shared-memory RAM models, burst checks, shadow

    SIMD, PE, ROWS, HIDDEN = P["simd"], P["pe"], P["rows"], P["hidden"]
    XW, BANK, MAX_RUNS = P["x_words"], P["bank_words"], P["max_runs"]
    BEAT = P["data_bits"] // 8
    UNIT = max(1, BEAT // SIMD)                   # byte words per beat: a transfer is whole beats
    U = int(np.lcm(PE, SIMD))                     # rows and head size come in multiples of this
TRIALS, SEED0 = P.get("trials", 1), P.get("seed0", 0)     # the sweep's size and first seed (slow: more)

LOADS = (Transfer.LOAD_X, Transfer.LOAD_Q)
KINDS = list(Transfer)
TAIL = 3        # busy falls at most this many cycles after the last buffer write (loads) or B response (stores)


def i16_bytes(a) -> bytes:
    return np.asarray(a).astype("<i2").tobytes()


class Job:
    """One transfer: the command and the model's expectation."""

    def __init__(self, kind, base, words, runs=1, step=0, local=0, local_step=0, inner=1, outer_stride=0):
        self.kind, self.base, self.words, self.runs, self.step = kind, base, words, runs, step
        self.local, self.local_step, self.inner, self.outer_stride = local, local_step, inner, outer_stride
        self.expect = []        # stores: bytes of each run (DRAM at base + r * step)
        self.work = {}          # STORE_K / STORE_VT: (bank, word) -> simd bytes to preload

    def span(self):
        return self.base, self.base + (self.runs - 1) * self.step + self.words * SIMD

    def run_range(self, r):
        a = self.base + r * self.step
        return a, a + self.words * SIMD

    def __repr__(self):
        return (f"{self.kind.name}(base={self.base:#x}, words={self.words}, runs={self.runs}, step={self.step}, "
                f"local={self.local}, local_step={self.local_step}, inner={self.inner}, outer={self.outer_stride})")


class Bench:
    def __init__(self, dut):
        self.dut = dut
        self.dram = Dram(dut, dut.clk, dut.rst, reads=True)
        self.x = np.zeros(XW * SIMD, np.int64)       # X and Y: int16 lanes, row-major
        self.y = np.zeros(XW * SIMD, np.int64)
        self.cycle = 0
        self.trace = []         # per cycle since the last start: (busy, {event: value})
        self.active = False     # a transfer is running (AR/AW/buffer traffic allowed)
        self.violations = []
        for n in ("start", "cancel", "clear", "bd_we", "bd_re", "bd_rsel", "bd_sel", "bd_addr", "bd_data", "kind",
                  "base", "step", "runs", "words", "local", "local_step", "inner", "outer_stride"):
            getattr(dut, n).value = 0
        cocotb.start_soon(self._monitor())

    async def _monitor(self):
        d = self.dut
        while True:
            await ReadOnly()
            ev = {}
            if int(d.m_axi_arvalid.value) and int(d.m_axi_arready.value):
                ev["ar"] = int(d.m_axi_araddr.value)
            if int(d.m_axi_awvalid.value) and int(d.m_axi_awready.value):
                ev["aw"] = int(d.m_axi_awaddr.value)
            if int(d.m_axi_bvalid.value) and int(d.m_axi_bready.value):
                ev["b"] = 1
            if int(d.wr_valid.value):
                ev["wr"] = 1
            if int(d.rd_en.value):
                ev["rd"] = 1
            if int(d.loaded.value):
                ev["loaded"] = int(d.loaded.value)
            if int(d.start.value):
                ev["start"] = 1
            if not self.active and any(k in ev for k in ("ar", "aw", "wr", "rd")):
                self.violations.append(f"cycle {self.cycle}: {sorted(ev)} while no transfer runs")
            self.trace.append((int(d.busy.value), ev))
            await RisingEdge(d.clk)
            self.cycle += 1

    # ---- the backdoor -----------------------------------------------------------------------------------
    async def poke(self, sel, addr, value):
        d = self.dut
        d.bd_we.value, d.bd_sel.value, d.bd_addr.value, d.bd_data.value = 1, sel, addr, value
        await RisingEdge(d.clk)
        d.bd_we.value = 0

    async def preload(self, rng):
        """Random X, Y and WORK contents (the model's X and Y)."""
        for sel, buf in ((0, self.x), (1, self.y)):
            buf[:] = [rng.randint(-32768, 32767) for _ in range(len(buf))]
            for j in range(XW):
                await self.poke(sel, j, int.from_bytes(i16_bytes(buf[j * SIMD:(j + 1) * SIMD]), "little"))
        for b in range(PE):
            for j in range(BANK):
                await self.poke(2 + b, j, rng.getrandbits(8 * SIMD))

    async def read_buffer(self, sel):
        """X (0) or Y (1) read back through the backdoor: int16 lanes."""
        d, words = self.dut, []
        d.bd_re.value, d.bd_rsel.value, d.bd_addr.value = 1, sel, 0
        await RisingEdge(d.clk)
        for k in range(XW):
            d.bd_addr.value = min(k + 1, XW - 1)
            await ReadOnly()
            words.append(int(d.bd_rdata.value))
            await RisingEdge(d.clk)
        d.bd_re.value = 0
        raw = b"".join(w.to_bytes(2 * SIMD, "little") for w in words)
        return np.frombuffer(raw, "<i2").astype(np.int64)

    async def check_buffer(self, kind, what=""):
        sel = 0 if kind == Transfer.LOAD_X else 1
        got, want = await self.read_buffer(sel), (self.x, self.y)[sel]
        bad = np.flatnonzero(got != want)
        assert not len(bad), (f"{what}: {len(bad)} {'XY'[sel]} lanes differ, first lane {bad[0]}: "
                              f"{got[bad[0]]}, expected {want[bad[0]]}")

    # ---- a transfer -------------------------------------------------------------------------------------
    async def prepare(self, job):
        """WORK's words for a store of K or V^T, through the backdoor."""
        for (bank, word), data in job.work.items():
            await self.poke(2 + bank, word, int.from_bytes(data, "little"))

    async def issue(self, job, fresh=True, prepared=False):
        """Start ``job`` (a one-cycle ``start``, after :meth:`prepare` unless ``prepared``; ``fresh``: the trace
        restarts); returns at the clock edge that takes it."""
        d = self.dut
        if not prepared:
            await self.prepare(job)
        for f in ("base", "step", "runs", "words", "local", "local_step", "inner", "outer_stride"):
            getattr(d, f).value = getattr(job, f)
        d.kind.value = job.kind.value
        self.active = True
        if fresh:
            self.trace = []
        d.start.value = 1
        await RisingEdge(d.clk)
        d.start.value = 0

    async def wait_idle(self, limit=200000):
        d = self.dut
        for _ in range(limit):
            await RisingEdge(d.clk)
            await ReadOnly()
            if not int(d.busy.value):
                await RisingEdge(d.clk)
                self.active = False
                return
        raise AssertionError(f"busy after {limit} cycles")

    def check_busy(self, job, clean=True):
        """busy: high from the cycle after start, through the last buffer write (loads) or B response (stores),
        low at most TAIL cycles later; a load never reads the buffers, a store never writes them."""
        t = self.trace
        s = next(i for i, (_, ev) in enumerate(t) if "start" in ev)
        fall = next(i for i in range(s + 1, len(t)) if not t[i][0])
        assert fall > s + 1, f"{job}: busy low in the cycle after start"
        last_kind = "wr" if job.kind in LOADS else "b"
        acts = [i for i, (_, ev) in enumerate(t) if last_kind in ev]
        other = [i for i, (_, ev) in enumerate(t) if ("rd" if job.kind in LOADS else "wr") in ev]
        assert not other, f"{job}: the buffer was {'read' if job.kind in LOADS else 'written'} (cycle {other[0] - s})"
        if acts:
            assert acts[-1] < fall, f"{job}: busy fell {acts[-1] - fall + 1} cycles before the last {last_kind}"
            if clean:
                assert fall - acts[-1] <= TAIL, f"{job}: busy fell {fall - acts[-1]} cycles after the last {last_kind}"
        elif clean:
            assert fall - s <= TAIL, f"{job}: busy {fall - s - 1} cycles for a transfer that moves nothing"
        assert not self.violations, self.violations[:3]
        if job.kind in LOADS:
            self.check_loaded(job, t[s:])
        return fall - s - 1

    @staticmethod
    def check_loaded(job, trace):
        """``loaded`` never counts a word before the load has written it whole (a Y word a buffer write, an X word
        every two), and it counts up (a load of two or more words shows at least one)."""
        writes, seen = 0, 0
        for i, (_, ev) in enumerate(trace):
            whole = writes if job.kind == Transfer.LOAD_Q else writes // 2
            loaded = ev.get("loaded", 0)
            assert loaded <= whole, f"{job}: loaded {loaded} in cycle {i} after {writes} buffer writes"
            seen = max(seen, loaded)
            writes += "wr" in ev
        total = writes if job.kind == Transfer.LOAD_Q else writes // 2
        assert total < 2 or seen > 0, f"{job}: {total} words written, loaded stayed 0"

    def events(self, what):
        return [ev[what] for _, ev in self.trace if what in ev]

    def apply(self, job):
        """The model after ``job``: X/Y (loads) or the DRAM shadow (stores)."""
        n = job.words * SIMD
        if n == 0:
            return
        for r in range(job.runs):
            a = job.base + r * job.step
            if job.kind == Transfer.LOAD_X:
                vals = np.frombuffer(bytes(self.dram.shadow[a:a + n]), "<i2")
                self.x[:len(vals)] = vals
            elif job.kind == Transfer.LOAD_Q:
                vals = np.frombuffer(bytes(self.dram.shadow[a:a + n]), np.int8)
                self.y[:len(vals)] = vals
            else:
                self.dram.shadow[a:a + n] = self.run_bytes(job, r)

    def run_bytes(self, job, r):
        """The DRAM bytes of a store's run ``r``."""
        n = job.words * SIMD
        if job.kind == Transfer.STORE_X:
            return i16_bytes(self.x[:n // 2])
        if job.kind == Transfer.STORE_Q:
            return i16_bytes(self.y[:n])[0::2]          # the low byte of each int16 lane
        return job.expect[r][:n]

    async def run(self, job):
        await self.issue(job)
        await self.wait_idle()
        self.check_busy(job)
        assert not int(self.dut.error.value), f"{job}: unexpected error (code {int(self.dut.error_code.value)})"
        self.apply(job)
        if job.kind in LOADS:
            await self.check_buffer(job.kind, repr(job))
        else:
            self.dram.check(repr(job))

    # ---- random jobs ------------------------------------------------------------------------------------
    def words(self, rng, cap):
        return UNIT * rng.randint(1, cap // UNIT)

    def rows_job(self, rng, kind, runs=None, gap=True):
        """LOAD_X / LOAD_Q / STORE_X / STORE_Q: int16 (X) or int8 (Q) rows, every run from buffer word 0."""
        cap = 2 * XW if kind in (Transfer.LOAD_X, Transfer.STORE_X) else XW
        words = self.words(rng, cap)
        runs = runs or rng.choice([1, 1, 1, 2, 3])
        step = words * SIMD + (BEAT * rng.randint(0, 40) if gap else 0)
        base = near_page(rng, (runs - 1) * step + words * SIMD)
        return Job(kind, base, words, runs, step)

    def geometry(self, rng, min_runs=1):
        """A block of ``rows`` tokens, ``heads`` heads of ``dh`` channels, in a scratch of ``seq`` tokens."""
        while True:
            rows = U * rng.randint(1, ROWS // U)
            dh = U * rng.randint(1, HIDDEN // U)
            heads = rng.randint(1, HIDDEN // dh)
            seq = rows * rng.randint(1, 4)
            if heads * dh // PE >= min_runs and heads >= min_runs:
                return rows, heads, dh, seq

    def k_job(self, rng, full=False, min_runs=1):
        """STORE_K as the sequencer issues it: a run per head, K_h's rows of this block in weight-word order."""
        rows, heads, dh, seq = self.geometry(rng, min_runs)
        h = heads * dh
        k = np.array([[rng.randint(-128, 127) for _ in range(h)] for _ in range(rows)], np.int64)
        span = rows // PE * h // SIMD                              # bank words of K
        k_local = rng.randint(0, BANK - span)
        words = rows * dh // SIMD
        runs = heads
        if not full and rng.random() < 0.3:
            runs = rng.randint(min_runs, heads)
        if not full and rng.random() < 0.3:
            words = self.words(rng, words)
        job = Job(Transfer.STORE_K, 0, words, runs, seq * dh, local=k_local, local_step=dh // SIMD,
                  inner=dh // SIMD, outer_stride=h // SIMD)
        job.base = near_page(rng, (runs - 1) * job.step + words * SIMD)
        for s in range(rows):                                      # ResultWriter's K placement
            for cw in range(h // SIMD):
                job.work[(s % PE, k_local + (s // PE) * (h // SIMD) + cw)] = \
                    k[s, cw * SIMD:(cw + 1) * SIMD].astype(np.int8).tobytes()
        for hh in range(runs):                                     # tiled_stack's K_h run of the block
            job.expect.append(pack_tile_weights(k[:, hh * dh:(hh + 1) * dh], PE, SIMD).astype(np.int8)
                              .tobytes()[:words * SIMD])
        return job

    def vt_job(self, rng, full=False, min_runs=1):
        """STORE_VT as the sequencer issues it: a run per ``pe`` channels of V^T, this block's tokens."""
        rows, heads, dh, seq = self.geometry(rng, min_runs)
        h = heads * dh
        v = np.array([[rng.randint(-128, 127) for _ in range(h)] for _ in range(rows)], np.int64)
        span = h // PE * rows // SIMD
        v_local = rng.randint(0, BANK - span)
        words = rows * PE // SIMD
        runs = h // PE
        if not full and rng.random() < 0.3:
            runs = rng.randint(min_runs, runs)
        if not full and rng.random() < 0.3:
            words = self.words(rng, words)
        job = Job(Transfer.STORE_VT, 0, words, runs, seq * PE, local=v_local, local_step=rows // SIMD,
                  inner=rows // SIMD)
        job.base = near_page(rng, (runs - 1) * job.step + words * SIMD)
        for c in range(h):                                         # ResultWriter's V^T placement
            for sw in range(rows // SIMD):
                job.work[(c % PE, v_local + (c // PE) * (rows // SIMD) + sw)] = \
                    v[sw * SIMD:(sw + 1) * SIMD, c].astype(np.int8).tobytes()
        for hh in range(heads):                                    # tiled_stack's V_h^T runs of the block
            packed = pack_tile_weights(v[:, hh * dh:(hh + 1) * dh].T, PE, SIMD).reshape(dh // PE, rows // SIMD,
                                                                                         PE * SIMD)
            for nf in range(dh // PE):
                if len(job.expect) < runs:
                    job.expect.append(packed[nf].astype(np.int8).tobytes()[:words * SIMD])
        return job

    def random_job(self, rng, kind=None, **kw):
        kind = rng.choice(KINDS) if kind is None else kind
        if kind == Transfer.STORE_K:
            return self.k_job(rng, **kw)
        if kind == Transfer.STORE_VT:
            return self.vt_job(rng, **kw)
        return self.rows_job(rng, kind, **{k: v for k, v in kw.items() if k == "runs"})


async def start(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    b = Bench(dut)
    await RisingEdge(dut.clk)
    await b.preload(random.Random(7))
    return b


async def pulse(dut, sig):
    sig.value = 1
    await RisingEdge(dut.clk)
    sig.value = 0


@cocotb.test()
async def random_transfers(dut):
    """Every kind with random sizes, runs, local offsets and DRAM bases near 4 KiB pages, random stalls on all
    five AXI channels; then each kind at full size without stalls near the ideal rate."""
    b = await start(dut)
    for seed in range(SEED0, SEED0 + 18 * TRIALS):
        rng = random.Random(seed)
        b.dram.set_pauses(rng, [rng.choice([0, 0.2, 0.5, 0.8]) for _ in range(5)])
        await b.run(b.random_job(rng, KINDS[seed % len(KINDS)]))
    b.dram.no_pauses()
    rng = random.Random(1000 + SEED0)
    for kind in KINDS:
        if kind in (Transfer.STORE_K, Transfer.STORE_VT):
            job = b.random_job(rng, kind, full=True)
        else:
            job = b.rows_job(rng, kind, runs=2)
            job.words = (2 * XW if kind in (Transfer.LOAD_X, Transfer.STORE_X) else XW) // 2
            job.step = job.words * SIMD + 4096
            job.base = near_page(rng, job.step + job.words * SIMD)
        await b.run(job)
        cycles = b.check_busy(job)
        ideal = job.runs * max(job.words, job.words * SIMD // BEAT)
        dut._log.info(f"{job}: {cycles} cycles (ideal {ideal})")
        assert cycles < 1.1 * ideal + 30 * job.runs, f"{job}: {cycles} cycles, ideal {ideal}: below full rate"


@cocotb.test()
async def load_beside_store(dut):
    """A load and a store at once, as the tiled engine moves the next block in beside a block's stores (LOAD_X
    beside STORE_Q, K, V^T; LOAD_Q beside STORE_X), in either order a few cycles apart, disjoint DRAM ranges,
    random stalls: both exact, both sides busy at once, and busy until the later one ends."""
    b = await start(dut)
    d = dut
    pairs = [(Transfer.LOAD_X, k) for k in (Transfer.STORE_Q, Transfer.STORE_K, Transfer.STORE_VT)] \
        + [(Transfer.LOAD_Q, k) for k in (Transfer.STORE_X, Transfer.STORE_K, Transfer.STORE_VT)]
    for trial in range(6 * TRIALS):
        rng = random.Random(3000 + SEED0 + trial)
        b.dram.set_pauses(rng, [rng.choice([0, 0.2, 0.5]) for _ in range(5)])
        lk, sk = pairs[trial % len(pairs)]
        load = b.random_job(rng, lk)
        while True:
            store = b.random_job(rng, sk)
            (l0, l1), (s0, s1) = load.span(), store.span()
            if l1 <= s0 or s1 <= l0:
                break
        first, second = (load, store) if trial % 2 else (store, load)
        await b.prepare(store)
        await b.issue(first, prepared=True)
        await ClockCycles(dut.clk, rng.randint(0, 3))
        await b.issue(second, fresh=False, prepared=True)
        both = 0
        for _ in range(200000):
            await ReadOnly()
            both += int(d.load_busy.value) & int(d.store_busy.value)
            if not int(d.busy.value):
                break
            await RisingEdge(d.clk)
        await RisingEdge(d.clk)
        b.active = False
        assert not int(d.error.value), f"{load} beside {store}: error (code {int(d.error_code.value)})"
        assert both, f"{load} beside {store}: never both busy"
        assert b.events("wr") and b.events("b"), f"{load} beside {store}: a side moved nothing"
        assert not b.violations, b.violations[:3]
        b.apply(load)
        b.apply(store)
        await b.check_buffer(lk, f"{load} beside {store}")
        b.dram.check(f"{store} beside {load}")
    b.dram.no_pauses()


@cocotb.test()
async def error_responses(dut):
    """SLVERR/DECERR on a read beat of a load's run r or on a write burst of a store's run r: error, the beat's
    (burst's) address and the code; busy falls; runs before r are exact, nothing of a later run is issued; a
    start without ``clear`` moves nothing; after ``clear`` the same transfer is exact."""
    b = await start(dut)
    for trial in range(6 * TRIALS):
        rng = random.Random(500 + SEED0 + trial)
        b.dram.set_pauses(rng, [rng.choice([0, 0.3]) for _ in range(5)])
        resp = rng.choice([AxiResp.SLVERR, AxiResp.SLVERR, AxiResp.DECERR])
        kind = KINDS[trial % len(KINDS)]
        if kind in (Transfer.STORE_K, Transfer.STORE_VT):
            job = b.random_job(rng, kind, min_runs=2)
        else:
            job = b.rows_job(rng, kind, runs=rng.randint(2, 3))
        r = rng.randrange(job.runs)
        lo, hi = job.run_range(r)
        before = bytes(b.dram.wr.read(0, len(b.dram.shadow)))
        if kind in LOADS:
            bad = lo + BEAT * rng.randrange((hi - lo) // BEAT)
            b.dram.rd.faults = {bad: resp}
        else:
            bad = lo + rng.randrange(hi - lo)
            b.dram.wr.faults = {bad: resp}
        await b.issue(job)
        await b.wait_idle()
        b.check_busy(job, clean=False)
        b.dram.rd.faults, b.dram.wr.faults = {}, {}
        assert int(dut.error.value) == 1, f"{job}: no error for {resp.name} at {bad:#x} (run {r})"
        assert int(dut.error_code.value) == int(resp), f"{job}: error code {int(dut.error_code.value)}"
        issued = b.events("ar" if kind in LOADS else "aw")
        if kind in LOADS:
            assert int(dut.error_addr.value) == bad, f"{job}: error_addr {int(dut.error_addr.value):#x}, beat {bad:#x}"
        else:
            burst = max(a for a in issued if a <= bad)
            assert int(dut.error_addr.value) == burst, \
                f"{job}: error_addr {int(dut.error_addr.value):#x}, burst {burst:#x}"
        later = [a for a in issued if a >= hi]
        assert not later, f"{job}: {len(later)} bursts of runs after the failing run {r} (first at {later[0]:#x})"
        if kind in LOADS:
            b.x[:], b.y[:] = await b.read_buffer(0), await b.read_buffer(1)
        else:
            mem = b.dram.wr.read(0, len(before))
            new = b.run_bytes(job, r)
            want = bytearray(before)
            done = Job(job.kind, job.base, job.words, r, job.step)
            done.expect = job.expect
            saved = b.dram.shadow
            b.dram.shadow = want
            b.apply(done)                       # the runs before r, exactly
            b.dram.shadow = saved
            for a in range(len(mem)):
                if lo <= a < hi:                # the failing run: each byte written or not
                    assert mem[a] in (want[a], new[a - lo]), f"{job}: run {r} byte {a:#x} {mem[a]:#x}"
                else:
                    assert mem[a] == want[a], f"{job}: byte {a:#x} is {mem[a]:#x}, expected {want[a]:#x}"
            b.dram.shadow[:] = mem
        # the error stays until clear: a start moves nothing
        await b.issue(job)
        await b.wait_idle()
        assert not any(k in ev for _, ev in b.trace for k in ("ar", "aw", "wr", "rd")), f"{job}: moved while in error"
        assert int(dut.error.value) == 1
        await pulse(dut, dut.clear)
        await RisingEdge(dut.clk)
        assert int(dut.error.value) == 0, "clear did not clear error"
        await b.run(job)
    b.dram.no_pauses()


@cocotb.test()
async def cancel_single_run(dut):
    """``cancel`` during a one-run transfer of each kind: busy falls without error, nothing outside the run
    changes (a store's bytes are each new or old), and the next transfers are exact."""
    b = await start(dut)
    for trial in range(6 * TRIALS):
        rng = random.Random(900 + SEED0 + trial)
        b.dram.set_pauses(rng, [0.3] * 5)
        kind = KINDS[trial % len(KINDS)]
        job = b.random_job(rng, kind)
        job.runs, job.expect = 1, job.expect[:1]
        before = bytes(b.dram.wr.read(0, len(b.dram.shadow)))
        await b.issue(job)
        await ClockCycles(dut.clk, rng.randint(1, 2 * job.words))
        await pulse(dut, dut.cancel)
        await b.wait_idle()
        b.check_busy(job, clean=False)
        assert not int(dut.error.value), f"{job}: error after cancel"
        mem = b.dram.wr.read(0, len(before))
        lo, hi = job.run_range(0)
        if kind in LOADS:
            assert mem == before, f"{job}: a load changed DRAM"
            sel = 0 if kind == Transfer.LOAD_X else 1
            got, old = await b.read_buffer(sel), (b.x, b.y)[sel]
            n = job.words * SIMD // (2 if kind == Transfer.LOAD_X else 1)
            assert (got[n:] == old[n:]).all(), f"{job}: lanes beyond the transfer changed"
            raw = bytes(before[lo:hi])
            new = np.frombuffer(raw, "<i2") if kind == Transfer.LOAD_X else np.frombuffer(raw, np.int8)
            assert ((got[:n] == old[:n]) | (got[:n] == new)).all(), f"{job}: a lane is neither old nor loaded"
            (b.x, b.y)[sel][:] = got
        else:
            assert mem[:lo] == before[:lo] and mem[hi:] == before[hi:], f"{job}: bytes outside the run changed"
            b.apply(job)
            new = bytes(b.dram.shadow[lo:hi])
            assert all(m in (o, n) for m, o, n in zip(mem[lo:hi], before[lo:hi], new)), f"{job}: a byte is neither"
            b.dram.shadow[:] = mem
        await b.run(b.random_job(rng, rng.choice(KINDS)))
        await b.run(b.random_job(rng, kind))
    b.dram.no_pauses()


@cocotb.test()
async def cancel_multi_run(dut):
    """``cancel`` during the first run of a several-run transfer (the engine's soft reset during STORE_K,
    STORE_VT or a load): the mover abandons the transfer; no burst of a later run is issued."""
    b = await start(dut)
    # the smallest case: LOAD_X of two one-beat runs a page apart, cancel two cycles after start (run 0 started)
    job = Job(Transfer.LOAD_X, 0x1000, UNIT, runs=2, step=0x1000)
    await b.issue(job)
    await RisingEdge(dut.clk)
    await pulse(dut, dut.cancel)
    await b.wait_idle()
    assert not [a for a in b.events("ar") if a >= 0x2000], f"{job}: cancel in run 0; run 1 was read"
    assert not int(dut.error.value), f"{job}: error after cancel"
    b.x[:] = await b.read_buffer(0)
    for trial in range(6):
        rng = random.Random(1300 + trial)
        kind = (Transfer.STORE_K, Transfer.STORE_VT, Transfer.LOAD_X)[trial % 3]
        if kind in LOADS:
            job = b.rows_job(rng, kind, runs=3)
        else:
            job = b.random_job(rng, kind, min_runs=2)
        await b.issue(job)
        await ClockCycles(dut.clk, rng.randint(1, job.words // 2 + 1))
        await pulse(dut, dut.cancel)
        await b.wait_idle()
        b.check_busy(job, clean=False)
        assert not int(dut.error.value), f"{job}: error after cancel"
        lo, hi = job.run_range(0)
        issued = b.events("ar" if kind in LOADS else "aw")
        later = [a for a in issued if not lo <= a < hi]
        assert not later, f"{job}: cancel in run 0; {len(later)} bursts of later runs issued (first at {later[0]:#x})"
        b.dram.shadow[:] = b.dram.wr.read(0, len(b.dram.shadow))
        b.x[:], b.y[:] = await b.read_buffer(0), await b.read_buffer(1)
        await b.run(b.random_job(rng, kind))        # then a clean transfer


@cocotb.test()
async def zero_words_and_busy(dut):
    """A run of zero words (and a transfer of zero runs) moves nothing: no AR/AW, no buffer access, DRAM and
    buffers unchanged (no buffer write: the top writes X and Y only through the mover), busy for at most
    two cycles; a stalled transfer keeps busy high through its last
    buffer write or B response (checked on every transfer, here also with long stalls)."""
    b = await start(dut)
    rng = random.Random(77)
    for kind in KINDS:
        for words, runs in ((0, 1), (0, 3), (UNIT, 0)):
            job = b.random_job(rng, kind)
            job.words, job.runs = words, runs
            await b.run(job)
            moved = [k for _, ev in b.trace for k in ("ar", "aw", "wr", "rd") if k in ev]
            assert not moved, f"{job}: {moved[:4]}"
    for kind in KINDS:                  # long stalls on the last channel of each side
        b.dram.set_pauses(rng, [0.5, 0.5, 0.9, 0.5, 0.9])
        await b.run(b.random_job(rng, kind))
    b.dram.no_pauses()


@cocotb.test()
async def corruption_is_detected(dut):
    """Negative check: an expectation one byte off (a STORE_K run, a STORE_VT run, a loaded X lane) fails."""
    b = await start(dut)
    rng = random.Random(31)
    for kind in (Transfer.STORE_K, Transfer.STORE_VT, Transfer.LOAD_X):
        job = b.random_job(rng, kind)
        if kind in LOADS:
            await b.run(job)
            b.x[rng.randrange(job.words * SIMD // 2)] ^= 0x100
            try:
                await b.check_buffer(kind, "corrupted")
            except AssertionError:
                b.x[:] = await b.read_buffer(0)
                continue
            raise AssertionError("a corrupted X lane was not detected")
        r = rng.randrange(job.runs)
        e = bytearray(job.expect[r])
        e[rng.randrange(len(e))] ^= 0x01
        job.expect[r] = bytes(e)
        try:
            await b.run(job)
        except AssertionError as err:
            dut._log.info(f"caught as expected: {str(err)[:120]}")
            b.dram.shadow[:] = b.dram.wr.read(0, len(b.dram.shadow))
            continue
        raise AssertionError(f"{kind.name}: a corrupted expected byte was not detected")
