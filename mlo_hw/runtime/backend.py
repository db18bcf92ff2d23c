"""What a backend is: the five primitives the runtime drives an engine through.

A backend moves bytes to and from the engine's DRAM and 32-bit words to and from its AXI4-Lite
registers; everything else (where the weights and activations go, the register sequence, the checks,
the errors) is :class:`mlo_hw.runtime.Accelerator`'s, the same for every backend:

    open(build)                   connect (build: the :class:`~mlo_hw.runtime.build.BuildFolder`)
    alloc(nbytes) -> addr         a DRAM region, as the engine's AXI address (4 KiB aligned)
    write_dram(addr, data)        bytes into DRAM at an engine address
    read_dram(addr, n) -> bytes
    write_reg(offset, value)      one AXI4-Lite register write
    read_reg(offset) -> int
    wait(timeout_s) -> bool       until the interrupt (or STATUS.done/error), at most ``timeout_s`` seconds
                                  of the device's time; False on a timeout
    pause(seconds)                let the device's time pass
    close()

The default :meth:`Backend.alloc` hands out regions of ``[dram_base, dram_base + dram_size)`` one after
another; the default :meth:`Backend.wait` polls STATUS. A backend that has a faster way (the simulation's
interrupt, a board's interrupt line) overrides it.
"""

from __future__ import annotations

import time

from ..cli import BadInput

__all__ = ["Backend", "BackendUnavailable", "PAGE"]

PAGE = 4096     # regions start on a 4 KiB page: no AXI burst of the engine crosses one


class BackendUnavailable(BadInput):
    """The backend's library is not installed, or its board/simulation cannot be reached (one line)."""


class Backend:
    """Base class: a bump allocator over a DRAM window and a STATUS-polling wait."""

    name = "backend"
    #: extra seconds the host adds to a run's timeout (bus round trips, polling)
    host_latency_s = 0.0
    #: False: the counters (CYCLES, COMPUTE_CYCLES, STALL_CYCLES, BYTES_READ) are not clocked (golden model)
    has_clock = True

    def __init__(self, dram_base: int = 0, dram_size: int = 1 << 30):
        self.dram_base, self.dram_size = dram_base, dram_size
        self._next = dram_base
        self.build = None

    # ---- life cycle ------------------------------------------------------------------------------
    def open(self, build) -> None:
        self.build = build
        self._next = self.dram_base

    def close(self) -> None:
        pass

    # ---- DRAM ------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        addr = -(-self._next // PAGE) * PAGE
        if addr + nbytes > self.dram_base + self.dram_size:
            raise BackendUnavailable(f"{self.name} backend: DRAM window {self.dram_base:#x}+{self.dram_size:#x} "
                                     f"has no room for {nbytes} more bytes at {addr:#x}")
        self._next = addr + nbytes
        return addr

    def write_dram(self, addr: int, data: bytes) -> None:
        raise NotImplementedError

    def read_dram(self, addr: int, n: int) -> bytes:
        raise NotImplementedError

    # ---- registers -------------------------------------------------------------------------------
    def write_reg(self, offset: int, value: int) -> None:
        raise NotImplementedError

    def read_reg(self, offset: int) -> int:
        raise NotImplementedError

    def wait(self, timeout_s: float) -> bool:
        """Poll STATUS until DONE or ERROR, at most ``timeout_s`` seconds of wall time."""
        regs = self.build.regs
        status, mask = regs.offset("STATUS"), regs.bit("STATUS", "done") | regs.bit("STATUS", "error")
        end = time.monotonic() + timeout_s
        while True:
            if self.read_reg(status) & mask:
                return True
            if time.monotonic() > end:
                return False
            time.sleep(0.0005)

    def pause(self, seconds: float) -> None:
        """Let ``seconds`` of the device's time pass."""
        time.sleep(seconds)

    # ---- optional --------------------------------------------------------------------------------
    def phase_profile_begin(self) -> None:
        """Start a per-phase cycle record (backends that can observe the engine's phases)."""

    def phase_profile(self) -> list[dict] | None:
        """Per (layer, op) ``cycles``, ``compute``, ``stall`` since :meth:`phase_profile_begin`, or None."""
        return None

    def __repr__(self):
        return f"<{type(self).__name__}>"
