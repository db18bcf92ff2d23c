"""The Serializer (a word of lanes in, an element a beat out) under cocotb + Verilator with random valid and ready
(the Regroup testbench: a split of a word into its lanes, lane 0 first, is the same stream), lint, and the timing
properties of ``registered_ready`` (``i.ready`` does not follow ``o.ready`` within a cycle) and
``registered_output`` (``o.payload`` does not follow the element index within a cycle)."""

import pytest
from amaranth.sim import Simulator

from mlo_hw.hw.engine.vector_io import Serializer
from sim.runner import lint, simulate, to_verilog


@pytest.mark.parametrize("lanes,registered_ready,registered_output",
                         [(4, False, False), (4, True, False), (1, True, False), (4, True, True), (1, True, True)])
def test_serializer_under_random_backpressure(lanes, registered_ready, registered_output):
    name = f"serializer_{lanes}_{int(registered_ready)}{int(registered_output)}"
    v = to_verilog(Serializer(lanes, 16, registered_ready=registered_ready, registered_output=registered_output), name)
    assert lint(v, name) == []
    simulate(v, name, "tb_activation_io", {"dut": "regroup", "i_bits": 16 * lanes, "o_bits": 16})


def _ready_follows_o_ready(registered_ready: bool) -> bool:
    """Fill the serializer with o.ready low, then raise o.ready on the last element of a word: whether i.ready
    rises in that same cycle."""
    dut = Serializer(2, 8, registered_ready=registered_ready)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, [1, 2])
        for _ in range(4):                  # the word and (registered_ready) the spare fill up
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.o.ready, 1)
        await ctx.tick()                    # element 0 leaves; element 1 is the word's last
        seen["before"] = ctx.get(dut.i.ready)
        ctx.set(dut.o.ready, 0)
        seen["held"] = ctx.get(dut.i.ready)
        ctx.set(dut.o.ready, 1)
        seen["taking"] = ctx.get(dut.i.ready)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen["held"] != seen["taking"]


def test_registered_ready_does_not_follow_o_ready():
    assert _ready_follows_o_ready(False)        # the plain serializer: ready with the last element's ready
    assert not _ready_follows_o_ready(True)


def _check_delivers_in_order(registered_output: bool):
    """Hold a word of two elements with o.ready low, then raise o.ready: the first element is offered while held,
    the second a cycle after o.ready rises."""
    dut = Serializer(2, 8, registered_ready=True, registered_output=registered_output)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, [1, 2])
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        for _ in range(3):
            await ctx.tick()
        seen["held"] = ctx.get(dut.o.payload)
        ctx.set(dut.o.ready, 1)
        await ctx.tick()
        seen["next"] = ctx.get(dut.o.payload)
        seen["valid"] = ctx.get(dut.o.valid)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["held"] == 1 and seen["valid"] and seen["next"] == 2


def test_registered_output_is_a_flip_flop():
    """Both serializers deliver the elements in order as o.ready rises; with ``registered_output`` o.payload is a
    flip-flop (a clocked assignment in the Verilog), without it a continuous assignment of the index's select."""
    _check_delivers_in_order(True)
    _check_delivers_in_order(False)
    plain = to_verilog(Serializer(4, 16, registered_ready=True), "ser_plain")
    registered = to_verilog(Serializer(4, 16, registered_ready=True, registered_output=True), "ser_reg")
    assert "o__payload <=" in registered and "assign o__payload" not in registered
    assert "assign o__payload" in plain and "o__payload <=" not in plain


@pytest.mark.parametrize("registered_request", [False, True])
@pytest.mark.parametrize("latency", [1, 3])
def test_vector_reader_streams_every_word_under_hold_and_backpressure(latency, registered_request):
    """Random commands (words, vectors, stride, passes) through a memory answering ``latency`` cycles after ``en``,
    ``hold`` while ``head`` is at or past a limit that rises at random (as the engine's waits judge it), random
    ``o.ready``: every word in order, each pass, and none more; every read but the first is of the word ``head_next``
    named at the read before. With ``registered_request``, ``en``/``addr`` are the
    previous cycle's ``issue``/``head``; without it they are this cycle's."""
    import random

    from mlo_hw.hw.engine.vector_io import VectorReader
    rng = random.Random(latency * 2 + registered_request)
    mem = [rng.randrange(1 << 16) for _ in range(256)]
    dut = VectorReader(8, 16, max_words=6, max_vectors=5, max_passes=3, latency=latency,
                       registered_request=registered_request)
    checked = {"words": 0, "delayed": 0, "next": 0}

    async def bench(ctx):
        requests, word = [(0, 0)] * (latency - 1), 0
        last = (0, 0)                                     # (issue, head) of the cycle before
        for trial in range(12):
            words, vectors, passes = rng.randint(1, 6), rng.randint(1, 5), rng.randint(0, 3)
            stride = rng.choice([words, words + rng.randint(1, 4)])
            base = rng.randrange(256 - vectors * stride)
            want = [mem[base + v * stride + w] for v in range(vectors) for w in range(words)] * max(passes, 1)
            limit = base + rng.randrange(vectors * stride)
            for name, value in (("base", base), ("stride", stride), ("words", words), ("vectors", vectors),
                                ("passes", passes)):
                ctx.set(getattr(dut, name), value)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            got, reads, announced = [], [], None
            for _ in range(40 * len(want) + 50):
                if rng.random() < 0.3:
                    limit += rng.randint(1, 3)
                ctx.set(dut.hold, ctx.get(dut.head) >= limit)
                ready = rng.random() < 0.6
                ctx.set(dut.o.ready, ready)
                ctx.set(dut.data, word)
                en, addr = ctx.get(dut.en), ctx.get(dut.addr)
                if registered_request:          # the request is the decision of the cycle before
                    assert (en, addr if en else 0) == (last[0], last[1] if last[0] else 0)
                    checked["delayed"] += en
                else:
                    assert (en, addr) == (ctx.get(dut.issue), ctx.get(dut.head))
                if ctx.get(dut.issue):
                    assert ctx.get(dut.head) < limit, "a read decided while hold"
                    if announced is not None:
                        assert ctx.get(dut.head) == announced, "the read is not of the word head_next named"
                        checked["next"] += 1
                    announced = ctx.get(dut.head_next) if len(reads) + 1 < len(want) else None
                    reads.append(ctx.get(dut.head))
                last = (ctx.get(dut.issue), ctx.get(dut.head))
                requests.append((en, addr))
                r_en, r_addr = requests.pop(0)
                if ready and ctx.get(dut.o.valid):
                    got.append(ctx.get(dut.o.payload))
                await ctx.tick()
                if r_en:
                    word = mem[r_addr]
                if len(got) == len(want) and not ctx.get(dut.busy):
                    break
            assert got == want, f"trial {trial}: {len(got)} of {len(want)} words, first difference at " \
                                f"{next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), len(got))}"
            checked["words"] += len(want)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert checked["words"] > 100 and (checked["delayed"] > 100 or not registered_request)
    assert checked["next"] > 100
