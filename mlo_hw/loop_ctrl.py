"""The layer loop: which weight bytes to fetch next, and the memory system that fetches them.

:class:`LoopController` walks the weight image schedule of :func:`mlo_hw.weight_image.layout` for
layers 0..L-1: for every section in consumption order, one DMA command per weight tile (matrix
sections) or one per small section, at ``weight_base + l * stride + section offset + t * tile_bytes``.
A tile command is issued only when the tile buffer grants a bank (``claim``/``can_claim``), so the
next tile, also the first of layer l+1, streams in while the previous one computes; small sections
go straight to the parameter store. Commands are tagged ``section | parity << 4``.

:class:`WeightStreamer` is the memory system: loop controller + :class:`~mlo_hw.weight_dma.ReadDma`
+ :class:`~mlo_hw.buffers.TileBuffer` + :class:`~mlo_hw.buffers.ParamStore`, with an AXI4 read
master (``m_axi_*``) towards DRAM and the buffers' read ports towards compute.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import AxiParams, axi_read_master_members
from .buffers import PARAM_SECTIONS, index_range, ParamGeometry, ParamStore, TileBuffer, TileGeometry
from .weight_dma import ReadDma, command_layout
from .weight_image import SECTION_ORDER, layout

__all__ = ["SECTION_BITS", "TAG_BITS", "LAYER_BITS", "section_id", "Schedule", "LoopController",
           "WeightStreamer"]

SECTION_BITS = 4
TAG_BITS = SECTION_BITS + 1          # section index, then the layer's parity
LAYER_BITS = 16
BEATS_BITS = 16


def section_id(name: str) -> int:
    return SECTION_ORDER.index(name)


class Schedule:
    """The per-layer fetch schedule in beats: one entry per section of the weight image layout."""

    def __init__(self, cfg):
        lay = layout(cfg)
        b = cfg.axi_data_bytes
        self.stride = lay.stride
        self.beat_bytes = b
        # (offset, beats per command, commands, step between commands, is a tile section)
        self.entries = [(s.offset, (s.tile_bytes or s.bytes) // b, s.tiles or 1, s.tile_bytes, bool(s.tile_rows))
                        for s in lay.sections]
        if any(s.offset % b or (s.tile_bytes or s.bytes) % b for s in lay.sections):
            raise ValueError("weight image: sections must be whole AXI beats")

    @property
    def max_beats(self) -> int:
        return max(e[1] for e in self.entries)


class LoopController(wiring.Component):
    """Layer counter and address generator.

    ``start`` (pulse) fetches ``layers`` layers from ``weight_base``; ``busy`` until every beat has
    been delivered, then ``done`` pulses for one cycle (not after an error or ``cancel``).
    ``dma_error`` stops issuing; ``cancel`` stops at once. One command per cycle at most.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        self.p = AxiParams.from_config(cfg)
        self.schedule = Schedule(cfg)
        super().__init__({
            "start": In(1), "cancel": In(1), "layers": In(LAYER_BITS), "weight_base": In(self.p.addr_bits),
            "cmd": Out(stream.Signature(command_layout(self.p, BEATS_BITS, TAG_BITS))),
            "claim": Out(1), "can_claim": In(1), "dma_busy": In(1), "dma_error": In(1),
            "busy": Out(1), "done": Out(1), "layer": Out(LAYER_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        sch = self.schedule
        n = len(sch.entries)
        entry = Signal(range(n))
        tile = Signal(index_range(max(e[2] for e in sch.entries)))
        layer_base = Signal(self.p.addr_bits)
        tile_off = Signal(self.p.addr_bits)
        offset, beats, count, step, is_tile = (Signal(self.p.addr_bits), Signal(BEATS_BITS), Signal.like(tile),
                                               Signal(range(max(e[3] for e in sch.entries) + 1)), Signal())
        with m.Switch(entry):
            for i, (off, bts, cnt, stp, til) in enumerate(sch.entries):
                with m.Case(i):
                    m.d.comb += [offset.eq(off), beats.eq(bts), count.eq(cnt - 1), step.eq(stp), is_tile.eq(til)]

        c = self.cmd.payload
        m.d.comb += [c.addr.eq(layer_base + offset + tile_off), c.beats.eq(beats),
                     c.tag.eq(entry | (self.layer[0] << SECTION_BITS))]

        with m.FSM(name="loop"):
            with m.State("IDLE"):
                with m.If(self.start & ~self.cancel):
                    m.d.sync += [self.layer.eq(0), entry.eq(0), tile.eq(0), tile_off.eq(0),
                                 layer_base.eq(self.weight_base)]
                    with m.If(self.layers == 0):
                        m.next = "FINISH"
                    with m.Else():
                        m.next = "ISSUE"
            with m.State("ISSUE"):
                m.d.comb += [self.busy.eq(1), self.cmd.valid.eq(~self.dma_error & (~is_tile | self.can_claim))]
                with m.If(self.cancel | self.dma_error):
                    m.next = "DRAIN"
                with m.Elif(self.cmd.valid & self.cmd.ready):
                    m.d.comb += self.claim.eq(is_tile)
                    with m.If(tile != count):
                        m.d.sync += [tile.eq(tile + 1), tile_off.eq(tile_off + step)]
                    with m.Else():
                        m.d.sync += [tile.eq(0), tile_off.eq(0), entry.eq(entry + 1)]
                        with m.If(entry == n - 1):
                            m.d.sync += [entry.eq(0), self.layer.eq(self.layer + 1),
                                         layer_base.eq(layer_base + sch.stride)]
                            with m.If(self.layer == self.layers - 1):
                                m.next = "FINISH"
            with m.State("FINISH"):
                m.d.comb += self.busy.eq(1)
                with m.If(self.cancel | self.dma_error):
                    m.next = "DRAIN"
                with m.Elif(~self.dma_busy):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
            with m.State("DRAIN"):
                m.d.comb += self.busy.eq(1)
                with m.If(~self.dma_busy):
                    m.next = "IDLE"
        return m


class WeightStreamer(wiring.Component):
    """The memory system: fetches every layer's weights from DRAM into the on-chip buffers.

    Control: ``start``, ``cancel`` (soft reset: drains the AXI bursts in flight, empties the
    buffers), ``clear`` (pulse, while idle: clears ``error``, as ``start`` does), ``layers``,
    ``weight_base``; status ``busy`` (until every AXI burst issued has drained), ``done`` (pulse), ``error`` with
    ``error_addr``/``error_code`` (see :mod:`mlo_hw.weight_dma`), ``beat`` (a beat was read, for the
    byte counter), ``layer`` (layer being fetched).
    Tile side (see :class:`~mlo_hw.buffers.TileBuffer`): ``tile_ready``, ``tile_tag``
    (section | parity << 4), ``tile_release``, ``waddr``/``wdata``, ``caddr``/``bias``/``mult``.
    Parameter side (see :class:`~mlo_hw.buffers.ParamStore`): ``param_slot``, ``param_addr``,
    ``param_data``, ``param_loaded``.
    """

    def __init__(self, cfg, outstanding: int = 8):
        self.cfg = cfg
        self.p = AxiParams.from_config(cfg)
        self.outstanding = outstanding
        self.tiles = TileGeometry.from_config(cfg)
        self.params = ParamGeometry.from_config(cfg)
        g = self.tiles
        pg = self.params
        super().__init__({
            "start": In(1), "cancel": In(1), "clear": In(1), "layers": In(LAYER_BITS),
            "weight_base": In(self.p.addr_bits),
            "busy": Out(1), "done": Out(1), "error": Out(1), "error_addr": Out(self.p.addr_bits),
            "error_code": Out(3), "beat": Out(1), "layer": Out(LAYER_BITS),
            "tile_ready": Out(1), "tile_tag": Out(TAG_BITS), "tile_release": In(1),
            "waddr": In(index_range(g.max_weight_words)), "wdata": Out(8 * g.word_bytes),
            "caddr": In(index_range(g.nf)),
            "bias": Out(data.ArrayLayout(signed(32), g.pe)),
            "mult": Out(data.ArrayLayout(16, g.pe)),
            "param_slot": In(1), "param_addr": In(range(pg.slot_bytes // 4)), "param_data": Out(32),
            "param_release": In(1),
            "param_loaded": Out(data.ArrayLayout(len(PARAM_SECTIONS), 2)),
            **axi_read_master_members(self.p),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, p = self.cfg, self.p
        m.submodules.loop = loop = LoopController(cfg)
        m.submodules.dma = dma = ReadDma(p, beats_bits=BEATS_BITS, tag_bits=TAG_BITS, outstanding=self.outstanding)
        m.submodules.tiles = tiles = TileBuffer(cfg, tag_bits=TAG_BITS)
        m.submodules.params = params = ParamStore(cfg)

        # AXI master ports
        for name in axi_read_master_members(p):
            port, inner = getattr(self, name), getattr(dma, name)
            if name in ("m_axi_arready", "m_axi_rid", "m_axi_rdata", "m_axi_rresp", "m_axi_rlast", "m_axi_rvalid"):
                m.d.comb += inner.eq(port)
            else:
                m.d.comb += port.eq(inner)

        flush = self.start | self.cancel
        wiring.connect(m, loop.cmd, dma.cmd)
        m.d.comb += [
            loop.start.eq(self.start), loop.cancel.eq(self.cancel), loop.layers.eq(self.layers),
            loop.weight_base.eq(self.weight_base), loop.can_claim.eq(tiles.can_claim), tiles.claim.eq(loop.claim),
            loop.dma_busy.eq(dma.busy), loop.dma_error.eq(dma.error),
            dma.cancel.eq(self.cancel), dma.clear.eq(self.start | self.clear), tiles.flush.eq(flush),
            self.busy.eq(loop.busy), self.done.eq(loop.done), self.layer.eq(loop.layer),
            self.error.eq(dma.error), self.error_addr.eq(dma.error_addr), self.error_code.eq(dma.error_code),
            self.beat.eq(dma.beats.valid & dma.beats.ready),
        ]

        # ---- route each beat by the section its command was tagged with ------------------------
        beat = dma.beats.payload
        section = beat.tag[:SECTION_BITS]
        parity = beat.tag[SECTION_BITS]
        sch = Schedule(cfg)
        index = Signal(range(sch.max_beats + 1))          # beat index inside its command
        with m.If(dma.beats.valid & dma.beats.ready):
            m.d.sync += index.eq(Mux(beat.last, 0, index + 1))
        with m.If(flush):                                 # an error or cancel may have cut a command short
            m.d.sync += index.eq(0)
        is_tile, weight_beats, param_base, param_id = (Signal(), Signal(range(sch.max_beats + 1)),
                                                       Signal(range(self.params.slot_bytes // p.data_bytes)),
                                                       Signal(index_range(len(PARAM_SECTIONS))))
        lay = layout(cfg)
        with m.Switch(section):
            for s in lay.sections:
                with m.Case(section_id(s.name)):
                    if s.tile_rows:
                        m.d.comb += [is_tile.eq(1), weight_beats.eq(self.tiles.weight_beats(s.cols))]
                    else:
                        m.d.comb += [param_base.eq(self.params.offsets[s.name] // p.data_bytes),
                                     param_id.eq(PARAM_SECTIONS.index(s.name))]
        tw = tiles.w.payload
        m.d.comb += [
            tw.data.eq(beat.data), tw.last.eq(beat.last), tw.tag.eq(beat.tag), tw.chan.eq(index >= weight_beats),
            tiles.w.valid.eq(dma.beats.valid & is_tile),
            dma.beats.ready.eq(~is_tile | tiles.w.ready),
            params.w_en.eq(dma.beats.valid & ~is_tile), params.w_slot.eq(parity),
            params.w_beat.eq(param_base + index), params.w_data.eq(beat.data), params.w_section.eq(param_id),
            params.w_section_start.eq(dma.beats.valid & ~is_tile & (index == 0)),
            params.w_section_done.eq(dma.beats.valid & ~is_tile & beat.last),
        ]

        # ---- compute-side ports -------------------------------------------------------------------
        m.d.comb += [
            self.tile_ready.eq(tiles.ready), self.tile_tag.eq(tiles.tag), tiles.release.eq(self.tile_release),
            tiles.waddr.eq(self.waddr), self.wdata.eq(tiles.wdata), tiles.caddr.eq(self.caddr),
            self.bias.eq(tiles.bias), self.mult.eq(tiles.mult),
            params.r_slot.eq(self.param_slot), params.r_addr.eq(self.param_addr), self.param_data.eq(params.r_data),
            params.release.eq(self.param_release), params.release_slot.eq(self.param_slot),
            params.clear.eq(self.start | self.clear),
            self.param_loaded.eq(params.loaded),
        ]
        return m



def streamer_tb_params(cfg, image_path, seeds=()) -> dict:
    """What the cocotb testbench of :class:`WeightStreamer` (``sim/tb_memsys.py``) needs to know."""
    lay = layout(cfg)
    return {
        "beat_bytes": cfg.axi_data_bytes, "word_bytes": cfg.mac_lanes, "pe": cfg.folding.pe,
        "tile_rows": cfg.folding.tile_rows, "stride": lay.stride, "layer_bytes": lay.layer_bytes,
        "sections": [{"name": s.name, "offset": s.offset, "bytes": s.bytes, "tiles": s.tiles,
                      "tile_bytes": s.tile_bytes, "cols": s.cols} for s in lay.sections],
        "param_offsets": ParamGeometry.from_config(cfg).offsets,
        "image_path": str(image_path), "seeds": list(seeds),
    }
