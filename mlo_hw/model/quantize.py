"""Post-training quantization: float layers + calibration inputs -> integer layers.

Scales come from the float reference run on the calibration inputs (``docs/numerics.md``):

- the residual stream is int16, per tensor, one scale per residual add shared by both of its inputs
  (layer input and O output; LN1 output and FFN-down output), ``RES_HEADROOM`` times the larger
  absmax, so the add needs no multipliers. In a pre-LN (GPT-2) stack every add's output is the next add's
  input, so the stream has one scale for the whole stack (``RES_HEADROOM`` times the absmax of every
  residual tensor of every layer), and each LayerNorm output (int16) has its own;
- a matrix input narrowed from the stream gets a power-of-two multiple of the stream's scale per
  channel (:func:`mlo_hw.model.numerics.narrow`), the smallest that holds the channel's absmax;
- the other int8 activations (Q, K, V, context, FFN up) are symmetric per tensor with the clipping
  range that minimises the squared error on the calibration values; the GELU output is uint8 with a
  zero point, over [min GELU, MSE-clipped max];
- weights are symmetric per output channel (with the per-channel input scale folded in).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import numerics as nx
from .golden import IntLayer, IntMatrix, int_stack
from .reference import FloatLayer, float_stack

__all__ = ["QuantModel", "quantize", "random_inputs", "build_model", "RES_HEADROOM", "DRAM_DTYPE", "dram_bytes",
           "from_dram"]

RES_HEADROOM = 2.0       # int16 residual scale = RES_HEADROOM * calibration absmax / 32767
GELU_MIN = -0.17         # min over x of x * Phi(x) is -0.16997 (at x = -0.7518)
_CALIB_SAMPLES = 1 << 16  # values per tensor kept for the clipping search
_CLIPPED = ("q", "k", "v", "ctx", "ffn_up", "gelu",   # int8 per tensor: range from the clipping search
            "x_q", "x_k", "x_v", "x_ctx")            # (and a decoder layer's cross-attention's)
_ACT_MIN = {"erf": GELU_MIN, "tanh": GELU_MIN, "relu": 0.0}   # the FFN activation's lower bound (by model.gelu)
_INT8 = 127
_INT16 = (1 << (nx.RES_BITS - 1)) - 1


DRAM_DTYPE = np.dtype("<i2")   # the engine's input and output in DRAM: int16 [seq_len, hidden], row-major


def dram_bytes(x) -> bytes:
    """Integer activations [S, H] (the residual stream) as the engine reads them from DRAM; values outside
    int16 raise ValueError (they would wrap)."""
    x = np.asarray(x)
    info = np.iinfo(DRAM_DTYPE)
    if x.size and (x.min() < info.min or x.max() > info.max):
        raise ValueError(f"engine input: values {x.min()}..{x.max()} outside int{nx.RES_BITS}")
    return x.astype(DRAM_DTYPE).tobytes()


def from_dram(buf: bytes, rows: int, cols: int) -> np.ndarray:
    """The engine's output as written to DRAM, back to int64 [rows, cols]."""
    return np.frombuffer(buf, DRAM_DTYPE, rows * cols).reshape(rows, cols).astype(np.int64)


@dataclass
class QuantModel:
    """The integer layers and the scales of the engine's int16 input and output."""
    layers: list[IntLayer]
    input_scale: float
    output_scale: float

    def quantize_input(self, x) -> np.ndarray:
        return np.clip(np.floor(np.asarray(x) / self.input_scale + 0.5), -_INT16 - 1, _INT16).astype(np.int64)

    def dequantize_output(self, y) -> np.ndarray:
        return np.asarray(y, np.float64) * self.output_scale


def _mse_range(values: np.ndarray, lo: float = 0.0, levels: int = _INT8) -> float:
    """The clipping bound ``hi`` (a fraction of max(values)) minimising the squared error of quantizing
    ``values`` with step ``(hi - lo) / levels`` (symmetric when ``lo == 0``, else [lo, hi])."""
    top = float(values.max(initial=0.0))
    if top <= 0:
        return 1e-12
    best, best_hi = None, top
    for alpha in np.linspace(0.1, 1.0, 37):             # steps of 2.5 % of the max
        hi = top * alpha
        step = (hi - lo) / levels
        err = float(((np.clip(np.floor(values / step + 0.5), math.floor(lo / step), math.ceil(hi / step)) * step
                      - values) ** 2).sum())
        if best is None or err < best:
            best, best_hi = err, hi
    return best_hi


def _matrix(w, b, s_in, s_out: float, wbits: int, acc_bits: int, zero_point: int = 0) -> IntMatrix:
    """Quantize ``y = x @ w.T + b`` for an input of scale ``s_in`` (a number, or one per input channel) and
    zero point ``zero_point``, output scale ``s_out``."""
    qmax = (1 << (wbits - 1)) - 1
    w = np.asarray(w) * np.broadcast_to(np.asarray(s_in, np.float64), (w.shape[1],))[None, :]
    row_max = np.abs(w).max(axis=1)
    row_max = np.where(row_max > 0, row_max, max(float(row_max.max()), 1e-12))
    s_w = row_max / qmax                      # acc unit of row n: s_w[n] (the input scale is folded into w)
    w_int = np.clip(np.floor(w / s_w[:, None] + 0.5), -qmax, qmax).astype(np.int64)
    bias = np.floor(b / s_w + 0.5).astype(np.int64) - zero_point * w_int.sum(axis=1)
    mult, shift = nx.quantize_multiplier(s_w / s_out)
    return IntMatrix(w=w_int, bias=nx.saturate(bias, acc_bits), mult=mult, shift=shift)


def _narrow_shifts(channel_absmax, s_res: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel shifts from the int16 stream (scale ``s_res``) to int8, and the int8 scales."""
    need = np.maximum(np.asarray(channel_absmax, np.float64), 1e-30) / (_INT8 * s_res)
    k = np.clip(np.ceil(np.log2(need)), 0, nx.NARROW_SHIFT_MAX).astype(np.int64)
    return k, s_res * 2.0 ** k


def _attention_multipliers(s_q: float, s_k: float, s_v: float, s_ctx: float, dh: int) -> tuple[int, int, int, int]:
    """The softmax's score multiplier (to units of 2**-8 of log2) and the context's requantization."""
    sm_mult, sm_shift = nx.quantize_multiplier(s_q * s_k / math.sqrt(dh) / math.log(2) * nx.EXP_TABLE_SIZE)
    ctx_mult, ctx_shift = nx.quantize_multiplier(s_v / (1 << nx.PROB_BITS) / s_ctx)
    return int(sm_mult[0]), sm_shift, int(ctx_mult[0]), ctx_shift


def _layernorm_params(gamma, beta, s_out: float, hidden: int):
    g_real = gamma * math.sqrt(hidden) / s_out            # gain per unit of 2**-15 in t, before 2**shift
    b_real = beta / s_out
    gmax = (1 << (nx.LN_GAIN_BITS - 1)) - 1
    shift = 40
    if np.abs(g_real).max() > 0:
        shift = min(shift, int(math.floor(math.log2(gmax / np.abs(g_real).max()))) + nx.LN_NORM_BITS)
    if np.abs(b_real).max() > 0:
        shift = min(shift, int(math.floor(math.log2((2 ** 31 - 1) / np.abs(b_real).max()))))
    shift = max(shift, 1)
    gain = np.clip(np.floor(g_real * 2.0 ** (shift - nx.LN_NORM_BITS) + 0.5), -gmax, gmax).astype(np.int64)
    bias = nx.saturate(np.floor(b_real * 2.0 ** shift + 0.5).astype(np.int64), 32)
    return gain, bias, shift


class _Stats:
    """Calibration statistics of one layer: absmax per tensor and per channel, minimum, and a value sample of
    the tensors whose range the clipping search picks."""

    def __init__(self, rng):
        self.rng, self.absmax, self.channel, self.values, self.minimum = rng, {}, {}, {}, {}

    def add(self, name, t):
        a = np.abs(t).reshape(-1, t.shape[-1])
        self.absmax[name] = max(self.absmax.get(name, 0.0), float(a.max()))
        self.channel[name] = np.maximum(self.channel.get(name, 0.0), a.max(axis=0))
        self.minimum[name] = min(self.minimum.get(name, 0.0), float(t.min()))
        if name not in _CLIPPED:
            return
        flat = np.asarray(t, np.float64).ravel()
        if flat.size > _CALIB_SAMPLES:
            flat = self.rng.choice(flat, _CALIB_SAMPLES, replace=False)
        self.values.setdefault(name, []).append(flat)

    def sample(self, name):
        return np.concatenate(self.values[name])


def _calibrate(float_layers: list[FloatLayer], calib, cfg) -> list[_Stats]:
    """Statistics of every layer's float intermediates (and its input, ``in``) over the calibration inputs."""
    m = cfg.model
    return _calibrate_stack(float_layers, [(x, nx.attention_mask(mask, m.causal), None, None) for x, mask in calib],
                            m.heads, m.layernorm_eps, m.norm, m.gelu, m.rmsnorm)


def _calibrate_stack(float_layers, calib, heads: int, eps: float, norm: str, gelu: str, rms: bool = False):
    """As :func:`_calibrate` over ``calib`` [(x, mask, score bias, memory)] (an encoder-decoder's stacks)."""
    rng = np.random.default_rng(0)          # one generator for every layer's value sample
    stats = [_Stats(rng) for _ in float_layers]
    for x, mask, bias, memory in calib:
        traces: list = []
        float_stack(np.asarray(x, np.float64), float_layers, mask, heads, eps, traces, norm, gelu, rms, bias, memory)
        for l, tr in enumerate(traces):
            stats[l].add("in", np.asarray(x if l == 0 else traces[l - 1]["out"]))
            for name, t in tr.items():
                stats[l].add(name, np.asarray(t))
    return stats


def _res_scale(*absmax: float) -> float:
    """The int16 scale of residual tensors added without multipliers: ``RES_HEADROOM`` x the largest absmax."""
    return RES_HEADROOM * max(absmax) / _INT16


def _post_ln_scales(stats: list[_Stats]) -> list[dict]:
    """Per layer, the int16 scales of a post-LN stack: where Q/K/V and FFN-up inputs are narrowed from
    (tensor name and scale), the O and FFN-down outputs, the LayerNorm outputs, and the scales reported."""
    out = []
    for l, st in enumerate(stats):
        s_r1, s_r2 = _res_scale(st.absmax["in"], st.absmax["attn_out"]), _res_scale(st.absmax["ln1"],
                                                                                     st.absmax["ffn_down"])
        s_out = (_res_scale(stats[l + 1].absmax["in"], stats[l + 1].absmax["attn_out"]) if l + 1 < len(stats)
                 else _res_scale(st.absmax["out"]))
        out.append(dict(qkv_from=("in", s_r1), ffn_from=("ln1", s_r2), o_out=s_r1, down_out=s_r2,
                        ln1_out=s_r2, ln2_out=s_out, report=dict(res1=s_r1, res2=s_r2, out=s_out)))
    return out


def _pre_ln_scales(stats: list[_Stats]) -> list[dict]:
    """As :func:`_post_ln_scales` for a pre-LN stack: one residual scale for every layer (every add's output is
    the next one's input), each LayerNorm output its own."""
    s_res = _res_scale(*(st.absmax[n] for st in stats for n in ("in", "attn_out", "res1", "ffn_down", "out")))
    out = []
    for st in stats:
        s_ln1, s_ln2 = _res_scale(st.absmax["ln1"]), _res_scale(st.absmax["ln2"])
        out.append(dict(qkv_from=("ln1", s_ln1), ffn_from=("ln2", s_ln2), o_out=s_res, down_out=s_res,
                        ln1_out=s_ln1, ln2_out=s_ln2,
                        report=dict(res1=s_res, res2=s_res, out=s_res, ln1=s_ln1, ln2=s_ln2)))
    return out


_STREAM_SCALES = {"post": _post_ln_scales, "pre": _pre_ln_scales}


def _quantize_layer(p: FloatLayer, st: _Stats, r: dict, cfg) -> IntLayer:
    """One layer from its float weights, calibration statistics ``st`` and stream scales ``r``."""
    h, i, dh, wb, acc = cfg.model.hidden, cfg.model.intermediate, cfg.head_dim, cfg.numerics.weight_bits, cfg.acc_bits
    k_in, s_in8 = _narrow_shifts(st.channel[r["qkv_from"][0]], r["qkv_from"][1])
    k_ffn, s_ffn8 = _narrow_shifts(st.channel[r["ffn_from"][0]], r["ffn_from"][1])
    s = {n: _mse_range(np.abs(st.sample(n))) / _INT8 for n in ("q", "k", "v", "ctx", "ffn_up")}
    g_lo = min(_ACT_MIN[cfg.model.gelu], st.minimum["gelu"])
    s["gelu"] = (_mse_range(st.sample("gelu"), lo=g_lo, levels=255) - g_lo) / 255
    g_zero = int(math.floor(-g_lo / s["gelu"] + 0.5))
    s.update(r["report"])
    sm_mult, sm_shift, ctx_mult, ctx_shift = _attention_multipliers(s["q"], s["k"], s["v"], s["ctx"], dh)
    ln1 = _layernorm_params(p.ln1_g, p.ln1_b, r["ln1_out"], h)
    ln2 = _layernorm_params(p.ln2_g, p.ln2_b, r["ln2_out"], h)
    return IntLayer(
        q=_matrix(p.q_w, p.q_b, s_in8, s["q"], wb, acc(h)),
        k=_matrix(p.k_w, p.k_b, s_in8, s["k"], wb, acc(h)),
        v=_matrix(p.v_w, p.v_b, s_in8, s["v"], wb, acc(h)),
        o=_matrix(p.o_w, p.o_b, s["ctx"], r["o_out"], wb, acc(h)),
        ffn_up=_matrix(p.ffn_up_w, p.ffn_up_b, s_ffn8, s["ffn_up"], wb, acc(h)),
        ffn_down=_matrix(p.ffn_down_w, p.ffn_down_b, s["gelu"], r["down_out"], wb, acc(i), zero_point=g_zero),
        softmax_mult=sm_mult, softmax_shift=sm_shift, ctx_mult=ctx_mult, ctx_shift=ctx_shift,
        ln1_gain=ln1[0], ln1_bias=ln1[1], ln1_shift=ln1[2],
        gelu=nx.gelu_table(s["ffn_up"], s["gelu"], g_zero, flavour=cfg.model.gelu),
        narrow_in=k_in, narrow_ln1=k_ffn,
        ln2_gain=ln2[0], ln2_bias=ln2[1], ln2_shift=ln2[2],
        scales=s, norm=cfg.model.norm, rms=cfg.model.rmsnorm)


def quantize(float_layers: list[FloatLayer], calib: list[tuple[np.ndarray, np.ndarray]], cfg) -> QuantModel:
    """Calibrate on ``calib`` ([(x [S, H] float, mask [S] bool), ...]) and quantize every layer (of the config's
    kind, ``model.norm``, with its GELU, ``model.gelu``)."""
    stats = _calibrate(float_layers, calib, cfg)
    scales = _STREAM_SCALES[cfg.model.norm](stats)
    layers = [_quantize_layer(p, st, r, cfg) for p, st, r in zip(float_layers, stats, scales)]
    input_scale = layers[0].scales["res1"] if layers else 1.0
    output_scale = layers[-1].scales["out"] if layers else 1.0
    return QuantModel(layers=layers, input_scale=input_scale, output_scale=output_scale)


def random_inputs(cfg, rng: np.random.Generator, count: int, padded: bool = True):
    """``count`` inputs like an embedding layer's output: N(0, 1) rows, with a random padding mask."""
    s_len, h = cfg.model.seq_len, cfg.model.hidden
    out = []
    for n in range(count):
        x = rng.normal(0.0, 1.0, (s_len, h))
        valid = s_len if (not padded or n == 0) else int(rng.integers(1, s_len + 1))
        out.append((x, np.arange(s_len) < valid))
    return out


def build_model(cfg, calib_count: int = 4):
    """The float layers and the quantized model a config describes (random weights from its seed, or the
    weights of ``weights.onnx`` by role, calibrated on the model's own inputs: see mlo_hw.frontend); an
    encoder-decoder's (``model.encoder_layers``) are :mod:`mlo_hw.model.seq2seq`'s (the float model, its
    ``IntSeq2Seq``)."""
    from .reference import random_float_layers
    if cfg.seq2seq:       # an encoder-decoder: (the float model, mlo_hw.model.seq2seq.IntSeq2Seq)
        if cfg.weights.source == "onnx":
            from ..frontend.host import build_seq2seq_onnx
            return build_seq2seq_onnx(cfg, calib_count)
        from .seq2seq import random_seq2seq
        return random_seq2seq(cfg, np.random.default_rng(cfg.weights.seed), calib_count)
    if cfg.weights.source == "onnx":
        from ..frontend.host import build_model_onnx
        return build_model_onnx(cfg, calib_count)
    rng = np.random.default_rng(cfg.weights.seed)
    layers = random_float_layers(cfg, rng)
    calib = random_inputs(cfg, rng, calib_count)
    return layers, quantize(layers, calib, cfg)


def run_int(model: QuantModel, x_int, mask, cfg, traces: list | None = None):
    """The integer stack on ``x_int``; ``mask`` [S] the real keys (made causal when ``cfg.model.causal``)."""
    return int_stack(x_int, model.layers, nx.attention_mask(mask, cfg.model.causal), cfg.model.heads, traces)
