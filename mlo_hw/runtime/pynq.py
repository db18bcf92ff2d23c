"""The PYNQ backend: an engine in a Zynq design, driven from the board's Linux through PYNQ.

    acc = Accelerator(build, backend="pynq", bitfile="mlo.bit", ip="mlo_engine_0")

``pynq.Overlay(bitfile)`` loads the design (``download=False``: it is already loaded) and its
``ip_dict[ip]`` gives the register window (``phys_addr``, ``addr_range``), driven through
``pynq.MMIO(phys_addr, addr_range)``; ``regs_base`` overrides it. DRAM regions are
``pynq.allocate(shape=(n,), dtype=uint8)`` buffers (physically contiguous, cache-flushed after a write and
invalidated before a read); the engine gets their ``device_address`` (``physical_address`` on older PYNQ). Waiting polls STATUS (wall time).
``pynq`` is imported when the backend opens; it missing, or the overlay not loading, is one line.
"""

from __future__ import annotations

import numpy as np

from .backend import PAGE, Backend, BackendUnavailable

__all__ = ["PynqBackend"]


class PynqBackend(Backend):
    name = "pynq"
    host_latency_s = 0.5

    def __init__(self, bitfile: str | None = None, ip: str = "mlo_engine_0", regs_base: int | None = None,
                 regs_size: int = 0x100, download: bool = True):
        super().__init__(0, 0)
        self.bitfile, self.ip, self.regs_base, self.regs_size, self.download = bitfile, ip, regs_base, regs_size, download
        self.buffers: list[tuple[int, object]] = []
        self.mmio = None

    def open(self, build) -> None:
        try:
            import pynq
        except ImportError:
            raise BackendUnavailable("pynq backend: pynq is not installed (it runs on the board's Linux: "
                                     "pip install pynq)") from None
        self.pynq = pynq
        if self.regs_base is None:
            if self.bitfile is None:
                raise BackendUnavailable("pynq backend: give bitfile (the overlay) or regs_base")
            try:
                overlay = pynq.Overlay(self.bitfile, download=self.download)
            except Exception as e:      # PYNQ raises OSError, RuntimeError, ValueError, ... by platform
                raise BackendUnavailable(f"pynq backend: cannot load overlay {self.bitfile}: "
                                         f"{' '.join(str(e).split())}") from None
            if self.ip not in overlay.ip_dict:
                raise BackendUnavailable(f"pynq backend: overlay {self.bitfile} has no IP {self.ip!r} "
                                         f"(has {', '.join(sorted(overlay.ip_dict)) or 'none'})")
            self.regs_base = overlay.ip_dict[self.ip]["phys_addr"]
            self.regs_size = overlay.ip_dict[self.ip]["addr_range"]
        self.mmio = pynq.MMIO(self.regs_base, self.regs_size)
        super().open(build)

    def close(self) -> None:
        for _, buf in self.buffers:
            buf.freebuffer()
        self.buffers = []

    # ---- DRAM: contiguous buffers ----------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        buf = self.pynq.allocate(shape=(nbytes,), dtype=np.uint8)
        addr = int(getattr(buf, "device_address", None) or buf.physical_address)
        if addr % PAGE:
            raise BackendUnavailable(f"pynq backend: buffer at {addr:#x} is not 4 KiB aligned")
        self.buffers.append((addr, buf))
        return addr

    def _find(self, addr: int, n: int):
        for base, buf in self.buffers:
            if base <= addr and addr + n <= base + buf.nbytes:
                return buf, addr - base
        raise ValueError(f"pynq backend: {n} bytes at {addr:#x} are not inside a buffer this backend allocated")

    def write_dram(self, addr: int, data: bytes) -> None:
        buf, off = self._find(addr, len(data))
        buf[off:off + len(data)] = np.frombuffer(bytes(data), np.uint8)
        buf.flush()

    def read_dram(self, addr: int, n: int) -> bytes:
        buf, off = self._find(addr, n)
        buf.invalidate()
        return bytes(np.asarray(buf[off:off + n], np.uint8))

    # ---- registers -------------------------------------------------------------------------------
    def write_reg(self, offset: int, value: int) -> None:
        self.mmio.write(offset, value & 0xFFFFFFFF)

    def read_reg(self, offset: int) -> int:
        return int(self.mmio.read(offset))
