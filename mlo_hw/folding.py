"""``folding: auto``: an analytic design-space exploration that picks pe, simd, tile_rows, ln_lanes and ln_width for a
config.

``python -m mlo_hw.folding --config CONFIG`` prints the ranking (the elaborate report carries it too).

A config may say ``folding: auto`` (the string, nothing else) instead of a ``{pe, simd, tile_rows}`` mapping.
The loader (:func:`mlo_hw.config.config_from_dict`) then calls :func:`choose`, which returns the config with
the chosen numbers, so everything downstream (elaborate, synth, plan, bench) sees a concrete folding (and
``runtime.json`` holds it); :func:`search_of` keeps the ranked candidates of a config so chosen, for the
elaborate report (:func:`format_search`).

For every legal (pe, simd, tile_rows) (the rules of ``config._validate`` and of the engine's geometry,
checked by running them) it takes the plan the rest of the tool chain would take (:func:`mlo_hw.plan.plan`:
on chip or DRAM-tiled, every DRAM byte counted), and for every LayerNorm lane count and width of
:func:`ln_lane_choices` the plan's expected cycles (the bound plus the LayerNorm phases, which overlap no matrix, the block transfers no
compute hides and the tile buffer's stalls: :attr:`mlo_hw.plan.Plan.expected_cycles`) give inferences per second at ``target.clock_mhz``; it estimates the
engine's resources:

- DSP48E1: the MAC array at two int8 lanes per DSP (one per lane when PE is 1: nothing to pack), the PE
  requantization multipliers (``acc + bias``, 33 bits, times the 16-bit multiplier: two DSP48E1 each, as
  yosys maps them), :data:`LN_LANE_DSP` a LayerNorm lane and element of its width and ``2 x pe`` for the softmax
  (``pe`` lanes).
- LUT (slice LUTs: logic + LUTRAM, what the part's LUT count covers): a linear model in MAC lanes, PE, SIMD
  and the plan's mode, calibrated against yosys ``synth_xilinx`` figures of engines with two LayerNorm lanes
  (:data:`LUT_MODEL`), plus :func:`ln_lane_luts` for each LayerNorm lane beyond two (less for fewer) and
  :data:`LN_WIDTH_LUT` for each element of a lane's width beyond one.
- BRAM36: the plan's buffers (counted by width and depth, with the memories of every LayerNorm lane beyond two)
  plus the block RAMs yosys adds outside them (the two default lanes' LayerNorm memories but one, FIFO memories),
  calibrated per mode (:data:`BRAM_EXTRA`).

A candidate fits when each estimate is within :data:`MARGIN` of the part's resources (block RAM: of the
plan's budget, ``target.bram36_budget`` or the part's). The fastest fitting candidate wins, where candidates
within :data:`TIE` of the fastest count as equally fast (the bound is an estimate: the engine measured 1.04 x
its bound on chip and 1.08-1.10 x tiled, docs/tiling.md); among those an on-chip plan goes first (it tracks
its bound more closely), then the most headroom (the lowest of the estimates' fractions of the part), then
fewer slice LUTs, fewer DSP48E1, more inferences per second.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass

from .config import PARTS, ConfigError, Folding

__all__ = ["AUTO", "MARGIN", "TIE", "LN_LANE_DSP", "LN_LANE_LUT", "LN_WIDTH_LUT", "LUT_MODEL", "BRAM_EXTRA", "Candidate",
           "candidate_foldings", "ln_lane_choices", "search_of", "dsp_estimate", "ln_lane_dsp", "ln_lane_luts",
           "lut_estimate", "evaluate", "explore", "choose", "format_search", "main"]

AUTO = "auto"

# Fraction of the part's resource an estimate may use. DSP and block RAM are counted per block exactly by
# synthesis (the slack covers the rest-of-engine DSPs varying with the model); LUTs need room to place and
# route, and the linear model is good to a few percent.
MARGIN = {"DSP": 0.95, "LUT": 0.85, "BRAM36": 1.0}

# Estimated inferences/s within this fraction of the fastest fitting candidate's count as a tie.
TIE = 0.02

# DSP48E1 of one LayerNorm lane (r*r, (d << k) * inv, t * gain; the last two widen with hidden), by the largest
# hidden it was measured at. LayerNormLanes alone at 2 and 4 lanes (bench/synth_blocks.py --block layernorm_lanes):
# 4 a lane at hidden 128, 5 at 384. In the engine, with the softmax's two a lane (``EngineGeometry.softmax_lanes``)
# and the requantizer's two a lane (``MVAUParams.requant_lanes``): bert_tiny 32 + 2 + 2 x 4 + 2 = 44 and
# minilm_l6_arty (hidden 384) 32 + 4 + 2 x 5 + 4 = 50, both as synthesized.
LN_LANE_DSP = {128: 4, 384: 5}

# Slice LUTs (LUT + LUTRAM) of one LayerNorm lane = base + per SIMD (its FIFO, serializer and output word are
# SIMD elements wide; the LayerNorm itself hardly depends on hidden, docs/blocks.md). LayerNormLanes alone,
# (4 lanes - 2 lanes) / 2 (bench/synth_blocks.py --block layernorm_lanes): bert_tiny (SIMD 8, hidden 128, its
# gains and biases in distributed RAM) 1,803 + 308 LUTRAM = 2,111; minilm_l6 (SIMD 32, hidden 384) 2,467.5 + 684 =
# 3,151.5; docs/synthesis.md.
LN_LANE_LUT = {"base": 1764.2, "simd": 43.35}

# Slice LUTs of each element of a LayerNorm lane's width beyond one (``folding.ln_width``: the element's residual add,
# square, sums and output pipeline; the lane's serial units, queues and row gather are not repeated): bert_tiny_auto
# (8 x 16 tiled, tile_rows 32, one lane) synthesized at width 1 and 2 (python -m mlo_hw.synth --pnr none, 2026-11-27,
# the same code): 16,569 and 17,115 slice LUTs.
LN_WIDTH_LUT = 546.0

# Slice LUTs (LUT + LUTRAM) = base + per MAC lane + per PE + per SIMD + (tiled plans) the DRAM block movers, for an
# engine of two LayerNorm lanes (every synthesis below; :func:`ln_lane_luts` for each lane more or less).
# Per PE: yosys synth_xilinx of the MVAU alone (docs/blocks.md: 1x1 432, 4x4 1,698, 8x8 3,994 LUT) -> 313 a PE
# (accumulator, bias, requantization shift, round, saturate). The rest solved from four engine syntheses
# (python -m mlo_hw.synth, slice LUTs): bert_tiny PE 8 x SIMD 8 on chip 15,760; bert_tiny_s512 8 x 8 tiled
# 16,676; bert_tiny 8 x 16 tiled 21,777; bert_tiny 4 x 16 on chip 15,859 (docs/synthesis.md, "folding: auto").
# minilm_l6_arty (8 x 8 tiled, hidden 384) measured 17,169 against 16,676 estimated: -3 %, inside the margin.
# Each softmax lane beyond the first (EngineGeometry.softmax_lanes): (17,670 + 1,888) - (14,153 + 1,460) over 7,
# bert_tiny synthesized with its softmax at 8 lanes and at 1 (python -m mlo_hw.synth --config bert_tiny). Each
# requantizer lane fewer than pe (MVAUParams.requant_lanes) saves (15,761 - 13,810) / 7: bert_tiny with 8 lanes
# (the fit above) and with 1 measured. Checked: bert_tiny 8 x 16 tiled (2 softmax and 2 requant lanes) 20,447
# measured, 20,670 estimated (+1.1 %); minilm_l6_arty 16,456 measured, 15,569 estimated (-5.4 %: its hidden-384
# LayerNorm and tiled movers are larger than the bert_tiny fit assumes).
# After the LayerNorm gains and biases moved to distributed RAM at hidden <= 128 (2026-11-25): bert_tiny at 3 LayerNorm
# lanes 15,748 measured, 15,921 estimated (+1.1 %); 8 x 16 tiled at 2 lanes 20,344 measured, 20,670 (+1.6 %).
# Refitted 2026-11-26 after the LUT savings of that day (one read multiplexer for the operand and the mover's stores,
# the LayerNorm pair words without a multiplexer, write multiplexers without a zero): base and the per-lane term
# solved from bert_tiny 8 x 8 on chip, 14,259 measured, and 8 x 16 tiled at two LayerNorm lanes, 19,188 (the other
# terms kept); bert_tiny_auto (8 x 16 tiled, tile_rows 32, one LayerNorm lane): see docs/synthesis.md.
# Refitted again 2026-11-26 with a tile_rows term (the tile parameter latch's register sets behind a read multiplexer);
# that term is gone since 2026-11-27: the latch is a distributed RAM, and tile_rows 16, 32 and 64 synthesize within
# 23 slice LUTs of each other. Base and the per-lane term refitted then, least squares over six syntheses (python -m
# mlo_hw.synth --pnr none, bert_tiny's model, folding fixed): 8 x 8 tile 8 two lanes on chip 14,443; 8 x 16 tiled:
# tile 16 at one lane 16,543 and at two 18,960, tile 32 at one 16,560 and at two 18,970, tile 64 at one 16,537:
# within 0.18 % of each (tests/test_folding.py).
LUT_MODEL = {"base": 11103.4, "lane": 22.43, "pe": 313.0, "simd": 168.9, "tiled": 916.0, "softmax_lane": 564.0,
             "requant_lane": 278.7}

# Block RAM36 yosys maps beyond the plan's buffers (the second LayerNorm lane's row memory, FIFO memories),
# measured - plan, the largest per mode kept. Measured with the LayerNorm biases in block RAM: on chip bert_tiny
# 8 x 8 49 - 47, 4 x 16 49 - 48; tiled bert_tiny 8 x 16 47 - 46, bert_tiny_s512 38.5 - 40.5, minilm_l6_arty 35 -
# 35.5; since the biases at hidden 128 are distributed RAM (mlo_hw.hw.layernorm.PARAM_LUTRAM_DEPTH) the two lanes'
# 1.0 BRAM36 of them less, and the plan counts the gains and biases deeper than that itself (mlo_hw.perf).
BRAM_EXTRA = {"on-chip": 1.0, "tiled": 0.0}

_SEARCHES: dict = {}        # config chosen by choose() -> its ranked candidates


@dataclass(frozen=True)
class Candidate:
    """One evaluated folding: its plan's figures and the resource estimate."""
    folding: Folding
    mode: str               # the plan's: "on-chip" or "tiled"
    block: int              # token rows per block
    cycles: int             # the plan's expected cycles per inference (every layer): bound + LayerNorm phases
    inferences_per_s: float
    dsp: int
    lut: int                # slice LUTs (logic + LUTRAM)
    bram36: float
    fits: bool

    @property
    def lanes(self) -> int:
        return self.folding.pe * self.folding.simd


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def ln_lane_choices(cfg) -> list[tuple[int, int]]:
    """(lanes, width) of the LayerNorm worth trying for ``cfg``'s folding: widths of a power of two up to where a
    row's beats reach the lane's statistics time (``hidden / width >= LN_ROW_CYCLES_MIN`` cycles: a wider lane waits
    on its mean unit), lane counts from 1 while ``lanes x width <= simd`` (the read port feeds no more,
    ``config._validate``) and up to the padded sequence (a lane per row at most); uneven counts share the rows out
    unevenly, which the lanes handle (``LayerNormLanes``)."""
    from .perf import LN_ROW_CYCLES_MIN
    f = cfg.folding
    widths = [w for w in (1 << i for i in range(f.simd.bit_length()))
              if f.simd % w == 0 and (w == 1 or cfg.model.hidden // w >= LN_ROW_CYCLES_MIN)]
    return [(n, w) for w in widths for n in range(1, min(f.simd // w, cfg.seq_padded) + 1)]


def candidate_foldings(cfg) -> list[Folding]:
    """(pe, simd, tile_rows) with pe and simd dividing hidden, intermediate and the head size and tile_rows a
    multiple of both dividing hidden and intermediate (``ln_lanes`` and ``ln_width`` 1: :func:`explore` tries
    :func:`ln_lane_choices` on each); the finer rules are left to :func:`evaluate`."""
    m = cfg.model
    width = math.gcd(m.hidden, m.intermediate, cfg.head_dim)
    rows = math.gcd(m.hidden, m.intermediate)
    out = []
    for pe in _divisors(width):
        for simd in _divisors(width):
            unit = math.lcm(pe, simd)
            out += [Folding(pe, simd, t, 1, 1) for t in range(unit, rows + 1, unit) if rows % t == 0]
    return out


def dsp_estimate(cfg) -> int:
    from .hw.layer_engine import EngineGeometry
    from .hw.mvau import MVAUParams, split_parts
    p = MVAUParams.from_config(cfg)
    mac = -(-p.pe // 2) * p.simd if p.packed else p.pe * p.simd
    requant = p.requant_lanes * split_parts(p.sum_bits, True)              # (acc + bias) * mult, split_product
    # a lane: (max - s) * mult (split_product of the score_bits-wide distance) and e * rcp
    softmax = EngineGeometry.from_config(cfg).softmax_lanes * (split_parts(cfg.acc_bits(cfg.head_dim), False) + 1)
    layernorm = ln_lane_dsp(cfg) * cfg.folding.ln_lanes * cfg.folding.ln_width
    return mac + requant + layernorm + softmax


def ln_lane_dsp(cfg) -> int:
    """DSP48E1 of one LayerNorm lane of width 1 at ``cfg``'s hidden size (:data:`LN_LANE_DSP`; beyond 384, as at
    384); each element of a lane's width has as many."""
    return next((n for h, n in sorted(LN_LANE_DSP.items()) if cfg.model.hidden <= h), max(LN_LANE_DSP.values()))


def ln_lane_luts(cfg) -> float:
    """Slice LUTs of one LayerNorm lane at ``cfg``'s SIMD (:data:`LN_LANE_LUT`)."""
    return LN_LANE_LUT["base"] + LN_LANE_LUT["simd"] * cfg.folding.simd


def lut_estimate(cfg, mode: str) -> int:
    from .hw.layer_engine import EngineGeometry
    f, k = cfg.folding, LUT_MODEL
    from .hw.mvau import MVAUParams
    softmax_lanes = EngineGeometry.from_config(cfg).softmax_lanes
    requant_lanes = MVAUParams.from_config(cfg).requant_lanes
    return round(k["base"] + k["lane"] * f.pe * f.simd + k["pe"] * f.pe + k["simd"] * f.simd
                 + k["softmax_lane"] * (softmax_lanes - 1) + k["requant_lane"] * (requant_lanes - f.pe)
                 + (k["tiled"] if mode == "tiled" else 0.0) + (f.ln_lanes - 2) * ln_lane_luts(cfg)
                 + f.ln_lanes * (f.ln_width - 1) * LN_WIDTH_LUT)


def _with_folding(cfg, folding: Folding):
    return dataclasses.replace(cfg, folding=folding)


def evaluate(cfg) -> Candidate | None:
    """The figures of ``cfg``'s folding, or None when the folding is illegal or no plan fits the block RAM."""
    from .config import _validate
    from .hw.layer_engine import EngineGeometry
    from .plan import plan
    try:
        _validate(cfg)
        EngineGeometry.from_config(cfg)
        p = plan(cfg)
    except ConfigError:
        return None
    part = PARTS[cfg.part_family]
    dsp, lut = dsp_estimate(cfg), lut_estimate(cfg, p.mode)
    bram = p.bram36 + BRAM_EXTRA[p.mode]
    fits = (dsp <= MARGIN["DSP"] * part["DSP"] and lut <= MARGIN["LUT"] * part["LUT"]
            and bram <= MARGIN["BRAM36"] * p.budget)
    return Candidate(cfg.folding, p.mode, p.block, p.expected_cycles, cfg.target.clock_mhz * 1e6 / p.expected_cycles,
                     dsp, lut, bram, fits)


def _with_ln_lanes(cfg) -> list:
    """``cfg`` at each LayerNorm lane count and width of :func:`ln_lane_choices`."""
    return [_with_folding(cfg, dataclasses.replace(cfg.folding, ln_lanes=n, ln_width=w))
            for n, w in ln_lane_choices(cfg)]


def _headroom_used(c: Candidate, part: dict, bram_budget: float) -> float:
    """The largest fraction of the part (block RAM: of the plan's budget) an estimate takes."""
    return max(c.dsp / part["DSP"], c.lut / part["LUT"], c.bram36 / bram_budget)


def explore(cfg) -> list[Candidate]:
    """Every legal folding of ``cfg``'s model on its part, best first (module docstring: fitting ones before the
    rest, near ties within :data:`TIE` by plan mode, headroom and LUTs, the rest by inferences/s)."""
    from .plan import _budget
    found = [c for c in (evaluate(v) for f in candidate_foldings(cfg) for v in _with_ln_lanes(_with_folding(cfg, f)))
             if c is not None]
    best = max((c.inferences_per_s for c in found if c.fits), default=0.0)
    part, bram_budget = PARTS[cfg.part_family], _budget(cfg)

    def key(c: Candidate) -> tuple:
        near = c.fits and c.inferences_per_s >= (1 - TIE) * best
        if not near:
            return (not c.fits, True, -c.inferences_per_s)
        return (False, False, 0.0, c.mode != "on-chip", _headroom_used(c, part, bram_budget), c.lut, c.dsp,
                -c.inferences_per_s)
    return sorted(found, key=key)


def choose(cfg):
    """``cfg`` with the fastest folding that fits (module docstring); its ranking: :func:`search_of`."""
    ranked = explore(cfg)
    if not ranked or not ranked[0].fits:
        part = PARTS[cfg.part_family]
        least = min(ranked, key=lambda c: c.lanes, default=None)
        what = (f"the smallest legal array (PE {least.folding.pe} x SIMD {least.folding.simd}) needs DSP "
                f"{least.dsp}, LUT {least.lut}, BRAM36 {least.bram36:g}" if least
                else "no legal folding has a plan within the block RAM budget")
        raise ConfigError(f"folding: auto found no (pe, simd, tile_rows) within {cfg.target.part}'s budget "
                          f"(DSP {part['DSP']}, LUT {part['LUT']}, BRAM36 {part['BRAM36']}, margins "
                          f"{', '.join(f'{k} {v:g}' for k, v in MARGIN.items())}): {what}")
    chosen = _with_folding(cfg, ranked[0].folding)
    _SEARCHES[chosen] = tuple(ranked)
    return chosen


def search_of(cfg) -> tuple[Candidate, ...]:
    """The ranked candidates (best first) when ``cfg`` came from ``folding: auto``, else empty."""
    return _SEARCHES.get(cfg, ())


def format_search(cfg, rows: int = 6) -> list[str]:
    """Report lines: the chosen folding and the runner-up table (empty when the folding was given by hand)."""
    ranked = search_of(cfg)
    if not ranked:
        return []
    part = PARTS[cfg.part_family]
    fit = [c for c in ranked if c.fits]
    lines = [f"`folding: auto` (mlo_hw.folding) chose PE {cfg.folding.pe} x SIMD {cfg.folding.simd}, tile_rows "
             f"{cfg.folding.tile_rows}, ln_lanes {cfg.folding.ln_lanes} x ln_width {cfg.folding.ln_width} of "
             f"{len(ranked)} legal foldings ({len(fit)} "
             f"within the estimated budget: DSP {part['DSP']} x {MARGIN['DSP']:g}, LUT {part['LUT']} x {MARGIN['LUT']:g}, BRAM36 the plan's "
             f"budget x {MARGIN['BRAM36']:g}; within {TIE:.0%} of the fastest, on-chip plans and headroom first). "
             "Estimates, not synthesis figures (cycles: the plan's bound plus the LayerNorm phases and the unhidden block transfers); the faster "
             "foldings that do not fit follow the fitting ones.", "",
             "| rank | PE | SIMD | tile_rows | LN lanes x width | MAC lanes | plan | cycles | inferences/s | DSP | LUT "
             "| BRAM36 | fits |",
             "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    faster, shapes = [], set()
    for c in ranked:            # the faster foldings that do not fit, one row per PE x SIMD
        if not c.fits and c.inferences_per_s > fit[0].inferences_per_s and (c.folding.pe, c.folding.simd) not in shapes:
            shapes.add((c.folding.pe, c.folding.simd))
            faster.append(c)
    shown = fit[:rows] + faster[:3]
    for i, c in enumerate(shown):
        rank = ranked.index(c) + 1
        plan = c.mode if c.mode == "on-chip" else f"tiled B={c.block}"
        lines.append(f"| {rank} | {c.folding.pe} | {c.folding.simd} | {c.folding.tile_rows} "
                     f"| {c.folding.ln_lanes} x {c.folding.ln_width} "
                     f"| {c.lanes} | {plan} "
                     f"| {c.cycles} | {c.inferences_per_s:.1f} | {c.dsp} | {c.lut} | {c.bram36:g} | "
                     f"{'yes' if c.fits else 'no'} |")
    return lines


def _main(argv=None) -> int:
    from .cli import ArgumentParser
    from .config import load_config
    from .folding import format_search      # the loader's copy of this module (not __main__), which holds the search
    ap = ArgumentParser(prog="python -m mlo_hw.folding", description="print the folding: auto exploration of a config")
    ap.add_argument("--config", default="bert_tiny_auto", help="a config file or the name of a shipped one")
    ap.add_argument("--rows", type=int, default=10, help="fitting candidates to list (default 10)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    lines = format_search(cfg, args.rows)
    print(f"# folding: {cfg.name} on {cfg.target.part}")
    print("\n".join(lines) if lines else f"the folding is given by hand: PE {cfg.folding.pe} x SIMD "
          f"{cfg.folding.simd}, tile_rows {cfg.folding.tile_rows}, ln_lanes {cfg.folding.ln_lanes}, "
          f"ln_width {cfg.folding.ln_width} "
          "(write folding: auto to explore)")
    return 0


def main(argv=None) -> int:
    from .cli import command
    return command()(_main)(argv)


if __name__ == "__main__":
    sys.exit(main())
