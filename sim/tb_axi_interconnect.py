"""cocotb tests of mlo_hw.hw.axi_interconnect: two ReadDmas behind a ReadArbiter, wrapped by AxiTop
(``aclk``, active-low synchronous ``aresetn``), against cocotbext-axi's AxiRamRead as the DRAM.

Both masters get random commands at the same time; every beat each master delivers is compared with
the memory at the address its own commands name (so a beat routed to the wrong master fails), and
every AR is checked for its master index in ARID and for 4 KiB crossings. RRESP errors hit one
master while the other one completes; aresetn is pulsed mid-transfer.
"""
import logging
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiReadBus
from cocotbext.axi.constants import AxiResp

from axi_faults import FaultyRam, set_pauses
from runner import tb_params

P = tb_params()
ADDR_BITS, DATA_BITS, MAX_BURST = P["addr_bits"], P["data_bits"], P["max_burst"]
BEATS_BITS, TAG_BITS = P["beats_bits"], P["tag_bits"]
BYTES = DATA_BITS // 8
MEM_BYTES = 1 << 17
MASTERS = 2


class Master:
    """Command source and beat sink of ReadDma ``i`` (ports ``cmd<i>``/``beats<i>``)."""

    def __init__(self, dut, i):
        self.dut, self.i = dut, i
        self.cmd_valid, self.cmd_ready = getattr(dut, f"cmd{i}__valid"), getattr(dut, f"cmd{i}__ready")
        self.cmd_payload = getattr(dut, f"cmd{i}__payload")
        self.b_valid, self.b_ready = getattr(dut, f"beats{i}__valid"), getattr(dut, f"beats{i}__ready")
        self.b_payload = getattr(dut, f"beats{i}__payload")
        self.received = []
        self.rng = random.Random(i)
        self.p_ready = 1.0
        self.cmd_valid.value = 0
        self.b_ready.value = 0
        getattr(dut, f"clear{i}").value = 0
        cocotb.start_soon(self._sink())

    def sig(self, name):
        return getattr(self.dut, f"{name}{self.i}")

    async def _sink(self):
        dut = self.dut
        while True:
            ready = self.rng.random() < self.p_ready
            self.b_ready.value = int(ready)
            await ReadOnly()
            if ready and int(self.b_valid.value) and int(dut.aresetn.value):
                v = int(self.b_payload.value)
                self.received.append((v & ((1 << DATA_BITS) - 1), (v >> DATA_BITS) & 1, v >> (DATA_BITS + 1)))
            await RisingEdge(dut.aclk)

    async def send(self, cmds, p_valid=1.0):
        for addr, beats, tag in cmds:
            while True:
                offer = self.rng.random() < p_valid
                self.cmd_valid.value = int(offer)
                self.cmd_payload.value = addr | (beats << ADDR_BITS) | (tag << (ADDR_BITS + BEATS_BITS))
                await ReadOnly()
                taken = offer and int(self.cmd_ready.value)
                await RisingEdge(self.dut.aclk)
                if taken:
                    break
        self.cmd_valid.value = 0


class Bench:
    def __init__(self, dut):
        self.dut = dut
        self.ram = FaultyRam(AxiReadBus.from_prefix(dut, "m_axi"), dut.aclk, dut.aresetn,
                             reset_active_level=False, size=MEM_BYTES)
        self.ram.log.setLevel(logging.WARNING)
        self.ram.write(0, random.Random(99).randbytes(MEM_BYTES))
        self.masters = [Master(dut, i) for i in range(MASTERS)]
        self.ars = []           # (master, addr, len)
        cocotb.start_soon(self._ar_monitor())

    async def _ar_monitor(self):
        dut = self.dut
        while True:
            await ReadOnly()
            if int(dut.m_axi_arvalid.value) and int(dut.m_axi_arready.value) and int(dut.aresetn.value):
                addr, ln, arid = int(dut.m_axi_araddr.value), int(dut.m_axi_arlen.value) + 1, int(dut.m_axi_arid.value)
                assert ln <= MAX_BURST, f"burst of {ln} beats > max {MAX_BURST}"
                assert addr // 4096 == (addr + ln * BYTES - 1) // 4096, f"burst {addr:#x}+{ln} crosses 4 KiB"
                assert arid & 1 == 0, f"ARID {arid}: the masters' own ID (0) must be in the low bit"
                self.ars.append((arid >> 1, addr, ln))
            await RisingEdge(dut.aclk)

    def expected(self, cmds):
        out = []
        for addr, beats, tag in cmds:
            for k in range(beats):
                out.append((int.from_bytes(self.ram.read(addr + k * BYTES, BYTES), "little"), int(k == beats - 1), tag))
        return out

    async def wait_until(self, cond, what, limit=200000):
        for _ in range(limit):
            await RisingEdge(self.dut.aclk)
            await ReadOnly()
            if cond():
                await RisingEdge(self.dut.aclk)
                return
        d = self.dut
        state = {k: int(getattr(d, k).value) for k in ("busy0", "busy1", "error0", "error1", "m_axi_arvalid",
                                                       "m_axi_rvalid", "m_axi_rready")}
        raise AssertionError(f"{what} not reached after {limit} cycles; "
                             f"received {[len(m.received) for m in self.masters]}; {state}")

    def idle(self):
        return not any(int(m.sig("busy").value) for m in self.masters)

    async def run(self, cmds_per_master, p_valid=1.0, what=""):
        wants = [self.expected(c) for c in cmds_per_master]
        for m in self.masters:
            m.received.clear()
        await cocotb.triggers.gather(*(cocotb.start_soon(m.send(c, p_valid))
                                       for m, c in zip(self.masters, cmds_per_master)))
        await self.wait_until(lambda: all(len(m.received) >= len(w) for m, w in zip(self.masters, wants))
                              and self.idle(), f"{what}: all beats")
        for m, want in zip(self.masters, wants):
            assert len(m.received) == len(want), f"{what}: master {m.i}: {len(m.received)} beats, expected {len(want)}"
            for k, (g, w) in enumerate(zip(m.received, want)):
                assert g == w, f"{what}: master {m.i} beat {k}: got {g}, expected {w}"
            assert not int(m.sig("error").value)


def near_page(rng, beats):
    span = beats * BYTES
    page = rng.randrange(1, MEM_BYTES // 4096 - (span // 4096) - 2)
    if rng.random() < 0.8:
        return page * 4096 - rng.randint(0, 2 * MAX_BURST) * BYTES
    return page * 4096 + rng.randrange(0, 4096 // BYTES) * BYTES


def random_cmds(rng):
    cmds = []
    for _ in range(rng.randint(1, 3)):
        beats = rng.choice([rng.randint(1, MAX_BURST), rng.randint(1, 3 * MAX_BURST + 5), 4096 // BYTES + 1])
        cmds.append((near_page(rng, beats), beats, rng.randrange(1 << TAG_BITS)))
    return cmds


async def start(dut):
    cocotb.start_soon(Clock(dut.aclk, 10, unit="ns").start())
    dut.aresetn.value = 0
    b = Bench(dut)
    await ClockCycles(dut.aclk, 3)
    dut.aresetn.value = 1
    await RisingEdge(dut.aclk)
    return b


@cocotb.test()
async def concurrent_masters_many_seeds(dut):
    """Both masters read random commands at once, random AR/R pauses and sink backpressure, per seed."""
    b = await start(dut)
    for seed in P["seeds"]:
        rng = random.Random(seed)
        set_pauses(b.ram, rng, rng.choice([0, 0.2, 0.5, 0.8]), rng.choice([0, 0.2, 0.5, 0.8]))
        for m in b.masters:
            m.rng = random.Random(rng.random())
            m.p_ready = rng.choice([1.0, 0.9, 0.5, 0.2])
        cmds = [random_cmds(rng) for _ in b.masters]
        b.ars.clear()
        await b.run(cmds, p_valid=rng.choice([1.0, 0.5]), what=f"seed {seed}")
        for i, c in enumerate(cmds):
            assert sum(ln for j, _, ln in b.ars if j == i) == sum(x[1] for x in c), f"seed {seed}: master {i} AR beats"
    set_pauses(b.ram, None, 0, 0)


@cocotb.test()
async def round_robin_alternates(dut):
    """Both masters requesting all the time: the AR grants alternate 0, 1, 0, 1 ..."""
    b = await start(dut)
    beats = 6 * MAX_BURST
    b.ars.clear()
    await b.run([[(4096, beats, 1)], [(8 * 4096, beats, 2)]], what="round robin")
    order = [j for j, _, _ in b.ars]
    assert order[:8] in ([0, 1] * 4, [1, 0] * 4), f"AR grant order {order}"
    assert sorted(order) == [0] * 6 + [1] * 6


@cocotb.test()
async def error_on_one_master_only(dut):
    """SLVERR/DECERR on a beat of one master: its error flag and address; the other completes intact."""
    b = await start(dut)
    for trial in range(P["error_trials"]):
        rng = random.Random(1000 + trial)
        set_pauses(b.ram, rng, rng.choice([0, 0.3]), rng.choice([0, 0.3]))
        victim = trial % 2
        beats = [rng.randint(1, 4 * MAX_BURST) for _ in b.masters]
        cmds = [[(near_page(rng, n), n, 3)] for n in beats]
        k = rng.randrange(beats[victim])
        bad = cmds[victim][0][0] + k * BYTES
        resp = rng.choice([AxiResp.SLVERR, AxiResp.DECERR])
        b.ram.faults = {bad: resp}
        wants = [b.expected(c) for c in cmds]
        for m in b.masters:
            m.received.clear()
        await cocotb.triggers.gather(*(cocotb.start_soon(m.send(c)) for m, c in zip(b.masters, cmds)))
        await b.wait_until(b.idle, f"trial {trial}: idle")
        v, o = b.masters[victim], b.masters[1 - victim]
        assert int(v.sig("error").value) == 1 and int(v.sig("error_addr").value) == bad
        assert int(v.sig("error_code").value) == int(resp)
        assert v.received == wants[victim][:k], f"trial {trial}: victim got {len(v.received)} beats, expected {k}"
        assert not int(o.sig("error").value) and o.received == wants[1 - victim], f"trial {trial}: other master"
        b.ram.faults = {}
        getattr(dut, f"clear{victim}").value = 1
        await RisingEdge(dut.aclk)
        getattr(dut, f"clear{victim}").value = 0
    set_pauses(b.ram, None, 0, 0)
    await b.run([[(4096, 3, 0)], [(8192, 5, 1)]], what="after errors")


@cocotb.test()
async def aresetn_mid_transfer(dut):
    """aresetn low in the middle of both masters' transfers: afterwards both work again."""
    b = await start(dut)
    for trial in range(4):
        rng = random.Random(2000 + trial)
        set_pauses(b.ram, rng, 0.3, 0.3)
        cmds = [[(near_page(rng, 4 * MAX_BURST), 4 * MAX_BURST, 0)] for _ in b.masters]
        for m in b.masters:
            m.received.clear()
        await cocotb.triggers.gather(*(cocotb.start_soon(m.send(c)) for m, c in zip(b.masters, cmds)))
        await ClockCycles(dut.aclk, rng.randint(1, 3 * MAX_BURST))
        dut.aresetn.value = 0
        await ClockCycles(dut.aclk, 3)
        dut.aresetn.value = 1
        await RisingEdge(dut.aclk)
        assert b.idle(), "busy after reset"
        for m, c in zip(b.masters, cmds):
            assert m.received == b.expected(c)[:len(m.received)], "a prefix of the data must be correct"
        await b.run([random_cmds(rng) for _ in b.masters], what=f"after reset {trial}")
    set_pauses(b.ram, None, 0, 0)


@cocotb.test()
async def misrouted_beat_is_detected(dut):
    """Negative check: master 1's beats compared against master 0's commands do not match."""
    b = await start(dut)
    cmds = [[(4096, 4, 0)], [(5 * 4096, 4, 0)]]
    await b.run(cmds)
    assert b.masters[1].received != b.expected(cmds[0])
    assert b.masters[1].received == b.expected(cmds[1])
