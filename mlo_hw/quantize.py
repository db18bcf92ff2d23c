"""Post-training quantization: float layers + calibration inputs -> integer layers.

Activations: symmetric, per tensor, ``scale = absmax / (2**(bits-1) - 1)`` from the float reference
on the calibration inputs. Weights: symmetric, per output channel. Every other integer parameter
follows from those scales as stated in ``docs/numerics.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import numerics as nx
from .golden import IntLayer, IntMatrix, int_stack
from .reference import FloatLayer, float_stack

__all__ = ["QuantModel", "quantize", "random_inputs", "build_model"]


@dataclass
class QuantModel:
    layers: list[IntLayer]
    input_scale: float
    output_scale: float
    act_bits: int = 8

    def quantize_input(self, x) -> np.ndarray:
        q = (1 << (self.act_bits - 1)) - 1
        return np.clip(np.floor(np.asarray(x) / self.input_scale + 0.5), -q - 1, q).astype(np.int64)

    def dequantize_output(self, y) -> np.ndarray:
        return np.asarray(y, np.float64) * self.output_scale


def _scale(absmax: float, bits: int) -> float:
    return max(float(absmax), 1e-12) / ((1 << (bits - 1)) - 1)


def _matrix(w, b, s_in: float, s_out: float, wbits: int, acc_bits: int) -> IntMatrix:
    qmax = (1 << (wbits - 1)) - 1
    row_max = np.abs(w).max(axis=1)
    row_max = np.where(row_max > 0, row_max, max(float(row_max.max()), 1e-12))
    s_w = row_max / qmax
    w_int = np.clip(np.floor(w / s_w[:, None] + 0.5), -qmax, qmax).astype(np.int64)
    bias = nx.saturate(np.floor(b / (s_in * s_w) + 0.5).astype(np.int64), acc_bits)
    mult, shift = nx.quantize_multiplier(s_in * s_w / s_out)
    return IntMatrix(w=w_int, bias=bias, mult=mult, shift=shift)


def _residual_mults(s_a: float, s_b: float) -> tuple[int, int]:
    top = (1 << nx.RES_MULT_BITS) - 1
    c = max(s_a, s_b)
    return max(1, int(math.floor(s_a / c * top + 0.5))), max(1, int(math.floor(s_b / c * top + 0.5)))


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


def quantize(float_layers: list[FloatLayer], calib: list[tuple[np.ndarray, np.ndarray]], cfg,
             clip: dict[str, float] | None = None) -> QuantModel:
    """Calibrate on ``calib`` ([(x [S, H] float, mask [S] bool), ...]) and quantize every layer.

    ``clip`` maps activation names to a percentile of |value| that replaces the absmax for that tensor
    (values beyond saturate), e.g. ``{"ffn_down": 99.95}`` for trained BERTs whose FFN output has a few
    huge outliers (all-MiniLM-L6-v2: 193 in one channel of the [CLS] row, the rest below 4).
    """
    heads, eps = cfg.model.heads, cfg.model.layernorm_eps
    ab, wb = cfg.numerics.act_bits, cfg.numerics.weight_bits
    absmax = [dict() for _ in float_layers]
    clipped = [dict() for _ in float_layers]
    in_max = 0.0
    for x, mask in calib:
        in_max = max(in_max, float(np.abs(x).max()))
        traces: list = []
        float_stack(np.asarray(x, np.float64), float_layers, mask, heads, eps, traces)
        for l, tr in enumerate(traces):
            for name, t in tr.items():
                absmax[l][name] = max(absmax[l].get(name, 0.0), float(np.abs(t).max()))
                if clip and name in clip:
                    clipped[l].setdefault(name, []).append(np.abs(t).ravel())
    for l, tensors in enumerate(clipped):
        for name, parts in tensors.items():
            absmax[l][name] = float(np.percentile(np.concatenate(parts), clip[name]))
    s_in = _scale(in_max, ab)
    input_scale = s_in
    dh = cfg.head_dim
    layers = []
    for l, p in enumerate(float_layers):
        s = {name: _scale(v, ab) for name, v in absmax[l].items()}
        s["in"] = s_in
        acc = lambda k: cfg.acc_bits(k)    # noqa: E731
        h, i = cfg.model.hidden, cfg.model.intermediate
        sm_mult, sm_shift = nx.quantize_multiplier(
            s["q"] * s["k"] / math.sqrt(dh) / math.log(2) * nx.EXP_TABLE_SIZE)
        ctx_mult, ctx_shift = nx.quantize_multiplier(s["v"] / (1 << nx.PROB_BITS) / s["ctx"])
        ln1 = _layernorm_params(p.ln1_g, p.ln1_b, s["ln1"], h)
        ln2 = _layernorm_params(p.ln2_g, p.ln2_b, s["out"], h)
        r1a, r1b = _residual_mults(s_in, s["attn_out"])
        r2a, r2b = _residual_mults(s["ln1"], s["ffn_down"])
        layers.append(IntLayer(
            q=_matrix(p.q_w, p.q_b, s_in, s["q"], wb, acc(h)),
            k=_matrix(p.k_w, p.k_b, s_in, s["k"], wb, acc(h)),
            v=_matrix(p.v_w, p.v_b, s_in, s["v"], wb, acc(h)),
            o=_matrix(p.o_w, p.o_b, s["ctx"], s["attn_out"], wb, acc(h)),
            ffn_up=_matrix(p.ffn_up_w, p.ffn_up_b, s["ln1"], s["ffn_up"], wb, acc(h)),
            ffn_down=_matrix(p.ffn_down_w, p.ffn_down_b, s["gelu"], s["ffn_down"], wb, acc(i)),
            softmax_mult=int(sm_mult[0]), softmax_shift=sm_shift,
            ctx_mult=int(ctx_mult[0]), ctx_shift=ctx_shift,
            res1_a=r1a, res1_b=r1b, ln1_gain=ln1[0], ln1_bias=ln1[1], ln1_shift=ln1[2],
            gelu=nx.gelu_table(s["ffn_up"], s["gelu"], ab),
            res2_a=r2a, res2_b=r2b, ln2_gain=ln2[0], ln2_bias=ln2[1], ln2_shift=ln2[2],
            scales=s))
        s_in = s["out"]
    return QuantModel(layers=layers, input_scale=input_scale, output_scale=s_in, act_bits=ab)


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
        from .frontend.host import build_model_onnx
        return build_model_onnx(cfg, calib_count)
    rng = np.random.default_rng(cfg.weights.seed)
    layers = random_float_layers(cfg, rng)
    calib = random_inputs(cfg, rng, calib_count)
    return layers, quantize(layers, calib, cfg)


def run_int(model: QuantModel, x_int, mask, cfg, traces: list | None = None):
    return int_stack(x_int, model.layers, mask, cfg.model.heads, model.act_bits, traces)
