"""cocotbext-axi DRAM model with injectable error responses, and random pause generators."""
from cocotbext.axi import AxiRamRead

__all__ = ["FaultyRam", "pauses", "set_pauses", "check_burst"]


class FaultyRam(AxiRamRead):
    """AxiRamRead that answers a chosen beat address with SLVERR or DECERR (``faults[addr] = resp``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.faults = {}
        self._fault = None
        send = self.r_channel.send

        async def send_with_fault(r):
            if self._fault is not None:
                r.rresp, self._fault = self._fault, None
            await send(r)
        self.r_channel.send = send_with_fault

    async def _read(self, address, length):
        self._fault = self.faults.get(address)
        return self.read(address % self.size, length)


def pauses(rng, p):
    while True:
        yield rng.random() < p


def set_pauses(ram, rng, p_ar, p_r):
    """Random AR/R stalls with probabilities p_ar/p_r (0: none)."""
    for ch, p in ((ram.ar_channel, p_ar), (ram.r_channel, p_r)):
        ch.set_pause_generator(pauses(rng, p) if p else None)
        if not p:
            ch.pause = False        # clearing a generator leaves the last pause value in place


def check_burst(ch: str, addr: int, beats: int, size: int, burst: int, beat_bytes: int, max_burst: int):
    """Assert that an address-channel handshake (``ch`` is "AR" or "AW") is a legal INCR burst of
    full beats: at most ``max_burst`` beats, never across a 4 KiB page."""
    assert beats <= max_burst, f"{ch} burst of {beats} beats > max {max_burst}"
    assert addr // 4096 == (addr + beats * beat_bytes - 1) // 4096, f"{ch} {addr:#x}+{beats} crosses 4 KiB"
    assert size == (beat_bytes - 1).bit_length(), f"{ch} size {size} is not the full beat"
    assert burst == 1, f"{ch} burst type {burst} is not INCR"
