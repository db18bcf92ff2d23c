"""The memory system (loop controller + AXI DMA + ping-pong tile buffers + parameter store).

cocotb + Verilator with cocotbext-axi's AxiRamRead as DRAM holding a real packed weight image;
every weight word, bias, multiplier and parameter word that reaches the buffers is compared with
the image. Lint and yosys synthesis (no latches, tile buffers in block RAM) at bert_tiny size.
"""

import pytest
from amaranth import Module
from amaranth.lib import wiring

from mlo_hw.config import load_config
from mlo_hw.hw.regs import ControlRegs, as_dict as regs_dict
from mlo_hw.hw.loop_ctrl import WeightStreamer, fetch_program, streamer_tb_params
from mlo_hw.hw.buffers import TileGeometry
from mlo_hw.model.quantize import build_model
from mlo_hw.synth import synth_verilog
from mlo_hw.model.weight_image import layout, pack_image
from sim.runner import lint, simulate, to_verilog


def _image(cfg, tmp_path):
    _, model = build_model(cfg)
    path = tmp_path / "weights.bin"
    path.write_bytes(pack_image(cfg, model.layers))
    return path


def test_memsys_streams_the_weight_image(tmp_path):
    cfg = load_config("small")
    v = to_verilog(WeightStreamer(cfg), "memsys_small")
    assert lint(v, "memsys_small") == []
    simulate(v, "memsys_small", "tb_memsys", streamer_tb_params(cfg, _image(cfg, tmp_path), seeds=range(10)))


def test_schedule_follows_the_layout():
    cfg = load_config("bert_tiny")
    lay, prog = layout(cfg), fetch_program(cfg)
    assert [f.offset for f in prog] == [s.offset for s in lay.sections]
    assert sum(f.beats * f.count for f in prog) * cfg.axi_data_bytes == lay.layer_bytes
    assert TileGeometry.from_config(cfg).max_weight_words == 4096 // 64


@pytest.mark.slow          # a yosys synthesis (23 s); the RTL runs of the weight streamer stay in the default suite
def test_memsys_synthesizes_to_block_ram_without_latches():
    cfg = load_config("bert_tiny")
    r = synth_verilog(to_verilog(WeightStreamer(cfg), "memsys_syn"), "memsys_syn")
    assert r.latches == 0
    assert r.used["DSP"] == 0
    # a 512-bit (PE*SIMD bytes) read word needs >= 512/72 BRAM36 side by side, whatever the depth
    word_bits = 8 * cfg.mac_lanes
    assert 1 <= r.used["BRAM36"] <= -(-word_bits // 72) + 3, r.used
    print(r.used, "logic depth", r.logic_depth)


def test_bad_folding_is_rejected():
    from mlo_hw.config import ConfigError, config_from_dict
    raw = {"model": {"layers": 1, "hidden": 32, "heads": 2, "intermediate": 64, "seq_len": 8},
           "folding": {"pe": 4, "simd": 4, "tile_rows": 4}, "memory": {"axi_data_bits": 256}}
    with pytest.raises(ConfigError, match="tile_rows"):
        TileGeometry.from_config(config_from_dict(raw))


class StreamerWithRegs(wiring.Component):
    """Test top: the memory system controlled through the AXI4-Lite register block."""

    INTERNAL_WS = ("start", "cancel", "clear", "layers", "weight_base", "busy", "done", "error", "error_addr",
                   "error_code", "beat", "layer")
    INTERNAL_REGS = ("start", "soft_reset", "layers", "weight_base", "input_base", "output_base", "busy", "done",
                     "error", "error_addr", "error_code", "read_beat")

    def __init__(self, cfg):
        self.ws, self.regs = WeightStreamer(cfg), ControlRegs(cfg)
        members = {n: mb for n, mb in self.ws.signature.members.items() if n not in self.INTERNAL_WS}
        members.update({n: mb for n, mb in self.regs.signature.members.items() if n not in self.INTERNAL_REGS})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.ws, m.submodules.regs = ws, regs = self.ws, self.regs
        for sub, internal in ((ws, self.INTERNAL_WS), (regs, self.INTERNAL_REGS)):
            for name, member in sub.signature.members.items():
                if name in internal:
                    continue
                outer, inner = getattr(self, name), getattr(sub, name)
                m.d.comb += (outer.eq(inner) if member.flow == wiring.Out else inner.eq(outer))
        m.d.comb += [
            ws.start.eq(regs.start), ws.cancel.eq(regs.soft_reset), ws.layers.eq(regs.layers),
            ws.weight_base.eq(regs.weight_base), regs.busy.eq(ws.busy), regs.done.eq(ws.done),
            regs.error.eq(ws.error), regs.error_addr.eq(ws.error_addr), regs.error_code.eq(ws.error_code),
            regs.read_beat.eq(ws.beat),
        ]
        return m


@pytest.mark.slow          # 23 s; every full-stack harness and runtime run controls the engine's streamer over AXI-Lite
def test_memsys_controlled_over_axi_lite(tmp_path):
    cfg = load_config("small")
    v = to_verilog(StreamerWithRegs(cfg), "memsys_regs")
    assert lint(v, "memsys_regs") == []
    params = streamer_tb_params(cfg, _image(cfg, tmp_path), seeds=range(3))
    params["registers"] = regs_dict(cfg)["registers"]
    simulate(v, "memsys_regs", "tb_memsys_regs", params)


def _small_with(axi_data_bits, **folding):
    from mlo_hw.config import config_from_dict
    import yaml
    from mlo_hw.config import resolve_config_path
    raw = yaml.safe_load(resolve_config_path("small").read_text())
    raw["memory"]["axi_data_bits"] = axi_data_bits
    raw["folding"].update(folding)
    return config_from_dict(raw, name=f"small_{axi_data_bits}")


@pytest.mark.parametrize("bits,folding", [(32, {}), (128, {}), (64, {"pe": 2, "simd": 2})])
def test_other_bus_widths_and_foldings_lint_clean(bits, folding):
    cfg = _small_with(bits, **folding)
    v = to_verilog(WeightStreamer(cfg), f"memsys_{bits}")
    assert lint(v, f"memsys_{bits}") == []


@pytest.mark.slow
@pytest.mark.parametrize("bits,folding", [(32, {}), (128, {}), (64, {"pe": 2, "simd": 2})])
def test_other_bus_widths_and_foldings_stream_the_image(bits, folding, tmp_path):
    cfg = _small_with(bits, **folding)
    top = f"memsys_{bits}_{cfg.mac_lanes}"
    simulate(to_verilog(WeightStreamer(cfg), top), top, "tb_memsys",
             streamer_tb_params(cfg, _image(cfg, tmp_path), seeds=range(3)))


def test_param_store_release_and_clear_leave_no_previous_layers_bits():
    """ParamStore.loaded: a released slot shows nothing of the layer that used it (the other slot keeps its
    bits), clear empties both, and a section arriving in the cycle of a release still counts; a section counts a
    cycle after its ``w_section_done`` (its last beat has landed then)."""
    from amaranth.sim import Simulator
    from mlo_hw.hw.buffers import PARAM_SECTIONS, ParamStore
    dut = ParamStore(load_config("small"))
    everything = (1 << len(PARAM_SECTIONS)) - 1

    async def bench(ctx):
        async def pulse(**signals):
            for name, value in signals.items():
                ctx.set(getattr(dut, name), value)
            await ctx.tick()
            for name in signals:
                ctx.set(getattr(dut, name), 0)

        for slot in (0, 1):
            for i in range(len(PARAM_SECTIONS)):
                await pulse(w_slot=slot, w_section=i, w_section_done=1)
        assert [ctx.get(dut.loaded[s]) for s in (0, 1)] == [everything, everything >> 1]
        await ctx.tick()
        assert [ctx.get(dut.loaded[s]) for s in (0, 1)] == [everything, everything]
        await pulse(release=1, release_slot=0)
        assert [ctx.get(dut.loaded[s]) for s in (0, 1)] == [0, everything]
        await pulse(release=1, release_slot=1, w_slot=1, w_section=0, w_section_done=1)
        assert [ctx.get(dut.loaded[s]) for s in (0, 1)] == [0, 0]
        await ctx.tick()
        assert [ctx.get(dut.loaded[s]) for s in (0, 1)] == [0, 1]
        await pulse(clear=1)
        assert [ctx.get(dut.loaded[s]) for s in (0, 1)] == [0, 0]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("blocks", [1, 2])
def test_fetch_program_commands_match_the_tiled_schedule(blocks):
    """The loop controller's commands (address, beats, tag) for two layers equal the weight and K/V reads of
    mlo_hw.model.tiled's schedule, expanded into one command per tile, in order (blocks = 1: the on-chip program,
    the weight image in order)."""
    import numpy as np
    from mlo_hw.hw.loop_ctrl import BEATS_BITS, LoopController, SECTION_BITS, section_id
    from mlo_hw.model.tiled import tiled_stack
    cfg = load_config("small")
    s, h = cfg.seq_padded, cfg.model.hidden
    weight_base = 0x20000
    _, model = build_model(cfg)
    lay, b = layout(cfg), cfg.axi_data_bytes
    want = []
    if blocks == 1:
        for li in range(cfg.model.layers):
            for sec in lay.sections:
                for t in range(sec.tiles or 1):
                    want.append((weight_base + li * lay.stride + sec.offset + t * sec.tile_bytes,
                                 (sec.tile_bytes or sec.bytes) // b, section_id(sec.name) | (li % 2) << SECTION_BITS))
        scratch = 0
    else:
        run = tiled_stack(cfg, model.layers, np.zeros((s, h), np.int64), np.ones(s, bool), s // blocks, weight_base)
        scratch = run.scratch_base
        for tr in run.transfers:
            tag = lambda name: section_id(name) | (tr.layer % 2) << SECTION_BITS       # noqa: E731
            if tr.kind == "read" and tr.what.startswith("weights."):
                sec = lay[tr.what[len("weights."):]]
                for t in range(sec.tiles or 1):
                    want.append((tr.addr + t * sec.tile_bytes, (sec.tile_bytes or sec.bytes) // b, tag(sec.name)))
            elif tr.kind == "read" and tr.what in ("k", "vt"):
                want.append((tr.addr, tr.bytes // b, tag({"k": "k_head", "vt": "vt_head"}[tr.what])))
    top = f"loop_ctrl_small_b{blocks}"
    dut = LoopController(cfg, blocks)
    v = to_verilog(dut, top)
    assert lint(v, top) == []
    tiles = {str(section_id(f.section)): f.tile for f in dut.program}
    simulate(v, top, "tb_fetch", {"commands": want, "addr_bits": dut.p.addr_bits, "beats_bits": BEATS_BITS,
                                  "layers": cfg.model.layers, "weight_base": weight_base, "scratch_base": scratch,
                                  "run_blocks": blocks,
                                  "tile_tags": tiles})


@pytest.mark.parametrize("name", ["small", "bert_tiny_s512"])
def test_tile_buffer_banks_in_turn(name):
    """The tile buffer's banks (four for small, two for bert_tiny_s512's deep K_h banks) filled and released in turn
    over several rounds: ``can_claim`` while a bank is free (a released one from the second cycle after its
    release), ``ready`` and ``tag`` for the bank being read, and
    ``next_ready`` exactly when the bank after it (wrapping round) is full."""
    from amaranth.sim import Simulator
    from mlo_hw.hw.buffers import TileBuffer
    cfg = load_config(name)
    raw = cfg.seq_padded * cfg.head_dim if name == "bert_tiny_s512" else 0
    dut = TileBuffer(cfg, raw_tile_bytes=raw)
    n = dut.geometry.banks
    assert n == (4 if name == "small" else 2)

    async def bench(ctx):
        full, claimed, rd, wr, tag = [], 0, 0, 0, 0
        for step in range(5 * n):
            if claimed < n and step % 3 != 2:          # fill a bank: claim, one weight beat and the last beat
                assert ctx.get(dut.can_claim)
                ctx.set(dut.claim, 1)
                await ctx.tick()
                ctx.set(dut.claim, 0)
                claimed += 1
                for last in (0, 1):
                    ctx.set(dut.w.valid, 1)
                    ctx.set(dut.w.payload, {"data": step, "chan": last, "last": last, "tag": tag % 32})
                    await ctx.tick()
                ctx.set(dut.w.valid, 0)
                await ctx.tick()                          # the last beat lands a cycle later
                full.append(tag % 32)
                tag += 1
                wr = (wr + 1) % n
            else:                                         # release the bank being read
                assert full and ctx.get(dut.ready) and ctx.get(dut.tag) == full[0]
                ctx.set(dut.release, 1)
                await ctx.tick()
                ctx.set(dut.release, 0)
                # the released bank counts for a claim from the second cycle on
                assert ctx.get(dut.can_claim) == (claimed < n)
                await ctx.tick()
                full.pop(0)
                claimed -= 1
                rd = (rd + 1) % n
            assert ctx.get(dut.can_claim) == (claimed < n)
            assert ctx.get(dut.ready) == bool(full)
            assert ctx.get(dut.next_ready) == (len(full) >= 2), (step, rd, len(full))
            if full:
                assert ctx.get(dut.tag) == full[0]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
