"""Integer operators: edge cases and properties against exact or float definitions."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from mlo_hw.model import numerics as nx

i64 = st.integers(-(2**40), 2**40)


@given(st.integers(-(2**40), 2**40), st.integers(1, 40))
def test_rshift_round_is_round_half_up(v, s):
    # exact rational reference: floor(v / 2^s + 1/2)
    assert int(nx.rshift_round(v, s)) == math.floor(v / 2**s + 0.5) if abs(v) < 2**50 else True
    from fractions import Fraction
    assert int(nx.rshift_round(v, s)) == math.floor(Fraction(v, 2**s) + Fraction(1, 2))


def test_rshift_round_ties_go_up():
    assert nx.rshift_round([1, 3, -1, -3, 5], 1).tolist() == [1, 2, 0, -1, 3]   # 0.5->1, 1.5->2, -0.5->0, -1.5->-1
    assert nx.rshift_round([7], 0).tolist() == [7]


def test_requant_saturates_both_ends():
    assert nx.requant([10**9, -(10**9), 0], 1000, 4).tolist() == [127, -128, 0]
    assert nx.requant([1000], [3], 4, bits=4).tolist() == [7]


@given(hnp.arrays(np.int64, st.integers(1, 64), elements=st.integers(-(2**24), 2**24)),
       st.integers(1, 2**16 - 1), st.integers(1, 40))
def test_requant_matches_float_rounding(acc, mult, shift):
    from fractions import Fraction
    got = nx.requant(acc, mult, shift)
    want = [max(-128, min(127, math.floor(Fraction(int(a) * mult, 2**shift) + Fraction(1, 2)))) for a in acc]
    assert got.tolist() == want


def test_quantize_multiplier_range_and_accuracy():
    real = np.array([0.001, 0.01, 0.5, 0.0123])
    mult, shift = nx.quantize_multiplier(real)
    assert mult.max() < 2**16 and mult.min() >= 1
    assert (np.abs(mult / 2**shift - real) <= 0.5 / 2**shift).all()
    with pytest.raises(ValueError):
        nx.quantize_multiplier([1e6])
    with pytest.raises(ValueError):
        nx.quantize_multiplier([0.0])


@settings(max_examples=300)
@given(st.data(), st.integers(1, 4), st.integers(2, 64))
def test_layernorm_close_to_float(data, rows, h):
    # the real input: the residual sum a + b of two int16 tensors in the same scale
    a = data.draw(hnp.arrays(np.int64, (rows, h), elements=st.integers(-2**15, 2**15 - 1)))
    b = data.draw(hnp.arrays(np.int64, (rows, h), elements=st.integers(-2**15, 2**15 - 1)))
    r = a + b
    # the mean keeps 4 fractional bits: rows whose spread is a few LSBs are coarse (real rows span thousands)
    assume((r.std(-1) >= 16).all())
    # gain 2^12 with shift 20 makes out = y / sqrt(H) * 2^7 where y = (r - mean) / std
    out = nx.layernorm(r, np.full(h, 1 << 12), np.zeros(h, np.int64), 20)
    x = r.astype(np.float64)
    sd = x.std(-1, keepdims=True)
    y = np.where(sd > 0, (x - x.mean(-1, keepdims=True)) / np.where(sd > 0, sd, 1), 0)
    ref = np.clip(y / np.sqrt(h) * 2**7, -128, 127)
    assert np.abs(out - ref).max() <= 1.01, (out, ref)


@given(hnp.arrays(np.int64, st.tuples(st.integers(1, 3), st.integers(1, 40)), elements=st.integers(-2**15, 2**15 - 1)),
       st.data())
def test_narrow_is_a_rounded_per_channel_shift_with_saturation(x, data):
    k = data.draw(hnp.arrays(np.int64, (x.shape[-1],), elements=st.integers(0, nx.NARROW_SHIFT_MAX)))
    got = nx.narrow(x, k)
    want = np.clip(np.floor(x / 2.0 ** k + 0.5), -128, 127)
    assert (got == want).all()


def test_layernorm_rejects_inputs_beyond_its_width():
    with pytest.raises(ValueError):
        nx.layernorm(np.array([[2**19, 0]]), [1, 1], [0, 0], 1)


def test_layernorm_zero_variance_rows_give_bias():
    r = np.full((3, 16), 12345, np.int64)
    r[1] = -7
    r[2] = 0
    bias = np.arange(16) * 2**10 - 2**13
    out = nx.layernorm(r, np.full(16, 999), bias, 10)
    assert (out == nx.saturate(nx.rshift_round(bias, 10))).all()


def test_layernorm_normalised_bound():
    # the largest possible deviation: one element far from all others
    r = np.zeros((1, 128), np.int64)
    r[0, 0] = 2**19 - 1
    out = nx.layernorm(r, np.full(128, 1), np.zeros(128, np.int64), 1, bits=32)
    assert abs(int(out[0, 0])) <= 2**14 + 1          # t <= 2^15, then >> 1


def test_exp2_table():
    t = nx.exp2_table()
    assert t.shape == (256,) and t[0] == 2**15 and (np.diff(t) <= 0).all() and t[-1] > 2**14


def test_softmax_all_equal_row_is_uniform():
    p = nx.softmax(np.full((1, 8), 77), np.ones(8, bool), 1000, 10)
    assert (p == p[0, 0]).all() and p[0, 0] == 32          # 256 / 8


def test_softmax_fully_masked_row_is_zero():
    p = nx.softmax(np.arange(16).reshape(2, 8), np.zeros(8, bool), 1000, 10)
    assert (p == 0).all()


def test_softmax_masked_keys_get_zero_and_single_key_saturates():
    mask = np.array([True] + [False] * 7)
    p = nx.softmax(np.arange(8)[None], mask, 1000, 10)
    assert p[0, 0] == 255 and (p[0, 1:] == 0).all()


@settings(max_examples=200)
@given(hnp.arrays(np.int64, st.tuples(st.integers(1, 3), st.integers(1, 40)), elements=st.integers(-(2**20), 2**20)),
       st.floats(1e-4, 1e-2))
def test_softmax_close_to_float(scores, scale):
    mult, shift = nx.quantize_multiplier(scale / math.log(2) * 256)
    p = nx.softmax(scores, np.ones(scores.shape[-1], bool), int(mult[0]), shift) / 256
    z = scores * (int(mult[0]) / 2**shift) * math.log(2) / 256
    e = np.exp(z - z.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
    assert np.abs(p - ref).max() < 0.01
    assert (p.sum(-1) <= 1.0 + 1e-9).all()


def test_gelu_table_is_uint8_with_its_zero_point():
    zero = 4                                  # 0.17 / 0.05 rounded: GELU's minimum sits near code 0
    t = nx.gelu_table(0.05, 0.05, zero)
    assert t[128] == zero                     # gelu(0) = 0
    assert t.min() >= 0 and t.max() == 255 - 0 or t.max() == round(127 * 0.05 * 0.5 * (1 + math.erf(127 * 0.05 / math.sqrt(2))) / 0.05) + zero
    assert (np.diff(t[128:]) >= 0).all() and t.min() == zero - 3    # gelu >= -0.17 = -3.4 codes
    assert nx.table_lookup([-128, 0, 127], t).tolist() == [t[0], t[128], t[255]]
    assert nx.gelu_table(0.5, 0.001, 0).max() == 255 and nx.gelu_table(0.5, 0.001, 0).min() == 0   # saturates


def test_isqrt_and_bit_length():
    v = np.array([0, 1, 2, 3, 4, 15, 16, 2**50 - 1, 2**50])
    assert nx.isqrt(v).tolist() == [math.isqrt(int(x)) for x in v]
    assert nx.bit_length(v).tolist() == [int(x).bit_length() for x in v]
