"""Softmax block against ``numerics.softmax``, bit for bit, with random valid/ready backpressure.

Params: ``row`` (keys a row), ``lanes`` (keys a beat), ``score_bits``, ``seed``, ``rows`` (random rows
per batch), ``config`` (optional: real score rows of that config's quantized layer 0, whose
``seq_padded`` must equal ``row``), ``corrupt`` (compare against an expectation made with shift + 1: the
run must fail; the negative check of the test suite).
"""
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from mlo_hw.hw.softmax import Softmax
from mlo_hw.model import numerics as nx
from runner import tb_params
from streams import StreamSink, StreamSource, pack, start_clock_and_reset, unpack


def _shape():
    p = tb_params()
    return p["row"], p["lanes"], p["score_bits"]


def _beats(rows, masks):
    """One input beat per ``lanes`` keys: the scores packed from lane 0 up, then the mask bits."""
    _, lanes, bits = _shape()
    for row, mask in zip(rows, masks):
        for k in range(0, len(row), lanes):
            yield pack(row[k:k + lanes], bits) | (pack(mask[k:k + lanes], 1) << (lanes * bits))


async def _run(dut, rows, masks, mult, shift, rng, p_valid, p_ready, corrupt=False):
    """Stream ``rows`` through with ``mult``/``shift``; return (got, expected) as flat key lists."""
    n, lanes, _ = _shape()
    dut.mult.value, dut.shift.value = mult, shift
    await RisingEdge(dut.clk)
    src = StreamSource(dut, "i", rng, p_valid=p_valid)
    sink = StreamSink(dut, "o", rng, p_ready=p_ready)
    cocotb.start_soon(src.send(_beats(rows, masks)))
    beats = len(rows) * n // lanes
    words = await sink.receive(beats, timeout_cycles=200 * beats + 2000)
    got = [p for word in words for p in unpack(word, lanes, nx.PROB_BITS, signed=False)]
    want = nx.softmax(np.array(rows), np.array(masks), mult, shift + (1 if corrupt else 0)).ravel().tolist()
    await ClockCycles(dut.clk, 2)
    return got, want


def _check(got, want, what):
    n, lanes, _ = _shape()
    assert len(got) == len(want), f"{what}: {len(got)} probabilities, want {len(want)}"
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, (f"{what}: {len(bad)} of {len(want)} probabilities differ, first at row {bad[0] // n} key "
                     f"{bad[0] % n} (lane {bad[0] % lanes}): got {got[bad[0]]}, want {want[bad[0]]}")


def _realistic(config, seed):
    """Scores of layer 0 of the config's quantized model on a random input with padding keys."""
    from mlo_hw.config import load_config
    from mlo_hw.model.golden import int_layer
    from mlo_hw.model.quantize import build_model, random_inputs
    cfg = load_config(config)
    _, model = build_model(cfg)
    rng = np.random.default_rng(seed)
    (x, _), = random_inputs(cfg, rng, 1, padded=False)
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
    if "config" not in p:
        return
    rng = random.Random(p["seed"])
    await start_clock_and_reset(dut)
    scores, masks, mult, shift = _realistic(p["config"], p["seed"])
    assert scores.shape[1] == p["row"], f"config {p['config']} has rows of {scores.shape[1]} keys, not {p['row']}"
    pick = sorted(rng.sample(range(len(scores)), min(p["rows"], len(scores))))
    got, want = await _run(dut, scores[pick].tolist(), masks[pick].tolist(), mult, shift, rng, 0.7, 0.6,
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
    add([hi if i == n - 1 else lo for i in range(n)], [True] * n)         # the winner in the last lane
    add([rng.randint(lo, hi) for _ in range(n)], [i < max(1, n // 3) for i in range(n)])   # padding tail
    add([rng.choice((lo, hi, 0, -1, 1)) for _ in range(n)], [rng.random() < 0.5 for _ in range(n)])
    return rows, masks


def _random_rows(n, bits, rng, count):
    """Rows around a random base with spreads of 2**4, 2**12 or full range; masks are BERT-style padding
    prefixes (``key < tokens``, tokens 0..n: 0 is a fully masked row) or random patterns."""
    rows, masks = [], []
    for _ in range(count):
        spread = rng.choice((4, 12, bits))           # narrow rows give many non-trivial probabilities
        base = rng.randint(-(1 << (bits - 1)) + (1 << (spread - 1)), (1 << (bits - 1)) - (1 << (spread - 1)))
        rows.append([base + rng.randint(-(1 << (spread - 1)), (1 << (spread - 1)) - 1) for _ in range(n)])
        if rng.random() < 0.6:
            tokens = 0 if rng.random() < 0.1 else rng.choice((rng.randint(1, n), n))
            masks.append([k < tokens for k in range(n)])
        else:
            masks.append([rng.random() < 0.85 for _ in range(n)])
    return rows, masks


@cocotb.test()
async def random_and_edge_rows(dut):
    """Full-range and narrow random rows, padding prefixes, random masks and the edge cases, under several
    mult/shift pairs, with random gaps on the input and random backpressure on the output."""
    p = tb_params()
    rng = random.Random(p["seed"] + 1)
    n, _, bits = _shape()
    await start_clock_and_reset(dut)
    params = [(1, 0), ((1 << 16) - 1, 0), ((1 << 16) - 1, 62), (rng.randint(1, 1 << 16), rng.randint(10, 30)),
              (rng.randint(1, 1 << 16), rng.randint(15, 24))]
    for mult, shift in params:
        rows, masks = _edge_rows(n, bits, rng)
        more_rows, more_masks = _random_rows(n, bits, rng, p["rows"])
        got, want = await _run(dut, rows + more_rows, masks + more_masks, mult, shift, rng, 0.75, 0.6)
        _check(got, want, f"mult={mult} shift={shift}")


@cocotb.test()
async def full_rate(dut):
    """Input always valid, output always ready: one beat a cycle, gapless across rows, and the first
    output ``Softmax.latency(row, lanes)`` cycles after the first input."""
    p = tb_params()
    rng = random.Random(p["seed"] + 2)
    n, lanes, bits = _shape()
    await start_clock_and_reset(dut)
    count = 12
    rows, masks = _random_rows(n, bits, rng, count)
    src = StreamSource(dut, "i", rng, p_valid=1.0)
    sink = StreamSink(dut, "o", rng, p_ready=1.0)
    dut.mult.value, dut.shift.value = 20000, 16
    cocotb.start_soon(src.send(_beats(rows, masks)))
    beats = count * n // lanes
    words = await sink.receive(beats)
    got = [v for word in words for v in unpack(word, lanes, nx.PROB_BITS, signed=False)]
    _check(got, nx.softmax(np.array(rows), np.array(masks), 20000, 16).ravel().tolist(), "full rate")
    first_out, span = sink.cycles[0], sink.cycles[-1] - sink.cycles[0] + 1
    dut._log.info(f"softmax row={n} lanes={lanes}: first output {first_out} cycles after the first input, "
                  f"{beats} beats ({count} rows) in {span} cycles: {count * n / span:.2f} elements a cycle")
    assert span == beats, f"{beats} beats of {count} rows took {span} cycles: not one a cycle"
    assert first_out == Softmax.latency(n, lanes), \
        f"first output after {first_out} cycles, the docstring says {Softmax.latency(n, lanes)}"
