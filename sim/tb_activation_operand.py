"""cocotb test of mlo_hw.hw.engine.activation_operand.ActivationOperand: a word memory model (read ``read_latency`` cycles late),
random per-channel shifts through the shift write port, random commands (narrowed or passed through, either
shift half, strided vectors, 1 to 3 passes), random ``ready`` on ``o``, random ``hold`` and waits (limits that
grow and restart, on at random: no read of a word past an ``on`` wait's count); every beat against
``numerics.narrow`` or the low bytes; a negative check."""
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from mlo_hw.model import numerics as nx
from runner import tb_params

P = tb_params()
H, SIMD, MEM = P["hidden"], P["simd"], P["mem_words"]
RW, RB = H // SIMD, nx.RES_BITS
W = P["cmd_widths"]


@cocotb.test()
async def random_commands_under_backpressure(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = dut.shift__en.value = dut.o__ready.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    rng = random.Random(1)
    lanes = [[rng.randint(-32768, 32767) for _ in range(SIMD)] for _ in range(MEM)]
    shifts = [rng.randint(0, nx.NARROW_SHIFT_MAX) for _ in range(2 * H)]
    for c, k in enumerate(shifts):       # the copier's order: channel c at word c // simd, lane c % simd
        dut.shift__addr.value, dut.shift__data.value = c // SIMD, sum(k << (4 * i) for i in range(SIMD))
        dut.shift__en.value = 1 << (c % SIMD)
        await RisingEdge(dut.clk)
    dut.shift__en.value = 0
    state = {"data": 0}

    async def memory():
        requests = [(0, 0)] * (P.get("read_latency", 1) - 1)     # registered in front of the block RAM
        while True:
            dut.rd_data.value = state["data"]
            await ReadOnly()
            requests.append((int(dut.rd_en.value), int(dut.rd_addr.value)))
            en, a = requests.pop(0)
            if en:
                state["data"] = sum((v & 0xFFFF) << (RB * i) for i, v in enumerate(lanes[a % MEM]))
            await RisingEdge(dut.clk)
    cocotb.start_soon(memory())
    # the waits: each a writer's count (words below it written) that grows, restarts with each command and at random
    # (falls: ``restart``), and a random ``on``; ``hold`` at random. The limit driven in a cycle is the next cycle's
    # count or, while it does not fall, this cycle's. A read decided in cycle d (on rd_en a cycle later) is of a word
    # below the count of every wait on in d
    NW = P.get("waits", 0)
    waits = {"count": [0] * NW, "next": [0] * NW, "on": [0] * NW, "restart": 0, "checked": 0}

    def drive_waits():          # each wait a struct of on (bit 0), limit, restart (the top bit)
        word = 0
        for i in range(NW):
            on = waits["on"][i] = int(rng.random() < 0.7)
            if waits["restart"]:        # falling: this cycle's count (stale), with restart
                limit = waits["count"][i]
            else:
                limit = waits["next"][i] if rng.random() < 0.5 else min(waits["count"][i], waits["next"][i])
            word |= (on | limit << 1 | bool(waits["restart"]) << (P["wait_bits"] - 1)) << (i * P["wait_bits"])
        dut.waits.value = word
        dut.hold.value = int(rng.random() < 0.15)

    async def check_reads():
        decided = None                      # (the counts, the ons) of the cycle before
        while True:
            await ReadOnly()
            if decided is not None and int(dut.rd_en.value):
                a = int(dut.rd_addr.value)
                for i in range(NW):
                    assert not decided[1][i] or a < decided[0][i], \
                        f"a read of word {a} decided while wait {i} was on at count {decided[0][i]}"
                waits["checked"] += NW > 0
            decided = (list(waits["count"]), list(waits["on"]))
            await RisingEdge(dut.clk)
            waits["count"] = list(waits["next"])
            waits["restart"] = 0
            for i in range(NW):
                if rng.random() < 0.4:
                    waits["next"][i] += rng.randint(1, 3)
            if NW and rng.random() < 0.02:          # the writers restart behind the reader's words: restart, the
                waits["next"] = [max(0, c - rng.randint(1, 12)) for c in waits["count"]]   # limits stale
                waits["restart"] = 1
            drive_waits()
    if NW:
        drive_waits()
        cocotb.start_soon(check_reads())
    else:
        dut.hold.value = 0
    for trial in range(12):
        narrowed = trial % 3 != 2
        words = RW if narrowed else rng.randint(1, RW + 2)
        vectors = rng.randint(1, 6)
        stride = rng.choice([words, words + rng.randint(1, 3)])
        base = rng.randrange(MEM - vectors * stride)
        shift_base = rng.choice([0, RW]) if narrowed else 0
        passes = rng.randint(0, P.get("max_passes", 1))          # 0 counts as 1
        fields = {"base": base, "stride": stride, "words": words, "vectors": vectors, "narrowed": int(narrowed),
                  "shift_base": shift_base, "passes": passes}
        dut.cmd.value = sum(v << W[k][0] for k, v in fields.items())
        if NW:      # the writers restart below the command's first word (the reader waits for them)
            waits["next"] = [max(0, base - rng.randint(0, 3)) for _ in range(NW)]
            waits["restart"] = 1
            drive_waits()
        dut.start.value = 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        want = []
        for v in range(vectors):
            for w in range(words):
                x = lanes[base + v * stride + w]
                if narrowed:
                    k = [shifts[(shift_base + w) * SIMD + i] for i in range(SIMD)]
                    want.append([int(nx.narrow(np.array([x[i]]), np.array([k[i]]))[0]) for i in range(SIMD)])
                else:
                    want.append([((x[i] + 128) & 255) - 128 for i in range(SIMD)])
        want = want * max(passes, 1)
        got, p_ready = [], [1.0, 0.5, 0.2][trial % 3]
        for _ in range(50 * len(want) + 100):
            ready = int(rng.random() < p_ready)
            dut.o__ready.value = ready
            await ReadOnly()
            if ready and int(dut.o__valid.value):
                word = int(dut.o__payload.value)
                got.append([((word >> (8 * i)) & 255) - 256 * ((word >> (8 * i + 7)) & 1) for i in range(SIMD)])
            await RisingEdge(dut.clk)
            if len(got) == len(want):
                break
        dut.o__ready.value = 0
        await ClockCycles(dut.clk, 3)
        await ReadOnly()
        assert not int(dut.o__valid.value), f"trial {trial}: more than the {len(want)} beats of {max(passes, 1)} pass(es)"
        await RisingEdge(dut.clk)
        assert got == want, f"trial {trial}: {sum(g != w for g, w in zip(got, want))} of {len(want)} beats differ " \
                            f"({len(got)} received)"
    assert want[0] != [v + 1 for v in want[0]]        # negative check: a changed beat is a difference
    assert not NW or waits["checked"] > 100, "the waits saw too few reads"
