"""An encoder-decoder (BART's post-LN layers) in RTL: the encoder's run, then the decoder's prefill with
cross-attention over the encoder's output in DRAM, then decode steps through the KV cache, bit-exact against the
golden model under random AXI stalls (docs/seq2seq.md)."""

from types import SimpleNamespace

import numpy as np
import pytest

from mlo_hw.model import numerics as nx
from mlo_hw.model.golden import IntMemory, int_matmul, int_stack
from mlo_hw.model.seq2seq import random_seq2seq
from mlo_hw.model.tiled import kv_head, scratch_layout
from sim.harness import EngineSim, Run, small_seq2seq_tiled_config



def _decoder_rows(y, first, last, seq, hidden):
    z = np.zeros((seq, hidden), np.int64)
    z[:last - first + 1] = y[first:last + 1]
    return z


def test_rtl_encoder_then_decoder_prefill_and_decode_steps():
    """One simulation, 30 % random stalls on every AXI channel: the encoder (50 of 64 tokens) into the memory region;
    the decoder's prefill (37 tokens: pass 0 writes every decoder layer's cross K and V^T of the memory, checked in
    the scratch), three decode steps (CACHE_LEN 36: the cross K/V reused), then two refused STARTs
    (MEMORY_TOKENS above the sequence; CACHE_LEN > 0 in an encoder run: ERROR_CODE.bad_memory, no run)."""
    _encoder_decoder_runs(small_seq2seq_tiled_config())


@pytest.mark.slow
@pytest.mark.parametrize("rmsnorm,gelu", [(False, "erf"), (True, "relu")])
def test_rtl_pre_ln_encoder_decoder(rmsnorm, gelu):
    """As above with pre-LN layers (mBART's kind: LNX before the cross block's Q, XO added into the residual
    stream), and with T5's RMSNorm and ReLU FFN (T5 without its relative position bias)."""
    _encoder_decoder_runs(small_seq2seq_tiled_config(norm="pre", rmsnorm=rmsnorm, gelu=gelu))


def _encoder_decoder_runs(cfg):
    m = cfg.model
    s, h, heads = m.seq_len, m.hidden, m.heads
    rng = np.random.default_rng(7)
    _, q = random_seq2seq(cfg, rng)
    sim = EngineSim(cfg, SimpleNamespace(layers=q.encoder + q.decoder))
    x = q.quantize(rng.normal(0, 1, (s, h)), q.encoder_scale)
    y = q.quantize(rng.normal(0, 1, (s, h)), q.decoder_scale)
    te, td, steps, unit = 50, 37, 3, 4
    runs = [Run(x, te, m.encoder_layers, memory_tokens=0, output_to_memory=True),
            Run(_decoder_rows(y, 0, td - 1, s, h), td, m.layers, memory_tokens=te, weight_layer=m.encoder_layers,
                cache_len=0, dump_scratch=True)]
    starts = []
    for n in range(td, td + steps):
        a = n - n % unit
        starts.append(a)
        runs.append(Run(_decoder_rows(y, a, n, s, h), n - a + 1, m.layers, memory_tokens=te,
                        weight_layer=m.encoder_layers, cache_len=a, trace=False))
    runs += [Run(x, 10, m.layers, memory_tokens=s + 1, weight_layer=m.encoder_layers, trace=False),
             Run(x, 10, m.encoder_layers, memory_tokens=0, cache_len=unit, trace=False)]
    res = sim.run_many(runs, stall=0.3, seed=3)
    bit = sim.h.bit
    for i, r in enumerate(res[:2 + steps]):
        assert r.irq and r.status & bit("STATUS", "done") and not r.status & bit("STATUS", "error"), \
            f"run {i}: STATUS {r.status:#x} ERROR_CODE {r.error_code:#x}"
    keys = np.arange(s) < te
    enc = int_stack(x, q.encoder, keys, heads)
    assert np.array_equal(res[0].output, enc), "the encoder's output differs"
    memory = IntMemory(enc, keys)
    full = int_stack(y, q.decoder, nx.attention_mask(np.arange(s) < td + steps, True), heads, memory=memory)
    prefill = int_stack(_decoder_rows(y, 0, td - 1, s, h), q.decoder, nx.attention_mask(np.arange(s) < td, True),
                        heads, memory=memory)
    assert np.array_equal(res[1].output, prefill), \
        f"the decoder's prefill differs at {np.argwhere(res[1].output != prefill)[:3].tolist()}"
    # the cross-attention matters: the golden decoder over another memory is another output
    other = int_stack(_decoder_rows(y, 0, td - 1, s, h), q.decoder, nx.attention_mask(np.arange(s) < td, True),
                      heads, memory=IntMemory(enc, np.arange(s) < 1))
    assert not np.array_equal(res[1].output[:td], other[:td])
    for i, (a, r) in enumerate(zip(starts, res[2:2 + steps])):
        n = td + i
        assert np.array_equal(r.output[n - a], full[n]), f"decode step at position {n} (CACHE_LEN {a}) differs"
    # pass 0's cross K and V^T of the memory, per decoder layer and head, in the scratch
    sc, dh = scratch_layout(cfg), cfg.head_dim
    for li, p in enumerate(q.decoder):
        kv8 = nx.narrow(enc, p.cross.narrow_mem)
        k, v = (nx.requant(int_matmul(kv8, mat.w.T) + mat.bias, mat.mult, mat.shift) for mat in (p.cross.k, p.cross.v))
        for hh in range(heads):
            at = li * sc.kv_stride + hh * cfg.seq_padded * dh
            got_k, got_vt = kv_head(cfg, res[1].scratch[sc.xk + at:][:cfg.seq_padded * dh],
                                    res[1].scratch[sc.xvt + at:][:cfg.seq_padded * dh])
            assert np.array_equal(got_k[:s], k[:, hh * dh:(hh + 1) * dh]), f"layer {li} head {hh}: cross K"
            assert np.array_equal(got_vt[:, :s], v[:, hh * dh:(hh + 1) * dh].T), f"layer {li} head {hh}: cross V^T"
    for r in res[-2:]:
        assert r.irq and r.status & bit("STATUS", "error") and r.error_code == bit("ERROR_CODE", "bad_memory"), \
            f"STATUS {r.status:#x} ERROR_CODE {r.error_code:#x}"


@pytest.mark.slow
def test_rtl_bart_fixture_end_to_end():
    """tests/fixtures/onnx/bart.onnx through the engine: the front end's float layers, quantized on the model's own
    inputs, the encoder's run (a padded input) and the decoder's prefill in RTL under 20 % stalls, bit-exact with the
    golden model, and the dequantized output against onnxruntime (cosine 0.99999 measured)."""
    pytest.importorskip("onnxruntime")
    from pathlib import Path

    from mlo_hw.config import config_from_dict
    from mlo_hw.frontend import load
    from mlo_hw.frontend.seq2seq import Seq2SeqHost, seq2seq_inputs, seq2seq_model
    from mlo_hw.model.seq2seq import int_scores, quantize_seq2seq
    fe = load(Path(__file__).parent / "fixtures" / "onnx" / "bart.onnx")
    model, host = seq2seq_model(fe), Seq2SeqHost(fe)
    s = 16
    rng = np.random.default_rng(0)
    q = quantize_seq2seq(model, [host.run(*c) for c in seq2seq_inputs(host, s, s, rng, 4)], False)
    cfg = config_from_dict({"name": "bart_fixture", "model": {
        "layers": len(model.decoder), "encoder_layers": len(model.encoder), "hidden": model.hidden,
        "heads": model.heads, "intermediate": model.intermediate, "seq_len": s, "layernorm_eps": model.eps,
        "causal": True, "norm": model.norm, "gelu": model.gelu},
        "folding": {"pe": 4, "simd": 4, "tile_rows": 8}, "memory": {"axi_data_bits": 64, "max_burst_beats": 16}})
    sim = EngineSim(cfg, SimpleNamespace(layers=q.encoder + q.decoder))
    ids, mask, dec = seq2seq_inputs(host, s, s, rng, 2)[1]
    r = host.run(ids, mask, dec)
    te = int(mask.sum())
    assert te < s
    x, y = q.quantize(r["enc_in"], q.encoder_scale), q.quantize(r["dec_in"], q.decoder_scale)
    res = sim.run_many([Run(x, te, len(q.encoder), memory_tokens=0, output_to_memory=True),
                        Run(y, s, len(q.decoder), memory_tokens=te, weight_layer=len(q.encoder), cache_len=0)],
                       stall=0.2)
    enc = q.encode(x, int_scores(r["encoder"]))
    want = q.decode(y, int_scores(r["self"]), q.memory(enc), int_scores(r["cross"]))
    assert np.array_equal(res[0].output, enc) and np.array_equal(res[1].output, want)
    got = res[1].output * q.decoder_out_scale
    cos = float((got * r["dec_out"]).sum() / np.linalg.norm(got) / np.linalg.norm(r["dec_out"]))
    print(f"bart fixture in RTL: encoder {res[0].cycles} cycles, decoder {res[1].cycles}; cosine vs onnxruntime {cos:.6f}")
    assert cos > 0.99


SMALL_SEQ2SEQ = {"name": "s2s_small", "model": {"layers": 2, "encoder_layers": 2, "hidden": 32, "heads": 2,
                                                "intermediate": 64, "seq_len": 16, "causal": True},
                 "folding": {"pe": 4, "simd": 4, "tile_rows": 8}, "memory": {"axi_data_bits": 64, "max_burst_beats": 16}}


def _runtime_check(build, cfg, backend):
    """encode(), decode() (a prefill) and a decode step through the runtime, against the golden model."""
    from mlo_hw.model.quantize import build_model
    from mlo_hw.runtime import Accelerator, RuntimeInputError
    _, q = build_model(cfg)
    s, h, heads = cfg.model.seq_len, cfg.model.hidden, cfg.model.heads
    rng = np.random.default_rng(3)
    x = q.quantize_input(rng.normal(0, 1, (s, h)))
    with Accelerator(build, backend) as acc:
        y = acc.quantize_decoder_input(rng.normal(0, 1, (s, h)))
        with pytest.raises(RuntimeInputError, match="no memory yet"):
            acc.decode(y, 9)
        memory = acc.encode(x, 12)
        keys = np.arange(s) < 12
        enc = int_stack(x, q.encoder, keys, heads)
        assert np.array_equal(memory, enc)
        out = acc.decode(y, 9)
        want = int_stack(y, q.decoder, nx.attention_mask(np.arange(s) < 9, True), heads, memory=IntMemory(enc, keys))
        assert np.array_equal(out[:9], want[:9])
        step = np.zeros((s, h), np.int64)
        step[:2] = y[8:10]
        full = int_stack(y, q.decoder, nx.attention_mask(np.arange(s) < 10, True), heads, memory=IntMemory(enc, keys))
        assert np.array_equal(acc.decode(step, 2, cache_len=8)[1], full[9])
        with pytest.raises(RuntimeInputError, match="is an encoder-decoder: call encode"):
            acc.run(x)


@pytest.fixture(scope="module")
def seq2seq_build(tmp_path_factory):
    from mlo_hw.config import config_from_dict
    from mlo_hw.elaborate import write_build
    cfg = config_from_dict(SMALL_SEQ2SEQ)
    out = tmp_path_factory.mktemp("s2s")
    write_build(cfg, out)
    return out, cfg


def test_elaborate_and_runtime_on_the_golden_backend(seq2seq_build):
    """An encoder-decoder config elaborates (the image holds both stacks; the test vector is the encoder's input,
    the memory, the decoder's input and output) and runs through the runtime's encode() and decode()."""
    from mlo_hw.model.quantize import from_dram
    build, cfg = seq2seq_build
    s, h = cfg.model.seq_len, cfg.model.hidden
    vec = {n: from_dram((build / f"golden_{n}.bin").read_bytes(), s, h) for n in ("input", "memory", "decoder_input",
                                                                                   "output")}
    from mlo_hw.model.quantize import build_model
    _, q = build_model(cfg)
    keys = np.ones(s, bool)
    assert np.array_equal(vec["memory"], int_stack(vec["input"], q.encoder, keys, cfg.model.heads))
    assert np.array_equal(vec["output"], int_stack(vec["decoder_input"], q.decoder, nx.attention_mask(keys, True),
                                                   cfg.model.heads, memory=IntMemory(vec["memory"], keys)))
    assert "2 encoder layers, then 2 decoder layers with cross-attention" in (build / "report.md").read_text()
    _runtime_check(build, cfg, "golden")


@pytest.mark.slow
def test_runtime_on_the_sim_backend(seq2seq_build):
    _runtime_check(*seq2seq_build, "sim")


@pytest.mark.slow
@pytest.mark.parametrize("kind", [{}, {"norm": "pre", "rmsnorm": True, "gelu": "relu"}])
def test_encoder_decoder_top_lints_clean(kind):
    from mlo_hw.hw.layer_engine import EngineTop
    from sim.runner import lint, to_verilog
    v = to_verilog(EngineTop(small_seq2seq_tiled_config(**kind)), "mlo_engine_s2s")
    assert lint(v, "mlo_engine_s2s") == []
