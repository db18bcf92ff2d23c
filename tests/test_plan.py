"""The tiling planner (mlo_hw/plan.py): on chip when it fits, else the DRAM-tiled schedule at the best block size
within the budget; its traffic equals the executed schedule's (mlo_hw/model/tiled.py); a config that fits neither way
is rejected with one line; the engine of this version refuses a tiled plan honestly."""
import copy

import numpy as np
import pytest
import yaml

from mlo_hw.config import ConfigError, config_from_dict, load_config, resolve_config_path
from mlo_hw.perf import layer_bound, onchip_bram36, tile_stream_stall
from mlo_hw.plan import block_choices, plan
from mlo_hw.model.quantize import build_model
from mlo_hw.model.tiled import layer_traffic, tiled_stack

BERT_BASE = dict(layers=12, hidden=768, heads=12, intermediate=3072)
NEXYS = ("xc7a200tsbg484-1", "nexys_video")


def _cfg(base="bert_tiny", part=None, budget=None, ln_lanes=None, **model):
    raw = yaml.safe_load(resolve_config_path(base).read_text())
    raw = copy.deepcopy(raw)
    raw["model"].update(model)
    if ln_lanes is not None:
        raw["folding"]["ln_lanes"] = ln_lanes
    if part:
        raw.setdefault("target", {})["part"], raw["target"]["board"] = part
    if budget is not None:
        raw.setdefault("target", {})["bram36_budget"] = budget
    return config_from_dict(raw, "plan_test")


@pytest.mark.parametrize("model,part,mode", [
    (dict(seq_len=128), None, "on-chip"),                                   # no regression: bert_tiny s128, 35T
    (dict(seq_len=512), None, "tiled"),
    (dict(layers=6, hidden=384, heads=12, intermediate=1536, seq_len=128), None, "tiled"),   # MiniLM, 35T
    (dict(seq_len=128, **BERT_BASE), NEXYS, "on-chip"),
    (dict(seq_len=512, **BERT_BASE), NEXYS, "tiled"),
    (dict(seq_len=512, ln_lanes=1, **BERT_BASE), None, "tiled"),            # BERT-base s512 on the 35T (one LN lane)
])
def test_the_issue_table_is_planned(model, part, mode):
    cfg = _cfg(part=part, **model)
    p = plan(cfg)
    assert p.mode == mode and p.bram36 <= p.budget
    onchip = sum(onchip_bram36(cfg).values())
    assert (onchip <= p.budget) == (mode == "on-chip")
    if mode == "tiled":
        assert p.block in block_choices(cfg) and p.blocks * p.block == cfg.seq_padded
        # no other block size that fits has a lower bound
        from mlo_hw.plan import _tiled_plan
        others = [_tiled_plan(cfg, b, p.budget) for b in block_choices(cfg)]
        assert p.cycles == min(o.cycles for o in others if o.bram36 <= p.budget)


def test_on_chip_bound_is_the_tile_bound_plus_the_input_and_output():
    cfg = load_config("bert_tiny")
    p = plan(cfg)
    io = 2 * 2 * cfg.model.seq_len * cfg.model.hidden
    assert p.layer_cycles == layer_bound(cfg) == 458752
    assert p.cycles == cfg.model.layers * layer_bound(cfg) + io // cfg.axi_data_bytes


@pytest.mark.parametrize("seq,budget", [(64, 9.5), (128, 12)])
def test_a_budget_forces_the_tiled_path_and_its_traffic_is_the_executed_schedule(seq, budget):
    cfg = _cfg("small", budget=budget, seq_len=seq)
    p = plan(cfg)
    assert p.mode == "tiled" and p.bram36 <= budget
    _, model = build_model(cfg)
    s, h = cfg.seq_padded, cfg.model.hidden
    run = tiled_stack(cfg, model.layers, np.zeros((s, h), np.int64), np.ones(s, bool), p.block)
    for li in range(cfg.model.layers):
        t = layer_traffic(run.transfers, li)
        assert (t["weights_read"], t["activations_read"], t["activations_written"]) == \
            (p.weights_read, p.activations_read, p.activations_written)
    # every activation byte: X twice, Q once, K and V^T once per query block (read); Q, K, V^T, X' (written); the
    # last block's Q neither (on chip: pass 2 starts with that block)
    assert p.activations_read == 2 * (2 * s * h) + s * h - p.block * h + p.blocks * 2 * s * h
    assert p.activations_written == 3 * s * h - p.block * h + 2 * s * h


def test_the_engine_is_built_for_the_plan_and_its_buffers_fit_the_budget():
    """A tiled plan builds the DRAM-tiled engine at the plan's block size, and the engine's own memories (word
    width x depth, counted like the planner's) fit the budget the plan was made for."""
    from mlo_hw.hw.layer_engine import LayerEngine
    from mlo_hw.perf import bram36
    cfg = _cfg("small", budget=9.5, seq_len=64)
    p, eng = plan(cfg), LayerEngine(cfg)
    assert p.mode == "tiled" and (eng.g.rows, eng.g.blocks) == (p.block, p.blocks)
    g = eng.g
    x_y = 2 * bram36(16 * g.simd, g.words(g.rows * g.hidden))
    work = g.pe * bram36(8 * g.simd, g.work_words // g.pe)
    probs = bram36(8 * g.simd, g.words(g.rows * g.seq))
    planned = {b.name: b.bram36 for b in p.buffers}
    assert x_y <= planned["x"] + planned["y"] and work <= planned["work"] and probs <= planned["p"]


def test_a_config_that_fits_no_way_is_rejected_with_the_numbers():
    with pytest.raises(ConfigError) as e:
        _cfg("small", budget=2, seq_len=16)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("target.bram36_budget: no plan fits 2 BRAM36") and "at least" in msg


@pytest.mark.parametrize("bad", [0, -3, "many", True, float("inf")])
def test_a_bad_budget_is_a_one_line_error(bad):
    with pytest.raises(ConfigError, match="target.bram36_budget"):
        _cfg("small", budget=bad)


def test_tile_stream_stall_counts_the_banks():
    """A long tile after short ones streams in while only they compute: with two banks its fetch starts once the tile
    two before it is computed (worked by hand: fetches end at 1, 2, 4, 9; computes at 3, 5, 7, 17, not 15); with four
    banks, or no long tile, nothing."""
    tiles = [(2, 1)] * 3 + [(8, 4)]
    assert tile_stream_stall(tiles, 2) == 2
    assert tile_stream_stall(tiles, 4) == 0
    assert tile_stream_stall([(2, 1)] * 6, 2) == 0


@pytest.mark.parametrize("tile_rows, measured", [(32, 0), (64, 16720)])
def test_tile_stall_matches_the_measured_run(tile_rows, measured):
    """bert_tiny's model at PE 8 x SIMD 16 (B = 32): at tile_rows 64 the tile buffer has two banks (four at 32), and FFN
    down's first tile (32 KiB, 4,096 beats) streams in behind FFN up's last (2,048 cycles). ``python bench/cycles.py``
    (2026-11-27, ideal memory) measured FFN_DOWN's DMA stalls over both layers: 16,720 at tile_rows 64, 0 at 32."""
    raw = yaml.safe_load(resolve_config_path("bert_tiny").read_text())
    raw["folding"] = {"pe": 8, "simd": 16, "tile_rows": tile_rows, "ln_lanes": 1}
    p = plan(config_from_dict(raw, "plan_test"))
    assert p.mode == "tiled" and p.block == 32
    assert abs(p.layers * p.tile_stall_cycles - measured) <= 0.03 * measured
