"""On-chip destinations of the weight stream: ping-pong weight tile buffers and per-layer parameters.

:class:`TileBuffer` holds two banks of the largest weight tile of the config. The DMA side writes
one AXI beat at a time into the bank it claimed; the compute side reads the other, full, bank one
PE x SIMD-byte word per cycle and the tile's per-channel bias and multiplier by ``nf``, then
releases it. :class:`ParamStore` keeps the small per-layer sections (header, ln1, gelu, ln2) in two
slots selected by the layer's parity, so layer l+1's parameters can stream in while layer l runs.
Every size comes from :func:`mlo_hw.model.weight_image.layout`.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Array, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config import ConfigError
from ..model.weight_image import layout
from ..perf import tile_banks
from .pipeline import delayed

__all__ = ["PARAM_SECTIONS", "NO_COLLISION", "index_range", "TileGeometry", "ParamGeometry", "BankedMemory", "TileBuffer", "ParamStore",
           "tile_write_layout"]

PARAM_SECTIONS = ("header", "narrow", "ln1", "gelu", "ln2")

# The attribute of a memory whose users never read a word in the cycle it is written (or ignore what such a read
# returns): synthesis need not give the read port the old word on such a collision. yosys otherwise emulates it on
# the ECP5's DP16KD (the write delayed a cycle, an address comparator and a bypass multiplexer behind the block
# RAM: a flip-flop and a LUT a data bit); synth_xilinx maps either way to the same block RAM. Simulation keeps the
# read-first model, so a design that did depend on it would still show it there.
NO_COLLISION = {"no_rw_check": 1}


def index_range(n: int) -> range:
    """An index over n items, at least one bit wide (zero-width vectors upset Verilog tools)."""
    return range(max(n, 2))


@dataclass(frozen=True)
class TileGeometry:
    """Sizes of one weight tile as the buffer sees it."""
    beat_bytes: int          # one AXI beat
    word_bytes: int          # one MVAU weight word: PE x SIMD bytes
    pe: int
    tile_rows: int
    max_weight_bytes: int    # the largest tile's weights (tile_rows x cols)
    chan_bytes: int          # bias int32[tile_rows] + mult uint32[tile_rows]
    banks: int = 2           # mlo_hw.perf.tile_banks: four where they cost no more block RAM than two

    @classmethod
    def from_config(cls, cfg, raw_tile_bytes: int = 0) -> "TileGeometry":
        """``raw_tile_bytes``: a bank must also hold a raw tile (weights only) of that size (a head's K_h or
        V_h^T in the DRAM-tiled schedule)."""
        lay = layout(cfg)
        f, b = cfg.folding, cfg.axi_data_bytes
        mats = [s for s in lay.sections if s.tile_rows]
        word = f.pe * f.simd
        if word % b and b % word:
            raise ConfigError(f"folding.pe*folding.simd: {word} bytes must divide or be a multiple of the "
                              f"AXI beat ({b} bytes, memory.axi_data_bits)")
        for s in mats:
            if (f.tile_rows * s.cols) % b:
                raise ConfigError(f"folding.tile_rows: a {s.name} tile's weights ({f.tile_rows * s.cols} bytes) "
                                  f"are not a whole number of {b}-byte AXI beats")
        if (4 * f.tile_rows) % b or max(b, 4 * f.pe) % min(b, 4 * f.pe):
            raise ConfigError(f"folding.tile_rows: the bias block ({4 * f.tile_rows} bytes) is not a whole "
                              f"number of {b}-byte AXI beats; lower memory.axi_data_bits")
        largest = max([f.tile_rows * s.cols for s in mats] + [raw_tile_bytes])
        return cls(b, word, f.pe, f.tile_rows, largest, 8 * f.tile_rows, tile_banks(8 * word, -(-largest // word)))

    def weight_beats(self, cols: int) -> int:
        return self.tile_rows * cols // self.beat_bytes

    @property
    def max_weight_words(self) -> int:
        return self.max_weight_bytes // self.word_bytes

    @property
    def nf(self) -> int:
        """Channel groups (PE channels each) per tile."""
        return self.tile_rows // self.pe


@dataclass(frozen=True)
class ParamGeometry:
    """Where each small per-layer section sits inside a ParamStore slot (byte offsets, beat aligned)."""
    beat_bytes: int
    offsets: dict
    sizes: dict

    @classmethod
    def from_config(cls, cfg) -> "ParamGeometry":
        lay = layout(cfg)
        offsets, sizes, off = {}, {}, 0
        for name in PARAM_SECTIONS:
            offsets[name], sizes[name] = off, lay[name].bytes
            off += lay[name].bytes
        return cls(cfg.axi_data_bytes, offsets, sizes)

    @property
    def slot_bytes(self) -> int:
        return sum(self.sizes.values())

    def word(self, section: str, byte_offset: int = 0) -> int:
        """The 32-bit word address (inside a slot) of a byte of a section."""
        return (self.offsets[section] + byte_offset) // 4


class BankedMemory(wiring.Component):
    """``banks`` banks of ``rows`` AXI beats each, written a beat at a time, read ``read_bits`` a time.

    When a read word is wider than a beat it spans ``lanes`` consecutive beats (one memory row with
    a write granularity of one beat); when narrower, a row holds ``sub`` words and the read selects
    one. Write: ``w_en`` with ``w_bank``, ``w_row`` (beat index // lanes), ``w_lane`` (beat index % lanes),
    registered beside the memory: the beat lands a cycle later (so a writer signals a section complete a cycle
    after its last ``w_en``). Read: ``r_bank``, ``r_addr`` (word index), data on ``r_data`` ``read_latency``
    cycles later: 1 (block RAM), or 2 with the read address registered beside the memory too (a wide distributed
    RAM, whose address fans out over many LUTs far from the logic that chooses it).
    """

    WRITE_LATENCY = 1      # cycles from w_en to the beat in the memory (the write register)

    def __init__(self, read_bits: int, beat_bits: int, beats_per_bank: int, banks: int = 2, read_latency: int = 1):
        if read_latency not in (1, 2):
            raise ValueError(f"BankedMemory read_latency: expected 1 or 2 cycles, got {read_latency}")
        self.lanes = max(1, read_bits // beat_bits)
        self.sub = max(1, beat_bits // read_bits)
        self.read_bits, self.beat_bits, self.banks = read_bits, beat_bits, banks
        self.read_latency = read_latency
        self.rows = -(-beats_per_bank // self.lanes)
        self.words = self.rows * self.sub
        super().__init__({
            "w_en": In(1), "w_bank": In(index_range(banks)), "w_row": In(index_range(self.rows)),
            "w_lane": In(index_range(self.lanes)), "w_data": In(beat_bits),
            "r_bank": In(index_range(banks)), "r_addr": In(index_range(self.words)), "r_data": Out(read_bits),
        })

    def elaborate(self, platform):
        m = Module()
        width = max(self.read_bits, self.beat_bits)
        # collision free: the writer fills a bank the reader is not reading (claim/full/release), the ParamStore a
        # section its readers wait for (``loaded``)
        m.submodules.ram = mem = Memory(shape=unsigned(width), depth=self.banks * self.rows, init=[],
                                        attrs=NO_COLLISION)
        wp = mem.write_port(granularity=self.beat_bits)
        rp = mem.read_port()
        # the write registered beside the memory (the DMA's beat logic is far from it); only the enable is reset
        wq_addr, wq_data = Signal.like(wp.addr, reset_less=True), Signal(self.beat_bits, reset_less=True)
        wq_en = Signal.like(wp.en)
        m.d.sync += [
            wq_addr.eq(self.w_bank * self.rows + self.w_row), wq_data.eq(self.w_data),
            wq_en.eq(Mux(self.w_en, 1 << self.w_lane, 0) if self.lanes > 1 else self.w_en),
        ]
        m.d.comb += [wp.addr.eq(wq_addr), wp.data.eq(wq_data.replicate(self.lanes)), wp.en.eq(wq_en)]
        r_bank, r_addr = self.r_bank, self.r_addr
        if self.read_latency == 2:
            r_bank, r_addr = Signal.like(r_bank, reset_less=True), Signal.like(r_addr, reset_less=True)
            m.d.sync += [r_bank.eq(self.r_bank), r_addr.eq(self.r_addr)]
        if self.sub == 1:
            m.d.comb += [rp.addr.eq(r_bank * self.rows + r_addr), self.r_data.eq(rp.data)]
        else:
            sel = Signal(index_range(self.sub))
            m.d.sync += sel.eq(r_addr % self.sub)
            m.d.comb += [
                rp.addr.eq(r_bank * self.rows + r_addr // self.sub),
                self.r_data.eq(rp.data.word_select(sel, self.read_bits)),
            ]
        return m


def tile_write_layout(beat_bits: int, tag_bits: int) -> data.StructLayout:
    """A beat for the tile buffer: ``chan`` marks the bias/mult part, ``last`` the tile's final beat."""
    return data.StructLayout({"data": beat_bits, "chan": 1, "last": 1, "tag": tag_bits})


class TileBuffer(wiring.Component):
    """Banks (two, or four where they cost no more block RAM: :attr:`TileGeometry.banks`) of the largest weight
    tile, with claim / full / release handshakes, used in turn.

    DMA side: ``claim`` (pulse) reserves the next bank in turn when ``can_claim`` (a released bank counts
    from the second cycle after its ``release``); the
    tile's beats then arrive on ``w`` (``chan`` = 0 for weight beats, 1 for the bias/mult beats
    and padding) and the beat with ``last`` marks that bank full a cycle later (once it has landed: the memories
    register their writes). Compute side: ``ready`` says the
    current read bank is full (``tag`` is what the writer tagged it with); read weight word
    ``waddr`` (= nf*SF + sf) on ``wdata`` one cycle later and the channel parameters of group ``caddr`` (= nf) on
    ``bias``/``mult`` :attr:`PARAM_READ_LATENCY` (2) cycles later (their distributed RAM's address is registered
    beside it); pulse ``release`` when done with the bank. ``next_ready``: the
    next bank (the next tile) is full; with ``cnext`` the channel parameters are read from it instead,
    so that the next tile's can be latched while the current one's weights are still being read.
    ``flush`` empties every bank. Throughput: one beat written and one word read per cycle.
    """

    PARAM_READ_LATENCY = 2     # cycles from caddr/cnext to bias/mult

    def __init__(self, cfg, tag_bits: int = 5, raw_tile_bytes: int = 0):
        g = self.geometry = TileGeometry.from_config(cfg, raw_tile_bytes)
        self.tag_bits = tag_bits
        beat_bits = 8 * g.beat_bytes
        super().__init__({
            "w": In(stream.Signature(tile_write_layout(beat_bits, tag_bits))),
            "claim": In(1), "can_claim": Out(1), "flush": In(1),
            "ready": Out(1), "tag": Out(tag_bits), "release": In(1), "next_ready": Out(1),
            "waddr": In(index_range(g.max_weight_words)), "wdata": Out(8 * g.word_bytes),
            "caddr": In(index_range(g.nf)), "cnext": In(1),
            "bias": Out(data.ArrayLayout(signed(32), g.pe)),
            "mult": Out(data.ArrayLayout(unsigned(16), g.pe)),
        })

    def elaborate(self, platform):
        m = Module()
        g = self.geometry
        beat_bits = 8 * g.beat_bytes
        max_beats = g.max_weight_bytes // g.beat_bytes
        chan_beats = 4 * g.tile_rows // g.beat_bytes        # beats of the bias block (and of the mult block)
        n = g.banks
        m.submodules.weights = wmem = BankedMemory(8 * g.word_bytes, beat_bits, max_beats, banks=n)
        chan = dict(banks=n, read_latency=self.PARAM_READ_LATENCY)
        m.submodules.biases = bmem = BankedMemory(32 * g.pe, beat_bits, chan_beats, **chan)
        m.submodules.mults = mmem = BankedMemory(32 * g.pe, beat_bits, chan_beats, **chan)

        def following(bank):
            return (bank + 1)[:len(bank)] if n & (n - 1) == 0 else Mux(bank == n - 1, 0, bank + 1)

        full = Signal(n)
        tags = Array(Signal(self.tag_bits, name=f"tag{i}") for i in range(n))
        wr_bank, rd_bank = Signal(range(n)), Signal(range(n))
        rd_next = Signal(range(n), init=1)     # following(rd_bank), a register: no adder on the read address
        used = Signal(range(n + 1))         # banks claimed or full
        # a bank's last beat is in the write register: full next cycle (BankedMemory.WRITE_LATENCY); a flush drops it
        landing, landing_bank = Signal(), Signal(range(n))

        # ---- write side ---------------------------------------------------------------------
        w = self.w.payload
        row, lane = Signal(index_range(wmem.rows)), Signal(index_range(wmem.lanes))
        chan_row, chan_lane = Signal(range(2 * bmem.rows + 1)), Signal(index_range(bmem.lanes))
        # chan_row in the bias block, in the mult block: flags kept beside it (the write enables take a register, not
        # a comparator: the DMA's beat -> the comparisons -> the bias memory's write enable was 6.67 ns at 1d63e36's
        # seed 2 on an ECP5-85F)
        in_biases, in_mults = Signal(init=1), Signal()
        m.d.comb += self.w.ready.eq(~full.bit_select(wr_bank, 1))
        m.d.comb += [
            wmem.w_bank.eq(wr_bank), wmem.w_row.eq(row), wmem.w_lane.eq(lane), wmem.w_data.eq(w.data),
            bmem.w_bank.eq(wr_bank), bmem.w_row.eq(chan_row), bmem.w_lane.eq(chan_lane), bmem.w_data.eq(w.data),
            mmem.w_bank.eq(wr_bank), mmem.w_row.eq(chan_row - bmem.rows), mmem.w_lane.eq(chan_lane),
            mmem.w_data.eq(w.data),
        ]
        with m.If(self.w.valid & self.w.ready):
            with m.If(~w.chan):
                m.d.comb += wmem.w_en.eq(1)
                m.d.sync += lane.eq(lane + 1)
                with m.If(lane == wmem.lanes - 1):
                    m.d.sync += [lane.eq(0), row.eq(row + 1)]
            with m.Else():
                m.d.comb += [bmem.w_en.eq(in_biases), mmem.w_en.eq(in_mults)]
                m.d.sync += chan_lane.eq(chan_lane + 1)
                with m.If((chan_lane == bmem.lanes - 1) & (in_biases | in_mults)):
                    m.d.sync += [chan_lane.eq(0), chan_row.eq(chan_row + 1),
                                 in_biases.eq(chan_row < bmem.rows - 1),
                                 in_mults.eq((chan_row >= bmem.rows - 1) & (chan_row < 2 * bmem.rows - 1))]
            with m.If(w.last):
                m.d.sync += [row.eq(0), lane.eq(0), chan_row.eq(0), chan_lane.eq(0), in_biases.eq(1), in_mults.eq(0),
                             landing.eq(1), landing_bank.eq(wr_bank), tags[wr_bank].eq(w.tag),
                             wr_bank.eq(following(wr_bank))]
        with m.If(landing):
            m.d.sync += [landing.eq(0), full.bit_select(landing_bank, 1).eq(1)]

        # ---- claims and releases ------------------------------------------------------------
        m.d.comb += self.can_claim.eq(used < n)
        claim = self.claim & self.can_claim
        release = self.release & self.ready
        # a release counts in ``used`` a cycle later, from a register: the compute side's release decode (the
        # sequencer's states) stays off the count's enables (7.04 ns at 18f3507's seed 2 on the ECP5-85F); the bank
        # is claimed again a cycle later at worst
        released = Signal()
        m.d.sync += released.eq(release & ~self.flush)
        with m.If(claim & ~released):
            m.d.sync += used.eq(used + 1)
        with m.Elif(released & ~claim):
            m.d.sync += used.eq(used - 1)

        # ---- read side ----------------------------------------------------------------------
        m.d.comb += [
            self.ready.eq(full.bit_select(rd_bank, 1)), self.next_ready.eq(full.bit_select(rd_next, 1)),
            self.tag.eq(tags[rd_bank]),
            wmem.r_bank.eq(rd_bank), wmem.r_addr.eq(self.waddr), self.wdata.eq(wmem.r_data),
            bmem.r_bank.eq(Mux(self.cnext, rd_next, rd_bank)), bmem.r_addr.eq(self.caddr), self.bias.eq(bmem.r_data),
            mmem.r_bank.eq(Mux(self.cnext, rd_next, rd_bank)), mmem.r_addr.eq(self.caddr),
        ]
        for p in range(g.pe):
            m.d.comb += self.mult[p].eq(mmem.r_data[32 * p: 32 * p + 16])
        with m.If(release):
            m.d.sync += [rd_bank.eq(rd_next), rd_next.eq(following(rd_next)), full.bit_select(rd_bank, 1).eq(0)]

        with m.If(self.flush):
            m.d.sync += [full.eq(0), used.eq(0), wr_bank.eq(0), rd_bank.eq(0), rd_next.eq(1), landing.eq(0),
                         row.eq(0), lane.eq(0), chan_row.eq(0), chan_lane.eq(0), in_biases.eq(1), in_mults.eq(0)]
        return m


class ParamStore(wiring.Component):
    """Two slots (layer parity) of the small per-layer sections, read as 32-bit words.

    Write: ``w_en`` with ``w_slot``, ``w_beat`` (beat index inside the slot, see
    :class:`ParamGeometry`) and ``w_data``; ``w_section_done`` (with ``w_section``, beside the section's last
    ``w_en``) marks a section loaded a cycle later, once that beat has landed; ``w_section_start`` of the header
    clears the slot's ``loaded`` bits. Read: ``r_slot``,
    ``r_addr`` (32-bit word inside the slot, ``ParamGeometry.word``) -> ``r_data`` one cycle later.
    ``loaded[slot]`` has bit i set once ``PARAM_SECTIONS[i]`` of that slot has arrived; ``release``
    (pulse) clears the bits of ``release_slot`` (its layer is done with it, so they never show a previous
    layer), ``clear`` (pulse) those of both slots (a new run). A section arriving in the same cycle wins.
    """

    def __init__(self, cfg):
        g = self.geometry = ParamGeometry.from_config(cfg)
        beats = g.slot_bytes // g.beat_bytes
        self._beats = beats
        n = len(PARAM_SECTIONS)
        super().__init__({
            "w_en": In(1), "w_slot": In(1), "w_beat": In(range(beats)), "w_data": In(8 * g.beat_bytes),
            "w_section": In(range(n)), "w_section_start": In(1), "w_section_done": In(1),
            "r_slot": In(1), "r_addr": In(range(g.slot_bytes // 4)), "r_data": Out(32),
            "loaded": Out(data.ArrayLayout(n, 2)),
            "release": In(1), "release_slot": In(1), "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        g = self.geometry
        m.submodules.store = mem = BankedMemory(32, 8 * g.beat_bytes, self._beats)
        m.d.comb += [
            mem.w_en.eq(self.w_en), mem.w_bank.eq(self.w_slot), mem.w_row.eq(self.w_beat), mem.w_lane.eq(0),
            mem.w_data.eq(self.w_data), mem.r_bank.eq(self.r_slot), mem.r_addr.eq(self.r_addr),
            self.r_data.eq(mem.r_data),
        ]
        with m.If(self.release):
            m.d.sync += self.loaded[self.release_slot].eq(0)
        with m.If(self.clear):
            m.d.sync += self.loaded.as_value().eq(0)
        with m.If(self.w_section_start & (self.w_section == 0)):
            m.d.sync += self.loaded[self.w_slot].eq(0)
        # the section's last beat is in the memory BankedMemory.WRITE_LATENCY cycles after its w_en: loaded then
        written = Signal(data.StructLayout({"done": 1, "slot": 1, "section": len(self.w_section)}))
        m.d.comb += [written.done.eq(self.w_section_done), written.slot.eq(self.w_slot),
                     written.section.eq(self.w_section)]
        done = delayed(m, written, BankedMemory.WRITE_LATENCY, "section_done")
        with m.If(done.done):
            m.d.sync += self.loaded[done.slot].bit_select(done.section, 1).eq(1)
        return m
