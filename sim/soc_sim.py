"""The LiteX SoC of ``python -m mlo_hw.soc`` simulated under Verilator, reached through ``litex_server``.

:func:`build` writes the simulated SoC (``mlo_hw.soc.write_sim``: the Arty A7 SoC's body, no CPU, LiteDRAM's
controller on its DFI-level DDR3 model ``SDRAMPHYModel``, the engine through ``DramPath``, its registers on the
SoC bus, its irq as the ``mlo_ev`` event, LiteX's UART bridge on a byte-stream PHY) and compiles it with
Verilator and ``sim/hdl/soc_sim.cpp`` (cached under ``sim_build/`` by a hash of the Verilog and the C++). When the
config's ``target.clock_mhz`` is not the board's sys clock, the engine runs in a domain of its own: the Verilog
has a second clock pad ``engine_clk``, the C++ is compiled with ``MLO_ENGINE_CLK`` and drives both clocks at
their own periods (:class:`SocSim` passes the two frequencies).
:class:`SocSim` runs it: the simulation opens a pseudo-terminal for the bridge, ``litex_server --uart
--uart-port <pty>`` (LiteX's own, from this Python) connects to it as to a board's USB-UART, and the runtime's
LiteX backend (``Accelerator(build, backend="litex", port=sim.port, csr_csv=sim.csr_csv)``) connects to
``litex_server``::

    with SocSim(load_config("small")) as soc:
        soc.sdram_init()                      # the host's DDR3 init (sdram_init.py), as on a board
        with Accelerator(build, backend="litex", host="127.0.0.1", port=soc.port, csr_csv=soc.csr_csv) as acc:
            ...

``litex_sim`` itself is not used: its C++ modules need libevent and json-c.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .runner import _env_with_verilator, build_folder
from mlo_hw.cli import ArgumentParser, command

__all__ = ["build", "SocSim"]

CPP = Path(__file__).resolve().parent / "hdl" / "soc_sim.cpp"
# the lines LiteX stamps with the date and a revision that changes from run to run
_STAMP = re.compile(r"Date\s*:|LiteX sha1|Auto-[Gg]enerated by LiteX")


def build(cfg, dram_bytes: int | None = None) -> Path:
    """The simulated SoC of ``cfg``, written and compiled: the folder holding ``Vmlo_soc`` (the simulation),
    ``csr.csv``, ``sdram_init.py`` and ``gateware/``. The engine's own clock (``write_sim``'s ``engine_domain``
    is not ``sys``) compiles the C++ main with ``-DMLO_ENGINE_CLK`` (the Verilog then has the ``engine_clk`` pad,
    so the cache key differs already)."""
    from mlo_hw.soc import SIM_DRAM_BYTES, TOP_NAME, write_sim
    dram_bytes = dram_bytes or SIM_DRAM_BYTES
    with tempfile.TemporaryDirectory() as tmp:
        facts = write_sim(cfg, Path(tmp), dram_bytes)
        gw = Path(tmp) / "gateware"
        sources = sorted(p.name for p in gw.iterdir() if p.suffix == ".v")
        # the key: every file written (less LiteX's date and revision stamps) and the C++ main
        text = "".join(line for p in sorted(Path(tmp).rglob("*")) if p.is_file()
                       for line in p.read_text().splitlines(True) if not _STAMP.search(line))
        key = hashlib.sha256((text + CPP.read_text()).encode()).hexdigest()[:16]
        out = build_folder(f"soc_sim-{cfg.name}", key)
        exe = out / f"V{TOP_NAME}"
        if exe.exists():
            return out
        shutil.rmtree(out)
        shutil.copytree(tmp, out)
    assert all((out / "gateware" / Path(s).name).exists() for s in facts["sources"])
    env = _env_with_verilator()
    env["MAKEFLAGS"] = "CFG_CXXFLAGS_PCH_I=-include"
    gw = out / "gateware"
    cflags = "-O2" + (" -DMLO_ENGINE_CLK" if facts["engine_domain"] != "sys" else "")
    r = subprocess.run(["verilator", "--cc", "--exe", "--build", "-j", "2", "-O3", "--x-assign", "0",
                        "--x-initial", "0", "-Wno-fatal", "-Wno-lint", "-Wno-style", "-Mdir", str(out / "obj"),
                        "--top-module", TOP_NAME, "-o", str(exe), "-CFLAGS", cflags,
                        *[str(gw / s) for s in sources], str(CPP)], capture_output=True, text=True, env=env)
    if r.returncode != 0 or not exe.exists():
        raise RuntimeError("verilator build of the simulated SoC failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SocSim:
    """The compiled SoC simulation (:func:`build`) running, with ``litex_server`` on its pseudo-terminal.
    ``port``: litex_server's TCP port on 127.0.0.1; ``csr_csv``: the SoC's address map; ``sys_mhz`` and
    ``engine_mhz``: the simulated clocks (the board's sys clock and ``target.clock_mhz``); after the ``with``
    block, ``cycles`` and ``seconds``: the simulated sys clock cycles and the wall time of the simulation, and
    ``engine_cycles``: the engine clock's cycles (``cycles`` when the engine runs on sys)."""

    def __init__(self, cfg, dram_bytes: int | None = None):
        from mlo_hw.soc import SIM_BOARD, SOC_BOARDS
        self.folder = build(cfg, dram_bytes)
        self.csr_csv = str(self.folder / "csr.csv")
        self.sys_mhz, self.engine_mhz = SOC_BOARDS[SIM_BOARD].sys_mhz, cfg.target.clock_mhz
        self.cycles = self.seconds = self.engine_cycles = None

    def __enter__(self):
        from mlo_hw.soc import TOP_NAME
        self.sim = subprocess.Popen([str(self.folder / f"V{TOP_NAME}"), "--sys-mhz", f"{self.sys_mhz!r}",
                                     "--engine-mhz", f"{self.engine_mhz!r}"], cwd=self.folder / "gateware",
                                    stdout=subprocess.PIPE, text=True)
        line = self.sim.stdout.readline()
        if not line.startswith("pty "):
            self.sim.kill()
            raise RuntimeError(f"the SoC simulation did not start: {line!r}")
        self.pty = line.split()[1]
        self.port = _free_port()
        self.server = subprocess.Popen([sys.executable, "-m", "litex.tools.litex_server", "--uart", "--uart-port",
                                        self.pty, "--bind-ip", "127.0.0.1", "--bind-port", str(self.port)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if self.server.poll() is not None:
                    self.__exit__(None, None, None)
                    raise RuntimeError("litex_server exited") from None
                time.sleep(0.1)
        return self

    def client(self):
        from litex.tools.litex_client import RemoteClient
        bus = RemoteClient(host="127.0.0.1", port=self.port, csr_csv=self.csr_csv)
        bus.open()
        return bus

    def sdram_init(self) -> int:
        """Run the SoC's ``sdram_init.py`` (LiteDRAM's DDR3 initialisation through the DFI injector) through
        litex_server, as the host does on a board; the number of CSR writes."""
        ns: dict = {"__name__": "sdram_init"}
        exec((self.folder / "sdram_init.py").read_text(), ns)
        bus = self.client()
        try:
            ns["run"](bus)
        finally:
            bus.close()
        return len(ns["OPS"])

    def __exit__(self, *exc):
        self.server.kill()
        self.server.wait()
        if self.sim.poll() is None:
            self.sim.send_signal(signal.SIGTERM)
            try:
                out, _ = self.sim.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.sim.kill()
                out, _ = self.sim.communicate()
            for line in out.splitlines():
                if line.startswith("cycles "):
                    words = line.split()
                    got = dict(zip(words[::2], words[1::2]))
                    self.cycles, self.seconds = int(got["cycles"]), float(got["seconds"])
                    self.engine_cycles = int(got["engine_cycles"])
        return False


@command()
def main(argv=None) -> int:
    """``python -m sim.soc_sim --config small``: build and start the simulated SoC and litex_server, run the
    host's DDR3 init, print the port and ``csr.csv`` for ``Accelerator(..., backend="litex")``, run until
    Ctrl-C."""
    from mlo_hw.config import load_config
    ap = ArgumentParser(prog="python -m sim.soc_sim", description=main.__doc__.splitlines()[0])
    ap.add_argument("--config", default="small")
    args = ap.parse_args(argv)
    with SocSim(load_config(args.config)) as soc:
        soc.sdram_init()
        print(f"simulated SoC on {soc.pty}; litex_server on 127.0.0.1:{soc.port}; csr_csv={soc.csr_csv}", flush=True)
        try:
            while soc.sim.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    print(f"{soc.cycles} sys cycles ({soc.engine_cycles} engine cycles) in {soc.seconds} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
