"""cocotb tests of mlo_hw.hw.loop_ctrl.WeightStreamer (loop controller + DMA + tile buffers + params).

DRAM is cocotbext-axi's AxiRamRead holding a packed weight image at ``weight_base``. A compute model
takes every full tile bank, reads every weight word and every bias/mult group through the read
ports and compares them with the image bytes, then releases the bank after a random delay. The
parameter store is compared with the image while the next layer streams in and at the end.
"""
import logging
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiReadBus
from cocotbext.axi.constants import AxiResp

from runner import tb_params
from axi_faults import FaultyRam, set_pauses

P = tb_params()
BYTES, WORD, PE, TR = P["beat_bytes"], P["word_bytes"], P["pe"], P["tile_rows"]
STRIDE, SECTIONS, PARAM_OFF = P["stride"], P["sections"], P["param_offsets"]
IMAGE = open(P["image_path"], "rb").read()
MEM = 1 << 20


def le(b, signed=False):
    return int.from_bytes(b, "little", signed=signed)


class Compute:
    """Walks the schedule, checks each full bank against the image, releases it."""

    def __init__(self, dut, img, base, layers, rng, p_busy):
        self.dut, self.img, self.base, self.layers, self.rng, self.p_busy = dut, img, base, layers, rng, p_busy
        self.tiles_done = 0

    def schedule(self):
        for l in range(self.layers):
            for sid, s in enumerate(SECTIONS):
                for t in range(s["tiles"]):
                    yield l, sid, s, t

    async def read(self, addr_sig, data_sig, n, base=0, latency=1):
        """Words base..base+n-1 through a read port whose data follows the address ``latency`` cycles later, one
        address per cycle."""
        dut = self.dut
        out = []
        for k in range(n + latency):
            addr_sig.value = base + min(k, n - 1)
            await ReadOnly()
            if k >= latency:                  # the word of the address presented ``latency`` cycles ago
                out.append(int(data_sig.value))
            await RisingEdge(dut.clk)
        return out

    async def check_params(self, layer, sections):
        dut = self.dut
        slot = layer % 2
        dut.param_slot.value = slot
        names = P["param_sections"]          # ParamStore.loaded: a bit per section, a field per slot
        loaded = (int(dut.param_loaded.value) >> (len(names) * slot)) & ((1 << len(names)) - 1)
        for name in sections:
            assert loaded >> names.index(name) & 1, f"layer {layer} {name} not loaded (bits {loaded:0{len(names)}b})"
            off, size = PARAM_OFF[name], next(s["bytes"] for s in SECTIONS if s["name"] == name)
            src = layer * STRIDE + next(s["offset"] for s in SECTIONS if s["name"] == name)
            got = await self.read(dut.param_addr, dut.param_data, size // 4, base=off // 4)
            want = [le(self.img[src + 4 * i: src + 4 * i + 4]) for i in range(size // 4)]
            for i, (g, w) in enumerate(zip(got, want)):
                assert g == w, f"layer {layer} {name} word {i}: {g:#x} != {w:#x}"

    async def run(self):
        dut = self.dut
        for l, sid, s, t in self.schedule():
            while True:
                await ReadOnly()
                if int(dut.tile_ready.value):
                    break
                await RisingEdge(dut.clk)
            tag = int(dut.tile_tag.value)
            assert tag == sid | (l % 2) << 4, f"tile tag {tag:#x}, expected section {sid} layer {l}"
            await RisingEdge(dut.clk)
            off = l * STRIDE + s["offset"] + t * s["tile_bytes"]
            wb = TR * s["cols"]
            words = await self.read(dut.waddr, dut.wdata, wb // WORD)
            for j, g in enumerate(words):
                w = le(self.img[off + j * WORD: off + (j + 1) * WORD])
                assert g == w, f"layer {l} {s['name']} tile {t} word {j}: {g:#x} != {w:#x}"
            nf = TR // PE
            biases = await self.read(dut.caddr, dut.bias, nf, latency=P["param_read_latency"])
            mults = await self.read(dut.caddr, dut.mult, nf, latency=P["param_read_latency"])
            for f in range(nf):
                for p in range(PE):
                    ch = f * PE + p
                    wbias = le(self.img[off + wb + 4 * ch: off + wb + 4 * ch + 4], signed=True)
                    wmult = le(self.img[off + wb + 4 * TR + 4 * ch: off + wb + 4 * TR + 4 * ch + 4]) & 0xFFFF
                    gbias = (biases[f] >> (32 * p)) & 0xFFFFFFFF
                    gbias -= (gbias >> 31) << 32
                    assert gbias == wbias, f"layer {l} {s['name']} tile {t} bias[{ch}] {gbias} != {wbias}"
                    assert (mults[f] >> (16 * p)) & 0xFFFF == wmult, f"layer {l} {s['name']} tile {t} mult[{ch}]"
            if s["name"] == "ffn_down" and t == 0:
                await self.check_params(l, ["header", "narrow", "ln1", "gelu"])
            while self.rng.random() < self.p_busy:
                await RisingEdge(dut.clk)
            dut.tile_release.value = 1
            await RisingEdge(dut.clk)
            dut.tile_release.value = 0
            self.tiles_done += 1


async def setup(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    ram = FaultyRam(AxiReadBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=MEM)
    ram.log.setLevel(logging.WARNING)
    for sig in (dut.start, dut.cancel, dut.tile_release, dut.waddr, dut.caddr, dut.param_slot, dut.param_addr):
        sig.value = 0
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return ram


async def start_run(dut, base, layers):
    dut.weight_base.value = base
    dut.layers.value = layers
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0


async def count_beats(dut, box):
    while True:
        await ReadOnly()
        box[0] += int(dut.beat.value)
        await RisingEdge(dut.clk)


@cocotb.test()
async def streams_every_layer_into_the_buffers(dut):
    ram = await setup(dut)
    beats = [0]
    cocotb.start_soon(count_beats(dut, beats))
    for run, seed in enumerate(P["seeds"]):
        rng = random.Random(seed)
        layers = rng.choice([1, 2, 3])
        img = bytes(IMAGE[:STRIDE * min(layers, len(IMAGE) // STRIDE)])
        img += rng.randbytes(STRIDE * layers - len(img))     # further layers: random bytes
        base = rng.choice([4096 * rng.randint(1, 8) - 64 * rng.randint(0, 3), 4096 * rng.randint(1, 8)])
        ram.write(base, img)
        set_pauses(ram, rng, rng.choice([0, 0.3, 0.7]), rng.choice([0, 0.3, 0.7]))
        comp = Compute(dut, img, base, layers, rng, rng.choice([0.0, 0.5, 0.95]))
        beats[0] = 0
        await start_run(dut, base, layers)
        task = cocotb.start_soon(comp.run())
        done = False
        for _ in range(400000):
            await ReadOnly()
            if int(dut.done.value):
                done = True
                break
            assert not int(dut.error.value), f"error at {int(dut.error_addr.value):#x}"
            await RisingEdge(dut.clk)
        assert done, f"run {run}: no done; {comp.tiles_done} tiles consumed"
        await task
        await RisingEdge(dut.clk)
        await RisingEdge(dut.clk)      # a section counts a cycle after its last beat (ParamStore: once it has landed)
        assert beats[0] * BYTES == layers * P["layer_bytes"], f"bytes read {beats[0] * BYTES}"
        for l in range(max(0, layers - 2), layers):
            await comp.check_params(l, P["param_sections"])
        dut._log.info(f"run {run}: base {base:#x}, {layers} layers, {comp.tiles_done} tiles OK")
    set_pauses(ram, None, 0, 0)


@cocotb.test()
async def error_response_stops_the_run_and_reports_the_address(dut):
    ram = await setup(dut)
    rng = random.Random(7)
    img = IMAGE[:STRIDE]
    base = 3 * 4096
    ram.write(base, img)
    for trial in range(3):
        bad = base + rng.randrange(P["layer_bytes"] // BYTES) * BYTES
        ram.faults = {bad: rng.choice([AxiResp.SLVERR, AxiResp.DECERR])}
        comp = Compute(dut, img, base, 1, rng, 0.0)
        await start_run(dut, base, 1)
        task = cocotb.start_soon(comp.run())
        for _ in range(100000):
            await ReadOnly()
            assert not int(dut.done.value), "done despite an error response"
            if int(dut.error.value) and not int(dut.busy.value):
                break
            await RisingEdge(dut.clk)
        else:
            raise AssertionError("no error, or still busy")
        assert int(dut.error_addr.value) == bad
        task.cancel()
        await RisingEdge(dut.clk)
        dut.tile_release.value = 0
        ram.faults = {}
    # a clean run afterwards (start clears the error and the buffers)
    comp = Compute(dut, img, base, 1, rng, 0.0)
    await start_run(dut, base, 1)
    await ReadOnly()
    assert not int(dut.error.value)
    await RisingEdge(dut.clk)
    await comp.run()


@cocotb.test()
async def cancel_mid_run_then_restart(dut):
    ram = await setup(dut)
    rng = random.Random(11)
    img = IMAGE[:STRIDE]
    base = 8 * 4096 - 64
    ram.write(base, img)
    set_pauses(ram, rng, 0.3, 0.3)
    comp = Compute(dut, img, base, 1, rng, 0.5)
    await start_run(dut, base, 1)
    task = cocotb.start_soon(comp.run())
    await ClockCycles(dut.clk, rng.randint(50, 400))
    task.cancel()
    await RisingEdge(dut.clk)
    dut.tile_release.value = 0
    dut.cancel.value = 1
    await RisingEdge(dut.clk)
    dut.cancel.value = 0
    for _ in range(5000):
        await ReadOnly()
        if not int(dut.busy.value):
            break
        await RisingEdge(dut.clk)
    else:
        raise AssertionError("still busy after cancel")
    assert not int(dut.error.value)
    await RisingEdge(dut.clk)
    comp = Compute(dut, img, base, 1, rng, 0.0)
    await start_run(dut, base, 1)
    await comp.run()
    set_pauses(ram, None, 0, 0)


@cocotb.test()
async def a_corrupted_byte_is_detected(dut):
    """Negative check: the compute model catches one wrong weight byte."""
    ram = await setup(dut)
    img = IMAGE[:STRIDE]
    base = 4096
    ram.write(base, img)
    s = next(sec for sec in SECTIONS if sec["name"] == "q")
    ram.write(base + s["offset"] + 5, bytes([img[s["offset"] + 5] ^ 1]))
    comp = Compute(dut, img, base, 1, random.Random(0), 0.0)
    await start_run(dut, base, 1)
    try:
        await comp.run()
    except AssertionError as e:
        assert f"q tile 0 word {5 // WORD}:" in str(e), str(e)
    else:
        raise AssertionError("a corrupted weight byte went unnoticed")
