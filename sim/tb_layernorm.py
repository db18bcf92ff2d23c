"""LayerNorm block (residual add + LayerNorm) against ``numerics.residual_add`` + ``numerics.layernorm``,
bit for bit, with random valid/ready backpressure.

Params: ``config`` (name), ``seed``, ``rows`` (random rows per batch), ``corrupt`` (compare against an
expectation made with shift + 1: the run must fail; the negative check of the test suite).
"""
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from mlo_hw import numerics as nx
from mlo_hw.config import load_config
from runner import tb_params
from streams import StreamSink, StreamSource, pack, start_clock_and_reset, to_signed


async def _load_params(dut, gain, bias):
    """Gains then biases through the write port, weight-image order (one word per cycle)."""
    for addr, word in enumerate([*gain, *bias]):
        dut.param__addr.value = addr
        dut.param__data.value = int(word) & 0xFFFFFFFF
        dut.param__en.value = 1
        await RisingEdge(dut.clk)
    dut.param__en.value = 0


async def _run(dut, a, b, p, rng, p_valid, p_ready, corrupt=False):
    """Rows ``a``, ``b`` [R, H] with params ``p`` (mult_a, mult_b, gain, bias, shift): (got, want, sink)."""
    mult_a, mult_b, gain, bias, shift = p
    await _load_params(dut, gain, bias)
    dut.mult_a.value, dut.mult_b.value, dut.shift.value = mult_a, mult_b, shift
    await RisingEdge(dut.clk)
    src = StreamSource(dut, "i", rng, p_valid=p_valid)
    sink = StreamSink(dut, "o", rng, p_ready=p_ready)
    cocotb.start_soon(src.send(pack(pair, 8) for pair in zip(np.ravel(a), np.ravel(b))))
    n = np.size(a)
    raw = await sink.receive(n, timeout_cycles=400 * n + 2000)
    got = [to_signed(v, 8) for v in raw]
    r = nx.residual_add(a, b, mult_a, mult_b)
    want = nx.layernorm(r, gain, bias, shift + (1 if corrupt else 0)).ravel().tolist()
    await ClockCycles(dut.clk, 2)
    return got, want, sink


def _check(got, want, what):
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, (f"{what}: {len(bad)} of {len(want)} outputs differ, first at {bad[0]}: "
                     f"got {got[bad[0]]}, want {want[bad[0]]}")


@cocotb.test()
async def realistic_rows(dut):
    """Both LayerNorms of layer 0 of the config's quantized model on a random input."""
    from mlo_hw.golden import int_layer
    from mlo_hw.quantize import build_model, random_inputs
    p = tb_params()
    rng = random.Random(p["seed"])
    cfg = load_config(p["config"])
    _, model = build_model(cfg)
    (x, mask), = random_inputs(cfg, np.random.default_rng(p["seed"]), 1, padded=False)
    xq = model.quantize_input(x)
    layer = model.layers[0]
    trace = {}
    int_layer(xq, layer, mask, cfg.model.heads, trace=trace)
    await start_clock_and_reset(dut)
    pick = sorted(rng.sample(range(cfg.model.seq_len), min(p["rows"], cfg.model.seq_len)))
    for a, b, params in (
            (xq, trace["attn_out"], (layer.res1_a, layer.res1_b, layer.ln1_gain, layer.ln1_bias, layer.ln1_shift)),
            (trace["ln1"], trace["ffn_down"], (layer.res2_a, layer.res2_b, layer.ln2_gain, layer.ln2_bias,
                                               layer.ln2_shift))):
        got, want, _ = await _run(dut, a[pick], b[pick], params, rng, 0.7, 0.6, corrupt=p.get("corrupt", False))
        assert len(set(want)) > 8, "realistic rows should give varied outputs"
        _check(got, want, f"realistic rows (shift={params[4]})")


def _edge_rows(h, rng):
    rows = []
    c = lambda v: [v] * h     # noqa: E731
    rows.append((c(rng.randint(-128, 127)), c(rng.randint(-128, 127))))          # zero variance
    rows.append((c(127), c(127)))                                                 # zero variance, extreme
    rows.append(([127 if j == 0 else -128 for j in range(h)], c(-128)))           # one outlier
    rows.append(([(-128, 127)[j % 2] for j in range(h)], [(127, -128)[j % 2] for j in range(h)]))  # max swing
    rows.append(([rng.choice((-1, 0, 1)) for _ in range(h)], c(0)))               # tiny variance
    rows.append(([1 if j == h - 1 else 0 for j in range(h)], c(0)))               # smallest non-zero variance
    return rows


@cocotb.test()
async def random_and_edge_rows(dut):
    """Full-range random pairs, random parameters (extreme gains, biases, shifts) and edge rows."""
    p = tb_params()
    rng = random.Random(p["seed"] + 1)
    h = load_config(p["config"]).model.hidden
    gmax = (1 << (nx.LN_GAIN_BITS - 1)) - 1
    await start_clock_and_reset(dut)
    for batch in range(5):
        mult_a, mult_b = rng.choice([(1023, rng.randint(1, 1023)), (rng.randint(1, 1023), 1023), (1, 1), (1023, 1023)])
        gain = [rng.choice((gmax, -gmax, rng.randint(-gmax, gmax), rng.randint(-4096, 4096))) for _ in range(h)]
        bias = [rng.choice((rng.randint(-(1 << 31), (1 << 31) - 1), rng.randint(-(1 << 20), 1 << 20), 0))
                for _ in range(h)]
        shift = (0, 18, 26, 63, rng.randint(1, 40))[batch]
        rows = _edge_rows(h, rng)
        for _ in range(p["rows"]):
            spread = rng.choice((2, 16, 128))
            rows.append(([max(-128, min(127, rng.randint(-spread, spread))) for _ in range(h)],
                         [max(-128, min(127, rng.randint(-spread, spread))) for _ in range(h)]))
        a = np.array([r[0] for r in rows])
        b = np.array([r[1] for r in rows])
        got, want, _ = await _run(dut, a, b, (mult_a, mult_b, gain, bias, shift), rng, 0.75, 0.6)
        _check(got, want, f"batch {batch} (mult_a={mult_a}, mult_b={mult_b}, shift={shift})")


@cocotb.test()
async def rounding_ties_and_saturation(dut):
    """Zero-variance rows (t = 0) with biases on exact rounding ties (half up, towards +inf), and
    gains/biases that saturate both ways."""
    p = tb_params()
    rng = random.Random(p["seed"] + 3)
    h = load_config(p["config"]).model.hidden
    shift = 8
    await start_clock_and_reset(dut)
    bias = [(rng.randint(-140, 140) << shift) + (1 << (shift - 1)) for _ in range(h)]   # k + 0.5
    gain = [rng.choice((0, 1, -1, 131071, -131071)) for _ in range(h)]
    rows = [([v] * h, [rng.randint(-128, 127)] * h) for v in (-128, 0, 5, 127)]
    rows += [([rng.randint(-128, 127) for _ in range(h)], [rng.randint(-128, 127) for _ in range(h)]) for _ in range(4)]
    a, b = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    got, want, _ = await _run(dut, a, b, (1023, 517, gain, bias, shift), rng, 0.8, 0.7)
    assert {-128, 127} <= set(want) and any(-128 < w < 127 for w in want[:4 * h])
    _check(got, want, "rounding ties and saturation")


@cocotb.test()
async def full_rate(dut):
    """With input always valid and output always ready: the sustained rate and the first-output latency."""
    p = tb_params()
    rng = random.Random(p["seed"] + 2)
    h = load_config(p["config"]).model.hidden
    await start_clock_and_reset(dut)
    count = 8
    a = np.array([[rng.randint(-128, 127) for _ in range(h)] for _ in range(count)])
    b = np.array([[rng.randint(-128, 127) for _ in range(h)] for _ in range(count)])
    gain = [rng.randint(-5000, 5000) for _ in range(h)]
    bias = [rng.randint(-(1 << 20), 1 << 20) for _ in range(h)]
    got, want, sink = await _run(dut, a, b, (700, 1023, gain, bias, 22), rng, 1.0, 1.0)
    _check(got, want, "full rate")
    first_out, span = sink.cycles[0], sink.cycles[-1] - sink.cycles[0] + 1
    per_row = max(h, 56)    # the mean unit bound for short rows (see the LayerNorm docstring)
    dut._log.info(f"layernorm H={h}: first output after {first_out} cycles, {count * h} outputs in {span} cycles")
    assert span <= (count - 1) * per_row + h, f"{span} cycles for {count} rows of {h}: too slow"
    assert first_out <= h + 130, f"first output after {first_out} cycles"
