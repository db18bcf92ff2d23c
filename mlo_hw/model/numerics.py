"""Integer arithmetic shared by the golden model and the RTL generators.

Every function takes and returns numpy ``int64`` arrays and is written as the hardware computes
it: products, sums, arithmetic right shifts (floor), saturation. ``docs/numerics.md`` states each
formula, width and rounding rule. Tables are made by one function each; the RTL initialises its
ROMs from the same function.

Rounding rule everywhere: ``rshift_round(v, s) = floor((v + 2**(s-1)) / 2**s)`` (round half up,
towards +inf), then saturation to the output range.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "MULT_BITS", "RES_BITS", "NARROW_SHIFT_MAX", "EXP_FRAC_BITS", "EXP_ONE_BITS", "EXP_TABLE_SIZE", "SOFTMAX_RECIP_BITS",
    "PROB_BITS", "LN_MEAN_FRAC_BITS", "LN_SQRT_NORM_BITS", "LN_NORM_BITS", "LN_GAIN_BITS", "LN_INPUT_BITS",
    "saturate", "rshift_round", "requant", "narrow", "layernorm", "exp2_table", "attention_mask", "per_head", "softmax",
    "table_lookup", "gelu_table", "quantize_multiplier", "isqrt", "bit_length",
]

MULT_BITS = 16          # requantization multiplier: unsigned, 1 .. 2**16-1
RES_BITS = 16           # the residual stream (layer input/output, LN outputs, O and FFN-down outputs): int16
NARROW_SHIFT_MAX = 15   # per-channel shift from the int16 residual stream to an int8 matrix input: 0..15
EXP_FRAC_BITS = 8       # softmax exponent argument: fixed point with 8 fractional bits of log2
EXP_TABLE_SIZE = 1 << EXP_FRAC_BITS
EXP_ONE_BITS = 15       # exp2 table values are in units of 2**-15 (table[0] == 2**15 exactly)
SOFTMAX_RECIP_BITS = 32  # reciprocal of the row sum: floor(2**32 / sum)
PROB_BITS = 8           # probabilities: unsigned, units of 2**-8, saturated at 255
LN_INPUT_BITS = 20      # LayerNorm input (residual sum): signed, |r| < 2**19
LN_MEAN_FRAC_BITS = 4   # the row mean keeps 4 fractional bits
LN_SQRT_NORM_BITS = 48  # the variance sum is shifted left by an even amount to at least 47 bits
LN_NORM_BITS = 15       # normalised LayerNorm value t: |t| <= 2**15, units of 2**-15 of 1/sqrt(H)
LN_GAIN_BITS = 18       # LayerNorm gain G: signed, |G| < 2**17


def acc_bits(k: int, weight_bits: int = 8, act_bits: int = 8) -> int:
    """Signed accumulator width of a ``k``-term dot product of ``weight_bits`` by ``act_bits`` signed integers, plus a
    bias of the same range (|w x| <= 2^(wb + ab - 2)): the MVAU's accumulators and the raw attention scores."""
    return weight_bits + act_bits - 1 + math.ceil(math.log2(k + 1)) + 1


def _i64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def saturate(v, bits: int = 8, signed: bool = True) -> np.ndarray:
    """Clamp to the range of a ``bits``-wide integer."""
    v = _i64(v)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return np.clip(v, lo, hi)


def rshift_round(v, shift) -> np.ndarray:
    """``floor((v + 2**(shift-1)) / 2**shift)`` for ``shift >= 1``; ``v`` for ``shift == 0``."""
    v, shift = _i64(v), _i64(shift)
    if np.any(shift < 0):
        raise ValueError("rshift_round: shift must be >= 0")
    half = np.where(shift > 0, np.left_shift(1, np.maximum(shift - 1, 0)), 0)
    return np.right_shift(v + half, shift)


def requant(acc, mult, shift: int, bits: int = 8) -> np.ndarray:
    """Accumulator to ``bits``-bit activation: ``sat(rshift_round(acc * mult, shift))``.

    ``mult`` is unsigned (per output channel, broadcast along the last axis), ``shift`` is one
    number per matrix.
    """
    return saturate(rshift_round(_i64(acc) * _i64(mult), shift), bits)


def narrow(x, shift) -> np.ndarray:
    """int16 residual values to int8 matrix inputs: ``sat_8(rshift_round(x, shift[c]))`` per channel.

    ``shift`` (one per channel, last axis, 0..15) makes channel c's int8 scale ``2**shift[c]`` times the
    residual stream's scale: a channel with a small range keeps its resolution, a channel with
    outliers its range.
    """
    return saturate(rshift_round(x, np.broadcast_to(_i64(shift), np.shape(x))), 8)


def bit_length(v) -> np.ndarray:
    """Number of bits of non-negative integers (0 for 0), elementwise."""
    v = _i64(v)
    return np.array([int(x).bit_length() for x in v.ravel()], dtype=np.int64).reshape(v.shape)


def isqrt(v) -> np.ndarray:
    """``floor(sqrt(v))`` of non-negative integers, elementwise, exact."""
    v = _i64(v)
    return np.array([math.isqrt(int(x)) for x in v.ravel()], dtype=np.int64).reshape(v.shape)


def layernorm(r, gain, bias, shift: int, bits: int = 8, rms: bool = False) -> np.ndarray:
    """Integer LayerNorm over the last axis (H elements); ``rms``: T5's RMSNorm, the same with ``m = 0``.

    ::

        S    = sum(r)
        m    = floor((2*S*16 + H) / (2*H))       # 16 * mean, rounded half up
        d    = 16*r - m                          # |d| < 2**24
        D    = sum(d*d)                          # < H * 2**48
        k    = max(0, (48 - bit_length(D)) // 2) # normalise small variances for a precise sqrt
        s    = isqrt(D * 4**k)                   # floor(sqrt(D) * 2**k)
        e    = bit_length(s)
        inv  = floor(2**(e+15) / s)   (0 if s == 0)
        t    = floor(d * 2**k * inv / 2**e)      # |t| <= 2**15, t ~ (x-mean)/std / sqrt(H) * 2**15
        out  = sat(rshift_round(t * gain + bias, shift))

    ``gain = round(gamma * sqrt(H) / s_out * 2**(shift-15))`` and ``bias = round(beta / s_out * 2**shift)``
    per channel. A row with zero variance gives ``t = 0`` and so ``out = sat(rshift_round(bias))``.
    """
    r = _i64(r)
    if r.size and np.abs(r).max() >= 1 << (LN_INPUT_BITS - 1):
        raise ValueError(f"layernorm: input exceeds {LN_INPUT_BITS} bits")
    h = r.shape[-1]
    total = r.sum(axis=-1, keepdims=True)
    mean = 0 if rms else np.floor_divide((2 << LN_MEAN_FRAC_BITS) * total + h, 2 * h)
    d = np.left_shift(r, LN_MEAN_FRAC_BITS) - mean
    dd = (d * d).sum(axis=-1, keepdims=True)
    k = np.maximum(0, (LN_SQRT_NORM_BITS - bit_length(dd)) // 2)
    s = isqrt(np.left_shift(dd, 2 * k))
    e = bit_length(s)
    inv = np.where(s > 0, np.floor_divide(np.left_shift(1, e + LN_NORM_BITS), np.maximum(s, 1)), 0)
    t = np.right_shift(np.left_shift(d, k) * inv, e)
    return saturate(rshift_round(t * _i64(gain) + _i64(bias), shift), bits)


def exp2_table() -> np.ndarray:
    """``table[f] = round(2**15 * 2**(-f/256))`` for f in 0..255: the softmax exponent ROM."""
    f = np.arange(EXP_TABLE_SIZE, dtype=np.float64)
    return np.floor(2.0 ** EXP_ONE_BITS * 2.0 ** (-f / EXP_TABLE_SIZE) + 0.5).astype(np.int64)


_EXP2 = exp2_table()


def attention_mask(keys, causal: bool = False) -> np.ndarray:
    """Which keys a query row attends: ``keys`` [S] (true: a real token, false: padding) for every row, or,
    ``causal`` (a decoder's self-attention), [S, S] with row i attending the real keys j <= i."""
    keys = np.asarray(keys, bool)
    return keys & np.tri(len(keys), dtype=bool) if causal else keys


def per_head(mask) -> np.ndarray:
    """An :func:`attention_mask` ([S] or [S, S]) broadcastable to scores [heads, S, S]."""
    mask = np.asarray(mask, bool)
    return mask[None] if mask.ndim == 2 else mask[None, None, :]


def softmax(scores, mask, mult: int, shift: int) -> np.ndarray:
    """Integer softmax over the last axis; returns unsigned probabilities in units of 2**-8.

    ``scores`` are the int accumulators of Q.K^T; ``mask`` (broadcast to scores) is true where a key
    may be attended. ``mult / 2**shift`` converts a score difference to units of 2**-8 of log2 (with
    ``a = score * mult``)::

        mx  = max(a where mask)
        u   = floor((mx - a) / 2**shift)                      # >= 0
        q   = min(u >> 8, 16); f = u & 255
        e   = table[f] >> q        (0 where masked or q == 16)
        sum = sum(e)                                         # >= 2**15 unless all masked
        rcp = floor(2**32 / sum)   (0 if sum == 0: a fully masked row gives all zeros)
        p   = min(floor(e * rcp / 2**24), 255)
    """
    s = _i64(scores)
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), s.shape)
    lowest = np.iinfo(np.int64).min
    a = s * int(mult)
    mx = np.where(mask, a, lowest).max(axis=-1, keepdims=True)
    u = np.right_shift(np.where(mask, mx - a, 0), int(shift))
    q = np.minimum(np.right_shift(u, EXP_FRAC_BITS), 16)
    f = np.bitwise_and(u, EXP_TABLE_SIZE - 1)
    e = np.where(mask & (q < 16), np.right_shift(_EXP2[f], np.minimum(q, 15)), 0)
    total = e.sum(axis=-1, keepdims=True)
    rcp = np.where(total > 0, np.floor_divide(1 << SOFTMAX_RECIP_BITS, np.maximum(total, 1)), 0)
    p = np.right_shift(e * rcp, SOFTMAX_RECIP_BITS - PROB_BITS)
    return np.minimum(p, (1 << PROB_BITS) - 1)


def table_lookup(x, table, bits: int = 8) -> np.ndarray:
    """``table[x + 2**(bits-1)]``: an elementwise function of a signed ``bits``-bit input."""
    return _i64(table)[_i64(x) + (1 << (bits - 1))]


def gelu_table(scale_in: float, scale_out: float, zero_point: int, bits: int = 8, flavour: str = "erf") -> np.ndarray:
    """GELU (``flavour`` "erf": the exact form; "tanh": GPT-2's approximation; "relu": T5's ReLU) as a table over every signed
    ``bits``-bit input, made at build time.

    The output is unsigned ``bits``-bit with a zero point (GELU's range is [-0.17, inf): a symmetric
    code would waste half of it): ``table[i] = clip(round_half_up(gelu((i - 2**(bits-1)) * scale_in)
    / scale_out) + zero_point, 0, 2**bits - 1)``. The consumer (FFN down) folds ``zero_point`` into its bias.
    """
    x = (np.arange(1 << bits, dtype=np.float64) - (1 << (bits - 1))) * scale_in
    if flavour == "erf":
        erf = np.vectorize(math.erf)
        y = 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    elif flavour == "tanh":
        from .reference import gelu_tanh
        y = gelu_tanh(x)
    elif flavour == "relu":
        y = np.maximum(x, 0.0)
    else:
        raise ValueError(f"gelu_table: flavour {flavour!r} is not 'erf', 'tanh' or 'relu'")
    return saturate(np.floor(y / scale_out + 0.5).astype(np.int64) + int(zero_point), bits, signed=False)


def quantize_multiplier(real, mult_bits: int = MULT_BITS, max_shift: int = 62) -> tuple[np.ndarray, int]:
    """Positive real factors as ``mult / 2**shift`` with one shared shift and ``mult < 2**mult_bits``.

    The shift is the largest that keeps every multiplier in range; every multiplier is at least 1.
    """
    real = np.atleast_1d(np.asarray(real, dtype=np.float64))
    if np.any(~np.isfinite(real)) or np.any(real <= 0):
        raise ValueError("quantize_multiplier: factors must be positive and finite")
    top = float(real.max())
    shift = min(int(math.floor(math.log2(((1 << mult_bits) - 1) / top))), max_shift)
    if shift < 1:
        raise ValueError(f"quantize_multiplier: factor {top:g} too large for {mult_bits}-bit multipliers")
    mult = np.floor(real * 2.0 ** shift + 0.5).astype(np.int64)
    mult = np.clip(mult, 1, (1 << mult_bits) - 1)
    return mult, shift
