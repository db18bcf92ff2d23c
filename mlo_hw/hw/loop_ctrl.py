"""The layer loop: which weight bytes to fetch next, and the memory system that fetches them.

:func:`fetch_program` lists, for one layer, everything the MVAU's weight port and the parameter store take
from DRAM, in the order they are consumed: :class:`Fetch` entries of ``count`` commands each. The on-chip
engine's program is the weight image's sections in order (:func:`mlo_hw.model.weight_image.layout`). The DRAM-tiled
schedule's (``blocks`` > 1, see :mod:`mlo_hw.model.tiled`) is: the small sections pass 1 needs (the header, the
narrowing shifts; pre-LN also LN1's); then K, V, Q once per token block; the other small sections; then per
block, each head's K_h and V_h^T from scratch DRAM (raw tiles: weights only) followed by O, FFN up, FFN down. An
encoder-decoder's (``docs/seq2seq.md``) adds the cross K and V per memory block before K, V, Q (pass 0), and after O the cross Q, each head's cross K_h and V_h^T, and the cross O, flagged so that a run skips
what is not its own. :class:`LoopController` walks the program for layers 0..L-1: one DMA command per tile (or per small
section) at ``weight_base + l * stride + offset + i * step``, or ``scratch_base + offset + head * S * dh``
for the per-head entries, looping over blocks and heads as the entries say. A tile command is issued only
when the tile buffer grants a bank (``claim``/``can_claim``), so the next tile, also the first of layer
l+1, streams in while the previous one computes; small sections go straight to the parameter store.
Commands are tagged ``section | parity << 4`` (section: the index in :data:`FETCH_SECTIONS`).

:class:`WeightStreamer` is the memory system: loop controller + :class:`~mlo_hw.hw.weight_dma.ReadDma`
+ :class:`~mlo_hw.hw.buffers.TileBuffer` + :class:`~mlo_hw.hw.buffers.ParamStore`, with an AXI4 read
master (``m_axi_*``) towards DRAM and the buffers' read ports towards compute.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import AxiParams, axi_read_master_members
from .buffers import PARAM_SECTIONS, index_range, ParamGeometry, ParamStore, TileBuffer, TileGeometry
from .pipeline import delayed
from .weight_dma import ReadDma, command_layout
from ..config import ConfigError
from ..model.weight_image import SECTION_ORDER, layout

__all__ = ["SECTION_BITS", "TAG_BITS", "LAYER_BITS", "FETCH_SECTIONS", "section_id", "Fetch", "fetch_program",
           "LoopController", "WeightStreamer"]

SECTION_BITS = 4
TAG_BITS = SECTION_BITS + 1          # section index, then the layer's parity
LAYER_BITS = 16
BEATS_BITS = 16


FETCH_SECTIONS = SECTION_ORDER + ("k_head", "vt_head")    # weight-image sections, then a head's K_h / V_h^T


def section_id(name: str) -> int:
    return FETCH_SECTIONS.index(name)


@dataclass(frozen=True)
class Fetch:
    """One entry of a layer's fetch program: ``count`` commands of ``beats`` beats, ``step`` bytes apart, from
    ``offset`` bytes into the layer's weights (or into scratch, plus ``head * head_bytes`` if ``per_head``).
    After its last command the walk goes back to entry ``loop_heads`` while heads remain, else to
    ``loop_blocks`` while token blocks remain (-1: no loop), else on."""
    section: str
    offset: int
    beats: int
    count: int
    step: int
    tile: bool                  # into the tile buffer (else the parameter store)
    weight_beats: int = 0       # beats of weights at the start of each command (the rest: bias, mult)
    scratch: bool = False
    per_head: bool = False
    loop_heads: int = -1
    loop_blocks: int = -1
    cross: bool = False         # an encoder-decoder's cross-attention: skipped in a run without a memory (the encoder)
    prefill: bool = False       # the memory's cross K and V (pass 0): skipped in a decode step (kept from the prefill)
    tag_as: str | None = None   # tagged (and routed) as this section: the same kind of tile

    @property
    def tag(self) -> str:
        return self.tag_as or self.section


def fetch_program(cfg, blocks: int = 1) -> tuple[Fetch, ...]:
    """One layer's fetches in consumption order: the weight image's sections (``blocks`` = 1, the on-chip
    engine), or the DRAM-tiled schedule of ``blocks`` token blocks (module docstring, :mod:`mlo_hw.model.tiled`)."""
    lay, b = layout(cfg), cfg.axi_data_bytes
    if any(s.offset % b or (s.tile_bytes or s.bytes) % b for s in lay.sections):
        raise ValueError("weight image: sections must be whole AXI beats")

    def section(name, **kw):
        s = lay[name]
        return Fetch(name, s.offset, (s.tile_bytes or s.bytes) // b, s.tiles or 1, s.tile_bytes,
                     bool(s.tile_rows), s.tile_rows * s.cols // b if s.tile_rows else 0, **kw)
    if blocks == 1:
        if cfg.seq2seq:
            raise ConfigError("model.encoder_layers: an encoder-decoder needs the DRAM-tiled engine")
        return tuple(section(s.name) for s in lay.sections)
    from ..model.tiled import scratch_layout, small_sections
    sc, head = scratch_layout(cfg), cfg.seq_padded * cfg.head_dim
    if head % b:
        raise ConfigError(f"memory.axi_data_bits: a head's K ({head} bytes) is not a whole number of {b}-byte beats")
    # the small sections pass 1 needs first, the others after pass 1's weights (small_sections)
    first, later = ([section(n) for n in names] for names in small_sections(cfg))
    pass1 = len(first)
    raw = dict(beats=head // b, count=1, step=0, tile=True, weight_beats=head // b, scratch=True, per_head=True)
    if not cfg.seq2seq:
        pass2 = pass1 + 3 + len(later)
        return tuple(first + [section("k"), section("v"), section("q", loop_blocks=pass1)] + later
                     + [Fetch("k_head", sc.k, **raw), Fetch("vt_head", sc.vt, loop_heads=pass2, **raw),
                        section("o"), section("ffn_up"), section("ffn_down", loop_blocks=pass2)])
    # an encoder-decoder (docs/seq2seq.md): pass 0 (the memory's cross K, V per block) before pass 1, the cross
    # block (Q, each head's cross K_h and V_h^T, O) after O in pass 2; the cross entries tagged as their like
    cross = dict(cross=True, tag_as="q")
    pass1 = pass1 + 2
    pass2 = pass1 + 3 + len(later)
    xheads = pass2 + 4
    return tuple(first + [section("xk", prefill=True, **cross),
                          section("xv", prefill=True, loop_blocks=len(first), **cross),
                          section("k"), section("v"), section("q", loop_blocks=pass1)] + later
                 + [Fetch("k_head", sc.k, **raw), Fetch("vt_head", sc.vt, loop_heads=pass2, **raw),
                    section("o"), section("xq", **cross),
                    Fetch("xk_head", sc.xk, cross=True, tag_as="k_head", **raw),
                    Fetch("xvt_head", sc.xvt, loop_heads=xheads, cross=True, tag_as="vt_head", **raw),
                    section("xo", **cross), section("ffn_up"), section("ffn_down", loop_blocks=pass2)])


class LoopController(wiring.Component):
    """Layer, block and head counters and the address generator of a fetch program (:func:`fetch_program`).

    ``start`` (pulse) fetches ``layers`` layers from ``weight_base`` (and ``scratch_base`` for the per-head
    entries), read in the cycle after it (``start`` is registered; hold them; a ``cancel`` in either cycle drops
    the start); ``busy`` from that cycle until every beat has been delivered, then ``done`` pulses for one cycle
    (not after an error or ``cancel``). ``dma_error`` stops issuing; ``cancel`` stops at once. One command per cycle
    at most; a tile command waits for ``can_claim`` and pulses ``claim`` when it is taken; a command from
    scratch waits for ``scratch_ready`` (the engine has written what it reads: pass 1's K and V^T).
    ``run_blocks`` (read with the others): the token blocks of this run (``blocks``, or fewer: a decode step after a
    prefill runs one). ``cross`` and ``prefill`` (read with them): an encoder-decoder's run kind; an entry marked
    ``cross`` is walked past (no command, a cycle) in a run without ``cross`` (the encoder's), one marked ``prefill``
    in a run without ``prefill`` (a decode step). The per-head entries read layer l's K_h and V_h^T ``l * kv_stride`` bytes on (a causal
    model's KV cache, :func:`mlo_hw.model.tiled.scratch_layout`).
    ``cmd.payload.addr`` comes from registers, computed in the three cycles after a command is taken (or after
    ``start``): the entry's offset and flags, then the entry's base (layer or scratch) plus its offset and the
    tile's plus the head's offset, then their sum, one 32-bit adder a cycle. ``cmd.valid`` stays low in those
    cycles: the first command leaves five cycles after ``start``, and back-to-back commands at most every fourth
    cycle (the weight DMA takes one at most every third: it plans its first burst a cycle after taking a command;
    a command is a whole weight tile or parameter section).
    """

    def __init__(self, cfg, blocks: int = 1):
        self.cfg, self.blocks = cfg, blocks
        self.p = AxiParams.from_config(cfg)
        self.program = fetch_program(cfg, blocks)
        self.stride = layout(cfg).stride
        self.head_bytes = cfg.seq_padded * cfg.head_dim
        from ..model.tiled import scratch_layout
        self.kv_stride = scratch_layout(cfg).kv_stride if blocks > 1 else 0
        super().__init__({
            "start": In(1), "cancel": In(1), "layers": In(LAYER_BITS), "weight_base": In(self.p.addr_bits),
            "run_blocks": In(range(blocks + 1)), "cross": In(1), "prefill": In(1),
            "scratch_base": In(self.p.addr_bits), "scratch_ready": In(1),
            "cmd": Out(stream.Signature(command_layout(self.p, BEATS_BITS, TAG_BITS))),
            "claim": Out(1), "can_claim": In(1), "dma_busy": In(1), "dma_error": In(1),
            "busy": Out(1), "done": Out(1), "layer": Out(LAYER_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        prog, heads = self.program, self.cfg.model.heads
        n = len(prog)
        entry = Signal(range(n))
        tile = Signal(index_range(max(e.count for e in prog)))
        block, head = Signal(index_range(self.blocks)), Signal(index_range(heads))
        layer_base, tile_off, head_off, kv_base = (Signal(self.p.addr_bits) for _ in range(4))
        last_block = Signal(index_range(self.blocks))          # run_blocks - 1, latched at start
        cross_run, prefill_run = Signal(), Signal()            # ``cross``, ``prefill``, latched at start
        skip = Signal()         # the entry is not this run's: walk past it without a command
        e = {"offset": Signal(self.p.addr_bits), "beats": Signal(BEATS_BITS), "last": Signal.like(tile),
             "step": Signal(range(max(e.step for e in prog) + 1)), "tile": Signal(), "scratch": Signal(),
             "per_head": Signal(), "loop_heads": Signal(), "loop_blocks": Signal(),
             "heads_to": Signal(range(n)), "blocks_to": Signal(range(n)), "section": Signal(SECTION_BITS),
             "cross": Signal(), "prefill": Signal()}
        with m.Switch(entry):
            for i, f in enumerate(prog):
                with m.Case(i):
                    m.d.comb += [e["offset"].eq(f.offset), e["beats"].eq(f.beats), e["last"].eq(f.count - 1),
                                 e["step"].eq(f.step), e["tile"].eq(f.tile), e["scratch"].eq(f.scratch),
                                 e["per_head"].eq(f.per_head), e["section"].eq(section_id(f.tag)),
                                 e["cross"].eq(f.cross), e["prefill"].eq(f.prefill),
                                 e["loop_heads"].eq(f.loop_heads >= 0), e["heads_to"].eq(max(f.loop_heads, 0)),
                                 e["loop_blocks"].eq(f.loop_blocks >= 0), e["blocks_to"].eq(max(f.loop_blocks, 0))]

        m.d.comb += skip.eq((e["cross"] & ~cross_run) | (e["prefill"] & ~prefill_run))
        # the command's address, registered over three cycles: the state it derives from changes only when a command
        # is taken (or at start), so it is valid from the third cycle after that on. The entry's offset and flags
        # (decoded from ``entry``), then the entry's base plus its offset and the tile's plus the head's offset, then
        # their sum. ``renew`` marks the change; ``fresh`` is low in the first cycle after it (the entry and ``skip``
        # are valid then), ``settled`` in all three
        c = self.cmd.payload
        offset, scratch, per_head = Signal.like(e["offset"]), Signal(), Signal()
        step = Signal.like(e["step"])   # the tile step, registered too: tile_off advances on a taken command (settled)
        entry_base, within = Signal(self.p.addr_bits, name="entry_base"), Signal(self.p.addr_bits, name="within")
        addr = Signal(self.p.addr_bits, name="cmd_addr")
        renew, fresh, decoded, settled = Signal(), Signal(), Signal(), Signal()
        last_layer = Signal()       # layer == layers - 1, registered where the layer changes
        # layer + 2 == layers, compared a cycle ahead: a layer's entries (every matrix and parameter section) take a
        # cycle or more each, so the layer changes at most every other cycle and the comparison is current; no adder
        # in front of last_layer
        penultimate = delayed(m, self.layer + 2 == self.layers, 1, "penultimate_layer")
        m.d.sync += [offset.eq(e["offset"]), scratch.eq(e["scratch"]), per_head.eq(e["per_head"]), step.eq(e["step"]),
                     entry_base.eq(Mux(scratch, kv_base, layer_base) + offset),
                     within.eq(tile_off + Mux(per_head, head_off, 0)),
                     addr.eq(entry_base + within),
                     fresh.eq(~renew), decoded.eq(fresh & ~renew), settled.eq(decoded & ~renew)]
        m.d.comb += [c.addr.eq(addr), c.beats.eq(e["beats"]),
                     c.tag.eq(e["section"] | (self.layer[0] << SECTION_BITS))]
        # where a taken command goes on, registered like the address (valid from ``decoded`` on; a command is taken
        # once ``settled``, a skipped entry's step in ``fresh`` does not read them): the comparisons are not behind
        # the handshake at the enables of the loop's registers (d126af5's seed 2 on the ECP5-85F: the layer's
        # enables, 7.25 ns)
        more_tiles, more_heads, more_blocks = Signal(), Signal(), Signal()
        m.d.sync += [more_tiles.eq(tile != e["last"]), more_heads.eq(head != heads - 1),
                     more_blocks.eq(block != last_block)]

        # ``start`` registered: the sequencer's decode of it stays off the loop's enables (its state -> the streamer's
        # start -> the layer's, tile's and entry's enables was 7.60 ns at 46c7007's seed 4 on the ECP5-85F)
        begin = delayed(m, self.start & ~self.cancel, 1, "begin")
        with m.FSM(name="loop"):
            with m.State("IDLE"):
                with m.If(begin & ~self.cancel):
                    m.d.comb += renew.eq(1)
                    m.d.sync += [self.layer.eq(0), entry.eq(0), tile.eq(0), tile_off.eq(0), block.eq(0), head.eq(0),
                                 head_off.eq(0), layer_base.eq(self.weight_base),
                                 kv_base.eq(self.scratch_base), last_block.eq(self.run_blocks - 1),
                                 last_layer.eq(self.layers == 1), cross_run.eq(self.cross),
                                 prefill_run.eq(self.prefill)]
                    with m.If(self.layers == 0):
                        m.next = "FINISH"
                    with m.Else():
                        m.next = "ISSUE"
            with m.State("ISSUE"):
                m.d.comb += [self.busy.eq(1), self.cmd.valid.eq(settled & ~skip & ~self.dma_error
                                                                & (~e["tile"] | self.can_claim)
                                                                & (~e["scratch"] | self.scratch_ready))]
                with m.If(self.cancel | self.dma_error):
                    m.next = "DRAIN"
                with m.Elif((self.cmd.valid & self.cmd.ready) | (fresh & skip)):
                    m.d.comb += [self.claim.eq(e["tile"] & ~skip), renew.eq(1)]
                    with m.If(more_tiles & ~skip):
                        m.d.sync += [tile.eq(tile + 1), tile_off.eq(tile_off + step)]
                    with m.Else():
                        m.d.sync += [tile.eq(0), tile_off.eq(0)]
                        with m.If(~skip & e["loop_heads"] & more_heads):
                            m.d.sync += [head.eq(head + 1), head_off.eq(head_off + self.head_bytes),
                                         entry.eq(e["heads_to"])]
                        with m.Elif(~skip & e["loop_blocks"] & more_blocks):
                            m.d.sync += [block.eq(block + 1), entry.eq(e["blocks_to"])]
                        with m.Else():
                            m.d.sync += entry.eq(entry + 1)
                            with m.If(e["loop_heads"]):
                                m.d.sync += [head.eq(0), head_off.eq(0)]
                            with m.If(e["loop_blocks"]):
                                m.d.sync += block.eq(0)
                            with m.If(entry == n - 1):
                                m.d.sync += [entry.eq(0), self.layer.eq(self.layer + 1),
                                             layer_base.eq(layer_base + self.stride), kv_base.eq(kv_base + self.kv_stride),
                                             last_layer.eq(penultimate)]
                                with m.If(last_layer):
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
    buffers; the tile buffer in the cycle after ``start`` or ``cancel``, in which ``tile_ready`` reads 0), ``clear`` (pulse, while idle: clears
    ``error``, as ``start`` does), ``layers``, ``weight_base``; status ``busy`` (until every AXI burst issued has drained), ``done`` (pulse), ``error`` with
    ``error_addr``/``error_code`` (see :mod:`mlo_hw.hw.weight_dma`), ``beat`` (a beat was read, for the
    byte counter), ``layer`` (layer being fetched).
    Tile side (see :class:`~mlo_hw.hw.buffers.TileBuffer`): ``tile_ready``, ``tile_tag``
    (section | parity << 4), ``tile_release``, ``waddr``/``wdata``, ``caddr``/``bias``/``mult``, and
    ``tile_next_ready``/``cnext`` (the next tile's bank is full / read the parameters from it).
    Parameter side (see :class:`~mlo_hw.hw.buffers.ParamStore`): ``param_slot``, ``param_addr``,
    ``param_data``, ``param_loaded``. ``blocks`` > 1: the DRAM-tiled fetch program (:func:`fetch_program`),
    whose per-head K_h / V_h^T come from ``scratch_base`` once ``scratch_ready``; the tile buffer's banks then
    hold a head's as well. The DMA keeps up to ``outstanding`` bursts of at most ``burst_beats`` (default the
    config's ``memory.max_burst_beats``) in flight: what another master's read on a shared port queues behind.
    """

    def __init__(self, cfg, outstanding: int = 8, blocks: int = 1, burst_beats: int | None = None):
        self.cfg, self.blocks = cfg, blocks
        self.p = AxiParams.from_config(cfg)
        # the DMA's bursts: at most burst_beats (None: the config's max_burst_beats), up to outstanding in flight
        self.dma_params = self.p if burst_beats is None else replace(
            self.p, max_burst_beats=min(burst_beats, self.p.max_burst_beats))
        self.outstanding = outstanding
        self.program = fetch_program(cfg, blocks)
        self.raw_tile_bytes = cfg.seq_padded * cfg.head_dim if blocks > 1 else 0
        self.tiles = TileGeometry.from_config(cfg, self.raw_tile_bytes)
        self.params = ParamGeometry.from_config(cfg)
        g = self.tiles
        pg = self.params
        super().__init__({
            "start": In(1), "cancel": In(1), "clear": In(1), "layers": In(LAYER_BITS), "run_blocks": In(range(blocks + 1)),
            "cross": In(1), "prefill": In(1),
            "weight_base": In(self.p.addr_bits), "scratch_base": In(self.p.addr_bits), "scratch_ready": In(1),
            "busy": Out(1), "done": Out(1), "error": Out(1), "error_addr": Out(self.p.addr_bits),
            "error_code": Out(3), "beat": Out(1), "layer": Out(LAYER_BITS),
            "tile_ready": Out(1), "tile_tag": Out(TAG_BITS), "tile_release": In(1), "tile_next_ready": Out(1),
            "waddr": In(index_range(g.max_weight_words)), "wdata": Out(8 * g.word_bytes),
            "caddr": In(index_range(g.nf)), "cnext": In(1),
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
        m.submodules.loop = loop = LoopController(cfg, self.blocks)
        m.submodules.dma = dma = ReadDma(self.dma_params, beats_bits=BEATS_BITS, tag_bits=TAG_BITS, outstanding=self.outstanding)
        m.submodules.tiles = tiles = TileBuffer(cfg, tag_bits=TAG_BITS, raw_tile_bytes=self.raw_tile_bytes)
        m.submodules.params = params = ParamStore(cfg)

        # AXI master ports
        for name in axi_read_master_members(p):
            port, inner = getattr(self, name), getattr(dma, name)
            if name in ("m_axi_arready", "m_axi_rid", "m_axi_rdata", "m_axi_rresp", "m_axi_rlast", "m_axi_rvalid"):
                m.d.comb += inner.eq(port)
            else:
                m.d.comb += port.eq(inner)

        flush = self.start | self.cancel
        # the tile buffer is emptied a cycle later, from a register (its counters sit by its memories, far from
        # the control): no tile command is taken before the second cycle after ``start``, and the DMA forwards no
        # beat after the cycle of ``cancel``; ``tile_ready`` and ``tile_next_ready`` read 0 in that cycle (the
        # emptied buffer's, not the last run's tile)
        tiles_flush = Signal()
        m.d.sync += tiles_flush.eq(flush)
        wiring.connect(m, loop.cmd, dma.cmd)
        m.d.comb += [
            loop.start.eq(self.start), loop.cancel.eq(self.cancel), loop.layers.eq(self.layers),
            loop.run_blocks.eq(self.run_blocks), loop.cross.eq(self.cross), loop.prefill.eq(self.prefill),
            loop.weight_base.eq(self.weight_base), loop.scratch_base.eq(self.scratch_base),
            loop.scratch_ready.eq(self.scratch_ready), loop.can_claim.eq(tiles.can_claim), tiles.claim.eq(loop.claim),
            loop.dma_busy.eq(dma.busy), loop.dma_error.eq(dma.error),
            dma.cancel.eq(self.cancel), dma.clear.eq(self.start | self.clear), tiles.flush.eq(tiles_flush),
            self.busy.eq(loop.busy), self.done.eq(loop.done), self.layer.eq(loop.layer),
            self.error.eq(dma.error), self.error_addr.eq(dma.error_addr), self.error_code.eq(dma.error_code),
            self.beat.eq(dma.beats.valid & dma.beats.ready),
        ]

        # ---- route each beat by the section its command was tagged with ------------------------
        beat = dma.beats.payload
        section = beat.tag[:SECTION_BITS]
        parity = beat.tag[SECTION_BITS]
        max_beats = max(f.beats for f in self.program)
        index = Signal(range(max_beats + 1))              # beat index inside its command
        with m.If(dma.beats.valid & dma.beats.ready):
            m.d.sync += index.eq(Mux(beat.last, 0, index + 1))
        with m.If(flush):                                 # an error or cancel may have cut a command short
            m.d.sync += index.eq(0)
        is_tile, weight_beats, param_base, param_id = (Signal(), Signal(range(max_beats + 1)),
                                                       Signal(range(self.params.slot_bytes // p.data_bytes)),
                                                       Signal(index_range(len(PARAM_SECTIONS))))
        with m.Switch(section):
            for f in {f.tag: f for f in self.program}.values():
                with m.Case(section_id(f.tag)):
                    if f.tile:
                        m.d.comb += [is_tile.eq(1), weight_beats.eq(f.weight_beats)]
                    else:
                        m.d.comb += [param_base.eq(self.params.offsets[f.section] // p.data_bytes),
                                     param_id.eq(PARAM_SECTIONS.index(f.section))]
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
            self.tile_ready.eq(tiles.ready & ~tiles_flush), self.tile_tag.eq(tiles.tag),
            tiles.release.eq(self.tile_release), self.tile_next_ready.eq(tiles.next_ready & ~tiles_flush),
            tiles.cnext.eq(self.cnext),
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
        "param_read_latency": TileBuffer.PARAM_READ_LATENCY,
        "tile_rows": cfg.folding.tile_rows, "stride": lay.stride, "layer_bytes": lay.layer_bytes,
        "sections": [{"name": s.name, "offset": s.offset, "bytes": s.bytes, "tiles": s.tiles,
                      "tile_bytes": s.tile_bytes, "cols": s.cols} for s in lay.sections],
        "param_offsets": ParamGeometry.from_config(cfg).offsets, "param_sections": list(PARAM_SECTIONS),
        "image_path": str(image_path), "seeds": list(seeds),
    }
