"""Analytical figures: the roofline cycle bound and the on-chip memory plan.

Roofline bound of one layer: the sum over weight tiles of ``max(compute, DMA)`` cycles, plus the
attention products (compute only, no weights). A tile of ``tile_rows`` output channels and ``cols``
inputs computes ``seq_padded * tile_rows * cols / (pe * simd)`` cycles and needs
``tile_bytes / axi_data_bytes`` beats of DMA.

A LayerNorm phase takes :func:`layernorm_cycles` (``folding.ln_lanes`` lanes); it starts during the last weight tile
of the matrix before it (O for LN1, FFN down for LN2) and reads each row once that tile has written it, and FFN up
runs behind a post-LN LN1, so only :func:`layernorm_visible_cycles` show beyond the matrices. The bound leaves them out (it is the matrices'
roofline), and :attr:`mlo_hw.plan.Plan.expected_cycles` adds them for ``folding: auto``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .model import numerics as nx
from .model.weight_image import layout

__all__ = ["buffer_group", "TileCost", "tile_banks", "tile_bank_words", "tile_stream_stall", "weight_tile_words", "matrix_costs", "layer_bound", "LN_LANES_CYCLES", "LN_ROW_CYCLES_MIN", "layernorm_row_latency", "layernorm_row_tail",
           "layernorm_cycles", "layernorm_visible_cycles", "layernorm_phases_visible", "layernorm_phase_visible",
           "layernorm_overlaps", "onchip_plan", "onchip_memories", "onchip_bram36", "bram36", "BRAM36_BYTES"]


@dataclass(frozen=True)
class TileCost:
    matrix: str
    tiles: int
    compute: int      # cycles per tile
    dma: int          # cycles per tile at one beat per cycle

    @property
    def bound(self) -> int:
        return self.tiles * max(self.compute, self.dma)


def matrix_costs(cfg, seq: int | None = None) -> list[TileCost]:
    """Per matrix (and per attention product), the tile count and per-tile compute and DMA cycles."""
    seq = cfg.seq_padded if seq is None else seq
    lanes = cfg.mac_lanes
    lay = layout(cfg)
    costs = []
    for m in cfg.matrices:
        sec = lay[m.name]
        compute = seq * sec.tile_rows * m.cols // lanes
        dma = -(-sec.tile_bytes // cfg.axi_data_bytes)
        costs.append(TileCost(m.name, sec.tiles, compute, dma))
    heads, dh = cfg.model.heads, cfg.head_dim
    costs.append(TileCost("attention.qk", heads, seq * seq * dh // lanes, 0))
    costs.append(TileCost("attention.pv", heads, seq * seq * dh // lanes, 0))
    return costs


def layer_bound(cfg, seq: int | None = None) -> int:
    return sum(c.bound for c in matrix_costs(cfg, seq))


# The LayerNorm lanes' own cycles in a phase's last row, beyond the LayerNorm block's (the start, the reader's request
# and read, the queues before and after the lane, the serializer's output register, the last word's gather and
# write). Fitted: with the block's latencies, :func:`layernorm_row_latency` matches the LN2 cycles bench/cycles.py
# measured (minilm_l6 at 2 and 8 lanes, seq 32 and 128: within 1 %; docs/engine.md, "LayerNorm lanes"); 6 since the
# serializer's output register (eighteenth session, 2026-12-07).
LN_LANES_CYCLES = 6


def layernorm_row_latency() -> int:
    """Cycles of a LayerNorm phase beyond its lanes' element cycles: the last row's statistics and its output
    pipeline (``hw.layernorm.ROW_STATS_CYCLES`` and ``OUT_LATENCY``, the block's), and :data:`LN_LANES_CYCLES`; 124
    since 2026-12-07 (LN1 may wait longer for its gains and biases: about 170 cycles on minilm_l6)."""
    from .hw.layernorm import OUT_LATENCY, ROW_STATS_CYCLES      # (hw imports perf)
    return ROW_STATS_CYCLES + OUT_LATENCY + LN_LANES_CYCLES

# A LayerNorm lane takes a row at most every this many cycles (its mean unit's time a row, MeanVariance in
# mlo_hw.hw.layernorm): rows shorter than it (hidden < 52) do not keep a lane busy every cycle.
LN_ROW_CYCLES_MIN = 50


def layernorm_row_tail(cfg) -> int:
    """Cycles of a LayerNorm lane's last row from its first input to its last output: its input, statistics and
    output pass, ``2 hidden / ln_width +`` :func:`layernorm_row_latency` (and the elements' sums of squares added at ``ln_width`` >
    1: :func:`~mlo_hw.hw.layernorm.row_sums_delay`)."""
    from .hw.layernorm import row_sums_delay
    width = cfg.folding.ln_width
    return 2 * (cfg.model.hidden // width) + layernorm_row_latency() + row_sums_delay(width)


def layernorm_cycles(cfg, rows: int | None = None) -> int:
    """Cycles of one LayerNorm phase over ``rows`` token rows (default ``seq_padded``) with ``folding.ln_lanes``
    lanes of ``folding.ln_width`` elements a cycle (:class:`~mlo_hw.hw.engine.layernorm_lanes.LayerNormLanes`): lane
    i starts ``i * hidden / simd`` cycles late (the FIFOs fill one after another from one read port); a lane takes a
    row every ``max(hidden / ln_width, 50)`` cycles after its first; the last row's :func:`layernorm_row_tail`
    follows: ``(n - 1) hidden / simd + (ceil(rows / n) - 1) max(hidden / ln_width, 50) + tail``."""
    rows = cfg.seq_padded if rows is None else rows
    h, n = cfg.model.hidden, min(cfg.folding.ln_lanes, rows)
    per_lane = -(-rows // n)
    return ((n - 1) * (h // cfg.folding.simd) + (per_lane - 1) * max(h // cfg.folding.ln_width, LN_ROW_CYCLES_MIN)
            + layernorm_row_tail(cfg))


def layernorm_visible_cycles(cfg, rows: int | None = None) -> int:
    """Cycles a layer's two LayerNorm phases over ``rows`` token rows (default ``seq_padded``) add to the matrices.
    Each starts during the last weight tile of the matrix before it, which writes a row every ``tile_rows / pe``
    times ``cols / simd`` cycles (O: ``hidden`` columns; FFN down: ``intermediate``), so a phase shows its
    :func:`layernorm_cycles` less that tile's time after its first row, and at least its last row's input,
    statistics and output (:func:`layernorm_row_tail`). Without the overlap (``tile_rows / pe`` not a power of
    two: the sequencer counts a tile's rows with a shift) the phases start after the matrix. A post-LN layer's LN1
    also runs behind FFN up, which starts once the GELU table is in and reads each row once the lanes have written
    it: FFN up's first tile (a row every ``tile_rows / pe`` times ``hidden / simd`` cycles) hides it too, all but
    that tile's last row's time."""
    return sum(layernorm_phases_visible(cfg, rows))


def layernorm_phases_visible(cfg, rows: int | None = None) -> tuple[int, int]:
    """The two terms of :func:`layernorm_visible_cycles`: (LN1's, after O; LN2's, after FFN down)."""
    post = cfg.model.norm == "post"
    return (layernorm_phase_visible(cfg, cfg.model.hidden, rows, next_cols=cfg.model.hidden if post else 0),
            layernorm_phase_visible(cfg, cfg.model.intermediate, rows))


def layernorm_overlaps(cfg) -> bool:
    """Whether the LayerNorm phases start during the last weight tile before them: the sequencer counts the rows
    that tile has written by shifting its result beats right by log2(``tile_rows / pe``), a power of two. Post-LN
    only: a pre-LN layer's O and FFN down add into X through its read port, which its LayerNorm reads."""
    groups = cfg.folding.tile_rows // cfg.folding.pe
    return cfg.model.norm == "post" and groups & (groups - 1) == 0


def layernorm_phase_visible(cfg, cols: int, rows: int | None = None, next_cols: int = 0) -> int:
    """One phase of :func:`layernorm_visible_cycles`: the LayerNorm after a matrix of ``cols`` input columns and, with
    ``next_cols``, before one of ``next_cols`` input columns that runs behind it (FFN up after a post-LN LN1)."""
    rows = cfg.seq_padded if rows is None else rows
    f = cfg.folding
    groups = f.tile_rows // f.pe
    full = layernorm_cycles(cfg, rows)
    shown = full
    if layernorm_overlaps(cfg):     # after the last row the tile before writes: that row's whole way through
        shown = max(layernorm_row_tail(cfg), full - (rows - 1) * groups * (cols // f.simd))
    # the first tile of the matrix behind it takes a row every groups * next_cols / simd cycles: all but the last
    # row's hide the LayerNorm
    return max(0, shown - (rows - 1) * groups * (next_cols // f.simd))


# Block RAM18 aspect ratios (7-series, true dual port): (width bits, depth). A BRAM36 is two.
BRAM18_SHAPES = ((1, 16384), (2, 8192), (4, 4096), (9, 2048), (18, 1024), (36, 512))
BRAM36_BYTES = 4608


def weight_tile_words(cfg) -> int:
    """MVAU weight words (``pe x simd`` bytes) of the config's largest weight tile (``tile_rows x cols``)."""
    f = cfg.folding
    return max(sec.tile_rows * sec.cols for sec in layout(cfg).sections if sec.tile_rows) // (f.pe * f.simd)


def tile_bank_words(cfg, tiled: bool) -> int:
    """MVAU weight words of a tile-buffer bank: the largest weight tile (:func:`weight_tile_words`), and in the
    DRAM-tiled engine also a head's K_h or V_h^T (``S x dh`` bytes)."""
    words = weight_tile_words(cfg)
    return max(words, cfg.seq_padded * cfg.head_dim // (cfg.folding.pe * cfg.folding.simd)) if tiled else words


def tile_stream_stall(tiles: list[tuple[int, int]], banks: int) -> int:
    """Cycles the tile buffer's ``banks`` add to a stream of weight tiles, each ``(compute, dma)``, beyond the sum of
    their ``max(compute, dma)``: a tile's fetch starts when the tile before has been fetched and the tile ``banks``
    earlier has been computed (its bank free), its compute when it is fetched and the tile before computed. After a
    matrix of short tiles (FFN up's ``hidden`` columns) a long tile (FFN down's ``intermediate``) has only the short
    ones' compute to stream in; with unbounded banks its fetch would start as early as the DMA allows."""
    def end(lookahead: int) -> int:
        fetched, computed = [], []
        for i, (c, d) in enumerate(tiles):
            start = max(fetched[-1] if fetched else 0, computed[i - lookahead] if i >= lookahead else 0)
            fetched.append(start + d)
            computed.append(max(computed[-1] if computed else 0, fetched[-1]) + c)
        return computed[-1] if computed else 0
    return end(banks) - end(len(tiles) + 1)


def tile_banks(width_bits: int, bank_words: int) -> int:
    """Banks of the weight tile buffer, ``bank_words`` words of ``width_bits`` each: four where they take no more block
    RAM than two (a wide, shallow buffer: the DMA then runs up to three tiles ahead, so that a large tile after small
    ones streams while they compute), else two."""
    return 4 if bram36(width_bits, 4 * bank_words) <= bram36(width_bits, 2 * bank_words) else 2


def bram36(width_bits: int, depth: int) -> float:
    """BRAM36 needed for a ``width_bits`` x ``depth`` memory: by width as well as by bytes (a 512-bit
    read needs 15 BRAM18 side by side however shallow the memory is)."""
    return min(-(-width_bits // w) * -(-depth // d) for w, d in BRAM18_SHAPES) / 2


# The softmax's row memories are as wide as its lanes (pe) and as deep as its row slots: at most this deep,
# yosys synth_xilinx maps them to distributed RAM (RAM64M/RAM32M: 3 or 6 bits at cost 8, against 36 bits of a
# RAMB18 at cost 129), so they take no block RAM.
LUTRAM_DEPTH = 64


def onchip_memories(cfg) -> dict[str, tuple[int, int]]:
    """Every large on-chip memory of the engine as (width bits, depth), from the engine's geometry (the softmax's
    row memories only when they are deeper than :data:`LUTRAM_DEPTH`: shallower ones are distributed RAM). Memories
    of one kind are numbered (``work0``, ``layernorm_rows1``: :func:`buffer_group` names their kind)."""
    from .hw.buffers import ParamGeometry
    from .hw.layer_engine import EngineGeometry
    from .hw.mvau import MVAUParams
    from .hw.softmax import Softmax
    g = EngineGeometry.from_config(cfg)
    s, h = g.seq, g.hidden
    word = 8 * g.simd
    beat = cfg.memory.axi_data_bits
    tile_words = tile_bank_words(cfg, tiled=False)
    param_bytes = ParamGeometry.from_config(cfg).slot_bytes       # one layer's small sections
    softmax = Softmax.memory_shapes(s, cfg.acc_bits(g.head_dim), g.softmax_lanes, g.softmax_interval)   # g.softmax
    return {
        "x": (nx.RES_BITS * g.simd, g.words(s * h)),
        "y": (nx.RES_BITS * g.simd, g.words(s * h)),
        **({"r": (nx.RES_BITS * g.simd, g.words(s * h))} if cfg.model.norm == "pre" else {}),
        "p": (word, g.words(s * s)),
        **{f"work{b}": (word, g.work_words // g.pe) for b in range(g.pe)},
        "weight_tiles": (8 * g.pe * g.simd, tile_banks(8 * g.pe * g.simd, tile_words) * tile_words),
        "params": (beat, 2 * param_bytes * 8 // beat),
        **{f"softmax_{k}": (w, d) for k, (w, d) in softmax.items() if d > LUTRAM_DEPTH},
        **_layernorm_memories(h, cfg.folding.ln_lanes, cfg.folding.ln_width),
        "mvau_vectors": (8 * g.simd, MVAUParams.from_config(cfg).max_col_folds),
    }


def _layernorm_memories(h: int, lanes: int, width: int = 1) -> dict[str, tuple[int, int]]:
    """The LayerNorm lanes' block RAMs (:class:`~mlo_hw.hw.layernorm.LayerNorm`, ``width`` elements a word). Every
    lane's gain and bias memories (one per element of a beat) when they are deeper than ``PARAM_LUTRAM_DEPTH``
    (shallower ones are distributed RAM); the row slots (``SLOTS`` rows of a power of two) of the first lane as the
    plan has always counted them and of each lane beyond two (the second lane's is in ``folding.BRAM_EXTRA``,
    calibrated on syntheses at two lanes: a single lane is counted with it, on the safe side).
    bench/synth_blocks.py --block layernorm_lanes: a lane adds 0.5 BRAM36 at hidden 128 and 2 at 384, as counted
    here."""
    from .hw.layernorm import PARAM_LUTRAM_DEPTH, SLOTS
    beats, r_bits = h // width, width * (nx.RES_BITS + 1)
    out = {"layernorm_rows": (r_bits, SLOTS * beats)}
    for i in range(lanes):
        if i >= 2:
            out[f"layernorm_rows{i}"] = (r_bits, SLOTS << max(1, (beats - 1).bit_length()))
        if h > PARAM_LUTRAM_DEPTH:
            for j in range(width):
                sub = f"{i}_{j}" if width > 1 else f"{i}"
                out[f"layernorm_bias{sub}"] = (32, beats)
                out[f"layernorm_gain{sub}"] = (nx.LN_GAIN_BITS, beats)
    return out


def buffer_group(name: str) -> str:
    """The kind of a memory of :func:`onchip_memories` (``work3`` -> ``work``): what the plan tables sum over."""
    return re.sub(r"[\d_]+$", "", name)


def onchip_plan(cfg) -> dict[str, int]:
    """Bytes of each on-chip buffer of the rolled layer engine (activations stay on chip between layers).

    x: the layer input and output (int16); y: Q during attention, then O's and LN1's output (int16); r (pre-LN
    layers only): the LayerNorms' outputs, while x keeps the residual stream (int16);
    p: one head's probabilities; work: K, V^T and CTX during attention, then the FFN intermediate
    (see :mod:`mlo_hw.hw.layer_engine`); weight_tiles: the two tile banks; params: two layers' header,
    narrow, LayerNorm and GELU sections; the softmax, LayerNorm and MVAU row memories.
    """
    mems = onchip_memories(cfg)
    out = {}
    for name, (w, d) in mems.items():
        key = buffer_group(name)
        out[key] = out.get(key, 0) + w * d // 8
    return out


def onchip_bram36(cfg) -> dict[str, float]:
    """BRAM36 of each buffer of :func:`onchip_plan`, counted by width and depth (:func:`bram36`)."""
    out = {}
    for name, (w, d) in onchip_memories(cfg).items():
        key = buffer_group(name)
        out[key] = out.get(key, 0) + bram36(w, d)
    return out
