"""The simulation harness itself: build, run, cache, lint, and a failing testbench fails."""

import pytest
from amaranth import Module, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from sim.runner import lint, simulate, to_verilog


class Adder(wiring.Component):
    """Registered sum of two int8 lanes; a one-deep stream register."""
    i: In(stream.Signature(signed(16)))
    o: Out(stream.Signature(signed(9)))

    def __init__(self, broken=False):
        self.broken = broken
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        a, b = self.i.payload[:8].as_signed(), self.i.payload[8:].as_signed()
        with m.If(self.o.ready | ~self.o.valid):
            m.d.sync += self.o.valid.eq(self.i.valid)
            m.d.sync += self.o.payload.eq(a + b + (1 if self.broken else 0))
        m.d.comb += self.i.ready.eq(self.o.ready | ~self.o.valid)
        return m


def test_runner_passes_a_correct_design_and_lints_clean():
    v = to_verilog(Adder(), "smoke_adder")
    assert lint(v, "smoke_adder") == []
    simulate(v, "smoke_adder", "tb_smoke", {"seed": 3})


def test_runner_reports_a_failing_testbench():
    v = to_verilog(Adder(broken=True), "smoke_adder_broken")
    with pytest.raises(AssertionError, match="1 of 1 cocotb tests failed"):
        simulate(v, "smoke_adder_broken", "tb_smoke", {"seed": 3})


def test_old_builds_of_a_top_are_pruned(tmp_path):
    """Each change of a design leaves a build behind: the two most recently used of a top stay, older ones of that
    top go, other tops' (even one whose name starts alike) and other folders are left alone."""
    import os

    from sim.runner import BUILDS_KEPT, prune_builds
    names = [f"adder-{i:016x}" for i in range(5)] + [f"adder_wide-{0:016x}", "adder-notahash", "lint"]
    for t, name in enumerate(names):
        (tmp_path / name).mkdir()
        os.utime(tmp_path / name, (1000 + t, 1000 + t))
    removed = prune_builds(tmp_path, "adder")
    assert BUILDS_KEPT == 2 and sorted(p.name for p in removed) == names[:3]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[3:])
