"""The LiteX SoC simulated (mlo_hw.soc.write_sim, sim/soc_sim.py): the Arty A7 SoC's body (no CPU, LiteDRAM,
the engine through DramPath, its registers and irq on the SoC bus, LiteX's UART bridge) with LiteDRAM's DFI
model for the DDR3 PHY, under Verilator, reached by the runtime's LiteX backend through LiteX's own
litex_server on a pseudo-terminal. Fast: the simulated SoC has the board SoC's address map. Slow: the
LiteX backend through the simulated SoC agrees bit for bit with the golden backend."""
import csv
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


@pytest.mark.slow
def test_litex_backend_through_the_simulated_soc_gives_the_golden_bits(tmp_path):
    """The runtime's LiteX backend, LiteX's litex_server (--uart on the simulation's pty) and RemoteClient,
    LiteX's UART bridge, the SoC bus, LiteDRAM's controller on its DDR3 model and the engine: after the
    host's DDR3 init (sdram_init.py, as on a board), load_weights and run on 2 random inputs (one with fewer
    tokens) give the golden backend's bits; the irq event reports the finished job."""
    from mlo_hw.elaborate import write_build
    from mlo_hw.model.quantize import build_model, random_inputs
    from mlo_hw.runtime import Accelerator
    from sim.soc_sim import SocSim
    cfg = load_config("small")
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
    print(f"simulated SoC: build (or cache) {t_build:.1f} s; open, load_weights and 2 runs {t_run:.1f} s "
          f"(engine runs {engine_cycles} cycles); the simulation ran {soc.cycles} cycles in {soc.seconds:.1f} s "
          f"({soc.cycles / soc.seconds / 1e3:.0f} kcycles/s)")
