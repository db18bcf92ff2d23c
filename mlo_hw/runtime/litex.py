"""The LiteX backend: an engine in a LiteX SoC, reached over Etherbone (UDP) or the UART bridge through
``litex_server`` and LiteX's ``RemoteClient`` (``litex.tools.litex_client``).

    litex_server --udp --udp-ip 192.168.1.50          # or: litex_server --uart --uart-port /dev/ttyUSB1
    acc = Accelerator(build, backend="litex", csr_csv="csr.csv", regs_base=0x8300_0000)

``RemoteClient`` moves 32-bit words on the SoC's bus: ``read(addr, length)``, ``write(addr, words)``. The
address map is a parameter, because it is the SoC's:

- ``regs_base``: the bus address of the engine's AXI4-Lite register window (default: the memory region
  named ``regs_region`` in ``csr_csv``);
- ``dram_bus_base``: the bus address at which the host sees the DRAM the engine reads (default: the
  ``main_ram`` region of ``csr_csv``); ``dram_device_base``: the engine's AXI address of that same byte
  (default 0: the engine's master on LiteDRAM's port, which starts at 0); ``dram_size`` (default: the
  ``main_ram`` region's size). A DRAM byte at engine address ``a`` is at bus address
  ``dram_bus_base + a - dram_device_base``.

Waiting polls STATUS (timeouts in wall time). ``litex`` is imported when the backend opens; it missing, or
no ``litex_server`` listening, is one line (:class:`~mlo_hw.runtime.backend.BackendUnavailable`).

``RemoteClient.read`` returns zeros when ``litex_server`` does not answer within its socket's 2 s (its
``receive_packet`` gives 0 on a timeout; the late answer is dropped, or left for the next read, which then returns
another read's words). A simulated SoC or a slow link can take that long. So the client's socket waits
``bridge_timeout`` seconds (default :data:`BRIDGE_TIMEOUT_S`), its ``receive_packet`` raises instead of giving 0,
and no answer, or an answer of the wrong length, is one line (:class:`~mlo_hw.runtime.backend.BackendUnavailable`)
that closes the connection (the stream of answers is out of step after it).
"""

from __future__ import annotations

import numpy as np

from .backend import Backend, BackendUnavailable

__all__ = ["LiteXBackend"]

CHUNK_WORDS = 255       # an Etherbone record counts its reads/writes in 8 bits
BRIDGE_TIMEOUT_S = 30.0   # seconds a read waits for litex_server's answer (RemoteClient's own: 2)


class LiteXBackend(Backend):
    name = "litex"
    host_latency_s = 2.0

    def __init__(self, host: str = "localhost", port: int = 1234, csr_csv: str | None = None,
                 regs_base: int | None = None, regs_region: str = "mlo", dram_bus_base: int | None = None,
                 dram_device_base: int = 0, dram_size: int | None = None, bridge_timeout: float = BRIDGE_TIMEOUT_S):
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise BackendUnavailable(f"litex backend: port: expected a TCP port 1..65535, got {port!r}")
        if isinstance(bridge_timeout, bool) or not isinstance(bridge_timeout, (int, float)) or not bridge_timeout > 0:
            raise BackendUnavailable(f"litex backend: bridge_timeout: expected seconds > 0, got {bridge_timeout!r}")
        self.bridge_timeout = float(bridge_timeout)
        super().__init__(dram_device_base, dram_size or 0)
        self.host, self.port, self.csr_csv = host, port, csr_csv
        self.regs_base, self.regs_region = regs_base, regs_region
        self.dram_bus_base = dram_bus_base
        self.client = None

    def _region(self, name: str, what: str):
        mems = getattr(self.client, "mems", None)
        region = getattr(mems, name, None) if mems is not None else None
        if region is None:
            raise BackendUnavailable(f"litex backend: {what}: give it, or a csr_csv with a memory region "
                                     f"named {name!r}")
        return region

    def open(self, build) -> None:
        try:
            from litex.tools.litex_client import RemoteClient
        except ImportError:
            raise BackendUnavailable("litex backend: litex is not installed (pip install litex)") from None
        try:
            self.client = RemoteClient(host=self.host, port=self.port, csr_csv=self.csr_csv)
        except (OSError, ValueError, KeyError) as e:
            raise BackendUnavailable(f"litex backend: cannot read csr_csv {self.csr_csv}: {e}") from None
        if self.regs_base is None:
            self.regs_base = self._region(self.regs_region, "regs_base").base
        if self.dram_bus_base is None:
            self.dram_bus_base = self._region("main_ram", "dram_bus_base").base
        if not self.dram_size:
            self.dram_size = self._region("main_ram", "dram_size").size
        try:
            self.client.open()
        except OSError as e:
            self.client = None
            raise BackendUnavailable(f"litex backend: cannot reach litex_server at {self.host}:{self.port} "
                                     f"({e.strerror or e}); start litex_server --udp or --uart first") from None
        self.client.socket.settimeout(self.bridge_timeout)
        receive = self.client.receive_packet

        def receive_or_raise(sock, addr_size):         # RemoteClient.read would turn a 0 into zeros
            answer = receive(sock, addr_size)
            if answer == 0:
                raise TimeoutError(f"no answer within {self.bridge_timeout:g} s (bridge_timeout)")
            return answer
        self.client.receive_packet = receive_or_raise
        super().open(build)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def _client(self):
        if self.client is None:
            raise BackendUnavailable(f"litex backend: no connection to litex_server at {self.host}:{self.port} "
                                     f"(closed, or closed by a failed read)")
        return self.client

    # ---- DRAM: 32-bit words over the bridge -------------------------------------------------------
    def _bus(self, addr: int) -> int:
        return self.dram_bus_base + addr - self.dram_base

    def _read(self, bus_addr: int, n: int) -> list[int]:
        """``n`` (1..CHUNK_WORDS) words from ``bus_addr`` (one Etherbone read record), all of them or one line."""
        try:
            datas = self._client().read(bus_addr, length=n)
            why = f"{len(datas)} words answered"
        except OSError as e:           # TimeoutError from receive_or_raise, or the connection lost
            datas, why = [], str(e) if isinstance(e, TimeoutError) else str(e.strerror or e)
        if len(datas) != n:
            self.close()                # later answers would be out of step with their reads
            raise BackendUnavailable(f"litex backend: a read of {n} words at bus address {bus_addr:#x} through "
                                     f"litex_server at {self.host}:{self.port} failed: {why}; the connection is closed")
        return datas

    def _read_words(self, bus_addr: int, count: int) -> list[int]:
        words = []
        for i in range(0, count, CHUNK_WORDS):
            words += self._read(bus_addr + 4 * i, min(CHUNK_WORDS, count - i))
        return words

    def write_dram(self, addr: int, data: bytes) -> None:
        head, end = addr % 4, addr + len(data)
        lo, hi = addr - head, -(-end // 4) * 4
        buf = bytearray(hi - lo)
        if head or end % 4:           # keep the bytes beside an unaligned region
            buf[:4] = self.read_dram(lo, 4)
            buf[-4:] = self.read_dram(hi - 4, 4)
        buf[head:head + len(data)] = data
        words = np.frombuffer(bytes(buf), "<u4").tolist()
        for i in range(0, len(words), CHUNK_WORDS):
            self._client().write(self._bus(lo) + 4 * i, words[i:i + CHUNK_WORDS])

    def read_dram(self, addr: int, n: int) -> bytes:
        head = addr % 4
        count = -(-(head + n) // 4)
        raw = np.asarray(self._read_words(self._bus(addr - head), count), "<u4").tobytes()
        return raw[head:head + n]

    # ---- registers -------------------------------------------------------------------------------
    def write_reg(self, offset: int, value: int) -> None:
        self._client().write(self.regs_base + offset, value & 0xFFFFFFFF)

    def read_reg(self, offset: int) -> int:
        return int(self._read(self.regs_base + offset, 1)[0])
