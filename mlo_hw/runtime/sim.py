"""The simulation backend: the engine's RTL, Verilated, on the AXI DRAM model of ``sim/harness.py``.

The harness binary (``sim/hdl/harness.cpp``; built once per config and cached under ``sim_build/``, the
same build the tests use) runs as a child process that reads its script from a pipe, one command at a
time, so each primitive is a command: ``write``/``read`` are AXI4-Lite transactions on the engine's
``s_axil_*``, ``load``/``dump`` the DRAM model's backdoor, and :meth:`SimBackend.wait` is ``wait_irq``
(timeouts in simulated time: ``timeout_s`` x ``target.clock_mhz``). Nothing in Python runs per cycle.

The simulated design is the engine the build's config generates (``LayerEngine`` with its trace ports
wired out), so the build folder's ``regs.json`` must be the map of that config (checked at open).
Options: ``memory`` (``ideal`` or ``ddr3``: ``sim.harness.memory_model``), ``stall`` (probability that
each AXI channel of the DRAM model stalls in a cycle), ``seed``, and :meth:`SimBackend.inject_error`
(an SLVERR on the beat at an address, as the DRAM model's ``err_en``/``err_addr``).

This backend needs the repository's ``sim/`` folder (it is not part of the installed package).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

from .backend import PAGE, Backend, BackendUnavailable

__all__ = ["SimBackend"]

ROOT = Path(__file__).resolve().parents[2]
_EXE: dict = {}         # config -> harness binary


def _harness_module():
    if not (ROOT / "sim" / "harness.py").is_file():
        raise BackendUnavailable("sim backend: needs the repository's sim/ folder (run from a checkout of mlo_hw)")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import sim.harness as harness
    return harness


class SimBackend(Backend):
    name = "sim"

    def __init__(self, memory: str = "ideal", stall: float = 0.0, seed: int = 1):
        super().__init__(0, 0)
        if memory not in ("ideal", "ddr3"):
            raise BackendUnavailable(f"sim backend: memory: expected 'ideal' or 'ddr3', got {memory!r}")
        if not 0.0 <= stall < 1.0:
            raise BackendUnavailable(f"sim backend: stall: expected a probability in [0, 1), got {stall!r}")
        self.memory, self.stall, self.seed = memory, stall, seed
        self.proc = None
        self.cycles = 0             # simulated cycles waited for runs so far
        self._tmp = None
        self._files = 0

    # ---- life cycle ------------------------------------------------------------------------------
    def open(self, build) -> None:
        harness = _harness_module()
        from ..hw.regs import as_dict
        cfg = build.cfg
        if json.loads(json.dumps(as_dict(cfg)))["registers"] != _registers(build.regs):
            raise BackendUnavailable(f"sim backend: {build.regs.source} is not the register map of config "
                                     f"{cfg.name} as this version generates it (re-run python -m mlo_hw.elaborate)")
        if cfg not in _EXE:                 # build() hashes the generated Verilog: once per process
            _EXE[cfg] = harness.build(cfg)
        exe = _EXE[cfg]
        dram = harness.DramMap.for_config(cfg)
        self.dram_base, self.dram_size = PAGE, dram.size - PAGE
        super().open(build)
        self._tmp = tempfile.TemporaryDirectory(prefix="mlo-sim-")
        try:
            self.proc = subprocess.Popen([str(exe), "/dev/stdin"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, bufsize=1)
        except OSError as e:
            raise BackendUnavailable(f"sim backend: cannot start {exe}: {e.strerror}") from None
        p = min(255, round(self.stall * 256))
        for k, v in harness.memory_model(cfg, self.memory).inputs().items():
            self._send(f"dram {k} {v}")
        self._send(f"dram seed {self.seed}")
        for c in ("ar", "r", "aw", "w", "b"):
            self._send(f"dram stall_{c} {p}")
        self._send("reset 4")
        self._send("reseed")
        self._sync()

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # ---- the pipe --------------------------------------------------------------------------------
    def _send(self, line: str) -> None:
        if self.proc is None:
            raise BackendUnavailable("sim backend: not open")
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._died()

    def _reply(self, keyword: str) -> list[str]:
        return self._reply_words((keyword,))

    def _reply_words(self, keywords) -> list[str]:
        """The harness's next output line, split; it must start with one of ``keywords``."""
        line = self.proc.stdout.readline()
        if not line:
            self._died()
        words = line.split()
        if words and words[0] in ("error", "protocol_error"):
            raise RuntimeError(f"sim backend: the harness stopped: {line.strip()}")
        if not words or words[0] not in keywords:
            raise RuntimeError(f"sim backend: expected '{' or '.join(keywords)} ...' from the harness, got "
                               f"{line.strip()!r}")
        return words

    def _sync(self) -> None:
        self._send("echo sync")
        self._reply("echo")

    def _died(self):
        out = self.proc.stdout.read() if self.proc.stdout else ""
        code = self.proc.wait()
        err = self.proc.stderr.read() if self.proc.stderr else ""
        detail = "; ".join(line for line in (out + err).splitlines() if line.strip())[-400:]
        self.proc = None
        raise RuntimeError(f"sim backend: the simulation stopped (exit status {code}): {detail or 'no output'}")

    def _file(self, name: str) -> Path:
        self._files += 1
        return Path(self._tmp.name) / f"{self._files}.{name}"

    # ---- primitives ------------------------------------------------------------------------------
    def write_dram(self, addr: int, data: bytes) -> None:
        f = self._file("load")
        f.write_bytes(bytes(data))
        self._send(f"load {addr} {f}")
        self._sync()
        f.unlink()

    def read_dram(self, addr: int, n: int) -> bytes:
        f = self._file("dump")
        self._send(f"dump {addr} {n} {f}")
        self._sync()
        data = f.read_bytes()
        f.unlink()
        return data

    def write_reg(self, offset: int, value: int) -> None:
        self._send(f"write {offset} {value & 0xFFFFFFFF}")

    def read_reg(self, offset: int) -> int:
        self._send(f"read {offset}")
        return int(self._reply("read")[2])

    def wait(self, timeout_s: float) -> bool:
        """Run the simulation until the interrupt, at most ``timeout_s`` seconds of simulated time."""
        cycles = max(1, math.ceil(timeout_s * self.build.cfg.target.clock_mhz * 1e6))
        self._send(f"wait_irq {cycles}")
        kind, n = self._reply_any(("irq", "timeout"))
        self.cycles += n
        return kind == "irq"

    def pause(self, seconds: float) -> None:
        self._send(f"wait {max(1, math.ceil(seconds * self.build.cfg.target.clock_mhz * 1e6))}")

    def _reply_any(self, keywords) -> tuple[str, int]:
        words = self._reply_words(keywords)
        return words[0], int(words[1])

    # ---- extras ----------------------------------------------------------------------------------
    def inject_error(self, addr: int | None) -> None:
        """Answer the AXI beat at byte ``addr`` with SLVERR (a read beat, or the write burst holding it);
        None: no error."""
        self._send(f"dram err_en {int(addr is not None)}")
        self._send(f"dram err_addr {addr or 0}")

    def phase_profile_begin(self) -> None:
        self._send("profile /dev/null")

    def phase_profile(self) -> list[dict]:
        f = self._file("profile")
        self._send(f"profile {f}")
        self._sync()
        rows = [dict(zip(("layer", "op", "cycles", "compute", "stall"), map(int, line.split())))
                for line in f.read_text().splitlines()]
        f.unlink()
        return rows


def _registers(regs) -> list:
    return list(regs.registers.values())
