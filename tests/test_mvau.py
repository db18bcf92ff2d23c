"""MVAU: cocotb + Verilator bit-exact runs over several foldings, lint, synthesis, parameter checks."""

import dataclasses

import pytest

from mlo_hw.config import load_config
from mlo_hw.hw.mvau import MVAU, MVAUParams
from sim.runner import lint, simulate, to_verilog

FOLDINGS = {
    "pe3_simd4": lambda: MVAUParams.from_config(load_config("small"), pe=3, simd=4, max_rows=24),
    "bert_tiny_8x8": lambda: MVAUParams.from_config(load_config("bert_tiny")),
}
SLOW_FOLDINGS = {
    "pe1_simd1": lambda: MVAUParams.from_config(load_config("small"), pe=1, simd=1),
    "pe2_simd4": lambda: MVAUParams.from_config(load_config("small"), pe=2, simd=4),
    "pe4_simd2_unpacked": lambda: MVAUParams.from_config(load_config("small"), pe=4, simd=2, pack_dsp=False),
    "pe8_simd3": lambda: MVAUParams(pe=8, simd=3, max_cols=48, max_rows=32, max_vectors=8, acc_bits=23),
}


def _run(name, make, seed=1, jobs=20, require_realistic=True):
    mp = make()
    dut = MVAU(mp)
    top = f"mvau_{name}"
    v = to_verilog(dut, top)
    assert lint(v, top) == []
    simulate(v, top, "tb_mvau", {"mvau": dataclasses.asdict(mp), "latency": dut.latency, "seed": seed,
                                 "jobs": jobs, "require_realistic": require_realistic})


@pytest.mark.parametrize("name", FOLDINGS)
def test_mvau_bit_exact_under_backpressure(name):
    _run(name, FOLDINGS[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_FOLDINGS)
def test_mvau_more_foldings(name):
    # the small config's matrices (K = 32, 64) do not fold by SIMD = 3: random jobs only there
    _run(name, SLOW_FOLDINGS[name], seed=7, jobs=40, require_realistic="simd3" not in name)


def test_mvau_synthesizes_without_latches_and_packs_two_lanes_per_dsp():
    from mlo_hw.synth import synth_verilog
    mp = MVAUParams.from_config(load_config("small"), pe=2, simd=2)
    res = synth_verilog(to_verilog(MVAU(mp), "mvau_synth"), "mvau_synth")
    assert res.latches == 0
    # 4 MAC lanes on 2 DSPs, plus the requant multipliers (33 x 16 bits: 2 DSPs a lane), one lane shared by
    # both channels (a result beat comes every >= 2 cycles: the small config's shortest product has 4 columns)
    assert mp.requant_lanes == 1
    assert res.used["DSP"] == mp.pe * mp.simd // 2 + 2 * mp.requant_lanes, res.used


def test_latency_is_fixed_by_the_folding():
    mp = MVAUParams.from_config(load_config("bert_tiny"), requant_lanes=8)
    assert MVAU(mp).latency == MVAU.FIXED_STAGES + 3 + MVAU.FIFO_LATENCY
    assert MVAU(dataclasses.replace(mp, simd=1)).latency == MVAU.FIXED_STAGES + MVAU.FIFO_LATENCY
    shared = MVAUParams.from_config(load_config("bert_tiny"))      # one requant lane: 8 cycles a beat
    assert (shared.requant_lanes, shared.requant_groups) == (1, 8)
    assert MVAU(shared).latency == MVAU.FIXED_STAGES + 3 + 8 + MVAU.FIFO_LATENCY


def test_the_shared_requantizer_refuses_a_job_whose_beats_come_faster_than_it_takes_them():
    mp = MVAUParams.from_config(load_config("bert_tiny"))
    mp.command(cols=64, rows=8, vectors=1)
    with pytest.raises(ValueError, match="MVAU command cols: the shared requantizer takes 8 cycles a beat"):
        mp.command(cols=56, rows=8, vectors=1)
    with pytest.raises(ValueError, match="MVAUParams.requant_lanes: expected a divisor of pe=8"):
        MVAUParams.from_config(load_config("bert_tiny"), requant_lanes=3)


def test_bert_tiny_params_cover_every_product_of_the_layer():
    cfg = load_config("bert_tiny")
    mp = MVAUParams.from_config(cfg)
    assert (mp.pe, mp.simd) == (cfg.folding.pe, cfg.folding.simd)
    assert mp.max_cols >= max(cfg.model.intermediate, cfg.seq_padded)
    assert mp.max_rows >= max(cfg.folding.tile_rows, cfg.seq_padded, cfg.head_dim)
    assert mp.packed and mp.packed_bits <= 25
    # worst case int8 x uint8 over max_cols fits the accumulator
    assert mp.max_cols * 128 * 255 < 1 << (mp.acc_bits - 1)


@pytest.mark.parametrize("kwargs, field", [
    (dict(cols=12, rows=8, vectors=1), "cols"),          # not a multiple of simd
    (dict(cols=8, rows=12, vectors=1), "rows"),          # not a multiple of pe
    (dict(cols=8 * 65, rows=8, vectors=1), "cols"),      # beyond max_cols
    (dict(cols=8, rows=8, vectors=0), "vectors"),
    (dict(cols=8, rows=8, vectors=1, shift=64), "shift"),
])
def test_bad_command_names_the_field(kwargs, field):
    mp = MVAUParams.from_config(load_config("bert_tiny"))
    with pytest.raises(ValueError, match=f"MVAU command {field}:"):
        mp.command(**kwargs)


def test_bad_params_name_the_field():
    with pytest.raises(ValueError, match="MVAUParams.acc_bits:"):
        MVAUParams(pe=2, simd=2, max_cols=512, max_rows=8, max_vectors=8, acc_bits=20)
    with pytest.raises(ValueError, match="MVAUParams.max_rows:"):
        MVAUParams(pe=3, simd=2, max_cols=8, max_rows=8, max_vectors=8, acc_bits=20)
    with pytest.raises(ValueError, match="MVAUParams.pe:"):
        MVAUParams(pe=0, simd=2, max_cols=8, max_rows=8, max_vectors=8, acc_bits=20)


def test_mvau_on_lib_memory_read_ports_in_amaranth_sim():
    """The read-port contract matches amaranth.lib.memory: wired with wiring.connect, bit-exact."""
    import numpy as np
    from amaranth import Module
    from amaranth.lib import memory, wiring
    from amaranth.sim import Simulator

    from mlo_hw.model import numerics as nx
    from mlo_hw.model.golden import int_matmul
    from mlo_hw.model.weight_image import pack_tile_weights

    mp = MVAUParams.from_config(load_config("small"), pe=2, simd=2)
    rng = np.random.default_rng(3)
    rows, cols, vectors = 4, 6, 2
    w = rng.integers(-128, 128, (rows, cols))
    bias, mult, shift = rng.integers(-5000, 5000, rows), rng.integers(1, 1 << 16, rows), 17
    x = rng.integers(0, 256, (vectors, cols))
    words = pack_tile_weights(w, mp.pe, mp.simd).reshape(-1, mp.pe * mp.simd)   # the DRAM tile order
    dut = MVAU(mp)
    m = Module()
    m.submodules.mvau = dut
    # memories as deep as the MVAU's address ports (wiring.connect checks the widths)
    wm = m.submodules.wm = memory.Memory(shape=dut.weights.data.shape(), depth=1 << len(dut.weights.addr),
                                         init=[list(map(int, r)) for r in words])
    pm = m.submodules.pm = memory.Memory(shape=dut.params.data.shape(), depth=1 << len(dut.params.addr), init=[
        {"bias": [int(b) for b in bias[i:i + mp.pe]], "mult": [int(v) for v in mult[i:i + mp.pe]]}
        for i in range(0, rows, mp.pe)])
    wiring.connect(m, dut.weights, wm.read_port())
    wiring.connect(m, dut.params, pm.read_port())

    jobs = [dict(raw=False), dict(raw=True)]
    got = []

    async def put(ctx, port, value):
        ctx.set(port.valid, 1)
        ctx.set(port.payload.as_value(), value)
        await ctx.tick().until(port.ready)
        ctx.set(port.valid, 0)

    async def feed_cmd(ctx):        # cmd and x are independent streams (the 2nd cmd waits for the 1st job)
        for job in jobs:
            await put(ctx, dut.cmd, mp.command(cols=cols, rows=rows, vectors=vectors, shift=shift,
                                               act_unsigned=True, **job))

    async def feed_x(ctx):
        for _ in jobs:
            for v in range(vectors):
                for j in range(0, cols, mp.simd):
                    word = sum((int(x[v, j + s]) & 0xFF) << (8 * s) for s in range(mp.simd))
                    await put(ctx, dut.x, word)

    async def drain(ctx):
        ctx.set(dut.o.ready, 1)
        for _ in range(len(jobs) * vectors * rows // mp.pe):
            word, = await ctx.tick().sample(dut.o.payload.as_value()).until(dut.o.valid)
            got.append([(word >> (c * mp.acc_bits)) & ((1 << mp.acc_bits) - 1) for c in range(mp.pe)])

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(feed_cmd, background=True)
    sim.add_testbench(feed_x, background=True)
    sim.add_testbench(drain)
    sim.run_until(2e-6)             # 200 cycles; the jobs take 2 * 12 steps + latency
    acc = int_matmul(x, w.T)
    want = [nx.requant(acc + bias, mult, shift, 8), acc]
    flat = [[int(v) & ((1 << mp.acc_bits) - 1) for v in out[vec, nf * mp.pe:(nf + 1) * mp.pe]]
            for out in want for vec in range(vectors) for nf in range(rows // mp.pe)]
    assert got == flat


@pytest.mark.parametrize("requant_lanes", [None, 2])
def test_requantizer_rounds_and_saturates_at_every_edge(requant_lanes):
    """The requantizer alone (Amaranth simulator) against numerics.requant: every shift 0..63, int8 and int16
    results and raw mode, on random sets and on ``acc + bias`` just around each saturation edge and around the
    width the rounding adder keeps (products of the full 33 x 16 bits among them)."""
    import random

    from amaranth.sim import Simulator

    from mlo_hw.hw.mvau import Requantizer
    from mlo_hw.model import numerics as nx
    p = MVAUParams(pe=4, simd=4, max_cols=512, max_rows=4, max_vectors=4, acc_bits=25, requant_lanes=requant_lanes)
    dut = Requantizer(p)
    rng = random.Random(7)
    acc_lim, bias_lim, mult_max = 1 << (p.acc_bits - 1), 1 << 31, (1 << p.mult_bits) - 1
    cases = []                                  # (acc, bias, mult, shift, raw, wide) per lane
    for shift in range(64):
        for wide in (0, 1):
            bits = nx.RES_BITS if wide else p.act_bits
            for mult in (1, 3, rng.randint(1, mult_max), mult_max):
                for edge in (1 << (bits - 1), 1 << (max(p.acc_bits + 1, nx.RES_BITS + 2) - 1), 1 << 40):
                    for sign in (1, -1):        # v = acc + bias near sign * edge * 2**shift / 2 / mult
                        centre = sign * edge * (1 << shift) // (2 * mult)
                        for d in (-2, -1, 0, 1, 2):
                            v = centre + d
                            bias = max(-bias_lim, min(bias_lim - 1, v - rng.randint(-acc_lim, acc_lim - 1)))
                            acc = v - bias
                            if -acc_lim <= acc < acc_lim:
                                cases.append((acc, bias, mult, shift, 0, wide))
        for _ in range(8):
            cases.append((rng.randint(-acc_lim, acc_lim - 1), rng.randint(-bias_lim, bias_lim - 1),
                          rng.randint(1, mult_max), shift, 0, rng.randint(0, 1)))
    cases += [(rng.randint(-acc_lim, acc_lim - 1), 0, 1, 0, 1, 0) for _ in range(50)]
    cases += [(-acc_lim, 0, 1, 0, 1, 0), (acc_lim - 1, 0, 1, 0, 1, 1)]
    modes = {}                                  # one shift and mode a set: the cases grouped by them
    for c in cases:
        modes.setdefault(c[3:], []).append(c)
    sets = [g[i:i + p.pe] for g in modes.values() for i in range(0, len(g) - p.pe + 1, p.pe)]
    want = [[c[0] if c[4] else int(nx.requant(c[0] + c[1], c[2], c[3], nx.RES_BITS if c[5] else p.act_bits))
             for c in s] for s in sets]
    got = []

    async def bench(ctx):
        for s in sets:
            for i, (acc, bias, mult, _, _, _) in enumerate(s):
                ctx.set(dut.acc[i], acc)
                ctx.set(dut.prm.bias[i], bias)
                ctx.set(dut.prm.mult[i], mult)
            ctx.set(dut.shift, s[0][3])
            ctx.set(dut.raw, s[0][4])
            ctx.set(dut.wide, s[0][5])
            ctx.set(dut.valid, 1)
            await ctx.tick()
            ctx.set(dut.valid, 0)
            await ctx.tick().repeat(dut.latency - 1)       # the result holds the set presented latency cycles ago
            got.append([ctx.get(dut.result[i]) for i in range(p.pe)])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert len(sets) > 1000 and any(w in (127, -128) for s in want for w in s)
    bad = [(s, g, w) for s, g, w in zip(sets, got, want) if g != w]
    assert not bad, f"{len(bad)} of {len(sets)} sets differ, first (cases, got, want) {bad[0]}"
