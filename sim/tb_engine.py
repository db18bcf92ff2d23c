"""The layer engine with cocotbext-axi as DRAM and control master: the tests about the AXI protocol itself.

Registers over AXI4-Lite, weights and input in an ``AxiRam`` (random latency and backpressure), START,
the interrupt, the output read back and compared bit for bit with the golden model; a monitor records
every tensor the engine produces on chip, checked by ``sim/engine_check.py`` so that a mismatch names the
first layer and tensor that differ. The tests: a misaligned INPUT_BASE and bad TOKENS are errors without
a run; and (parameter ``drain``) abandoned runs, soft reset and error responses, with an AXI bus monitor
on every cycle. Plain full-stack runs (bit exactness, cycles, MiniLM) use the faster harness of
``sim/harness.py``.
"""
import logging
import random
from collections import deque

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from mlo_hw.config import load_config
from mlo_hw.model.golden import int_stack
from mlo_hw.hw.layer_engine import EngineGeometry, Op, with_seq_len
from mlo_hw.model.numerics import RES_BITS
from mlo_hw.model.quantize import DRAM_DTYPE, build_model, dram_bytes, from_dram, random_inputs
from mlo_hw.model.weight_image import layout, pack_image
from engine_check import Trace, check_run
from runner import tb_params

P = tb_params()
CFG = load_config(P["config"])
if P.get("seq_len"):
    CFG = with_seq_len(CFG, P["seq_len"])
REGS = {r["name"]: r for r in P["registers"]}
BIT = {(r["name"], f["name"]): 1 << f["lsb"] for r in P["registers"] for f in r["fields"]}
WEIGHT_BASE, INPUT_BASE, OUTPUT_BASE = 0x40000, 0x1000, 0x20000    # room for int16 [128, 384]
H, HEADS, PE = CFG.model.hidden, CFG.model.heads, CFG.folding.pe
ACC_BITS = int(P["acc_bits"])
SOFTMAX_LANES = EngineGeometry.from_config(CFG).softmax_lanes


MODEL = build_model(CFG)[1]
IMAGE = pack_image(CFG, MODEL.layers)
RAM_BYTES = 1 << (WEIGHT_BASE + len(IMAGE) - 1).bit_length()


def read_output(ram, seq_len: int) -> np.ndarray:
    """The engine's output [seq_len, H] (int64) read back from DRAM."""
    return from_dram(ram.read(OUTPUT_BASE, seq_len * H * DRAM_DTYPE.itemsize), seq_len, H)


def signed(v, bits):
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def set_pauses(ram, rng, p):
    """Random stalls on every channel of the RAM (p = probability of a stalled cycle)."""
    def gen():
        while True:
            yield rng.random() < p
    for ch in (ram.read_if.ar_channel, ram.read_if.r_channel, ram.write_if.aw_channel,
               ram.write_if.w_channel, ram.write_if.b_channel):
        ch.set_pause_generator(gen() if p else None)
        if not p:
            ch.pause = False        # clearing a generator leaves its last value in place


async def rd(axil, name):
    return int.from_bytes((await axil.read(REGS[name]["offset"], 4)).data, "little")


async def wr(axil, name, value):
    await axil.write(REGS[name]["offset"], int(value).to_bytes(4, "little"))


class Monitor:
    """Records (layer, op, values) of the MVAU, softmax and LayerNorm output handshakes."""

    def __init__(self, dut):
        self.dut = dut
        self.mvau, self.probs, self.ln = [], [], []
        self.running = True

    async def run(self):
        dut = self.dut
        mv_v, mv_r, mv_p = dut.mvau.o__valid, dut.mvau.o__ready, dut.mvau.o__payload
        sm_v, sm_r, sm_p = dut.softmax.o__valid, dut.softmax.o__ready, dut.softmax.o__payload
        lane_blocks = [getattr(dut.layernorm, f"ln{i}") for i in range(CFG.folding.ln_lanes)]
        lns = [(ln.o__valid, ln.o__ready, ln.o__payload) for ln in lane_blocks]
        while self.running:
            await RisingEdge(dut.clk)
            await ReadOnly()
            # an LN output belongs to ln_op's LayerNorm (it may finish its last rows while op is the next matrix)
            op, ln_op, layer = int(dut.op.value), int(dut.ln_op.value), int(dut.layer.value)
            if mv_v.value and mv_r.value:
                word = int(mv_p.value)
                self.mvau.append((layer, op, [signed(word >> (ACC_BITS * p), ACC_BITS) for p in range(PE)]))
            if sm_v.value and sm_r.value:            # a beat of SOFTMAX_LANES probabilities
                beat = int(sm_p.value)
                self.probs.extend((layer, (beat >> (8 * lane)) & 0xFF) for lane in range(SOFTMAX_LANES))
            for lane, (ln_v, ln_r, ln_p) in enumerate(lns):
                if ln_v.value and ln_r.value:          # a beat of folding.ln_width elements, channel order
                    beat = int(ln_p.value)
                    self.ln.extend((layer, ln_op, lane, signed(beat >> (RES_BITS * j), RES_BITS))
                                   for j in range(CFG.folding.ln_width))

    def trace(self) -> Trace:
        """The records as sim/engine_check.py takes them."""
        return Trace.from_records(self.mvau, self.probs, self.ln, PE)


def random_input(rng):
    """A random quantized engine input [seq_len, H] (N(0, 1) rows, like an embedding layer's output)."""
    x_float, _ = random_inputs(CFG, np.random.default_rng(rng.randrange(1 << 30)), 1, padded=False)[0]
    return MODEL.quantize_input(x_float)


async def run_case(dut, axil, ram, rng, layers, x, tokens, pause, monitor=True):
    """One run on the quantized input ``x`` with ``tokens`` valid: returns (output [seq_len, H], golden
    output, traces, monitor, cycles)."""
    seq_len = CFG.model.seq_len
    mask = np.arange(seq_len) < tokens
    traces = []
    want = int_stack(x, MODEL.layers[:layers], mask, HEADS, traces)
    image = dram_bytes(x)
    ram.write(INPUT_BASE, image)
    ram.write(OUTPUT_BASE, bytes(rng.randrange(256) for _ in range(len(image))))
    set_pauses(ram, rng, pause)
    mon = Monitor(dut)
    mon.running = monitor
    task = cocotb.start_soon(mon.run())
    await wr(axil, "WEIGHT_BASE_LO", WEIGHT_BASE)
    await wr(axil, "INPUT_BASE_LO", INPUT_BASE)
    await wr(axil, "OUTPUT_BASE_LO", OUTPUT_BASE)
    await wr(axil, "LAYERS", layers)
    await wr(axil, "TOKENS", tokens)
    await wr(axil, "CTRL", BIT["CTRL", "irq_enable"] | BIT["CTRL", "start"])
    for _ in range(P.get("timeout_cycles", 2_000_000) // 64):
        await ClockCycles(dut.clk, 64)
        if dut.irq.value:
            break
    status = await rd(axil, "STATUS")
    mon.running = False
    await task
    assert status & BIT["STATUS", "done"], f"no DONE (STATUS {status:#x}, op {Op(int(dut.op.value)).name})"
    assert not status & BIT["STATUS", "error"], f"ERROR set (STATUS {status:#x})"
    cycles = await rd(axil, "CYCLES")
    await wr(axil, "STATUS", BIT["STATUS", "done"])
    return read_output(ram, seq_len), want, traces, mon, cycles


def check(got, want, traces, mon, tokens, layers):
    """AssertionError naming the first layer and tensor that differ (sim/engine_check.py)."""
    check_run(CFG, got, want, traces, mon.trace(), CFG.model.seq_len, layers)


def check_catches_corruption(got, want, traces, mon, tokens, layers, rng):
    """Negative check: :func:`check` rejects the same output with one element corrupted."""
    bad = got.copy()
    bad[rng.randrange(CFG.model.seq_len), rng.randrange(H)] ^= 0x10
    try:
        check(bad, want, traces, mon, tokens, layers)
    except AssertionError:
        return
    raise AssertionError("the checker missed a corrupted output element")


async def setup(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=RAM_BYTES)
    axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
    for log in (axil.write_if.log, axil.read_if.log, ram.write_if.log, ram.read_if.log):
        log.setLevel(logging.WARNING)
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    ram.write(WEIGHT_BASE, IMAGE)
    return ram, axil


@cocotb.test(skip=bool(P.get("drain")))
async def misaligned_input_base_is_an_error(dut):
    """An INPUT_BASE that is not a multiple of the AXI beat, or TOKENS outside 1..seq_len, sets STATUS.error
    without a run (no DONE); the next run with good values works."""
    ram, axil = await setup(dut)
    beat = CFG.axi_data_bytes
    await wr(axil, "WEIGHT_BASE_LO", WEIGHT_BASE)
    await wr(axil, "INPUT_BASE_LO", INPUT_BASE + beat // 2)
    await wr(axil, "OUTPUT_BASE_LO", OUTPUT_BASE)
    await wr(axil, "LAYERS", 1)
    await wr(axil, "CTRL", BIT["CTRL", "irq_enable"] | BIT["CTRL", "start"])
    await ClockCycles(dut.clk, 50)
    status = await rd(axil, "STATUS")
    assert status & BIT["STATUS", "error"] and not status & BIT["STATUS", "done"], f"STATUS {status:#x}"
    assert not status & BIT["STATUS", "busy"], f"STATUS {status:#x}"
    assert dut.irq.value, "the interrupt follows ERROR"
    # TOKENS outside 1..seq_len: ERROR with ERROR_CODE.bad_tokens, no run
    await wr(axil, "INPUT_BASE_LO", INPUT_BASE)
    for tokens in (0, CFG.model.seq_len + 1):
        await wr(axil, "TOKENS", tokens)
        await wr(axil, "CTRL", BIT["CTRL", "irq_enable"] | BIT["CTRL", "start"])
        await ClockCycles(dut.clk, 20)
        status, code = await rd(axil, "STATUS"), await rd(axil, "ERROR_CODE")
        assert status & BIT["STATUS", "error"] and not status & BIT["STATUS", "busy"], f"STATUS {status:#x}"
        assert code & BIT["ERROR_CODE", "bad_tokens"], f"TOKENS={tokens}: ERROR_CODE {code:#x}"
    rng = random.Random(11)
    got, want, traces, mon, _ = await run_case(dut, axil, ram, rng, 1, random_input(rng), CFG.model.seq_len, 0.0)
    check(got, want, traces, mon, CFG.model.seq_len, 1)


# ---- abandoned runs: soft reset and error responses must leave the AXI bus legal and drained ---------------

AR_FIELDS = ("araddr", "arlen", "arsize", "arburst", "arlock", "arcache", "arprot", "arid")
AW_FIELDS = ("awaddr", "awlen", "awsize", "awburst", "awlock", "awcache", "awprot", "awid")
W_FIELDS = ("wdata", "wstrb", "wlast")


class BusMonitor:
    """AXI4 checks on the engine's ``m_axi_*`` port in every cycle of a test (sampled after the clock edge):

    - an AR, AW or W on offer keeps VALID and its payload until it is accepted (AXI A3.2.1);
    - an R beat comes only while a read burst is outstanding (RLAST on its last beat); W beats in burst
      order, WLAST on each burst's last (a W beat may come before its AW, as AXI allows: A3.3.1, and the
      write DMA does it); B only for a finished burst;
    - drain: while STATUS.busy (``regs.busy``) is 0, no AR or AW is on offer and no R beat, W beat or B
      response is owed.

    ``errors``: the violations, the first of each kind with its cycle and how often it recurred. ``reads``:
    [beats owed, address] per
    outstanding read burst; ``ar_wait``: cycles the AR on offer has waited (0: none). ``resets``: per
    CTRL.soft_reset pulse (op, addresses of the read bursts in flight or on offer, a write burst in
    flight); ``written_after_reset``: W beats with a non-zero WSTRB since the last one. ``ops``: every
    ``op`` seen (a test clears it).
    """

    def __init__(self, dut):
        self.dut = dut
        self.first, self.count, self.resets, self.ops = {}, {}, [], set()
        self.reads, self.writes = deque(), deque()     # [beats owed, address] per accepted burst
        self.w_early = deque()      # WLAST of W beats accepted before their AW (AXI allows it, A3.3.1)
        self.b_owed = self.written_after_reset = 0
        self.ar_wait, self.ar_addr, self.aw_on_offer = 0, None, False
        self.cycle = 0
        self.running = True

    def fail(self, kind, msg):
        self.first.setdefault(kind, f"cycle {self.cycle}: {msg}")
        self.count[kind] = self.count.get(kind, 0) + 1

    @property
    def errors(self):
        return [m + (f" (and in {self.count[k] - 1} more cycles)" if self.count[k] > 1 else "")
                for k, m in self.first.items()]

    def reads_in_flight(self):
        return [a for _, a in self.reads] + ([self.ar_addr] if self.ar_wait else [])

    def writes_in_flight(self):
        return bool(self.writes or self.w_early or self.b_owed or self.aw_on_offer)

    async def run(self):
        dut = self.dut
        port = {n: getattr(dut, f"m_axi_{n}") for n in AR_FIELDS + AW_FIELDS + W_FIELDS + (
            "arvalid", "arready", "rvalid", "rready", "rlast", "awvalid", "awready", "wvalid", "wready",
            "bvalid", "bready")}
        channels = [(ch, port[f"{ch.lower()}valid"], port[f"{ch.lower()}ready"], fields)
                    for ch, fields in (("AR", AR_FIELDS), ("AW", AW_FIELDS), ("W", W_FIELDS))]
        busy, soft_reset, op = dut.regs.busy, dut.regs.soft_reset, dut.op
        held = {"AR": None, "AW": None, "W": None}
        while self.running:
            await RisingEdge(dut.clk)
            await ReadOnly()
            self.cycle += 1
            self.ops.add(Op(int(op.value)))
            offered, accepted = {}, {}
            for ch, valid, ready, fields in channels:
                payload = tuple(int(port[f].value) for f in fields) if valid.value else None
                if held[ch] is not None:
                    if payload is None:
                        self.fail(f"{ch} drop", f"{ch}VALID dropped before {ch}READY")
                    elif payload != held[ch]:
                        diff = ", ".join(f"{f} {a:#x} -> {b:#x}" for f, a, b in zip(fields, held[ch], payload)
                                         if a != b)
                        self.fail(f"{ch} change", f"{ch} payload changed while {ch}VALID & !{ch}READY: {diff}")
                offered[ch] = payload
                accepted[ch] = payload if payload is not None and ready.value else None
                held[ch] = payload if payload is not None and accepted[ch] is None else None
            # the drain invariant, on what is owed at the start of this cycle
            if not busy.value and (offered["AR"] or offered["AW"] or offered["W"] or self.reads or self.writes
                                   or self.w_early or self.b_owed):
                self.fail("busy", f"STATUS.busy is 0 with AXI traffic in flight: AR on offer {bool(offered['AR'])}, "
                          f"read bursts owed {len(self.reads)}, AW on offer {bool(offered['AW'])}, "
                          f"write bursts owing W {len(self.writes)}, B owed {self.b_owed}")
            if soft_reset.value:
                self.resets.append((Op(int(op.value)), self.reads_in_flight(), self.writes_in_flight()))
                self.written_after_reset = 0
            # R, W and B before this cycle's AR/AW: a beat never belongs to a burst accepted in its own cycle
            if port["rvalid"].value and port["rready"].value:
                if not self.reads:
                    self.fail("R", "R beat with no read burst outstanding")
                else:
                    self.reads[0][0] -= 1
                    if bool(port["rlast"].value) != (self.reads[0][0] == 0):
                        self.fail("RLAST", f"RLAST {int(port['rlast'].value)} with {self.reads[0][0]} beats left")
                    if self.reads[0][0] == 0 or port["rlast"].value:
                        self.reads.popleft()
            if accepted["W"] is not None:
                self.written_after_reset += accepted["W"][1] != 0
                self.w_early.append(accepted["W"][2])      # matched with its burst once that AW is seen
            if port["bvalid"].value and port["bready"].value:
                if not self.b_owed:
                    self.fail("B", "B response with no finished write burst")
                self.b_owed = max(self.b_owed - 1, 0)
            if accepted["AR"] is not None:
                self.reads.append([accepted["AR"][1] + 1, accepted["AR"][0]])
            if accepted["AW"] is not None:
                self.writes.append([accepted["AW"][1] + 1, accepted["AW"][0]])
            while self.w_early and self.writes:         # W beats of accepted bursts, in order
                wlast = self.w_early.popleft()
                self.writes[0][0] -= 1
                if bool(wlast) != (self.writes[0][0] == 0):
                    self.fail("WLAST", f"WLAST {wlast} with {self.writes[0][0]} beats left")
                if self.writes[0][0] == 0:
                    self.writes.popleft()
                    self.b_owed += 1
            if len(self.w_early) > 256:
                self.fail("W", f"{len(self.w_early)} W beats with no accepted AW")
            self.ar_wait = self.ar_wait + 1 if held["AR"] is not None else 0
            self.ar_addr = held["AR"][0] if held["AR"] is not None else None
            self.aw_on_offer = held["AW"] is not None


async def start_bus_monitor(dut):
    bus = BusMonitor(dut)
    return bus, cocotb.start_soon(bus.run())


async def until(dut, cond, limit, what):
    """Wait for ``cond()`` (sampled after a clock edge) at most ``limit`` cycles; returns the cycles waited,
    in a phase where signals may be written again."""
    for i in range(limit):
        await RisingEdge(dut.clk)
        await ReadOnly()
        if cond():
            await FallingEdge(dut.clk)
            return i
    raise AssertionError(f"timeout: no {what} within {limit} cycles (op {Op(int(dut.op.value)).name})")


async def configure(axil, layers):
    for name, value in (("WEIGHT_BASE_LO", WEIGHT_BASE), ("INPUT_BASE_LO", INPUT_BASE),
                        ("OUTPUT_BASE_LO", OUTPUT_BASE), ("LAYERS", layers), ("TOKENS", CFG.model.seq_len)):
        await wr(axil, name, value)


async def busy_bit(axil):
    return bool(await rd(axil, "STATUS") & BIT["STATUS", "busy"])


async def wait_not_busy(axil, tries=400):
    """Poll STATUS until busy reads 0 (each read takes a few cycles), at most ``tries`` reads; returns the
    last STATUS read (busy still set if it never fell)."""
    for _ in range(tries):
        status = await rd(axil, "STATUS")
        if not status & BIT["STATUS", "busy"]:
            break
    return status


def drain_problems(bus, busy, owed, status):
    """What went wrong around an abandoned run: the bus monitor's violations, STATUS.busy reads (``busy``)
    that were 0 while bursts were in flight (``owed``), a START during the drain that was not refused,
    STATUS.busy never falling, DONE."""
    problems = list(bus.errors)
    if not all(busy):
        problems.append(f"STATUS.busy read {[int(b) for b in busy]} while read bursts were in flight at "
                        f"{[hex(a) for a in owed]} (want 1 until the bus drained)")
    if bus.ops - {Op.IDLE}:
        problems.append(f"a START during the drain ran phases {sorted(o.name for o in bus.ops - {Op.IDLE})}")
    if status & BIT["STATUS", "busy"]:
        problems.append("STATUS.busy never fell after the drain")
    if status & BIT["STATUS", "done"]:
        problems.append("DONE set for an abandoned run")
    return problems


def hold_arready(ram, hold: bool):
    """Hold the RAM's ARREADY low (``hold``) or let it accept again (no random stalls on AR either way)."""
    ar = ram.read_if.ar_channel
    ar.set_pause_generator(None)
    ar.pause = hold


def answer_with_slverr(ram, faults: set):
    """Beats read at the byte addresses in ``faults`` come back with RRESP = SLVERR (cocotbext-axi's RAM
    answers SLVERR when its read raises; cf. ``sim/axi_faults.py``)."""
    read = ram.read_if._read

    async def _read(address, length):
        if address in faults:
            raise OSError(f"injected read fault at {address:#x}")
        return await read(address, length)
    ram.read_if._read = _read


async def good_run_after(dut, axil, ram, rng, bus, bus_task):
    """A full run (every layer, random stalls) checked bit exact, then the bus monitor's verdict."""
    tokens, layers = CFG.model.seq_len, CFG.model.layers
    got, want, traces, mon, cycles = await run_case(dut, axil, ram, rng, layers, random_input(rng), tokens, 0.2)
    check(got, want, traces, mon, tokens, layers)
    bus.running = False
    await bus_task
    assert not bus.errors, "AXI violations:\n" + "\n".join(bus.errors)
    dut._log.info(f"good run after the abandoned ones: {cycles} cycles, bit exact, bus clean")


@cocotb.test(skip=not P.get("drain"))
async def soft_reset_with_a_weight_read_pending(dut):
    """CTRL.soft_reset while a weight-DMA AR waits for ARREADY: STATUS.busy stays 1 until the bus has
    drained, a START written meanwhile is refused (no AR changes, no run), then a run is bit exact."""
    ram, axil = await setup(dut)
    bus, bus_task = await start_bus_monitor(dut)
    rng = random.Random(P.get("seed", 1))
    ram.write(INPUT_BASE, dram_bytes(random_input(rng)))
    await configure(axil, CFG.model.layers)
    await wr(axil, "CTRL", BIT["CTRL", "start"])
    # once a weight burst was accepted, ARREADY is held low: the DMA's next AR waits on the port
    await until(dut, lambda: any(a >= WEIGHT_BASE for _, a in bus.reads), 5000, "weight burst accepted")
    hold_arready(ram, True)
    await until(dut, lambda: bus.ar_wait >= 8, 2000, "AR waiting 8 cycles")
    assert bus.ar_addr >= WEIGHT_BASE, f"the AR waiting is at {bus.ar_addr:#x}, not a weight read"
    await wr(axil, "CTRL", BIT["CTRL", "soft_reset"])
    owed = bus.reads_in_flight()
    bus.ops.clear()
    busy = [await busy_bit(axil)]
    await ClockCycles(dut.clk, 20)
    await wr(axil, "CTRL", BIT["CTRL", "start"])          # while draining: must be refused
    await ClockCycles(dut.clk, 50)
    busy.append(await busy_bit(axil))
    hold_arready(ram, False)
    status = await wait_not_busy(axil, 100)
    problems = drain_problems(bus, busy, owed, status)
    assert not problems, "\n".join(problems)
    await good_run_after(dut, axil, ram, rng, bus, bus_task)


@cocotb.test(skip=not P.get("drain"))
async def soft_reset_during_load_and_store(dut):
    """CTRL.soft_reset at random cycles of the input load and of the output store (random stalls on every
    channel): the run stops, STATUS.busy falls once the bursts in flight have drained, no DONE, at most the
    W beat on offer and the one gathered in the soft reset's own cycle are still written (the mover's cancel is a
    register, ``cancel_moves``, a cycle behind it); the bus stays legal throughout; then a run is bit exact."""
    ram, axil = await setup(dut)
    bus, bus_task = await start_bus_monitor(dut)
    rng = random.Random(P.get("seed", 1) + 1)
    await configure(axil, 1)
    n = P.get("points", 3)
    points = [(Op.LOAD, rng.randrange(60)) for _ in range(n)] + [(Op.STORE, rng.randrange(150)) for _ in range(n)]
    hit = {Op.LOAD: 0, Op.STORE: 0}
    for phase, delay in points:
        set_pauses(ram, rng, 0.3)
        ram.write(INPUT_BASE, dram_bytes(random_input(rng)))
        await wr(axil, "CTRL", BIT["CTRL", "start"])
        await until(dut, lambda: Op(int(dut.op.value)) == phase, 20000, f"{phase.name} phase")
        await ClockCycles(dut.clk, delay)
        resets = len(bus.resets)
        await wr(axil, "CTRL", BIT["CTRL", "soft_reset"])
        waited = await until(dut, lambda: not dut.regs.busy.value, 1000,
                             f"STATUS.busy falling after a soft reset {delay} cycles into {phase.name}")
        op, reads, writes = bus.resets[resets]
        assert op == phase, f"the soft reset landed in {op.name}, not {phase.name} (delay {delay})"
        # the beat on offer, and the one gathered in the soft reset's cycle (the cancel reaches the W stage a cycle
        # later, from a register), may still be written; the rest of the burst goes out with WSTRB 0
        assert bus.written_after_reset <= 2, f"{bus.written_after_reset} beats written after the soft reset"
        status = await rd(axil, "STATUS")
        assert not status & BIT["STATUS", "done"], f"DONE after a soft reset in {phase.name}"
        in_flight = any(INPUT_BASE <= a < OUTPUT_BASE for a in reads) if phase == Op.LOAD else writes
        hit[phase] += bool(in_flight)
        dut._log.info(f"soft reset {delay} cycles into {phase.name}: burst in flight {bool(in_flight)}, "
                      f"drained after {waited} cycles")
    assert all(hit.values()), f"no soft reset hit a burst in flight in some phase: {hit}"
    await good_run_after(dut, axil, ram, rng, bus, bus_task)


@cocotb.test(skip=not P.get("drain"))
async def read_error_aborts_then_restart(dut):
    """SLVERR on an input beat (ERROR, no run), then on a weight beat while the DMA's next AR waits for
    ARREADY (the run stops; STATUS.busy stays 1 until the bus drained; a START written meanwhile is
    refused); ERROR_ADDR names the beat; the bus stays legal throughout; then a run is bit exact."""
    ram, axil = await setup(dut)
    bus, bus_task = await start_bus_monitor(dut)
    rng = random.Random(P.get("seed", 1) + 2)
    faults = set()
    answer_with_slverr(ram, faults)
    beat = CFG.axi_data_bytes
    await configure(axil, CFG.model.layers)
    # an error response on the input read: the reader reads on to the end, then ERROR without a run
    set_pauses(ram, rng, 0.3)
    image = dram_bytes(random_input(rng))
    ram.write(INPUT_BASE, image)
    faults.add(INPUT_BASE + beat * rng.randrange(len(image) // beat))
    bus.ops.clear()
    await wr(axil, "CTRL", BIT["CTRL", "start"])
    status = await wait_not_busy(axil)
    assert status & BIT["STATUS", "error"] and not status & BIT["STATUS", "done"] \
        and not status & BIT["STATUS", "busy"], f"STATUS {status:#x} after an input read error"
    assert bus.ops <= {Op.IDLE, Op.LOAD}, f"a failed input load went on to {sorted(o.name for o in bus.ops)}"
    faults.clear()
    # an error response on the first beat of a weight tile of layer 0; ARREADY is held low from the cycle
    # its AR is accepted, so the tile's next burst waits on the port when the error comes back
    tiles = [WEIGHT_BASE + sec.offset + t * sec.tile_bytes for sec in layout(CFG).sections for t in range(sec.tiles)]
    bad = rng.choice(tiles)
    faults.add(bad)
    await wr(axil, "CTRL", BIT["CTRL", "start"])
    await until(dut, lambda: dut.m_axi_arvalid.value and dut.m_axi_arready.value
                and int(dut.m_axi_araddr.value) == bad, 50000, f"AR of the tile at {bad:#x}")
    hold_arready(ram, True)
    await until(dut, lambda: dut.regs.error.value, 1000, "weight read error")
    owed = bus.reads_in_flight()
    assert bus.ar_wait, "test setup: no AR waiting on the port when the error came back"
    # the sequencer abandons the run in the cycle after the error (its ``halt`` register), and may move on once
    # before it (a run's last phase, not a START's)
    await ClockCycles(dut.clk, 2)
    bus.ops.clear()
    busy = [await busy_bit(axil)]
    await wr(axil, "CTRL", BIT["CTRL", "start"])          # while draining: must be refused
    await ClockCycles(dut.clk, 30)
    busy.append(await busy_bit(axil))
    set_pauses(ram, rng, 0.5)
    status = await wait_not_busy(axil)
    faults.clear()
    problems = drain_problems(bus, busy, owed, status)
    if not status & BIT["STATUS", "error"]:
        problems.append(f"STATUS {status:#x}: no ERROR after the weight read error")
    if await rd(axil, "ERROR_ADDR_LO") != bad or await rd(axil, "ERROR_CODE") != 2:
        problems.append(f"ERROR_ADDR/ERROR_CODE do not name the SLVERR beat at {bad:#x}")
    assert not problems, "\n".join(problems)
    await good_run_after(dut, axil, ram, rng, bus, bus_task)
