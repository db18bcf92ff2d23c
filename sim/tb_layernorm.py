"""LayerNorm block (residual add + LayerNorm) against ``numerics.layernorm(a + b, gain, bias, shift,
bits=16)``, bit for bit, with random valid/ready backpressure.

Inputs ``a``, ``b`` are int16 on one shared scale; the output is int16. Rows come from the quantized
model of the config (both LayerNorms of layer 0) and from the seed (layer-like, random and edge rows).

Params: ``config`` (name), ``seed``, ``rows`` (random rows per batch), ``corrupt`` (compare against an
expectation made with shift + 1: the run must fail; the negative check of the test suite), ``rms`` (the block is
an RMSNorm: ``numerics.layernorm(..., rms=True)``, the config's model made one), ``width`` (elements a beat, 1 if
absent).
"""
import math
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from mlo_hw.hw.layernorm import OUT_LATENCY, ROW_STATS_CYCLES, row_sums_delay
from mlo_hw.model import numerics as nx
from mlo_hw.config import load_config
from runner import tb_params
from streams import StreamSink, StreamSource, pack, start_clock_and_reset, unpack

RB = nx.RES_BITS
LO, HI = -(1 << (RB - 1)), (1 << (RB - 1)) - 1          # int16 range
GMAX = (1 << (nx.LN_GAIN_BITS - 1)) - 1
WIDTH = tb_params().get("width", 1)     # elements a beat


async def _load_params(dut, gain, bias):
    """Gains then biases through the write port, weight-image order (one word per cycle)."""
    for addr, word in enumerate([*gain, *bias]):
        dut.param__addr.value = addr
        dut.param__data.value = int(word) & 0xFFFFFFFF
        dut.param__en.value = 1
        await RisingEdge(dut.clk)
    dut.param__en.value = 0


def expected(a, b, gain, bias, shift):
    """The golden LayerNorm (RMSNorm with ``rms``) of the residual sum, int16 output, as a flat list."""
    r = np.asarray(a, dtype=np.int64) + np.asarray(b, dtype=np.int64)
    return nx.layernorm(r, gain, bias, shift, bits=RB, rms=bool(tb_params().get("rms"))).ravel().tolist()


async def _run(dut, a, b, p, rng, p_valid, p_ready, corrupt=False):
    """Rows ``a``, ``b`` [R, H] (int16) with params ``p`` (gain, bias, shift): (got, want, sink)."""
    gain, bias, shift = p
    a, b = np.asarray(a), np.asarray(b)
    assert a.min() >= LO and a.max() <= HI and b.min() >= LO and b.max() <= HI
    await _load_params(dut, gain, bias)
    dut.shift.value = shift
    await RisingEdge(dut.clk)
    src = StreamSource(dut, "i", rng, p_valid=p_valid)
    sink = StreamSink(dut, "o", rng, p_ready=p_ready)
    pairs = [pack(pair, RB) for pair in zip(np.ravel(a), np.ravel(b))]
    cocotb.start_soon(src.send(pack(pairs[i:i + WIDTH], 2 * RB) for i in range(0, len(pairs), WIDTH)))
    n = np.size(a)
    raw = await sink.receive(n // WIDTH, timeout_cycles=400 * n + 2000)
    got = [v for beat in raw for v in unpack(beat, WIDTH, RB)]
    want = expected(a, b, gain, bias, shift + (1 if corrupt else 0))
    await ClockCycles(dut.clk, 2)
    return got, want, sink


def _check(got, want, what):
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, (f"{what}: {len(bad)} of {len(want)} outputs differ, first at {bad[0]}: "
                     f"got {got[bad[0]]}, want {want[bad[0]]}")


def _ln_params(h, nrng, shift):
    """Gain and bias as quantization makes them: gamma ~ 1, beta ~ 0, output scale ~ 4/2**15 (int16 in
    +-8): ``gain = round(gamma * sqrt(H) / s_out * 2**(shift-15))``, ``bias = round(beta / s_out * 2**shift)``."""
    s_out = 8.0 / (1 << (RB - 1))
    gamma = nrng.normal(1.0, 0.2, h)
    beta = nrng.normal(0.0, 0.3, h)
    gain = np.clip(np.round(gamma * math.sqrt(h) / s_out * 2.0 ** (shift - 15)), -GMAX, GMAX).astype(np.int64)
    bias = np.clip(np.round(beta / s_out * 2.0 ** shift), -(1 << 31), (1 << 31) - 1).astype(np.int64)
    return gain.tolist(), bias.tolist()


@cocotb.test()
async def realistic_rows(dut):
    """Layer-like rows: a (residual) and b (branch) roughly Gaussian with a few outlier channels, on one
    scale that uses a good part of the int16 range; gains/biases from gamma ~ 1, beta ~ 0."""
    p = tb_params()
    rng = random.Random(p["seed"])
    nrng = np.random.default_rng(p["seed"])
    h = load_config(p["config"]).model.hidden
    await start_clock_and_reset(dut)
    for shift in (12, 3):
        sigma = nrng.uniform(500, 3000, (p["rows"], 1))
        a = nrng.normal(0, 1, (p["rows"], h)) * sigma
        b = nrng.normal(0, 0.5, (p["rows"], h)) * sigma
        a[:, nrng.choice(h, 2, replace=False)] *= 8                  # outlier channels
        a, b = (np.clip(np.round(x), LO, HI).astype(np.int64) for x in (a, b))
        gain, bias = _ln_params(h, nrng, shift)
        got, want, _ = await _run(dut, a, b, (gain, bias, shift), rng, 0.7, 0.6, corrupt=p.get("corrupt", False))
        assert len(set(want)) > 8, "realistic rows should give varied outputs"
        _check(got, want, f"realistic rows (shift={shift})")


@cocotb.test()
async def model_rows(dut):
    """Both LayerNorms of layer 0 of the config's quantized model on a random input (golden trace)."""
    from mlo_hw.model.golden import int_layer
    from mlo_hw.model.quantize import build_model, random_inputs
    p = tb_params()
    rng = random.Random(p["seed"])
    cfg = load_config(p["config"])
    if p.get("rms"):
        import dataclasses
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, rmsnorm=True))
    _, model = build_model(cfg)
    (x, mask), = random_inputs(cfg, np.random.default_rng(p["seed"]), 1, padded=False)
    xq, layer, trace = model.quantize_input(x), model.layers[0], {}
    int_layer(xq, layer, mask, cfg.model.heads, trace=trace)
    await start_clock_and_reset(dut)
    pick = sorted(rng.sample(range(cfg.model.seq_len), min(p["rows"], cfg.model.seq_len)))
    for a, b, params, out in (
            (xq, trace["attn_out"], (layer.ln1_gain, layer.ln1_bias, layer.ln1_shift), trace["ln1"]),
            (trace["ln1"], trace["ffn_down"], (layer.ln2_gain, layer.ln2_bias, layer.ln2_shift), trace["out"])):
        got, want, _ = await _run(dut, a[pick], b[pick], params, rng, 0.7, 0.6, corrupt=p.get("corrupt", False))
        if not p.get("corrupt"):
            assert want == out[pick].ravel().tolist(), "expected() disagrees with the golden model's trace"
        _check(got, want, f"model rows (shift={params[2]})")


def _edge_rows(h, rng):
    rows = []
    c = lambda v: [v] * h     # noqa: E731
    rows.append((c(rng.randint(LO, HI)), c(rng.randint(LO, HI))))              # constant row (zero variance)
    rows.append((c(HI), c(HI)))                                                 # constant, r = 2**16 - 2
    rows.append((c(LO), c(LO)))                                                 # constant, r = -2**16
    rows.append(([HI if j == 0 else LO for j in range(h)], c(LO)))              # one outlier
    rows.append(([(LO, HI)[j % 2] for j in range(h)], [(LO, HI)[j % 2] for j in range(h)]))  # max swing
    rows.append(([(LO, HI)[j % 2] for j in range(h)], [(HI, LO)[j % 2] for j in range(h)]))  # cancels: r = -1
    rows.append(([rng.choice((-1, 0, 1)) for _ in range(h)], c(0)))             # tiny variance
    rows.append(([v + rng.choice((0, 1)) for v in c(rng.randint(LO, HI - 1))], c(rng.randint(LO, HI))))  # tiny, offset
    rows.append(([1 if j == h - 1 else 0 for j in range(h)], c(0)))             # smallest non-zero variance
    rows.append(([rng.randint(LO, HI) for _ in range(h)], [rng.choice((LO, HI)) for _ in range(h)]))  # full range
    return rows


@cocotb.test()
async def random_and_edge_rows(dut):
    """Full-range int16 random pairs, random parameters (extreme gains, biases, shifts) and edge rows."""
    p = tb_params()
    rng = random.Random(p["seed"] + 1)
    h = load_config(p["config"]).model.hidden
    await start_clock_and_reset(dut)
    for batch in range(6):
        gain = [rng.choice((GMAX, -GMAX, rng.randint(-GMAX, GMAX), rng.randint(-4096, 4096))) for _ in range(h)]
        bias = [rng.choice((rng.randint(-(1 << 31), (1 << 31) - 1), rng.randint(-(1 << 24), 1 << 24), 0))
                for _ in range(h)]
        shift = (0, 10, 18, 19, 63, rng.randint(1, 40))[batch]    # 19 and up: the rounding half in the bias's high half
        rows = _edge_rows(h, rng)
        for _ in range(p["rows"]):
            spread = rng.choice((2, 256, 4096, HI))
            rows.append(([max(LO, min(HI, rng.randint(-spread, spread))) for _ in range(h)],
                         [max(LO, min(HI, rng.randint(-spread, spread))) for _ in range(h)]))
        a = np.array([r[0] for r in rows])
        b = np.array([r[1] for r in rows])
        got, want, _ = await _run(dut, a, b, (gain, bias, shift), rng, 0.75, 0.6)
        _check(got, want, f"batch {batch} (shift={shift})")


@cocotb.test()
async def rounding_ties_and_saturation(dut):
    """Zero-variance rows (t = 0) with biases on exact rounding ties (half up, towards +inf), and
    gains/biases that saturate int16 both ways."""
    p = tb_params()
    rng = random.Random(p["seed"] + 3)
    h = load_config(p["config"]).model.hidden
    shift = 8
    await start_clock_and_reset(dut)
    bias = [(rng.randint(-33000, 33000) << shift) + (1 << (shift - 1)) for _ in range(h)]   # k + 0.5
    gain = [rng.choice((0, 1, -1, GMAX, -GMAX)) for _ in range(h)]
    rows = [([v] * h, [rng.randint(LO, HI)] * h) for v in (LO, 0, 5, HI)]
    rows += [([rng.randint(LO, HI) for _ in range(h)], [rng.randint(LO, HI) for _ in range(h)]) for _ in range(4)]
    a, b = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    got, want, _ = await _run(dut, a, b, (gain, bias, shift), rng, 0.8, 0.7)
    assert {LO, HI} <= set(want) and any(LO < w < HI for w in want[:4 * h])
    assert {LO, HI} <= set(want[4 * h:]), "the varied rows should saturate both ways"
    _check(got, want, "rounding ties and saturation")


@cocotb.test()
async def full_rate(dut):
    """With input always valid and output always ready: the sustained rate and the first-output latency."""
    p = tb_params()
    rng = random.Random(p["seed"] + 2)
    h = load_config(p["config"]).model.hidden
    await start_clock_and_reset(dut)
    count = 8
    a = np.array([[rng.randint(LO, HI) for _ in range(h)] for _ in range(count)])
    b = np.array([[rng.randint(LO, HI) for _ in range(h)] for _ in range(count)])
    gain = [rng.randint(-5000, 5000) for _ in range(h)]
    bias = [rng.randint(-(1 << 20), 1 << 20) for _ in range(h)]
    got, want, sink = await _run(dut, a, b, (gain, bias, 14), rng, 1.0, 1.0)
    _check(got, want, "full rate")
    first_out, span = sink.cycles[0], sink.cycles[-1] - sink.cycles[0] + 1
    beats = h // WIDTH
    per_row = max(beats, 52)    # the mean unit / row slot bound for short rows (see the LayerNorm docstring)
    dut._log.info(f"layernorm H={h} width {WIDTH}: first output after {first_out} cycles, {count * h} outputs in "
                  f"{span} cycles")
    assert span <= (count - 1) * per_row + beats, f"{span} cycles for {count} rows of {h}: too slow"
    # after a row's last beat in: the ingest, the mean and the scale units, then the output pipeline's stages
    assert first_out <= beats + ROW_STATS_CYCLES + OUT_LATENCY + row_sums_delay(WIDTH), \
        f"first output after {first_out} cycles"
