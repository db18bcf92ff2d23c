"""Analytical figures: the roofline cycle bound and the on-chip memory plan.

Roofline bound of one layer: the sum over weight tiles of ``max(compute, DMA)`` cycles, plus the
attention products (compute only, no weights). A tile of ``tile_rows`` output channels and ``cols``
inputs computes ``seq_padded * tile_rows * cols / (pe * simd)`` cycles and needs
``tile_bytes / axi_data_bytes`` beats of DMA.
"""

from __future__ import annotations

from dataclasses import dataclass

from .weight_image import layout

__all__ = ["TileCost", "matrix_costs", "layer_bound", "onchip_plan"]


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


def onchip_plan(cfg) -> dict[str, int]:
    """Bytes of each on-chip buffer of the rolled layer (activations stay on chip between layers).

    x: the layer input and residual source; a: LN1 output (FFN input and residual source);
    work: Q, K, V and context during attention, then the FFN intermediate (they never overlap in time).
    """
    s, h, i = cfg.seq_padded, cfg.model.hidden, cfg.model.intermediate
    lay = layout(cfg)
    tile = max(sec.tile_bytes for sec in lay.sections if sec.tile_rows)
    return {
        "x": s * h,
        "a": s * h,
        "work": max(4 * s * h, s * i),
        "weight_tiles": 2 * tile,
        "scores_row": 2 * s * 4,
        "ln_rows": 2 * h * 4,
        "params": 2 * 8 * h + (1 << cfg.numerics.act_bits) + 256 * 2,
    }
