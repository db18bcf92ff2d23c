"""The layer engine end to end: registers over AXI4-Lite, weights and input in an AxiRam (random latency
and backpressure), start, wait for DONE, read the output, compare bit for bit with the golden model.

Besides the output, a monitor records every tensor the engine produces on chip (MVAU results per
phase, softmax probabilities, LayerNorm outputs) and compares them with the golden model's per-layer
trace, so a mismatch names the first layer and tensor that differ.

Model source (parameter ``model``): ``"random"`` (default) takes the config's random weights and random
inputs; ``"minilm"`` takes all-MiniLM-L6-v2 quantized by :func:`mlo_hw.minilm.quantized_model` (parameter
``calibration``: the sentences, default ``mlo_hw.minilm.CALIBRATION``). The test ``minilm_sentences`` runs every layer on each of
``sentences`` (tokenized at the config's seq_len, stall probability ``pauses[i]``) and writes per sentence
the tokens, the cycles and the verdict to ``result_out`` (JSON) when given.
"""
import json
import logging
import random
from collections import deque

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from mlo_hw.config import load_config
from mlo_hw.golden import int_stack
from mlo_hw.layer_engine import LN_LANES, Op, with_seq_len
from mlo_hw.numerics import RES_BITS
from mlo_hw.quantize import DRAM_DTYPE, build_model, dram_bytes, from_dram, random_inputs
from mlo_hw.weight_image import layout, pack_image
from runner import tb_params

P = tb_params()
CFG = load_config(P["config"])
if P.get("seq_len"):
    CFG = with_seq_len(CFG, P["seq_len"])
REGS = {r["name"]: r for r in P["registers"]}
BIT = {(r["name"], f["name"]): 1 << f["lsb"] for r in P["registers"] for f in r["fields"]}
WEIGHT_BASE, INPUT_BASE, OUTPUT_BASE = 0x40000, 0x1000, 0x20000    # room for int16 [128, 384]
S_PAD, H, HEADS = CFG.seq_padded, CFG.model.hidden, CFG.model.heads
PE, TR = CFG.folding.pe, CFG.folding.tile_rows
DH = CFG.head_dim
ACC_BITS = int(P["acc_bits"])
MODEL_SOURCE = P.get("model", "random")


def load_model():
    """(MiniLM or None, the QuantModel the engine runs) for the ``model`` parameter."""
    if MODEL_SOURCE == "random":
        return None, build_model(CFG)[1]
    if MODEL_SOURCE != "minilm":
        raise ValueError(f"model: expected 'random' or 'minilm', got {MODEL_SOURCE!r}")
    from mlo_hw.minilm import CALIBRATION, load_minilm, quantized_model
    minilm = load_minilm()
    return minilm, quantized_model(minilm, CFG, P.get("calibration", CALIBRATION))


MINILM, MODEL = load_model()
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
        lns = [(getattr(dut, f"ln{i}").o__valid, getattr(dut, f"ln{i}").o__ready, getattr(dut, f"ln{i}").o__payload)
               for i in range(LN_LANES)]
        while self.running:
            await RisingEdge(dut.clk)
            await ReadOnly()
            op, layer = int(dut.op.value), int(dut.layer.value)
            if mv_v.value and mv_r.value:
                word = int(mv_p.value)
                self.mvau.append((layer, op, [signed(word >> (ACC_BITS * p), ACC_BITS) for p in range(PE)]))
            if sm_v.value and sm_r.value:
                self.probs.append((layer, int(sm_p.value)))
            for lane, (ln_v, ln_r, ln_p) in enumerate(lns):
                if ln_v.value and ln_r.value:
                    self.ln.append((layer, op, lane, signed(int(ln_p.value), RES_BITS)))


def runs(records, key):
    """Group consecutive records with the same key into runs: [(key, [values])]."""
    out = []
    for r in records:
        k, v = key(r), r[-1]
        if out and out[-1][0] == k:
            out[-1][1].append(v)
        else:
            out.append((k, [v]))
    return out


def expected_streams(trace, tokens, seq_len):
    """Per layer, the on-chip streams in the engine's order, with a validity mask (padded rows and
    keys are not in the golden model)."""
    def matrix(t, rows):
        vals, ok = [], []
        for tile in range(rows // TR):
            for s in range(S_PAD):
                for nf in range(TR // PE):
                    c = tile * TR + nf * PE
                    for p in range(PE):
                        ok.append(s < seq_len)
                        vals.append(int(t[s, c + p]) if s < seq_len else 0)
        return vals, ok

    def flat(beats):
        return [v for beat in beats for v in beat]

    exp = {}
    for name in ("q", "k", "v", "attn_out", "ffn_down"):
        exp[name] = matrix(trace[name], H)
    exp["ffn_up"] = matrix(trace["ffn_up"], CFG.model.intermediate)
    for h in range(HEADS):
        vals, ok = [], []
        for s in range(S_PAD):
            for k in range(S_PAD):
                ok.append(s < seq_len and k < seq_len)
                vals.append(int(trace["scores"][h, s, k]) if ok[-1] else 0)
        exp[f"scores.h{h}"] = (vals, ok)
        vals, ok = [], []
        for s in range(S_PAD):
            for k in range(S_PAD):
                ok.append(s < seq_len)
                vals.append((int(trace["probs"][h, s, k]) if k < seq_len else 0) if s < seq_len else 0)
        exp[f"probs.h{h}"] = (vals, ok)
        vals, ok = [], []
        for s in range(S_PAD):
            for nf in range(DH // PE):
                for p in range(PE):
                    c = h * DH + nf * PE + p
                    ok.append(s < seq_len)
                    vals.append(int(trace["ctx"][s, c]) if s < seq_len else 0)
        exp[f"ctx.h{h}"] = (vals, ok)
    for name in ("ln1", "out"):
        t = trace[name]
        exp[name] = ([int(t[s, c]) if s < seq_len else 0 for s in range(S_PAD) for c in range(H)],
                     [s < seq_len for s in range(S_PAD) for c in range(H)])
    return exp


def observed_streams(mon, layers):
    obs = [dict() for _ in range(layers)]
    op_name = {Op.Q: "q", Op.K: "k", Op.V: "v", Op.O: "attn_out", Op.FFN_UP: "ffn_up", Op.FFN_DOWN: "ffn_down"}
    head = {}
    for (layer, op), beats in runs(mon.mvau, key=lambda r: (r[0], r[1])):
        if layer >= layers:
            continue
        vals = [v for b in beats for v in b]
        op = Op(op)
        if op in op_name:
            obs[layer][op_name[op]] = vals
        elif op in (Op.SCORES, Op.PV):
            h = head.get((layer, op), 0)
            head[layer, op] = h + 1
            obs[layer][f"{'scores' if op == Op.SCORES else 'ctx'}.h{h}"] = vals
    for layer, probs in runs(mon.probs, key=lambda r: r[0]):
        for h in range(HEADS):
            if layer < layers:
                obs[layer][f"probs.h{h}"] = probs[h * S_PAD * S_PAD:(h + 1) * S_PAD * S_PAD]
    for (layer, op), recs in runs([(r[0], r[1], r[2:]) for r in mon.ln], key=lambda r: (r[0], r[1])):
        if layer < layers:
            # row r comes from LayerNorm lane r % LN_LANES, in row order within a lane
            per_lane = [[v for lane, v in recs if lane == i] for i in range(LN_LANES)]
            rows = []
            for r in range(S_PAD):
                rows += per_lane[r % LN_LANES][(r // LN_LANES) * H:(r // LN_LANES + 1) * H]
            obs[layer]["ln1" if Op(op) == Op.LN1 else "out"] = rows
    return obs


ORDER = (["q", "k", "v"] + [f"{t}.h{h}" for h in range(HEADS) for t in ("scores", "probs", "ctx")]
         + ["attn_out", "ln1", "ffn_up", "ffn_down", "out"])


def first_difference(traces, obs, tokens, seq_len):
    """The first (layer, tensor, index, got, want) where the engine differs from the golden trace, or None."""
    for layer, trace in enumerate(traces):
        exp = expected_streams(trace, tokens, seq_len)
        for name in ORDER:
            want, ok = exp[name]
            got = obs[layer].get(name)
            if got is None:
                return layer, name, -1, "missing", f"{len(want)} values"
            if len(got) != len(want):
                return layer, name, -1, f"{len(got)} values", f"{len(want)} values"
            for i, (g, w, o) in enumerate(zip(got, want, ok)):
                if o and g != w:
                    return layer, name, i, g, w
    return None


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
    seq_len = CFG.model.seq_len
    diff = first_difference(traces, observed_streams(mon, layers), tokens, seq_len)
    if diff is not None:
        layer, name, i, g, w = diff
        raise AssertionError(f"layer {layer} tensor {name} differs first at index {i}: got {g}, want {w}")
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)[0]
        raise AssertionError(f"output in DRAM differs at {tuple(bad)} (on-chip tensors matched)")


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


@cocotb.test(skip=bool(P.get("profile_out")) or MODEL_SOURCE != "random")
async def full_stack_bit_exact(dut):
    """Every layer, all tokens valid, then padded masks and a one-layer run, random AXI stalls."""
    ram, axil = await setup(dut)
    rng = random.Random(P.get("seed", 1))
    seq_len = CFG.model.seq_len
    cases = [(CFG.model.layers, seq_len, 0.0)] + [
        (rng.choice([1, CFG.model.layers]), rng.randint(1, seq_len), rng.choice([0.2, 0.5]))
        for _ in range(P.get("cases", 2))]
    for layers, tokens, pause in cases:
        got, want, traces, mon, cycles = await run_case(dut, axil, ram, rng, layers, random_input(rng), tokens,
                                                        pause)
        dut._log.info(f"layers={layers} tokens={tokens} pause={pause}: {cycles} cycles")
        check(got, want, traces, mon, tokens, layers)
        check_catches_corruption(got, want, traces, mon, tokens, layers, rng)


class Profile:
    """Per layer and phase: cycles, cycles the MVAU was busy, cycles compute waited for DRAM."""

    def __init__(self, dut):
        self.dut, self.running, self.rows = dut, True, {}

    async def run(self):
        dut = self.dut
        busy, stall = dut.regs.compute_busy, dut.regs.dma_stall
        while self.running:
            await RisingEdge(dut.clk)
            await ReadOnly()
            key = (int(dut.layer.value), Op(int(dut.op.value)).name)
            row = self.rows.setdefault(key, [0, 0, 0])
            row[0] += 1
            row[1] += int(busy.value)
            row[2] += int(stall.value)


@cocotb.test(skip=not P.get("profile_out"))
async def profile(dut):
    """One run of every layer, all tokens valid, memory answering at full speed: the cycle profile
    (``bench/cycles.py``); the output is still checked against the golden model."""
    import json
    ram, axil = await setup(dut)
    prof = Profile(dut)
    task = cocotb.start_soon(prof.run())
    seq_len = CFG.model.seq_len
    rng = random.Random(1)
    got, want, traces, mon, cycles = await run_case(dut, axil, ram, rng, CFG.model.layers, random_input(rng),
                                                    seq_len, 0.0, monitor=False)
    prof.running = False
    await task
    assert np.array_equal(got, want), "output differs from the golden model"
    out = {"cycles": cycles, "compute_cycles": await rd(axil, "COMPUTE_CYCLES"),
           "stall_cycles": await rd(axil, "STALL_CYCLES"),
           "phases": [{"layer": k[0], "op": k[1], "cycles": v[0], "compute": v[1], "stall": v[2]}
                      for k, v in prof.rows.items()]}
    with open(P["profile_out"], "w") as f:
        json.dump(out, f, indent=1)


@cocotb.test(skip=bool(P.get("profile_out")))
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


@cocotb.test(skip=MODEL_SOURCE != "minilm")
async def minilm_sentences(dut):
    """all-MiniLM-L6-v2 on real sentences, every layer, bit exact (per-tensor monitor and DRAM output), and
    the checker rejects each output with one element corrupted; stops at the first sentence that fails."""
    from mlo_hw.minilm import engine_input
    ram, axil = await setup(dut)
    rng = random.Random(P.get("seed", 1))
    sentences = P["sentences"]
    pauses = P.get("pauses", [0.0] * len(sentences))
    results = []
    for sentence, pause in zip(sentences, pauses):
        x, tokens = engine_input(MINILM, MODEL, sentence, CFG.model.seq_len)
        row = {"sentence": sentence, "tokens": tokens, "pause": pause, "bit_exact": False}
        results.append(row)
        try:
            got, want, traces, mon, row["cycles"] = await run_case(dut, axil, ram, rng, CFG.model.layers, x, tokens,
                                                                   pause)
            check(got, want, traces, mon, tokens, CFG.model.layers)
            row["bit_exact"] = True
        except AssertionError as e:
            row["error"] = str(e)
        dut._log.info(f"tokens={tokens} pause={pause}: {row.get('cycles')} cycles, "
                      f"{'bit exact' if row['bit_exact'] else row['error']}")
        if P.get("result_out"):
            with open(P["result_out"], "w") as f:
                json.dump(results, f)
        assert row["bit_exact"], f"sentence {len(results) - 1} ({sentence!r}): {row['error']}"
        check_catches_corruption(got, want, traces, mon, tokens, CFG.model.layers, rng)


# ---- abandoned runs: soft reset and error responses must leave the AXI bus legal and drained ---------------

AR_FIELDS = ("araddr", "arlen", "arsize", "arburst", "arlock", "arcache", "arprot", "arid")
AW_FIELDS = ("awaddr", "awlen", "awsize", "awburst", "awlock", "awcache", "awprot", "awid")
W_FIELDS = ("wdata", "wstrb", "wlast")


class BusMonitor:
    """AXI4 checks on the engine's ``m_axi_*`` port in every cycle of a test (sampled after the clock edge):

    - an AR, AW or W on offer keeps VALID and its payload until it is accepted (AXI A3.2.1);
    - an R beat comes only while a read burst is outstanding (RLAST on its last beat); W beats only for
      an accepted AW (the engine never sends W first; WLAST on the last); B only for a finished burst;
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
        return bool(self.writes or self.b_owed or self.aw_on_offer)

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
                                   or self.b_owed):
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
                if not self.writes:
                    self.fail("W", "W beat with no accepted AW")
                else:
                    self.writes[0][0] -= 1
                    if bool(accepted["W"][2]) != (self.writes[0][0] == 0):
                        self.fail("WLAST", f"WLAST {accepted['W'][2]} with {self.writes[0][0]} beats left")
                    if self.writes[0][0] == 0:
                        self.writes.popleft()
                        self.b_owed += 1
            if port["bvalid"].value and port["bready"].value:
                if not self.b_owed:
                    self.fail("B", "B response with no finished write burst")
                self.b_owed = max(self.b_owed - 1, 0)
            if accepted["AR"] is not None:
                self.reads.append([accepted["AR"][1] + 1, accepted["AR"][0]])
            if accepted["AW"] is not None:
                self.writes.append([accepted["AW"][1] + 1, accepted["AW"][0]])
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
    W beat on offer is still written; the bus stays legal throughout; then a run is bit exact."""
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
        # the beat on offer may still be written; the rest of the burst goes out with WSTRB 0
        assert bus.written_after_reset <= 1, f"{bus.written_after_reset} beats written after the soft reset"
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
