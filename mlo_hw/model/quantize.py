"""Post-training quantization: float layers + calibration inputs -> integer layers.

Scales come from the float reference run on the calibration inputs (``docs/numerics.md``):

- the residual stream is int16, per tensor, one scale per residual add shared by both of its inputs
  (layer input and O output; LN1 output and FFN-down output), ``RES_HEADROOM`` times the larger
  absmax, so the add needs no multipliers;
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
_CLIPPED = ("q", "k", "v", "ctx", "ffn_up", "gelu")   # int8 per tensor: range from the clipping search
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


def quantize(float_layers: list[FloatLayer], calib: list[tuple[np.ndarray, np.ndarray]], cfg) -> QuantModel:
    """Calibrate on ``calib`` ([(x [S, H] float, mask [S] bool), ...]) and quantize every layer."""
    heads, eps, wb = cfg.model.heads, cfg.model.layernorm_eps, cfg.numerics.weight_bits
    rng = np.random.default_rng(0)
    stats = [_Stats(rng) for _ in float_layers]
    for x, mask in calib:
        traces: list = []
        float_stack(np.asarray(x, np.float64), float_layers, nx.attention_mask(mask, cfg.model.causal), heads, eps,
                    traces)
        for l, tr in enumerate(traces):
            stats[l].add("in", np.asarray(x if l == 0 else traces[l - 1]["out"]))
            for name, t in tr.items():
                stats[l].add(name, np.asarray(t))
    h, i, dh = cfg.model.hidden, cfg.model.intermediate, cfg.head_dim
    acc = cfg.acc_bits

    def res_scale(st, a, b):
        return RES_HEADROOM * max(st.absmax[a], st.absmax[b]) / _INT16

    layers = []
    for l, (p, st) in enumerate(zip(float_layers, stats)):
        s_r1, s_r2 = res_scale(st, "in", "attn_out"), res_scale(st, "ln1", "ffn_down")
        s_out = (res_scale(stats[l + 1], "in", "attn_out") if l + 1 < len(stats)
                 else RES_HEADROOM * st.absmax["out"] / _INT16)
        k_in, s_in8 = _narrow_shifts(st.channel["in"], s_r1)
        k_ln1, s_ln1_8 = _narrow_shifts(st.channel["ln1"], s_r2)
        s = {n: _mse_range(np.abs(st.sample(n))) / _INT8 for n in _CLIPPED if n != "gelu"}
        g_lo = min(GELU_MIN, st.minimum["gelu"])
        s["gelu"] = (_mse_range(st.sample("gelu"), lo=g_lo, levels=255) - g_lo) / 255
        g_zero = int(math.floor(-g_lo / s["gelu"] + 0.5))
        s.update(res1=s_r1, res2=s_r2, out=s_out)
        sm_mult, sm_shift = nx.quantize_multiplier(
            s["q"] * s["k"] / math.sqrt(dh) / math.log(2) * nx.EXP_TABLE_SIZE)
        ctx_mult, ctx_shift = nx.quantize_multiplier(s["v"] / (1 << nx.PROB_BITS) / s["ctx"])
        ln1 = _layernorm_params(p.ln1_g, p.ln1_b, s_r2, h)
        ln2 = _layernorm_params(p.ln2_g, p.ln2_b, s_out, h)
        layers.append(IntLayer(
            q=_matrix(p.q_w, p.q_b, s_in8, s["q"], wb, acc(h)),
            k=_matrix(p.k_w, p.k_b, s_in8, s["k"], wb, acc(h)),
            v=_matrix(p.v_w, p.v_b, s_in8, s["v"], wb, acc(h)),
            o=_matrix(p.o_w, p.o_b, s["ctx"], s_r1, wb, acc(h)),
            ffn_up=_matrix(p.ffn_up_w, p.ffn_up_b, s_ln1_8, s["ffn_up"], wb, acc(h)),
            ffn_down=_matrix(p.ffn_down_w, p.ffn_down_b, s["gelu"], s_r2, wb, acc(i), zero_point=g_zero),
            softmax_mult=int(sm_mult[0]), softmax_shift=sm_shift,
            ctx_mult=int(ctx_mult[0]), ctx_shift=ctx_shift,
            ln1_gain=ln1[0], ln1_bias=ln1[1], ln1_shift=ln1[2],
            gelu=nx.gelu_table(s["ffn_up"], s["gelu"], g_zero),
            narrow_in=k_in, narrow_ln1=k_ln1,
            ln2_gain=ln2[0], ln2_bias=ln2[1], ln2_shift=ln2[2],
            scales=s))
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
    weights of ``weights.onnx`` by role, calibrated on the model's own inputs: see mlo_hw.frontend)."""
    from .reference import random_float_layers
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
