"""Config loading and validation: one-line errors naming the field."""

import copy
import subprocess
import sys

import pytest
import yaml

from mlo_hw.config import ConfigError, config_from_dict, load_config, resolve_config_path

BASE = yaml.safe_load(resolve_config_path("bert_tiny").read_text())


def with_change(path, value):
    raw = copy.deepcopy(BASE)
    d = raw
    for key in path[:-1]:
        d = d.setdefault(key, {})
    if value is KeyError:
        del d[path[-1]]
    else:
        d[path[-1]] = value
    return raw


def test_shipped_configs_load_by_name_and_path():
    a = load_config("bert_tiny")
    b = load_config("configs/bert_tiny.yaml")
    assert a == b and a.head_dim == 64 and a.model.layers == 2
    assert load_config("small.yaml").model.hidden == 32


def test_derived_figures():
    c = load_config("bert_tiny")
    assert c.acc_bits(128) == 8 + 8 - 1 + 8 + 1
    assert [m.name for m in c.matrices] == ["q", "k", "v", "o", "ffn_up", "ffn_down"]
    assert c.matrices[4].rows == 512 and c.matrices[5].cols == 512
    assert c.seq_padded % c.folding.pe == 0 and c.seq_padded % c.folding.simd == 0


@pytest.mark.parametrize("path,value,needle", [
    (("model", "heads"), 3, "model.hidden: 128 is not divisible by model.heads=3"),
    (("model", "layers"), 0, "model.layers: expected a positive integer"),
    (("model", "hiden"), 5, "model.hiden: unknown key"),
    (("model", "hidden"), "128", "model.hidden: expected an integer"),
    (("numerics", "weight_bits"), 9, "numerics.weight_bits: expected 2..8"),
    (("folding", "simd"), 24, "folding.simd: 24 does not divide model.hidden=128"),
    (("folding", "pe"), 3, "folding.pe: 3 does not divide"),
    (("folding", "tile_rows"), 12, "folding.tile_rows: 12 is not a multiple of folding.pe=8"),
    (("folding", "ln_lanes"), 0, "folding.ln_lanes: expected 1..8 (folding.simd / folding.ln_width: one read port"),
    (("folding", "ln_lanes"), 9, "folding.ln_lanes: expected 1..8 (folding.simd / folding.ln_width: one read port"),
    (("folding", "ln_lanes"), -2, "folding.ln_lanes: expected 1..8"),
    (("folding", "ln_lanes"), 2.5, "folding.ln_lanes: expected an integer, got 2.5"),
    (("folding", "ln_lanes"), True, "folding.ln_lanes: expected an integer, got True"),
    (("folding", "ln_width"), 3, "folding.ln_width: expected a power of two dividing folding.simd=8"),
    (("folding", "ln_width"), 16, "folding.ln_width: expected a power of two dividing folding.simd=8"),
    (("folding", "ln_width"), 0, "folding.ln_width: expected a power of two dividing folding.simd=8"),
    (("folding", "ln_width"), "2", "folding.ln_width: expected an integer, got '2'"),
    (("memory", "axi_data_bits"), 48, "memory.axi_data_bits: expected 32, 64, 128, 256 or 512"),
    (("memory", "max_burst_beats"), 100, "memory.max_burst_beats: expected a power of two"),
    (("target", "part"), "xc7k325t", "target.part: unknown part"),
    (("weights", "source"), "hub", "weights.source: expected 'random' or 'onnx'"),
    (("target", "block_rows"), "8", "target.block_rows: expected an integer or null, got '8'"),
    (("target", "block_rows"), 12, "target.block_rows: 12 is not a block of the DRAM-tiled schedule at seq_len"),
    (("target", "block_rows"), 0, "target.block_rows: 0 is not a block of the DRAM-tiled schedule"),
    (("model", "seq_len"), KeyError, "model.seq_len: missing"),
    (("extra",), 1, "extra: unknown top-level key"),
    (("model", "norm"), "mid", "model.norm: expected 'post' (BERT: LayerNorm after each residual add) or 'pre'"),
    (("model", "norm"), 1, "model.norm: expected a string, got 1"),
    (("model", "gelu"), "swish", "model.gelu: expected 'erf' (exact GELU), 'tanh' (GPT-2's approximation) or 'relu', got 'swish'"),
])
def test_validation_names_the_field(path, value, needle):
    with pytest.raises(ConfigError) as e:
        config_from_dict(with_change(path, value))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_layer_kind_defaults_to_bert_and_pre_ln_loads():
    """model.norm 'post' and model.gelu 'erf' when absent; a pre-LN config with tanh GELU loads."""
    cfg = load_config("bert_tiny")
    assert (cfg.model.norm, cfg.model.gelu) == ("post", "erf")
    assert config_from_dict(with_change(("model", "norm"), "pre")).model.norm == "pre"
    assert config_from_dict(with_change(("model", "gelu"), "tanh")).model.gelu == "tanh"


def test_ln_lanes_defaults_to_two_and_reaches_the_engine():
    """folding.ln_lanes: 2 when absent; a given count sizes the engine's LayerNorm lanes and its trace port."""
    from mlo_hw.hw.engine.layernorm_lanes import LayerNormLanes
    from amaranth import Shape
    from mlo_hw.hw.layer_engine import trace_members
    raw = with_change(("folding", "tile_rows"), 8)
    raw["folding"].pop("ln_lanes", None)
    assert config_from_dict(raw).folding.ln_lanes == 2
    cfg = config_from_dict(with_change(("folding", "ln_lanes"), 4))
    assert cfg.folding.ln_lanes == 4 and LayerNormLanes.from_config(cfg).lanes == 4
    assert Shape.cast(trace_members(cfg)["trace_ln_valid"].shape).width == 4
    with pytest.raises(ValueError, match="lanes x width must be 1..simd=8"):
        LayerNormLanes(128, 8, 16, 9)


def test_ln_width_defaults_to_one_and_reaches_the_engine():
    """folding.ln_width: 1 when absent; a given width sizes the lanes' LayerNorms and the trace port, and bounds
    ln_lanes (lanes x width <= simd)."""
    from amaranth import Shape
    from mlo_hw.hw.engine.layernorm_lanes import LayerNormLanes
    from mlo_hw.hw.layer_engine import trace_members
    from mlo_hw.hw.layernorm import LayerNorm
    assert load_config("bert_tiny").folding.ln_width == 1
    raw = with_change(("folding", "ln_width"), 2)
    cfg = config_from_dict(raw)
    assert cfg.folding.ln_width == 2 and LayerNormLanes.from_config(cfg).width == 2
    assert LayerNorm.from_config(cfg).width == 2
    assert Shape.cast(trace_members(cfg)["trace_ln_data"].shape).width == 2 * 2 * 16      # 2 lanes x 2 elements
    raw["folding"]["ln_lanes"] = 5
    with pytest.raises(ConfigError, match=r"^folding.ln_lanes: expected 1..4 \(folding.simd / folding.ln_width"):
        config_from_dict(raw)
    with pytest.raises(ValueError, match="lanes x width must be 1..simd=8"):
        LayerNormLanes(128, 8, 16, 5, width=2)


def test_bad_config_exits_nonzero_with_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(with_change(("folding", "simd"), 24)))
    r = subprocess.run([sys.executable, "-m", "mlo_hw.elaborate", "--config", str(bad), "-o", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "folding.simd" in r.stderr and "Traceback" not in r.stderr
    bad.write_text("model: [1, 2\n")
    r = subprocess.run([sys.executable, "-m", "mlo_hw.elaborate", "--config", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and "not valid YAML" in r.stderr and "Traceback" not in r.stderr
