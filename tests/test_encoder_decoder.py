"""Encoder-decoders in RTL (BART's post-LN layers; -m slow: mBART's pre-LN, T5's RMSNorm, ReLU and relative position
bias, both fixtures end to end): the encoder's run, then the decoder's prefill with cross-attention over the encoder's
output in DRAM, then decode steps through the KV cache, bit-exact against the golden model under random AXI stalls;
the elaborated build through the runtime (docs/seq2seq.md)."""

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
@pytest.mark.parametrize("rmsnorm,gelu,position_bias", [(False, "erf", False), (True, "relu", True)])
def test_rtl_pre_ln_encoder_decoder(rmsnorm, gelu, position_bias):
    """As above with pre-LN layers (mBART's kind: LNX before the cross block's Q, XO added into the residual
    stream), and T5's kind: RMSNorm, a ReLU FFN and a relative position bias (random tables per stack, each layer's
    in its score units, added to the self-attention's scores at key - query: the decode steps' at their positions)."""
    _encoder_decoder_runs(small_seq2seq_tiled_config(norm="pre", rmsnorm=rmsnorm, gelu=gelu,
                                                     position_bias=position_bias))


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
@pytest.mark.parametrize("name", ["bart", "t5"])
def test_rtl_fixture_end_to_end(name):
    """tests/fixtures/onnx/{bart,t5}.onnx through the engine: the front end's float layers, quantized on the model's
    own inputs, the encoder's run (a padded input), the memory (T5: the host's final norm of the encoder's output,
    requantized and written to DRAM) and the decoder's prefill in RTL under 20 % stalls, bit-exact with the golden
    model, and the dequantized output against onnxruntime (cosine printed; > 0.99)."""
    pytest.importorskip("onnxruntime")
    from pathlib import Path

    from mlo_hw.frontend import load
    from mlo_hw.frontend.seq2seq import Seq2SeqHost, config_dict, seq2seq_inputs, seq2seq_model
    from mlo_hw.config import config_from_dict
    from mlo_hw.model.seq2seq import quantize_seq2seq
    path = Path(__file__).parent / "fixtures" / "onnx" / f"{name}.onnx"
    fe = load(path)
    model, host = seq2seq_model(fe), Seq2SeqHost(fe)
    s = 16
    raw = config_dict(fe, str(path), s, position_bias=host.has_position_bias())
    raw["folding"], raw["memory"] = {"pe": 4, "simd": 4, "tile_rows": 8}, {"axi_data_bits": 64, "max_burst_beats": 16}
    cfg = config_from_dict(raw)
    rng = np.random.default_rng(0)
    q = quantize_seq2seq(model, [host.run(*c) for c in seq2seq_inputs(host, s, s, rng, 4)], host._between is not None,
                         radius=cfg.bias_radius)
    sim = EngineSim(cfg, SimpleNamespace(layers=q.encoder + q.decoder))
    ids, mask, dec = seq2seq_inputs(host, s, s, rng, 2)[1]
    r = host.run(ids, mask, dec)
    te = int(mask.sum())
    assert te < s
    x, y = q.quantize(r["enc_in"], q.encoder_scale), q.quantize(r["dec_in"], q.decoder_scale)
    enc_run, = sim.run_many([Run(x, te, len(q.encoder), memory_tokens=0, output_to_memory=True)], stall=0.2)
    enc = q.encode(x, r["encoder"].mask)
    assert np.array_equal(enc_run.output, enc)
    memory = q.memory(enc_run.output, host.memory)             # T5: the host's part between the stacks
    dec_run, = sim.run_many([Run(y, s, len(q.decoder), memory_tokens=te, weight_layer=len(q.encoder), cache_len=0,
                                 memory=memory)], stall=0.2, seed=2)
    want = q.decode(y, r["self"].mask, memory, r["cross"].mask)
    assert np.array_equal(dec_run.output, want)
    got = dec_run.output * q.decoder_out_scale
    cos = float((got * r["dec_out"]).sum() / np.linalg.norm(got) / np.linalg.norm(r["dec_out"]))
    print(f"{name} fixture in RTL: encoder {enc_run.cycles} cycles, decoder {dec_run.cycles}; cosine vs onnxruntime "
          f"{cos:.6f}")
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


def test_t5_fixture_build_and_runtime_on_the_golden_backend(tmp_path):
    """T5 through frontend --engine, then the runtime: encode(), the host's final norm of the encoder's output
    (dequantize_encoder_output, Seq2SeqHost.memory, quantize_memory), set_memory(), decode(): the build's test
    vector, bit for bit; decode() before set_memory() is refused in one line."""
    pytest.importorskip("onnxruntime")
    from pathlib import Path

    from mlo_hw.frontend import load
    from mlo_hw.frontend.__main__ import main as frontend
    from mlo_hw.frontend.seq2seq import Seq2SeqHost
    from mlo_hw.model.quantize import from_dram
    from mlo_hw.runtime import Accelerator, RuntimeInputError
    path = Path(__file__).parent / "fixtures" / "onnx" / "t5.onnx"
    assert frontend([str(path), "--engine", str(tmp_path / "t5"), "--seq-len", "16"]) == 0
    host = Seq2SeqHost(load(path))

    def vector(name):
        return from_dram((tmp_path / "t5" / f"golden_{name}.bin").read_bytes(), 16, 32)
    with Accelerator(tmp_path / "t5", "golden") as acc:
        e = acc.encode(vector("input"))
        with pytest.raises(RuntimeInputError, match="call set_memory\\(\\) after encode\\(\\)"):
            acc.decode(vector("decoder_input"))
        memory = acc.quantize_memory(host.memory(acc.dequantize_encoder_output(e)))
        assert np.array_equal(memory, vector("memory"))
        acc.set_memory(memory)
        assert np.array_equal(acc.decode(vector("decoder_input")), vector("output"))
