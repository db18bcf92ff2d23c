"""The DRAM-tiled layer schedule, executed in numpy: what the tiled engine moves, in what layout, in what order.

When the activations do not fit on chip, the engine runs each layer in two passes over token blocks of
``block`` rows (``block`` divides the padded sequence ``S``; ``T = S / block`` blocks), its activations in a
scratch region of DRAM:

- pass 1, per block t: read X_t (int16 [block, H]); K_t, V_t, Q_t = narrow(X_t) W^T (the K, V and Q weights
  streamed once per block, in that order: the engine's K_t and V_t leave beside Q_t); write K_t, V_t and Q_t to
  scratch (the last block's Q_t stays on chip).
- pass 2, per block t, from the last block on (T - 1, then 0 .. T - 2): read Q_t (the last block's: the one on
  chip); per head h read K_h and V_h^T (all S keys) and compute
  scores -> softmax -> P -> P V_h -> CTX_t; O (weights streamed once per block); read X_t again (the
  residual); LN1; FFN up; GELU; FFN down; LN2; write X'_t (the next layer's input, or the output).

Every operation is row-wise except attention, whose score rows are still complete (all S keys) before the
softmax: so the schedule equals :func:`mlo_hw.model.golden.int_layer` bit for bit (``tests/test_tiled.py``).

Scratch layout (:func:`scratch_layout`, byte offsets from SCRATCH_BASE, each region 4 KiB aligned):
``x0``, ``x1`` int16 [S, H] row-major (the residual stream, ping-pong between layers: layer l reads
``x{l%2}``, except layer 0 which reads the input buffer, and writes ``x{(l+1)%2}``, except the last which
writes the output buffer); ``q`` int8 [S, H] row-major; an encoder-decoder's ``xk`` and ``xvt``, each decoder
layer's cross-attention K and V^T of the memory, laid out as ``k`` and ``vt``; ``k`` and ``vt`` head-major, each head's
[S, dh] (K_h) and [dh, S] (V_h^T) in the MVAU's weight-word order (:func:`mlo_hw.model.weight_image.pack_tile_weights`:
word (nf, sf) of ``pe * simd`` bytes, byte ``p * simd + s``), so a head streams into the MVAU's weight port
as a tile. A block's K_h is one contiguous run of ``block * dh`` bytes; its V_h^T is ``dh / pe`` runs of
``block * pe`` bytes, ``S * pe`` bytes apart. A causal model (a decoder) keeps every layer's ``k`` and ``vt``
(layer l's ``l * kv_stride`` bytes on): its KV cache (``docs/decode.md``); an encoder's layers share one.

:func:`tiled_stack` runs the layers on a byte-addressed DRAM and returns the output with every transfer
(:class:`Transfer`): the DRAM traffic the planner's bound counts, and the access pattern an RTL run of the
tiled engine must show.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import numerics as nx
from .golden import IntLayer, int_matmul
from .weight_image import layout, pack_tile_weights, unpack_tile_weights

__all__ = ["PAGE", "ScratchLayout", "scratch_layout", "small_sections", "kv_writes", "kv_head", "Transfer", "TiledRun", "tiled_stack",
           "layer_traffic"]

PAGE = 4096


def _page(n: int) -> int:
    return -(-n // PAGE) * PAGE


@dataclass(frozen=True)
class ScratchLayout:
    """Byte offsets of the scratch regions (see the module docstring) and the total size; layer l's K and V^T are at
    ``k + l * kv_stride`` and ``vt + l * kv_stride`` (``kv_stride`` 0: one region for every layer)."""
    x0: int
    x1: int
    q: int
    k: int
    vt: int
    bytes: int
    kv_stride: int = 0
    xk: int = 0          # an encoder-decoder's: each decoder layer's cross K and V^T of the memory (as k, vt)
    xvt: int = 0


def scratch_layout(cfg) -> ScratchLayout:
    """A causal model (a decoder) keeps every layer's K and V^T: they are its KV cache (``docs/decode.md``);
    an encoder's layers reuse one region."""
    s, h = cfg.seq_padded, cfg.model.hidden
    x, a = _page(2 * s * h), _page(s * h)
    n = max(cfg.model.layers, cfg.model.encoder_layers) if cfg.model.causal else 1
    k, vt = 2 * x + a, 2 * x + a + n * a
    if not cfg.seq2seq:
        return ScratchLayout(x0=0, x1=x, q=2 * x, k=k, vt=vt, bytes=2 * x + a + 2 * n * a,
                             kv_stride=a if cfg.model.causal else 0)
    return ScratchLayout(x0=0, x1=x, q=2 * x, k=k, vt=vt, bytes=2 * x + a + 4 * n * a, kv_stride=a,
                         xk=vt + n * a, xvt=vt + 2 * n * a)


def kv_writes(cfg, k, v, first_key: int):
    """The scratch writes of a layer's int8 K and V rows [n, H] for keys ``first_key``.. (a multiple of pe and simd):
    (region ``"k"`` or ``"vt"``, byte offset inside the layer's region, bytes), K_h one run per head, V_h^T one run
    per ``pe`` channels of a head (the module docstring's layout)."""
    s, dh, pe, simd = cfg.seq_padded, cfg.head_dim, cfg.folding.pe, cfg.folding.simd
    n = len(k)
    out = []
    for hh in range(cfg.model.heads):
        out.append(("k", hh * s * dh + first_key * dh, _i8(pack_tile_weights(k[:, hh * dh:(hh + 1) * dh], pe, simd))))
        packed = pack_tile_weights(v[:, hh * dh:(hh + 1) * dh].T, pe, simd).reshape(dh // pe, n // simd, pe * simd)
        out += [("vt", hh * s * dh + nf * s * pe + first_key * pe, _i8(packed[nf])) for nf in range(dh // pe)]
    return out


def kv_head(cfg, k_bytes: bytes, vt_bytes: bytes):
    """A head's K_h [S, dh] and V_h^T [dh, S] (int64) from its ``S * dh`` bytes of each region."""
    s, dh, pe, simd = cfg.seq_padded, cfg.head_dim, cfg.folding.pe, cfg.folding.simd
    return (unpack_tile_weights(np.frombuffer(k_bytes, np.int8), s, dh, pe, simd).astype(np.int64),
            unpack_tile_weights(np.frombuffer(vt_bytes, np.int8), dh, s, pe, simd).astype(np.int64))


@dataclass(frozen=True)
class Transfer:
    """One DRAM transfer of the schedule: ``kind`` "read" or "write", what it moves, where, how many bytes."""
    layer: int
    kind: str
    what: str          # "x", "q", "k", "vt", "residual", "out", or "weights.<section>"
    addr: int
    bytes: int


@dataclass
class TiledRun:
    """What :func:`tiled_stack` returns: the output, every transfer in order, the final DRAM image and where
    the input, output and scratch regions start in it."""
    output: np.ndarray
    transfers: list
    mem: bytearray
    input_base: int
    output_base: int
    scratch_base: int


class _Dram:
    def __init__(self, size: int):
        self.mem = bytearray(size)
        self.log: list[Transfer] = []
        self.layer = 0

    def read(self, what, addr, n) -> bytes:
        self.log.append(Transfer(self.layer, "read", what, addr, n))
        return bytes(self.mem[addr:addr + n])

    def write(self, what, addr, data: bytes):
        self.log.append(Transfer(self.layer, "write", what, addr, len(data)))
        self.mem[addr:addr + len(data)] = data


def small_sections(cfg) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A layer's small sections (the parameter store's), split by when the tiled schedule fetches them: those pass 1
    needs (the header, the narrowing shifts; pre-LN also LN1's gains and biases) before pass 1's weights, the rest
    (pass 2's) after them, so that a run's first weight tile does not queue behind parameters it does not need."""
    first = ("header", "narrow") + (("ln1",) if cfg.model.norm == "pre" else ())
    small = [sec.name for sec in layout(cfg).sections if not sec.tile_rows]
    return first, tuple(n for n in small if n not in first)


def _linear(x, m, bits=8):
    return nx.requant(int_matmul(x, m.w.T) + m.bias, m.mult, m.shift, bits)


def _i16(t) -> bytes:
    return np.asarray(t).astype("<i2").tobytes()


def _i8(t) -> bytes:
    return np.asarray(t).astype(np.int8).tobytes()


def tiled_stack(cfg, layers: list[IntLayer], x, mask, block: int, weight_base: int = 0):
    """Run ``layers`` on int16 ``x`` [S, H] (S = ``cfg.seq_padded``; ``mask`` [S] the real keys, made causal
    when ``cfg.model.causal``) in blocks of ``block`` rows through a
    simulated DRAM (weights at ``weight_base``, then input, output and scratch); returns (output int64
    [S, H], the transfers, the DRAM image: a :class:`TiledRun`)."""
    s, h, heads = cfg.seq_padded, cfg.model.hidden, cfg.model.heads
    dh, pe, simd = cfg.head_dim, cfg.folding.pe, cfg.folding.simd
    unit = np.lcm(pe, simd)
    if block <= 0 or s % block or block % unit:
        raise ValueError(f"block: {block} rows must divide seq {s} and be a multiple of lcm(pe, simd) = {unit}")
    x = np.asarray(x, np.int64)
    assert x.shape == (s, h), (x.shape, (s, h))
    lay, sc = layout(cfg), scratch_layout(cfg)
    act = _page(2 * s * h)
    inp = _page(weight_base + lay.total_bytes)
    out, scratch = inp + act, inp + 2 * act
    dram = _Dram(scratch + sc.bytes)
    dram.mem[inp:inp + 2 * s * h] = _i16(x)
    mask = nx.attention_mask(mask, cfg.model.causal)
    rows = lambda base, t, width: (base + t * block * width, block * width)        # noqa: E731
    for li, p in enumerate(layers):
        dram.layer = li
        kv = li * sc.kv_stride               # the layer's K and V^T (a causal model's KV cache)
        wbase = weight_base + li * lay.stride
        src = inp if li == 0 else scratch + (sc.x1 if li % 2 else sc.x0)
        dst = out if li == len(layers) - 1 else scratch + (sc.x0 if li % 2 else sc.x1)
        first, later = small_sections(cfg)     # the small sections, once per layer: pass 1's first, pass 2's after it
        for name in first:
            dram.read(f"weights.{name}", wbase + lay[name].offset, lay[name].bytes)
        blocks = s // block
        for t in range(blocks):                                     # pass 1: K, V, Q of every block
            for name in ("k", "v", "q"):
                dram.read(f"weights.{name}", wbase + lay[name].offset, lay[name].bytes)
            xt = np.frombuffer(dram.read("x", *rows(src, t, 2 * h)), "<i2").reshape(block, h).astype(np.int64)
            pre = p.norm == "pre"         # pre-LN: LN1 of the block's rows before Q, K, V
            x8 = nx.narrow(nx.layernorm(xt, p.ln1_gain, p.ln1_bias, p.ln1_shift, nx.RES_BITS, p.rms) if pre else xt,
                           p.narrow_in)
            q, k, v = (_linear(x8, getattr(p, n)) for n in ("q", "k", "v"))
            if t < blocks - 1:            # the last block's Q stays on chip: pass 2 starts with that block
                dram.write("q", rows(scratch + sc.q, t, h)[0], _i8(q))
            for region, off, data in kv_writes(cfg, k, v, t * block):
                dram.write(region, scratch + getattr(sc, region) + kv + off, data)
        for name in later:
            dram.read(f"weights.{name}", wbase + lay[name].offset, lay[name].bytes)
        last_q = q
        for t in [blocks - 1, *range(blocks - 1)]:                  # pass 2: the rest, per query block, the last first
            q = last_q if t == blocks - 1 else \
                np.frombuffer(dram.read("q", *rows(scratch + sc.q, t, h)), np.int8).reshape(block, h).astype(np.int64)
            ctx = np.zeros((block, h), np.int64)
            for hh in range(heads):
                kh, vth = kv_head(cfg, dram.read("k", scratch + sc.k + kv + hh * s * dh, s * dh),
                                  dram.read("vt", scratch + sc.vt + kv + hh * s * dh, s * dh))
                scores = int_matmul(q[:, hh * dh:(hh + 1) * dh], kh.T)
                rows_mask = mask[t * block:(t + 1) * block] if mask.ndim == 2 else mask   # the block's query rows
                probs = nx.softmax(scores[None], nx.per_head(rows_mask), p.softmax_mult, p.softmax_shift)[0]
                ctx[:, hh * dh:(hh + 1) * dh] = nx.requant(int_matmul(probs, vth.T), p.ctx_mult, p.ctx_shift)
            for name in ("o", "ffn_up", "ffn_down"):                # after the heads, as the MVAU takes them
                dram.read(f"weights.{name}", wbase + lay[name].offset, lay[name].bytes)
            attn = _linear(ctx, p.o, nx.RES_BITS)
            xt = np.frombuffer(dram.read("residual", *rows(src, t, 2 * h)), "<i2").reshape(block, h).astype(np.int64)
            if p.norm == "pre":           # saturating int16 adds around LN2 (golden._pre_ln)
                res = nx.saturate(xt + attn, nx.RES_BITS)
                ffn_in = nx.layernorm(res, p.ln2_gain, p.ln2_bias, p.ln2_shift, nx.RES_BITS, p.rms)
            else:
                res = ffn_in = nx.layernorm(xt + attn, p.ln1_gain, p.ln1_bias, p.ln1_shift, nx.RES_BITS, p.rms)
            act_ = nx.table_lookup(_linear(nx.narrow(ffn_in, p.narrow_ln1), p.ffn_up), p.gelu)
            down = _linear(act_, p.ffn_down, nx.RES_BITS)
            if p.norm == "pre":
                y = nx.saturate(res + down, nx.RES_BITS)
            else:
                y = nx.layernorm(res + down, p.ln2_gain, p.ln2_bias, p.ln2_shift, nx.RES_BITS, p.rms)
            dram.write("out" if dst == out else "x", rows(dst, t, 2 * h)[0], _i16(y))
    y = np.frombuffer(bytes(dram.mem[out:out + 2 * s * h]), "<i2").reshape(s, h).astype(np.int64)
    return TiledRun(y, dram.log, dram.mem, inp, out, scratch)


def layer_traffic(log: list[Transfer], layer: int) -> dict[str, int]:
    """Bytes of one layer's transfers: weights read, activations read, activations written."""
    t = {"weights_read": 0, "activations_read": 0, "activations_written": 0}
    for tr in log:
        if tr.layer != layer:
            continue
        if tr.kind == "write":
            t["activations_written"] += tr.bytes
        elif tr.what.startswith("weights."):
            t["weights_read"] += tr.bytes
        else:
            t["activations_read"] += tr.bytes
    return t
