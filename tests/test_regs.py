"""Control/status registers: AXI4-Lite slave behaviour, and the emitted register map files."""

import json
import random
import shutil
import subprocess

import pytest
from amaranth.sim import Simulator

from mlo_hw.config import load_config
from amaranth import Module, Signal

from mlo_hw.hw.pipeline import SplitCounter, split_sum
from mlo_hw.hw.regs import ControlRegs, as_dict, markdown, register_map, write_register_map
from mlo_hw.synth import synth_verilog
from sim.runner import ROOT, lint, simulate, to_verilog


def test_regs_over_axi_lite():
    cfg = load_config("bert_tiny")
    v = to_verilog(ControlRegs(cfg), "control_regs")
    assert lint(v, "control_regs") == []
    d = as_dict(cfg)
    simulate(v, "control_regs", "tb_regs", {"registers": d["registers"], "seed": 5,
                                            "beat_bytes": cfg.axi_data_bytes})
    r = synth_verilog(v, "control_regs")
    assert r.latches == 0 and r.used["DSP"] == 0


@pytest.mark.parametrize("width", [2, 3, 8, 9])
def test_split_counter_counts_as_one_counter_through_every_wrap(width):
    """The performance counters' SplitCounter against a plain modulo counter, cycle by cycle, on random increments and
    clears, long enough to wrap the whole width several times (the high half's carry at every low wrap)."""
    dut, rng = SplitCounter(width), random.Random(width)
    steps = 6 << width

    async def bench(ctx):
        want = 0
        for _ in range(steps):
            inc, clear = rng.random() < 0.8, rng.random() < 0.01
            ctx.set(dut.inc, inc)
            ctx.set(dut.clear, clear)
            await ctx.tick()
            want = 0 if clear else (want + inc) % (1 << width)
            assert ctx.get(dut.count) == want

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_register_map_is_consistent():
    for name in ("bert_tiny", "small"):
        regs = register_map(load_config(name))
        offsets = [r.offset for r in regs]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        assert all(o % 4 == 0 and o < 256 for o in offsets)
        for r in regs:
            used = 0
            for f in r.fields:
                assert f.access in ("RO", "RW", "W1C", "W1P")
                assert used & f.mask == 0 and f.lsb + f.width <= 32, f"{r.name}.{f.name} overlaps"
                used |= f.mask


def test_emitted_files(tmp_path):
    cfg = load_config("bert_tiny")
    js, h = write_register_map(tmp_path, cfg)
    data = json.loads(js.read_text())
    assert [r["name"] for r in data["registers"]][:3] == ["ID", "CTRL", "STATUS"]
    text = h.read_text()
    assert "#define MLO_REG_WEIGHT_BASE_LO 0x10u" in text and "#define MLO_STATUS_DONE_MASK 0x00000002u" in text
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        src = tmp_path / "t.c"
        src.write_text('#include "mlo_hw_regs.h"\nint main(void){return MLO_REG_STATUS == 8u ? 0 : 1;}\n')
        subprocess.run([cc, "-Wall", "-Werror", "-I", str(tmp_path), str(src), "-o", str(tmp_path / "t")], check=True)
        assert subprocess.run([str(tmp_path / "t")]).returncode == 0


def test_docs_match_the_map():
    doc = ROOT / "docs" / "registers.md"
    assert doc.read_text() == markdown(load_config("bart_tiny")), \
        "docs/registers.md is stale: regenerate with python -m mlo_hw.hw.regs --config bart_tiny --markdown docs/registers.md"


def test_split_sum_is_the_sum_two_cycles_later():
    """split_sum (the tiled sequencer's transfer addresses) against a + b modulo 2**width, two cycles after random
    terms, with sums around every carry out of the low half (terms near the half's edge)."""
    width, rng = 12, random.Random(3)
    m = Module()
    a, b = Signal(width), Signal(width)
    out = split_sum(m, a, b, "out", width)
    half = width // 2
    edge = [(1 << half) - 1, 1 << half, 0, (1 << width) - 1]
    terms = [(rng.choice(edge + [rng.randrange(1 << width)]), rng.randrange(1 << width)) for _ in range(400)]

    async def bench(ctx):
        for i, (x, y) in enumerate(terms):
            ctx.set(a, x)
            ctx.set(b, y)
            await ctx.tick()
            if i >= 2:
                x2, y2 = terms[i - 1]        # the value now is the terms' of two ticks ago (set before tick i - 1)
                assert ctx.get(out) == (x2 + y2) % (1 << width)

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
