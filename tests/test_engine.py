"""The rolled layer engine: lint, config checks, and the AXI protocol tests under cocotb + Verilator with
cocotbext-axi (bad bases and TOKENS, soft reset, error recovery). Plain full-stack runs: tests/test_harness.py."""
import pytest

from mlo_hw.config import ConfigError, config_from_dict, load_config, resolve_config_path
from mlo_hw.hw.engine.activation_operand import Narrow
from mlo_hw.hw.layer_engine import EngineGeometry, EngineTop, LayerEngine, with_seq_len
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


@pytest.mark.slow    # the default suite checks both errors on the RTL through the runtime (tests/test_runtime.py)
def test_misaligned_input_base_and_bad_tokens_are_errors_without_a_run():
    cfg = load_config("small")
    run_engine(cfg, engine_params(cfg, "small", seed=7), "misaligned_input_base_is_an_error")


# -m slow: 45-75 s each. The default suite stops runs on error responses of every channel and recovers by soft
# reset through the full-stack harness (tests/test_harness.py) and the runtime (tests/test_runtime.py).
@pytest.mark.slow
@pytest.mark.parametrize("case", ["soft_reset_with_a_weight_read_pending", "soft_reset_during_load_and_store",
                                  "read_error_aborts_then_restart"])
def test_abandoned_runs_drain_the_bus_then_run_bit_exact(case):
    """Soft reset with a weight AR pending, soft resets during the input load and the output store, read
    error responses: every AXI transaction drains legally (a bus monitor), STATUS.busy covers the drain,
    START is refused meanwhile, and the next run is bit exact."""
    cfg = load_config("small")
    run_engine(cfg, engine_params(cfg, "small", drain=True, seed=7), case)


@pytest.mark.parametrize("lanes", [4, pytest.param(32, marks=pytest.mark.slow)])   # 32: MiniLM's SIMD (CI budget)
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


def test_a_config_whose_activations_do_not_fit_on_chip_builds_the_dram_tiled_engine_of_its_plan():
    from mlo_hw.plan import plan
    cfg = with_seq_len(load_config("bert_tiny"), 512)       # activations in DRAM (tiled in token blocks)
    p, eng = plan(cfg), LayerEngine(cfg)
    assert p.mode == "tiled" and (eng.g.rows, eng.g.blocks) == (p.block, 512 // p.block) and eng.g.tiled
    onchip = LayerEngine(load_config("bert_tiny"))
    assert not onchip.g.tiled and onchip.g.rows == 128


def test_elaborate_writes_the_rtl_file_list_and_register_map(tmp_path):
    from mlo_hw.elaborate import main
    assert main(["--config", "small", "-o", str(tmp_path)]) == 0
    v = (tmp_path / "mlo_engine.v").read_text()
    assert "module mlo_engine(" in v and (tmp_path / "files.f").read_text().split() == ["mlo_engine.v"]
    assert (tmp_path / "regs.json").exists() and (tmp_path / "mlo_hw_regs.h").exists()
    report = (tmp_path / "report.md").read_text()
    assert "BRAM36" in report and "not generated yet" not in report


def test_buffer_collision_flag_fires_on_a_read_and_a_write_of_one_word():
    """``trace_collision``'s source (the harness stops a run on it): a read and a write of the same word at one clock
    edge raise it, of different words do not."""
    from amaranth import Module
    from amaranth.sim import Simulator
    from mlo_hw.hw.layer_engine import _Buffer
    m = Module()
    b = _Buffer(m, "buf_t", 16, 4)
    hit = b.collision(m)
    seen = []

    async def bench(ctx):
        ctx.set(b.rd_addr, 5)
        ctx.set(b.rd_en, 1)
        ctx.set(b.w.addr, 5)
        ctx.set(b.w.en, 0b0011)
        await ctx.tick()                # both requests registered: word 5 read and written at the next edge
        seen.append(ctx.get(hit))
        ctx.set(b.w.addr, 6)
        await ctx.tick()
        seen.append(ctx.get(hit))
        ctx.set(b.w.addr, 5)
        ctx.set(b.rd_en, 0)
        await ctx.tick()
        seen.append(ctx.get(hit))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [1, 0, 0]


@pytest.mark.parametrize("half_words", [8, 12])       # a power of two (the half a top bit) and not (an offset added)
def test_buffer_halves_keep_two_blocks_apart(half_words):
    """X's two halves (tiled pass 1: X_{t+1} loads into one while block t reads the other): every word of both halves
    written through ``w`` with its half, then read back with ``rd_half``; the halves do not alias, and the memory
    holds them at ``half * half_words + addr``."""
    import random
    from amaranth import Module, Signal
    from amaranth.sim import Simulator
    from mlo_hw.hw.layer_engine import _Buffer
    m = Module()
    rd_half, wr_half = Signal(), Signal()
    b = _Buffer(m, "buf_h", 2 * half_words, 2, halves=(rd_half, wr_half))
    rng = random.Random(half_words)
    want = {(h, a): rng.randrange(1 << 16) for h in (0, 1) for a in range(half_words)}
    got = {}

    async def bench(ctx):
        ctx.set(rd_half, 1)                       # reads of the other half run beside the writes, as in pass 1
        for (h, a), v in want.items():
            ctx.set(wr_half, h)
            ctx.set(b.w.addr, a)
            ctx.set(b.w.data, v)
            ctx.set(b.w.en, 0b11)
            await ctx.tick()
        ctx.set(b.w.en, 0)
        await ctx.tick().repeat(2)
        for h, a in want:
            ctx.set(rd_half, h)
            ctx.set(b.rd_addr, a)
            ctx.set(b.rd_en, 1)
            await ctx.tick().repeat(2)             # the request registered, then the block RAM's read
            got[h, a] = ctx.get(b.r.data)
        for h, a in want:
            assert ctx.get(b.mem.data[h * half_words + a]) == want[h, a]

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == want
