"""Softmax block against ``numerics.softmax``, bit for bit, with random valid/ready backpressure.

Params: ``config`` (name), ``seed``, ``rows`` (random rows per batch), ``corrupt`` (compare against an
expectation made with shift + 1: the run must fail; the negative check of the test suite).
"""
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from mlo_hw.model import numerics as nx
from mlo_hw.config import load_config
from runner import tb_params
from streams import StreamSink, StreamSource, start_clock_and_reset


def _beats(rows, masks, bits):
    for row, mask in zip(rows, masks):
        for s, k in zip(row, mask):
            yield (int(s) & ((1 << bits) - 1)) | (int(bool(k)) << bits)


async def _run(dut, rows, masks, mult, shift, rng, p_valid, p_ready, corrupt=False):
    """Stream ``rows`` through with ``mult``/``shift``; return (got, expected, cycles)."""
    cfg = load_config(tb_params()["config"])
    bits = cfg.acc_bits(cfg.head_dim)
    dut.mult.value, dut.shift.value = mult, shift
    await RisingEdge(dut.clk)
    src = StreamSource(dut, "i", rng, p_valid=p_valid)
    sink = StreamSink(dut, "o", rng, p_ready=p_ready)
    cocotb.start_soon(src.send(_beats(rows, masks, bits)))
    got = await sink.receive(len(rows) * len(rows[0]), timeout_cycles=200 * len(rows) * len(rows[0]) + 1000)
    want = nx.softmax(np.array(rows), np.array(masks), mult, shift + (1 if corrupt else 0)).ravel().tolist()
    await ClockCycles(dut.clk, 2)
    return got, want, sink.cycles[-1] + 1


def _check(got, want, what):
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, (f"{what}: {len(bad)} of {len(want)} probabilities differ, first at {bad[0]}: "
                     f"got {got[bad[0]]}, want {want[bad[0]]}")


def _realistic():
    """Scores of layer 0 of the config's quantized model on a random padded input."""
    from mlo_hw.model.golden import int_layer
    from mlo_hw.model.quantize import build_model, random_inputs
    cfg = load_config(tb_params()["config"])
    _, model = build_model(cfg)
    rng = np.random.default_rng(tb_params()["seed"])
    (x, mask), = random_inputs(cfg, rng, 1, padded=False)
    mask = np.arange(cfg.model.seq_len) < max(1, cfg.model.seq_len - 3)   # a few padding keys
    trace = {}
    layer = model.layers[0]
    int_layer(model.quantize_input(x), layer, mask, cfg.model.heads, trace=trace)
    scores = trace["scores"].reshape(-1, cfg.model.seq_len)
    pad = cfg.seq_padded - cfg.model.seq_len
    scores = np.pad(scores, ((0, 0), (0, pad)))
    full_mask = np.pad(mask, (0, pad))
    return scores, np.broadcast_to(full_mask, scores.shape), layer.softmax_mult, layer.softmax_shift


@cocotb.test()
async def realistic_rows(dut):
    p = tb_params()
    rng = random.Random(p["seed"])
    await start_clock_and_reset(dut)
    scores, masks, mult, shift = _realistic()
    pick = sorted(rng.sample(range(len(scores)), min(p["rows"], len(scores))))
    got, want, _ = await _run(dut, scores[pick].tolist(), masks[pick].tolist(), mult, shift, rng, 0.7, 0.6,
                              corrupt=p.get("corrupt", False))
    assert any(w not in (0, 255) for w in want), "realistic rows should give intermediate probabilities"
    _check(got, want, f"realistic rows (mult={mult}, shift={shift})")


def _edge_rows(n, bits, rng):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    rows, masks = [], []
    def add(row, mask):
        rows.append([int(v) for v in row])
        masks.append([bool(k) for k in mask])
    add([rng.randint(lo, hi)] * n, [True] * n)                            # all equal
    add([rng.randint(lo, hi) for _ in range(n)], [False] * n)             # fully masked
    add([hi if i == n // 2 else lo for i in range(n)], [True] * n)        # extremes: one winner
    add([lo if i == 0 else hi for i in range(n)], [i == 0 for i in range(n)])   # only the minimum is masked in
    add([rng.randint(lo, hi) for _ in range(n)], [i < max(1, n // 3) for i in range(n)])   # padding tail
    add([rng.choice((lo, hi, 0, -1, 1)) for _ in range(n)], [rng.random() < 0.5 for _ in range(n)])
    return rows, masks


@cocotb.test()
async def random_and_edge_rows(dut):
    """Full-range random scores, random masks and the edge cases, under several mult/shift pairs."""
    p = tb_params()
    rng = random.Random(p["seed"] + 1)
    cfg = load_config(p["config"])
    n, bits = cfg.seq_padded, cfg.acc_bits(cfg.head_dim)
    await start_clock_and_reset(dut)
    params = [(1, 0), ((1 << 16) - 1, 0), ((1 << 16) - 1, 62), (rng.randint(1, 1 << 16), rng.randint(10, 30)),
              (rng.randint(1, 1 << 16), rng.randint(15, 24))]
    for mult, shift in params:
        rows, masks = _edge_rows(n, bits, rng)
        for _ in range(p["rows"]):
            spread = rng.choice((4, 12, bits))           # narrow rows give many non-trivial probabilities
            base = rng.randint(-(1 << (bits - 1)) + (1 << (spread - 1)), (1 << (bits - 1)) - (1 << (spread - 1)))
            rows.append([base + rng.randint(-(1 << (spread - 1)), (1 << (spread - 1)) - 1) for _ in range(n)])
            masks.append([rng.random() < 0.85 for _ in range(n)])
        got, want, _ = await _run(dut, rows, masks, mult, shift, rng, 0.75, 0.6)
        _check(got, want, f"mult={mult} shift={shift}")


@cocotb.test()
async def full_rate(dut):
    """With input always valid and output always ready the block sustains one element per cycle."""
    p = tb_params()
    rng = random.Random(p["seed"] + 2)
    cfg = load_config(p["config"])
    n, bits = cfg.seq_padded, cfg.acc_bits(cfg.head_dim)
    await start_clock_and_reset(dut)
    count = 12
    rows = [[rng.randint(-300, 300) for _ in range(n)] for _ in range(count)]
    masks = [[True] * n for _ in range(count)]
    src = StreamSource(dut, "i", rng, p_valid=1.0)
    sink = StreamSink(dut, "o", rng, p_ready=1.0)
    dut.mult.value, dut.shift.value = 20000, 16
    cocotb.start_soon(src.send(_beats(rows, masks, bits)))
    got = await sink.receive(count * n)
    _check(got, nx.softmax(np.array(rows), np.array(masks), 20000, 16).ravel().tolist(), "full rate")
    first_out, span = sink.cycles[0], sink.cycles[-1] - sink.cycles[0] + 1
    per_row = max(n, 21)   # the divider bound for short rows (see the Softmax docstring)
    dut._log.info(f"softmax row={n}: first output after {first_out} cycles, {count * n} outputs in {span} cycles")
    assert span <= (count - 1) * per_row + n, f"{span} cycles for {count} rows of {n}: too slow"
    assert first_out <= 2 * n + 40, f"first output after {first_out} cycles"
