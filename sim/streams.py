"""cocotb helpers for ``amaranth.lib.stream`` ports (flattened as ``<name>__valid/__ready/__payload``).

``StreamSource`` drives a stream from a list of payload integers with random valid gaps;
``StreamSink`` collects payloads with random ready backpressure. Both take a ``random.Random`` so
a seed reproduces a run. ``start_clock_and_reset`` is the common preamble.
"""

from __future__ import annotations

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

__all__ = ["StreamSource", "StreamSink", "start_clock_and_reset", "to_signed", "pack", "unpack"]


def to_signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def pack(values, bits: int) -> int:
    """Little-end-first packing of signed or unsigned ``values`` into one integer (element 0 in the LSBs)."""
    word = 0
    for i, v in enumerate(values):
        word |= (int(v) & ((1 << bits) - 1)) << (i * bits)
    return word


def unpack(word: int, count: int, bits: int, signed: bool = True) -> list[int]:
    out = [(word >> (i * bits)) & ((1 << bits) - 1) for i in range(count)]
    return [to_signed(v, bits) for v in out] if signed else out


async def start_clock_and_reset(dut, period_ns: int = 10, cycles: int = 3, clk="clk", rst="rst"):
    cocotb.start_soon(Clock(getattr(dut, clk), period_ns, unit="ns").start())
    getattr(dut, rst).value = 1
    await ClockCycles(getattr(dut, clk), cycles)
    getattr(dut, rst).value = 0
    await RisingEdge(getattr(dut, clk))


class StreamSource:
    """Drives ``payloads`` in order; ``valid`` is low on a random fraction ``1 - p_valid`` of cycles.

    Per cycle: set valid/payload, wait for the settled phase, see ``ready``, then the clock edge
    completes the transfer if both were high.
    """

    def __init__(self, dut, name: str, rng: random.Random | None = None, p_valid: float = 1.0, clk="clk"):
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready", None)
        self.payload = getattr(dut, f"{name}__payload")
        self.clk = getattr(dut, clk)
        self.rng = rng or random.Random(0)
        self.p_valid = p_valid
        self.valid.value = 0

    async def send(self, payloads):
        payloads = list(payloads)
        i = 0
        while i < len(payloads):
            offer = self.rng.random() < self.p_valid
            self.valid.value = int(offer)
            if offer:
                self.payload.value = int(payloads[i])
            await ReadOnly()
            taken = offer and (self.ready is None or bool(int(self.ready.value)))
            await RisingEdge(self.clk)
            i += taken
        self.valid.value = 0


class StreamSink:
    """Collects payloads; ``ready`` is high on a random fraction ``p_ready`` of cycles."""

    def __init__(self, dut, name: str, rng: random.Random | None = None, p_ready: float = 1.0, clk="clk"):
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready", None)
        self.payload = getattr(dut, f"{name}__payload")
        self.clk = getattr(dut, clk)
        self.rng = rng or random.Random(1)
        self.p_ready = p_ready
        self.items: list[int] = []
        self.cycles: list[int] = []     # the cycle (counted from receive()) each item was taken
        if self.ready is not None:
            self.ready.value = 0

    async def receive(self, count: int, timeout_cycles: int = 1_000_000):
        cycle = 0
        while len(self.items) < count:
            ready = self.rng.random() < self.p_ready
            if self.ready is not None:
                self.ready.value = int(ready)
            await ReadOnly()
            if int(self.valid.value) and (ready or self.ready is None):
                self.items.append(int(self.payload.value))
                self.cycles.append(cycle)
            await RisingEdge(self.clk)
            cycle += 1
            if cycle > timeout_cycles:
                raise TimeoutError(f"stream sink: {len(self.items)} of {count} items after {cycle} cycles")
        if self.ready is not None:
            self.ready.value = 0
        return self.items
