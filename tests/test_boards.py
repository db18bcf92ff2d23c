"""Board tops, XDC and the Vivado build plan (produced without Vivado)."""

import dataclasses
import re
from pathlib import Path

import pytest
from amaranth import Module, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mlo_hw import boards
from mlo_hw.boards import BOARDS, build_plan, mmcm_params, xdc_text
from mlo_hw.config import ConfigError, load_config
from mlo_hw.synth import synth_verilog

ROOT = Path(__file__).resolve().parent.parent


class Acc(wiring.Component):
    """A stand-in design: a 16-bit accumulator of an 8-bit input, with a stream of a struct payload."""
    a: In(8)
    s: Out(16)
    i: In(stream.Signature(data.StructLayout({"x": signed(8), "last": 1})))

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(1)
        with m.If(self.i.valid):
            m.d.sync += self.s.eq(self.s + self.a + self.i.payload.x)
        return m


def _with_clock(cfg, mhz, board=None):
    return dataclasses.replace(cfg, target=dataclasses.replace(cfg.target, clock_mhz=mhz,
                                                               board=board or cfg.target.board))


@pytest.mark.parametrize("board,part", [("arty_a7_35", "xc7a35ticsg324-1L"), ("arty_a7_100", "xc7a100ticsg324-1L"),
                                        ("nexys_video", "xc7a200tsbg484-1")])
def test_build_plan_has_tcl_xdc_and_verilog(board, part):
    cfg = load_config("bert_tiny")
    plan = build_plan(cfg, Acc(), board)
    f = plan.files
    assert {"build_mlo_top.sh", "mlo_top.tcl", "mlo_top.xdc", "mlo_top.v", f"{board}.xdc"} <= set(f)
    tcl = f["mlo_top.tcl"]
    assert f"create_project -force -name mlo_top -part {part}" in tcl
    assert f'read_xdc "{board}.xdc"' in tcl and "write_bitstream" in tcl
    assert "vivado" in f["build_mlo_top.sh"].lower() and "mlo_top.tcl" in f["build_mlo_top.sh"]
    # The board clock constraint comes from our XDC only, on the port amaranth names.
    assert "create_clock" not in f["mlo_top.xdc"]
    assert "create_clock -name sys_clk -period 10.000 [get_ports {clk100_0__io}]" in f[f"{board}.xdc"]
    assert re.search(r"set_property LOC \w+ \[get_ports \"clk100_0__io\"\]", f["mlo_top.xdc"])
    assert re.search(r"set_property LOC \w+ \[get_ports \"rst_0__io\"\]", f["mlo_top.xdc"])
    v = f["mlo_top.v"]
    assert "module mlo_top(" in v and "input clk100_0__io" in v and "BUFG" in v and "MMCME2" not in v
    assert re.search(r"\\mlo_top\.design\s+\\design\s+\(", v)


def test_committed_constraints_match_the_generator():
    cfg = load_config("bert_tiny")
    for board in BOARDS:
        assert (ROOT / "constraints" / f"{board}.xdc").read_text() == xdc_text(cfg, BOARDS[board]), board


def test_reset_buttons_are_active_low_and_inverted_by_the_platform():
    for board in BOARDS.values():
        plat = board.platform(toolchain="Vivado")
        assert plat.lookup(plat.default_rst, 0).ios[0].invert, board.name


def test_other_clock_uses_an_mmcm():
    for mhz in (125, 150, 80, 66.67, 200):
        p = mmcm_params(100, mhz)
        assert 600 <= p["vco_mhz"] <= 1200 and abs(p["out_mhz"] - mhz) / mhz < 0.005
    assert mmcm_params(100, 125)["out_mhz"] == 125
    with pytest.raises(ConfigError, match="target.clock_mhz: 3 MHz cannot be made"):
        mmcm_params(100, 3)
    cfg = _with_clock(load_config("bert_tiny"), 125.0)
    f = build_plan(cfg, Acc()).files
    assert "MMCME2_BASE" in f["mlo_top.v"] and "CLKFBOUT_MULT_F" in f["mlo_top.v"]
    assert "create_clock -name osc_clk -period 10.000" in f["arty_a7_35.xdc"]
    assert "125.000 MHz" in f["arty_a7_35.xdc"]


def test_board_and_part_must_agree():
    cfg = load_config("bert_tiny")
    with pytest.raises(ConfigError, match="target.part: xc7a35ticsg324-1L is not the FPGA of board nexys_video"):
        boards.board_of(dataclasses.replace(cfg, target=dataclasses.replace(cfg.target, board="nexys_video")))
    with pytest.raises(ConfigError, match="--board: unknown board 'zybo'"):
        boards.board_of(cfg, "zybo")


def test_engine_command_refuses_while_the_engine_is_not_built(tmp_path, monkeypatch, capsys):
    from mlo_hw import synth
    monkeypatch.setattr(synth, "ENGINE_MODULE", "mlo_hw.no_such_engine")
    assert boards.main(["--config", "bert_tiny", "-o", str(tmp_path)]) == 2
    assert "the engine is not built yet" in capsys.readouterr().err
    assert boards.main(["--config", "bert_tiny", "--block", "nope", "-o", str(tmp_path)]) == 2
    assert "--block: unknown block 'nope'" in capsys.readouterr().err


def test_cli_writes_the_plan_of_a_block(tmp_path, monkeypatch, capsys):
    from mlo_hw import synth
    monkeypatch.setattr(synth, "ENGINE_MODULE", "mlo_hw.no_such_engine")
    monkeypatch.setattr(synth, "BLOCKS", (synth.Block("acc", "mlo_hw.config", lambda cfg: Acc()),))
    assert boards.main(["--config", "bert_tiny", "--block", "acc", "-o", str(tmp_path)]) == 0
    for name in ("build_mlo_top.sh", "mlo_top.tcl", "mlo_top.xdc", "mlo_top.v", "arty_a7_35.xdc"):
        assert (tmp_path / name).is_file(), name
    assert f"sh {tmp_path}/build_mlo_top.sh" in capsys.readouterr().out


def test_board_top_synthesizes_with_io_buffers_and_no_latches():
    f = build_plan(load_config("bert_tiny"), Acc()).files
    r = synth_verilog(f["mlo_top.v"], "mlo_top", iopad=True)
    assert r.latches == 0 and r.cells.get("BUFG") == 1 and r.cells.get("IBUF") == 2
    # xorshift state, one stimulus flip-flop per input bit (8 + 10), the accumulator, the LED register
    assert r.used["FF"] >= 64 + 18 + 16 + 1, r.used


def test_cli_writes_the_plan_of_the_engine(tmp_path, capsys):
    """The engine makes its own ``sync`` from its aclk port: the board's clock is a local domain that drives aclk
    (before, the plan of the engine itself failed with an AssertionError in amaranth)."""
    assert boards.main(["--config", "small", "--board", "arty_a7_35", "-o", str(tmp_path)]) == 0
    top = (tmp_path / "mlo_top.v").read_text()
    assert "module mlo_top(" in top and "BUFG bufg" in top and "module \\mlo_top.design.engine " in top
    assert f"sh {tmp_path}/build_mlo_top.sh" in capsys.readouterr().out
