"""The LiteX SoC simulated (mlo_hw.soc.write_sim, sim/soc_sim.py): the Arty A7 SoC's body (no CPU, LiteDRAM,
the engine through DramPath, its registers and irq on the SoC bus, LiteX's UART bridge) with LiteDRAM's DFI
model for the DDR3 PHY, under Verilator, reached by the runtime's LiteX backend through LiteX's own
litex_server on a pseudo-terminal. Fast: the simulated SoC has the board SoC's address map, also with the engine
at a clock of its own. Slow: the LiteX backend through the simulated SoC agrees bit for bit with the golden
backend, with the engine on sys (100 MHz) and at 120 MHz beside it (through the clock crossings)."""
import csv
import dataclasses
import re
import time

import numpy as np
import pytest

pytest.importorskip("litex", reason="litex is not installed")
pytest.importorskip("litex_boards", reason="litex-boards is not installed")

from mlo_hw.config import load_config  # noqa: E402


def _csr(path):
    """csr.csv as {(kind, name): address} for the CSR bases, registers and memory regions."""
    out = {}
    with open(path) as f:
        for row in csv.reader(r for r in f if not r.startswith("#")):
            if row and row[0] in ("csr_base", "csr_register", "memory_region"):
                out[(row[0], row[1])] = int(row[2], 0)
    return out


def test_the_simulated_soc_has_the_board_socs_address_map(tmp_path):
    """write_sim (the simulation's SoC) and write_litex (the Arty A7's, with the UART bridge) put the engine's
    registers, main_ram, the DFI injector's CSRs (which sdram_init.py writes) and the irq event's CSRs at the
    same addresses, and write the same DDR3 init sequence but for the CAS latency in MR0 (the DFI model's
    PHY settings have CL 6 at 100 MHz, the Arty's 7-series PHY CL 7); only the PHY, clock and pads differ."""
    from mlo_hw import soc
    cfg = load_config("small")
    sim_facts = soc.write_sim(cfg, tmp_path / "sim")
    board = soc.SOC_BOARDS[soc.SIM_BOARD]
    soc.write_litex(soc.retarget(cfg, board, explicit=True), board, tmp_path / "board", "uart")
    s, b = _csr(tmp_path / "sim" / "csr.csv"), _csr(tmp_path / "board" / "csr.csv")
    shared = [k for k in b if k[1] == "mlo" or k[1] == "main_ram" or k[1].startswith(("sdram_dfii", "mlo_ev"))]
    assert len(shared) > 20 and ("memory_region", "mlo") in shared and ("memory_region", "main_ram") in shared
    assert {k: s.get(k) for k in shared} == {k: b[k] for k in shared}
    ops = []
    for side in ("sim", "board"):
        ns = {"__name__": "sdram_init"}
        exec((tmp_path / side / "sdram_init.py").read_text(), ns)
        ops.append(ns["OPS"])
    # the same writes, but for MR0's CAS latency: the model's PHY settings say CL 6, the Arty's S7 PHY CL 7
    assert [n for n, _ in ops[0]] == [n for n, _ in ops[1]] and len(ops[0]) > 20
    diff = [(a, b) for a, b in zip(*ops) if a != b]
    assert diff == [(("sdram_dfii_pi0_address", 0x920), ("sdram_dfii_pi0_address", 0x930))], diff
    v = (tmp_path / "sim" / "gateware" / "mlo_soc.v").read_text()
    assert "mlo_engine" in v and "mlo_axi_upsizer" in v and "serial_sink_data" in v
    assert sim_facts["dram_port_bits"] == 128 and sim_facts["upsizer"]


def _at_mhz(cfg, mhz):
    return dataclasses.replace(cfg, target=dataclasses.replace(cfg.target, clock_mhz=mhz))


def test_the_simulated_soc_with_the_engine_at_its_own_clock(tmp_path):
    """write_sim with the engine at 120 MHz (sys 100): a second clock pad engine_clk clocks the engine instance
    and its up-converter, its reset is sys's synchronised to it, the crossings are LiteX's and LiteDRAM's (as on
    the board: tests/test_soc.py), and the address map is the 100 MHz simulation's."""
    from mlo_hw import soc
    from test_soc import check_crossings, instance_connections      # tests/ is on the path (rootdir-less tests)
    cfg = load_config("small")
    facts = soc.write_sim(_at_mhz(cfg, 120.0), tmp_path / "120")
    soc.write_sim(cfg, tmp_path / "100")
    assert (facts["sys_mhz"], facts["engine_mhz"], facts["engine_domain"]) == (100.0, 120.0, "engine")
    v = (tmp_path / "120" / "gateware" / "mlo_soc.v").read_text()
    assert re.search(r"^\s*input\s+(wire\s+)?engine_clk,?$", v, re.M)
    # the domains' clocks are the pads' (LiteX names them apart: sys_clk_1 = sys_clk, engine_clk_1 = engine_clk)
    clk = {pad: re.search(rf"^assign (\w+) = {pad};$", v, re.M).group(1) for pad in ("sys_clk", "engine_clk")}
    conn = instance_connections(v, "mlo_engine")
    assert conn["aclk"] == clk["engine_clk"] and conn["aresetn"] == "(~engine_rst)"
    assert instance_connections(v, "mlo_axi_upsizer")["clk"] == clk["engine_clk"]
    check_crossings(v, engine_clk=clk["engine_clk"], sys_clk=clk["sys_clk"])
    assert _csr(tmp_path / "120" / "csr.csv") == _csr(tmp_path / "100" / "csr.csv")
    assert "engine_clk" not in (tmp_path / "100" / "gateware" / "mlo_soc.v").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("engine_mhz", [100.0, 120.0], ids=["engine_on_sys", "engine_120mhz"])
def test_litex_backend_through_the_simulated_soc_gives_the_golden_bits(tmp_path, engine_mhz):
    """The runtime's LiteX backend, LiteX's litex_server (--uart on the simulation's pty) and RemoteClient,
    LiteX's UART bridge, the SoC bus, LiteDRAM's controller on its DDR3 model and the engine: after the
    host's DDR3 init (sdram_init.py, as on a board), load_weights and run on 2 random inputs (one with fewer
    tokens) give the golden backend's bits; the irq event reports the finished job. With the engine on sys
    (100 MHz) and at 120 MHz in its own domain (registers, DRAM port and irq through the clock crossings;
    the simulation drives both clocks at their periods)."""
    from mlo_hw.elaborate import write_build
    from mlo_hw.model.quantize import build_model, random_inputs
    from mlo_hw.runtime import Accelerator
    from sim.soc_sim import SocSim
    cfg = _at_mhz(load_config("small"), engine_mhz)
    build = tmp_path / "small"
    build.mkdir()
    write_build(cfg, build)
    model = build_model(cfg)[1]
    rng = np.random.default_rng(7)
    xs = [model.quantize_input(x) for x, _ in random_inputs(cfg, rng, 2, padded=False)]
    runs = [(xs[0], cfg.model.seq_len), (xs[1], 3)]
    with Accelerator(build, backend="golden") as gold:
        want = [gold.run(x, t) for x, t in runs]
    t0 = time.monotonic()
    soc = SocSim(cfg)
    t_build = time.monotonic() - t0
    with soc:
        assert soc.sdram_init() > 10
        t1 = time.monotonic()
        with Accelerator(build, backend="litex", host="127.0.0.1", port=soc.port, csr_csv=soc.csr_csv) as acc:
            acc.load_weights()
            got, engine_cycles = [], []
            for x, t in runs:            # the timeout is wall time: the simulation runs ~1000x slower than the board
                got.append(acc.run(x, t, timeout=900))
                engine_cycles.append(acc.profile().rows[0].cycles)
            t_run = time.monotonic() - t1
            bus = acc.backend.client
            ev = bus.regs.mlo_ev_status.read()
            status, ctrl = acc.read("STATUS"), acc.read("CTRL")
            irq = bool(status & 0b110) and bool(ctrl & acc.regs.bit("CTRL", "irq_enable"))
    for g, w in zip(got, want):
        assert g.shape == w.shape and np.array_equal(g, w) and np.any(w != 0)
    assert ev == int(irq)          # the engine's irq as the mlo_ev event, read over the bridge
    # the simulation drove the two clocks at their periods: engine_mhz / 100 engine cycles a sys cycle
    assert (soc.sys_mhz, soc.engine_mhz) == (100.0, engine_mhz) and soc.cycles > 100_000
    assert abs(soc.engine_cycles / soc.cycles - engine_mhz / 100.0) < 1e-4, (soc.engine_cycles, soc.cycles)
    print(f"simulated SoC (engine {engine_mhz:g} MHz, sys {soc.sys_mhz:g} MHz): build (or cache) {t_build:.1f} s; "
          f"open, load_weights and 2 runs {t_run:.1f} s "
          f"(engine runs {engine_cycles} cycles); the simulation ran {soc.cycles} sys cycles "
          f"({soc.engine_cycles} engine cycles) in {soc.seconds:.1f} s "
          f"({soc.cycles / soc.seconds / 1e3:.0f} kcycles/s)")
