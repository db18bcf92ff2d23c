"""The tiling planner: what stays on chip, what lives in DRAM, the tile size, and the cycle bound of the plan.

``python -m mlo_hw.plan --config CONFIG`` prints the plan; :func:`plan` is what the config loader, the engine,
the report and ``bench/cycles.py`` use.

Two modes. **On chip** (today's engine): every activation stays on chip between layers; the DRAM traffic is
the weight image per layer plus the input read and the output write once per run. **Tiled** (the schedule of
:mod:`mlo_hw.model.tiled`, ``docs/tiling.md``): each layer runs in two passes over token blocks of ``B`` rows, its
activations in scratch DRAM; on chip only block-sized buffers remain, plus a tile buffer that also holds a
head's K_h or V_h^T. The planner keeps everything on chip whenever that fits the budget (``target.bram36_budget``,
default the part's block RAM), else picks the block size with the lowest bound that fits; a config that fits
neither way is rejected with one line naming the numbers.

The bound (cycles, one PE x SIMD MVAU, one AXI beat per cycle):

- on chip, per layer: :func:`mlo_hw.perf.layer_bound` (per weight tile max(compute, DMA), attention products
  compute only); per run: layers x that + (input + output bytes) / beat (the load precedes the first layer,
  the store follows the last).
- tiled, per layer: per block and phase, max(the phase's weight tiles' sum of max(compute, DMA), all the
  phase's DRAM bytes / beat). Phases: pass 1 (Q, K, V tiles; X_t in, Q_t K_t V_t out), attention (per head a
  K_h and a V_h^T raw tile; Q_t in), the rest (O, FFN up, FFN down tiles; X_t in again, X'_t out). The small
  parameter sections are counted once per layer, in the first phase's bytes. The last block's Q_t stays on chip
  (pass 2 starts with that block): its pass 1 writes no Q_t, and pass 2's first heads read none.

The two LayerNorm phases of a layer (per block, when tiled) start during the last weight tile before each: the plan
carries the cycles they add beyond the matrices (:func:`mlo_hw.perf.layernorm_visible_cycles`, ``folding.ln_lanes``
lanes; tiled post-LN, LN1's per block and the run's last block's LN2, every other LN2 running behind) beside the
bound, and ``expected_cycles`` (bound plus LayerNorm plus, tiled, the block transfers no compute hides, plus the
weight tiles the tile buffer's banks hold back: :func:`mlo_hw.perf.tile_stream_stall`) is what ``folding: auto``
ranks by. The bound itself, and the choice of the block size, stay the matrices'
roofline.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from .model import numerics as nx
from .config import PARTS, ConfigError
from .perf import (bram36, buffer_group, layer_bound, layernorm_phases_visible, layernorm_visible_cycles, matrix_costs,
                   onchip_memories, tile_bank_words, tile_banks, tile_stream_stall)
from .model.tiled import scratch_layout
from .model.weight_image import layout

__all__ = ["Buffer", "Plan", "KVCache", "plan", "kv_cache", "DecodeStep", "decode_step", "block_choices", "tiled_memories", "format_plan", "main"]

SMALL_SECTIONS = ("header", "narrow", "ln1", "gelu", "ln2")


@dataclass(frozen=True)
class Buffer:
    name: str
    width: int          # bits of a word
    depth: int          # words
    bram36: float

    @property
    def bytes(self) -> int:
        return self.width * self.depth // 8


@dataclass(frozen=True)
class Plan:
    mode: str                   # "on-chip" or "tiled"
    block: int                  # token rows per block (S when on chip)
    blocks: int                 # T = S / block
    budget: float               # BRAM36 the plan must fit
    buffers: tuple              # on-chip Buffers
    scratch_bytes: int          # DRAM scratch for the activations (0 on chip)
    weights_read: int           # bytes per layer
    activations_read: int       # bytes per layer (on chip: 0; the run's input read is in ``io_bytes``)
    activations_written: int    # bytes per layer
    io_bytes: int               # on chip: the input read and the output write of a run (tiled: in the layers)
    layer_cycles: int           # the bound per layer
    cycles: int                 # the bound per run of every layer
    beat_bytes: int
    clock_mhz: float
    layernorm_cycles: int       # per layer: the two LayerNorm phases of every block (not in the bound)
    layers: int
    # an encoder-decoder: the bound of an encoder layer (``layer_cycles`` is a decoder layer's; ``cycles`` counts
    # the encoder's run and the decoder's prefill; ``layers`` both stacks' layers)
    encoder_layer_cycles: int = 0
    # tiled: per layer, the block transfers that no compute hides: the layer's first X_0 load and its last X'_t
    # store (post-LN, the store follows LN2's rows, so its last row's; the other stores run beside the next block's
    # matrices, the other loads beside the stores or the heads, and pass 2's first block's Q_t is on chip:
    # docs/tiling.md)
    serial_transfer_cycles: int = 0
    # per layer: the weight tiles' fetches the tile buffer's banks hold back (:func:`mlo_hw.perf.tile_stream_stall`)
    tile_stall_cycles: int = 0
    # once per run: tiled post-LN, the run's last block's LN2 (every other block's runs behind the next block's
    # heads, or behind the next layer's start; ``layernorm_cycles`` then counts LN1 alone)
    run_end_cycles: int = 0

    @property
    def expected_cycles(self) -> int:
        """The bound plus the LayerNorm phases, the unhidden block transfers and the tile buffer's stalls of every
        layer, and the run's last LN2 where it is counted once: what the engine's run should take."""
        per_layer = self.layernorm_cycles + self.serial_transfer_cycles + self.tile_stall_cycles
        return self.cycles + self.layers * per_layer + self.run_end_cycles

    @property
    def bram36(self) -> float:
        return sum(b.bram36 for b in self.buffers)

    @property
    def layer_bytes(self) -> int:
        return self.weights_read + self.activations_read + self.activations_written

    @property
    def bytes_per_cycle(self) -> float:
        """The DRAM bandwidth the bound needs, in bytes per cycle (the port carries ``beat_bytes``)."""
        return self.layer_bytes / self.layer_cycles


def block_choices(cfg) -> list[int]:
    """Token-block sizes the tiled schedule allows: multiples of lcm(PE, SIMD) that divide the padded sequence."""
    s, unit = cfg.seq_padded, math.lcm(cfg.folding.pe, cfg.folding.simd)
    return [b for b in range(unit, s, unit) if s % b == 0]


def tiled_memories(cfg, block: int) -> dict[str, tuple[int, int]]:
    """The on-chip memories of the tiled engine at ``block`` rows, as (width bits, depth) like
    :func:`mlo_hw.perf.onchip_memories`: X and Y int16 [2 block, H] (a block computes while the next moves),
    R (pre-LN layers) [block, H] int16, P [block, S], WORK (PE banks) the larger of K_t + V_t [2 block, H] and CTX or F [block, max(H, I)] bytes,
    the tile buffer's banks (:func:`mlo_hw.perf.tile_banks`) of the larger of a weight tile and a head's K_h (S x dh),
    the rest as on chip."""
    mems = onchip_memories(cfg)
    f, m = cfg.folding, cfg.model
    simd, pe, s, h = f.simd, f.pe, cfg.seq_padded, m.hidden
    word = 8 * simd
    work_bytes = max(2 * block * h, block * max(h, m.intermediate))
    bank_words = tile_bank_words(cfg, tiled=True)
    out = {"x": (nx.RES_BITS * simd, 2 * block * h // simd), "y": (nx.RES_BITS * simd, 2 * block * h // simd),
           **({"r": (nx.RES_BITS * simd, block * h // simd)} if m.norm == "pre" else {}),
           "p": (word, block * s // simd),
           **{f"work{b}": (word, work_bytes // simd // pe) for b in range(pe)},
           "weight_tiles": (8 * pe * simd, tile_banks(8 * pe * simd, bank_words) * bank_words)}
    for name, shape in mems.items():
        if buffer_group(name) in ("params", "softmax_scores", "softmax_exps", "layernorm_rows", "layernorm_bias",
                                  "layernorm_gain", "mvau_vectors"):
            out[name] = shape       # (the softmax's row memories are not in mems when they are distributed RAM)
    return out


def _buffers(mems) -> tuple:
    merged: dict[str, list] = {}
    for name, (w, d) in mems.items():
        key = buffer_group(name)
        b = merged.setdefault(key, [w, 0, 0.0])
        b[1] += d
        b[2] += bram36(w, d)
    return tuple(Buffer(k, w, d, n) for k, (w, d, n) in merged.items())


def _budget(cfg) -> float:
    have = PARTS[cfg.part_family]["BRAM36"]
    b = cfg.target.bram36_budget
    return have if b is None else b


def _tiled_traffic(cfg, block: int) -> tuple[int, int, int]:
    s, h = cfg.seq_padded, cfg.model.hidden
    lay, t = layout(cfg), s // block
    small = sum(lay[n].bytes for n in SMALL_SECTIONS)
    weights = small + t * sum(lay[m.name].bytes for m in cfg.matrices)
    # X, Q, K/V^T per query block, X again; Q, K, V^T, X' (the last block's Q stays on chip: pass 2 starts with it)
    act_read = 2 * s * h + s * h - block * h + t * 2 * s * h + 2 * s * h
    act_written = 3 * s * h - block * h + 2 * s * h
    if cfg.seq2seq:       # a decoder layer: the memory in, its cross K/V^T out, read again per query block
        act_read += 2 * s * h + t * 2 * s * h
        act_written += 2 * s * h
    return weights, act_read, act_written


@dataclass(frozen=True)
class _Phases:
    """A tiled layer's phases, each (cycles, DRAM bytes). Pass 1's last block keeps its Q_t on chip and pass 2 starts
    with it, so that block's pass 1 writes no Q_t and its heads read none."""
    first: tuple            # pass 1 of the first block, with the small sections
    pass1: tuple            # pass 1 of another block
    last: tuple             # pass 1 of the last block (of two or more)
    only: tuple             # pass 1 of a run of one block (the small sections, no Q_t out)
    attention: tuple        # a block's heads
    first_attention: tuple  # pass 2's first block's heads (no Q_t in)
    rest: tuple             # the rest of a block

    def layer(self, blocks: int) -> int:
        """The cycles of a layer of ``blocks`` blocks."""
        if blocks == 1:
            return self.only[0] + self.first_attention[0] + self.rest[0]
        return (self.first[0] + (blocks - 2) * self.pass1[0] + self.last[0] + self.first_attention[0]
                + (blocks - 1) * self.attention[0] + blocks * self.rest[0])


def _tiled_phases(cfg, block: int, cross: bool | None = None) -> _Phases:
    """A layer's phases at ``block`` rows (:class:`_Phases`); an encoder-decoder's decoder layer's (``cross``, default
    ``cfg.seq2seq``) with pass 0 and the cross-attention block."""
    s, h, dh = cfg.seq_padded, cfg.model.hidden, cfg.head_dim
    lanes, beat = cfg.mac_lanes, cfg.axi_data_bytes
    lay = layout(cfg)
    costs = {c.matrix: c for c in matrix_costs(cfg, block)}     # per tile: compute at ``block`` vectors, DMA

    def phase(matrices, raw_tiles, act_bytes):
        tiles = sum(costs[mm].tiles * max(costs[mm].compute, costs[mm].dma) for mm in matrices)
        tiles += raw_tiles * max(block * s * dh // lanes, -(-s * dh // beat))
        dram = sum(lay[mm].bytes for mm in matrices) + raw_tiles * s * dh + act_bytes
        return max(tiles, -(-dram // beat)), dram
    small = sum(lay[n].bytes for n in SMALL_SECTIONS)
    cross = cfg.seq2seq if cross is None else cross     # a decoder layer: pass 0 (the memory's cross K, V) joins pass 1
    pass1_matrices, raw_tiles, rest_matrices = _phase_matrices(cfg, cross)
    pass1_act, q = (9 if cross else 5) * block * h, block * h       # (Q_t: out in pass 1, in before the heads)
    return _Phases(phase(pass1_matrices, 0, pass1_act + small), phase(pass1_matrices, 0, pass1_act),
                   phase(pass1_matrices, 0, pass1_act - q), phase(pass1_matrices, 0, pass1_act - q + small),
                   phase((), raw_tiles, q), phase((), raw_tiles, 0), phase(rest_matrices, 0, 4 * block * h))


def _phase_matrices(cfg, cross: bool) -> tuple:
    """A tiled layer's weight matrices by phase, in the order the engine streams them: pass 1's, the attention's raw
    tiles (a head's K_h and V_h^T, twice for a decoder layer's cross-attention block), the rest's."""
    heads = cfg.model.heads
    if cross:
        return ("xk", "xv", "q", "k", "v"), 4 * heads, ("o", "xq", "xo", "ffn_up", "ffn_down")
    return ("q", "k", "v"), 2 * heads, ("o", "ffn_up", "ffn_down")


def _tile_stall(cfg, block: int | None) -> int:
    """Per layer, the cycles the tile buffer's banks add to its weight-tile stream (:func:`perf.tile_stream_stall`):
    tiled at ``block`` rows (every block's pass 1, then every block's heads and the rest), or on chip (None)."""
    f, lanes, beat = cfg.folding, cfg.mac_lanes, cfg.axi_data_bytes
    s, dh = cfg.seq_padded, cfg.head_dim
    costs = {c.matrix: c for c in matrix_costs(cfg, s if block is None else block)}
    tiles = lambda names: [(costs[n].compute, costs[n].dma) for n in names for _ in range(costs[n].tiles)]  # noqa: E731
    if block is None:
        stream = tiles(m.name for m in cfg.matrices)
    else:
        pass1, raw, rest = _phase_matrices(cfg, cfg.seq2seq)
        raw_tile = (block * s * dh // lanes, -(-s * dh // beat))
        t = s // block
        stream = t * tiles(pass1) + t * ([raw_tile] * raw + tiles(rest))
    return tile_stream_stall(stream, tile_banks(8 * f.pe * f.simd, tile_bank_words(cfg, tiled=block is not None)))


def _tiled_layer_cycles(cfg, block: int, cross: bool | None = None) -> int:
    return _tiled_phases(cfg, block, cross).layer(cfg.seq_padded // block)


@dataclass(frozen=True)
class DecodeStep:
    """The model of a decode step of a KV-cache engine: ``cycles`` the bound (every DRAM byte counted),
    ``layernorm`` the LayerNorm cycles beyond it, ``bytes`` what it moves over the AXI port."""
    cycles: int
    layernorm: int
    bytes: int


def decode_step(cfg) -> DecodeStep:
    """A decode step of ``cfg``'s KV-cache engine (:func:`kv_cache`): one block through every layer, per layer pass 1
    with the small sections, the heads over the cache's whole capacity, the rest."""
    p = plan(cfg)
    ph = _tiled_phases(cfg, p.block)
    phases = (ph.only, ph.first_attention, ph.rest)
    n = cfg.model.layers
    return DecodeStep(n * sum(c for c, _ in phases), n * layernorm_visible_cycles(cfg, p.block),
                      n * sum(b for _, b in phases))


def _tiled_plan(cfg, block: int, budget: float) -> Plan:
    w, ar, aw = _tiled_traffic(cfg, block)
    layer_cycles = _tiled_layer_cycles(cfg, block)
    m = cfg.model
    block_bytes = 2 * block * m.hidden         # an int16 [B, H] block: a layer's first X_0 load
    # a layer's last X'_t store: post-LN behind LN2, which it follows row by row (its last row after LN2's end)
    store_bytes = 2 * m.hidden if m.norm == "post" else block_bytes
    enc = _tiled_layer_cycles(cfg, block, cross=False) if cfg.seq2seq else 0
    blocks = cfg.seq_padded // block
    ln1, ln2 = layernorm_phases_visible(cfg, block)
    # post-LN, every LN2 but the run's last runs behind the next block's heads or the next layer's start
    behind = m.norm == "post" and not cfg.seq2seq
    layernorm, run_end = (blocks * ln1, ln2) if behind else (blocks * (ln1 + ln2), 0)
    return Plan("tiled", block, blocks, budget, _buffers(tiled_memories(cfg, block)),
                scratch_layout(cfg).bytes, w, ar, aw, 0, layer_cycles, m.layers * layer_cycles + m.encoder_layers * enc,
                cfg.axi_data_bytes, cfg.target.clock_mhz, layernorm, cfg.image_layers, enc,
                -(-(block_bytes + store_bytes) // cfg.axi_data_bytes), _tile_stall(cfg, block), run_end)


def _onchip_plan(cfg, budget: float) -> Plan:
    s, h, beat = cfg.seq_padded, cfg.model.hidden, cfg.axi_data_bytes
    io = 2 * (-(-2 * cfg.model.seq_len * h // beat) * beat)
    per_layer = layer_bound(cfg)
    return Plan("on-chip", s, 1, budget, _buffers(onchip_memories(cfg)), 0, layout(cfg).layer_bytes, 0, 0, io,
                per_layer, cfg.model.layers * per_layer + io // beat, beat, cfg.target.clock_mhz,
                layernorm_visible_cycles(cfg), cfg.model.layers, tile_stall_cycles=_tile_stall(cfg, None))


@dataclass(frozen=True)
class KVCache:
    """A decoder's KV cache in the DRAM-tiled engine (``docs/decode.md``): every layer's K and V^T in the scratch,
    ``capacity`` keys; a run's first token (CACHE_LEN) a multiple of ``unit``; a run after a prefill at most
    ``block`` tokens (one block)."""
    capacity: int
    unit: int
    block: int

    def refuses(self, cache_len: int, tokens: int) -> bool:
        """START's check (``ERROR_CODE.bad_cache``): CACHE_LEN not a multiple of ``unit``, above 0 with more than a
        block of tokens, or CACHE_LEN + TOKENS above the capacity. The engine's own is
        :meth:`mlo_hw.hw.engine.sequencer.Sequencer.cache_bad`."""
        return bool(cache_len % self.unit or (cache_len and tokens > self.block) or cache_len + tokens > self.capacity)


def kv_cache(cfg) -> KVCache | None:
    """The KV cache of ``cfg``'s engine: a causal model whose activations live in DRAM, else None."""
    if not cfg.model.causal:
        return None
    p = plan(cfg)
    if p.blocks == 1:
        return None
    unit = math.lcm(cfg.folding.pe, cfg.folding.simd)
    if unit & (unit - 1):
        raise ConfigError(f"folding.simd: a decoder's KV cache appends whole MVAU weight words (lcm(pe, simd) keys), "
                          f"which the engine addresses by shifts: lcm(pe={cfg.folding.pe}, simd={cfg.folding.simd}) = "
                          f"{unit} must be a power of two")
    return KVCache(cfg.seq_padded, unit, p.block)


def plan(cfg) -> Plan:
    """The plan for ``cfg`` (module docstring); ConfigError with one line when nothing fits the budget."""
    budget = _budget(cfg)
    forced = cfg.target.block_rows
    if forced is not None:       # target.block_rows: the DRAM-tiled plan at that block, or an error
        choices = block_choices(cfg)
        if forced not in choices:
            raise ConfigError(f"target.block_rows: {forced} is not a block of the DRAM-tiled schedule at seq_len "
                              f"{cfg.model.seq_len}: expected one of {', '.join(map(str, choices)) or 'none'} "
                              f"(multiples of lcm(pe, simd) that divide the padded sequence {cfg.seq_padded})")
        p = _tiled_plan(cfg, forced, budget)
        if p.bram36 > budget:
            raise ConfigError(f"target.block_rows: the DRAM-tiled plan at {forced} rows needs {p.bram36:g} BRAM36, "
                              f"above the budget of {budget:g}")
        return p
    onchip = _onchip_plan(cfg, budget)
    if onchip.bram36 <= budget and not cfg.seq2seq:     # an encoder-decoder's cross K/V live in the scratch
        return onchip
    tiled = [_tiled_plan(cfg, b, budget) for b in block_choices(cfg)]
    fits = [p for p in tiled if p.bram36 <= budget]
    if fits:
        return min(fits, key=lambda p: (p.cycles, -p.block))
    smallest = min(tiled, key=lambda p: p.bram36) if tiled else onchip
    big = ", ".join(f"{b.name} {b.bram36:g}" for b in sorted(smallest.buffers, key=lambda b: -b.bram36)[:3])
    where = "target.bram36_budget" if cfg.target.bram36_budget is not None else "target.part"
    raise ConfigError(f"{where}: no plan fits {budget:g} BRAM36 ({cfg.target.part}): all on chip needs "
                      f"{onchip.bram36:g}, activations in DRAM at least {smallest.bram36:g} (block of "
                      f"{smallest.block} rows: {big}, ...) at seq_len {cfg.model.seq_len}, hidden {cfg.model.hidden}, "
                      f"intermediate {cfg.model.intermediate}")


def format_plan(p: Plan, markdown: bool = True) -> list[str]:
    """The plan as report lines (Markdown tables)."""
    port = p.beat_bytes * p.clock_mhz
    need = p.bytes_per_cycle * p.clock_mhz
    mode = ("all activations on chip (no scratch DRAM)" if p.mode == "on-chip" else
            f"activations in DRAM, token blocks of {p.block} rows ({p.blocks} blocks), scratch {p.scratch_bytes} bytes")
    lines = [f"Mode: {p.mode}: {mode}. Budget {p.budget:g} BRAM36; the plan uses {p.bram36:g}.", "",
             "| on-chip buffer | width | depth | bytes | BRAM36 |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {b.name} | {b.width} | {b.depth} | {b.bytes} | {b.bram36:g} |" for b in p.buffers]
    lines += [f"| **total** | | | **{sum(b.bytes for b in p.buffers)}** | **{p.bram36:g}** |", "",
              "| DRAM traffic per layer | bytes |", "|---|---:|",
              f"| weights read | {p.weights_read} |", f"| activations read | {p.activations_read} |",
              f"| activations written | {p.activations_written} |"]
    if p.io_bytes:
        lines.append(f"| input read + output written (once per run) | {p.io_bytes} |")
    if p.encoder_layer_cycles:
        lines += ["", f"An encoder-decoder: an encoder layer's bound is {p.encoder_layer_cycles} cycles, a decoder "
                      f"layer's (pass 0's cross K/V and the cross-attention block included) {p.layer_cycles}; the run "
                      "below is the encoder's run plus the decoder's prefill."]
    lines += ["", f"Bound: {p.layer_cycles} cycles per layer, {p.cycles} per run (every DRAM byte counted); it "
                  f"needs {p.bytes_per_cycle:.2f} bytes per cycle ({need:.0f} MB/s at {p.clock_mhz:g} MHz) of the "
                  f"port's {p.beat_bytes} ({port:.0f} MB/s).",
              "", f"LayerNorm beyond the matrices (a post-LN layer's phases start during the last tile before them; "
                  f"not in the bound): {p.layernorm_cycles} cycles per layer."]
    if p.run_end_cycles:
        lines += ["", f"The run's last LayerNorm (tiled post-LN: every block's LN2 but the run's last runs behind the "
                      f"next block's heads or the next layer's start; the line above counts LN1): "
                      f"{p.run_end_cycles} cycles per run."]
    if p.serial_transfer_cycles:
        lines += ["", f"Block transfers no compute hides (a layer's first load and its last store, post-LN the "
                      f"last store's last row; not in the bound): "
                      f"{p.serial_transfer_cycles} cycles per layer."]
    if p.tile_stall_cycles:
        lines += ["", f"Weight tiles the tile buffer's banks hold back (a long tile after short ones streams in behind "
                      f"them alone; not in the bound): {p.tile_stall_cycles} cycles per layer."]
    lines += ["", f"Expected (bound, LayerNorm, those transfers and stalls): {p.expected_cycles} cycles per run."]
    return lines


def _main(argv=None) -> int:
    from .cli import ArgumentParser
    from .config import load_config
    ap = ArgumentParser(prog="python -m mlo_hw.plan", description="print the tiling plan of a config")
    ap.add_argument("--config", default="bert_tiny", help="a config file or the name of a shipped one")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    print(f"# plan: {cfg.name} on {cfg.target.part}")
    print("\n".join(format_plan(plan(cfg))))
    return 0


def main(argv=None) -> int:
    from .cli import command
    return command()(_main)(argv)


if __name__ == "__main__":
    sys.exit(main())
