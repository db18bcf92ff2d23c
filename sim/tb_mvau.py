"""cocotb testbench of :class:`mlo_hw.hw.mvau.MVAU`: random jobs against ``golden.int_matmul`` + ``numerics.requant``.

The weight and parameter read ports are modelled as synchronous memories (read latency 1, data
held while ``en`` is low). Each job has its own tile contents; the models switch to the next job's
tile after the job's reads (``vectors * row_folds * col_folds`` weight reads, ``vectors * row_folds``
parameter reads), which is how the engine's ping-pong buffers behave.
"""
import random

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from mlo_hw.model import numerics as nx
from mlo_hw.model.golden import int_matmul
from mlo_hw.hw.mvau import BIAS_BITS, MVAUParams
from runner import tb_params
from streams import StreamSink, StreamSource, pack, start_clock_and_reset, unpack


def _params():
    p = dict(tb_params())
    return p, MVAUParams(**p["mvau"])


class Job:
    """One MVAU job: operands, command word, weight words, parameter words and expected beats."""

    def __init__(self, mp: MVAUParams, w, x, bias, mult, shift, raw, act_unsigned, wide=False):
        self.mp, self.w, self.x = mp, np.asarray(w, np.int64), np.asarray(x, np.int64)
        rows, cols = self.w.shape
        self.rows, self.cols, self.vectors = rows, cols, self.x.shape[0]
        self.bias, self.mult, self.shift = np.asarray(bias, np.int64), np.asarray(mult, np.int64), shift
        self.raw, self.act_unsigned, self.wide = raw, act_unsigned, wide
        self.cmd = mp.command(cols=cols, rows=rows, vectors=self.vectors, shift=shift, raw=raw,
                              act_unsigned=act_unsigned, wide=wide)
        pe, simd, sf = mp.pe, mp.simd, cols // mp.simd
        self.steps = self.vectors * (rows // pe) * sf
        # weight word nf*SF + sf: lane p*simd + s = W[nf*pe + p, sf*simd + s]
        self.w_words = [pack(self.w[nf * pe:(nf + 1) * pe, j * simd:(j + 1) * simd].reshape(-1), mp.weight_bits)
                        for nf in range(rows // pe) for j in range(sf)]
        self.p_words = [pack(self.bias[nf * pe:(nf + 1) * pe], BIAS_BITS)
                        | pack(self.mult[nf * pe:(nf + 1) * pe], mp.mult_bits) << (BIAS_BITS * pe)
                        for nf in range(rows // pe)]
        self.x_beats = [pack(self.x[v, j * simd:(j + 1) * simd], mp.act_bits)
                        for v in range(self.vectors) for j in range(sf)]

    def expected(self):
        """Output beats in (vector, nf) order, from the golden functions."""
        acc = int_matmul(self.x, self.w.T)
        bits = nx.RES_BITS if self.wide else self.mp.act_bits
        out = acc if self.raw else nx.requant(acc + self.bias, self.mult, self.shift, bits)
        pe = self.mp.pe
        return [list(out[v, nf * pe:(nf + 1) * pe]) for v in range(self.vectors) for nf in range(self.rows // pe)]


async def read_port_model(dut, port, jobs, words_of, reads_of):
    """Synchronous read port: ``data`` <= job's ``words[addr]`` at the edge after ``en``."""
    en, addr, dat = (getattr(dut, f"{port}__{n}") for n in ("en", "addr", "data"))
    queue = [(words_of(j), reads_of(j)) for j in jobs]
    k, left = 0, queue[0][1] if queue else 0
    while True:
        await ReadOnly()
        read = k < len(queue) and int(en.value)
        a = int(addr.value) if read else 0
        await RisingEdge(dut.clk)
        if read:
            words = queue[k][0]
            assert a < len(words), f"{port}: address {a} beyond the tile ({len(words)} words)"
            dat.value = words[a]
            left -= 1
            if left == 0:
                k += 1
                left = queue[k][1] if k < len(queue) else 0


class Monitor:
    """Counts cycles and records the cycle of every cmd and output handshake."""

    def __init__(self, dut):
        self.dut, self.cmd_cycles, self.out_cycles, self.busy = dut, [], [], []

    async def run(self):
        d, cycle = self.dut, 0
        while True:
            await ReadOnly()
            if int(d.cmd__valid.value) and int(d.cmd__ready.value):
                self.cmd_cycles.append(cycle)
            if int(d.o__valid.value) and int(d.o__ready.value):
                self.out_cycles.append(cycle)
            self.busy.append(int(d.busy.value))
            await RisingEdge(d.clk)
            cycle += 1


def mismatches(got, want, limit=5):
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if list(g) != list(w)]
    msgs = [f"beat {i}: got {g}, expected {w}" for i, g, w in bad[:limit]]
    if len(got) != len(want):
        msgs.append(f"{len(got)} beats, expected {len(want)}")
    return msgs


async def run_jobs(dut, mp, jobs, rng, p_valid=1.0, p_ready=1.0, cmd_valid=1.0):
    """Drive every job through the DUT; returns (received lanes, monitor)."""
    mon = Monitor(dut)
    cocotb.start_soon(mon.run())
    cocotb.start_soon(read_port_model(dut, "weights", jobs, lambda j: j.w_words, lambda j: j.steps))
    cocotb.start_soon(read_port_model(dut, "params", jobs, lambda j: j.p_words,
                                      lambda j: j.vectors * j.rows // mp.pe))
    cmd = StreamSource(dut, "cmd", rng, p_valid=cmd_valid)
    xs = StreamSource(dut, "x", rng, p_valid=p_valid)
    sink = StreamSink(dut, "o", rng, p_ready=p_ready)
    cocotb.start_soon(cmd.send([j.cmd for j in jobs]))
    cocotb.start_soon(xs.send([b for j in jobs for b in j.x_beats]))
    total = sum(j.vectors * j.rows // mp.pe for j in jobs)
    words = await sink.receive(total, timeout_cycles=50 * sum(j.steps for j in jobs) + 1000)
    return [unpack(wd, mp.pe, mp.acc_bits, signed=True) for wd in words], mon


def random_job(mp, rng: random.Random, nrng: np.random.Generator, raw=None, act_unsigned=None,
               cols=None, rows=None, vectors=None, wide=None):
    raw = rng.random() < 0.4 if raw is None else raw
    wide = rng.random() < 0.4 if wide is None else wide
    act_unsigned = rng.random() < 0.4 if act_unsigned is None else act_unsigned
    cols = cols or mp.simd * rng.randint(mp.requant_groups, max(mp.requant_groups, min(mp.max_col_folds, 12)))
    rows = rows or mp.pe * rng.randint(1, min(mp.max_row_folds, 4))
    vectors = vectors or rng.randint(1, min(mp.max_vectors, 4))
    w = nrng.integers(-(1 << (mp.weight_bits - 1)), 1 << (mp.weight_bits - 1), (rows, cols))
    lo, hi = (0, 1 << mp.act_bits) if act_unsigned else (-(1 << (mp.act_bits - 1)), 1 << (mp.act_bits - 1))
    x = nrng.integers(lo, hi, (vectors, cols))
    bias = nrng.integers(-(1 << (mp.acc_bits - 2)), 1 << (mp.acc_bits - 2), rows)
    bias[nrng.random(rows) < 0.1] = rng.choice([-(1 << 31), (1 << 31) - 1])      # int32 extremes
    mult = nrng.integers(1, 1 << mp.mult_bits, rows)
    # a shift that puts typical results inside the output range, sometimes 0 or far off
    typical = int(np.abs(int_matmul(x, w.T) + bias).mean() * mult.mean()) + 1
    out_bits = nx.RES_BITS if wide else mp.act_bits
    shift = max(0, min(63, typical.bit_length() - out_bits + rng.randint(-3, 2)))
    shift = rng.choice([shift, shift, shift, 0, 63]) if not raw else rng.randint(0, 63)
    return Job(mp, w, x, bias, mult, shift, raw, act_unsigned, wide)


@cocotb.test()
async def random_jobs_under_backpressure(dut):
    """Random raw/requant, int8/uint8 jobs back to back, random valid/ready on every stream."""
    p, mp = _params()
    rng, nrng = random.Random(p["seed"]), np.random.default_rng(p["seed"])
    await start_clock_and_reset(dut)
    jobs = [random_job(mp, rng, nrng) for _ in range(p.get("jobs", 6))]
    jobs.insert(1, random_job(mp, rng, nrng, raw=False, act_unsigned=False))
    jobs.insert(2, random_job(mp, rng, nrng, raw=True, act_unsigned=True))
    jobs.insert(3, random_job(mp, rng, nrng, raw=False, act_unsigned=True, wide=True))   # FFN down: uint8 in, int16 out
    got, mon = await run_jobs(dut, mp, jobs, rng, p_valid=0.7, p_ready=0.6, cmd_valid=0.5)
    want = [b for j in jobs for b in j.expected()]
    bad = mismatches(got, want)
    assert not bad, "; ".join(bad)
    # negative check: the comparison catches one corrupted lane
    corrupt = [list(b) for b in want]
    corrupt[len(corrupt) // 2][-1] += 1
    assert mismatches(got, corrupt), "comparison did not catch a corrupted value"
    for _ in range(3):
        await RisingEdge(dut.clk)
    await ReadOnly()
    assert int(dut.busy.value) == 0, "busy still high after the last result"


def realistic_jobs(mp):
    """The small config's layer 0 as the engine would run it: FFN-down (uint8 GELU codes in, int16 out),
    Q.K^T (raw) and P.V (uint8).

    Besides ``Job.expected`` (golden functions), each job is checked against the golden model's
    own trace of that tensor here.
    """
    from mlo_hw.config import load_config
    from mlo_hw.model.quantize import build_model, random_inputs, run_int
    cfg = load_config("small")
    _, qm = build_model(cfg)
    x, mask = random_inputs(cfg, np.random.default_rng(5), 1)[0]
    traces = []
    run_int(qm, qm.quantize_input(x), mask, cfg, traces)
    t, lay = traces[0], qm.layers[0]
    heads, dh, s_len = cfg.model.heads, cfg.head_dim, cfg.model.seq_len
    split = lambda a: a.reshape(s_len, heads, dh).transpose(1, 0, 2)   # noqa: E731
    vecs = min(4, mp.max_vectors)
    jobs = []
    m = lay.ffn_down
    rows = min(m.w.shape[0], mp.max_rows) // mp.pe * mp.pe
    folds = lambda cols: cols % mp.simd == 0 and cols // mp.simd >= mp.requant_groups   # noqa: E731 (mp.command)
    if m.w.shape[1] <= mp.max_cols and folds(m.w.shape[1]) and rows:
        jobs.append((Job(mp, m.w[:rows], t["gelu"][:vecs], m.bias[:rows], m.mult[:rows], m.shift, False, True, True),
                     t["ffn_down"][:vecs, :rows]))
    qh, kh, vh = split(t["q"]), split(t["k"]), split(t["v"])
    if s_len % mp.pe == 0 and folds(dh) and s_len <= mp.max_rows:
        jobs.append((Job(mp, kh[0], qh[0][:vecs], np.zeros(s_len), np.ones(s_len), 0, True, False),
                     t["scores"][0][:vecs]))
    if dh % mp.pe == 0 and folds(s_len) and dh <= mp.max_rows and s_len <= mp.max_cols:
        ctx = split(t["ctx"])[0]
        jobs.append((Job(mp, vh[0].T, t["probs"][0][:vecs], np.zeros(dh), np.full(dh, lay.ctx_mult),
                         lay.ctx_shift, False, True), ctx[:vecs]))
    for job, traced in jobs:
        pe = mp.pe
        flat = [list(traced[v, nf * pe:(nf + 1) * pe]) for v in range(job.vectors) for nf in range(job.rows // pe)]
        assert job.expected() == flat, "Job.expected disagrees with the golden model's trace"
    return [job for job, _ in jobs]


@cocotb.test()
async def extremes_and_realistic_layer(dut):
    """Accumulator extremes at max_cols (uint8 255 x -128, int8 -128 x -128) and a quantized BERT matrix."""
    p, mp = _params()
    rng = random.Random(p["seed"] + 1)
    await start_clock_and_reset(dut)
    k, rows = mp.max_cols, mp.pe
    jobs = []
    for fill_w, fill_x, uns in ((-128, 255, True), (-128, -128, False), (127, 255, True), (127, -128, False)):
        w = np.full((rows, k), fill_w)
        x = np.full((1, k), fill_x)
        jobs.append(Job(mp, w, x, np.zeros(rows), np.ones(rows), 0, True, uns))
    # the same extreme through requant, with int32 bias extremes and the largest multiplier
    jobs.append(Job(mp, np.full((rows, k), -128), np.full((1, k), 255), np.full(rows, -(1 << 31)),
                    np.full(rows, (1 << mp.mult_bits) - 1), 62, False, True))
    real = realistic_jobs(mp)
    assert real or not p.get("require_realistic", True), "no realistic job fits this folding"
    jobs += real
    got, _ = await run_jobs(dut, mp, jobs, rng, p_valid=0.8, p_ready=0.7)
    want = [b for j in jobs for b in j.expected()]
    bad = mismatches(got, want)
    assert not bad, "; ".join(bad)
    worst = -(1 << (mp.weight_bits - 1)) * ((1 << mp.act_bits) - 1) * mp.max_cols
    assert min(min(b) for b in got) == worst, "the extreme job did not reach the worst-case accumulator"


@cocotb.test()
async def cycles_without_backpressure(dut):
    """Always-valid inputs, always-ready output: last output = first cmd handshake + steps + a cycle between jobs
    + latency, exactly."""
    p, mp = _params()
    rng, nrng = random.Random(p["seed"] + 2), np.random.default_rng(p["seed"] + 2)
    await start_clock_and_reset(dut)
    jobs = [random_job(mp, rng, nrng, vectors=2) for _ in range(3)]
    got, mon = await run_jobs(dut, mp, jobs, rng)
    want = [b for j in jobs for b in j.expected()]
    assert not mismatches(got, want), "; ".join(mismatches(got, want))
    steps = sum(j.steps for j in jobs)
    first_cmd, last_out = mon.cmd_cycles[0], mon.out_cycles[-1]
    gaps = len(jobs) - 1
    assert last_out - first_cmd == steps + gaps + p["latency"], \
        f"{last_out - first_cmd} cycles for {steps} steps; expected {steps} + {gaps} + latency {p['latency']}"
    # each later command is taken the cycle after the previous job issued its last step (cmd.ready a register)
    expect, t = [], first_cmd
    for j in jobs:
        expect.append(t)
        t += j.steps + 1
    assert mon.cmd_cycles == expect, f"cmd handshakes at {mon.cmd_cycles}, expected {expect}"
