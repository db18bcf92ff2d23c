"""The DRAM weight image: every layer's integer parameters, laid out in the order the engine reads them.

Layout (see ``docs/architecture.md``, "Memory layout")::

    layer l block    at  base + l * stride          stride = layer bytes rounded up to 4096
    sections         in consumption order, each starting at a multiple of ALIGN (64) bytes:
      header         12 little-endian uint32 words (HEADER_FIELDS)
      narrow         uint8 [2H]: the per-channel shifts narrow_in[H], then narrow_ln1[H]
      q, k, v, o     matrix sections: rows/tile_rows tiles, each tile padded to ALIGN:
                       weights int8 [tile_rows * cols] in (nf, sf, pe, simd) order,
                       bias    int32 [tile_rows], mult uint32 [tile_rows]
      ln1            gain int32 [H], bias int32 [H]
      gelu           uint8 [256]: table[x + 128]
      ffn_up         matrix section
      ffn_down       matrix section
      ln2            gain int32 [H], bias int32 [H]
    a pre-LN layer (``model.norm: pre``): header, narrow, ln1, q, k, v, o, ln2, gelu, ffn_up, ffn_down
    (:data:`PRE_LN_SECTION_ORDER`); the manifest's ``norm`` says which
    an encoder-decoder (``model.encoder_layers``, the DRAM-tiled engine, which fetches sections in its own order):
    the encoder's layers then the decoder's, every layer the post-LN sections plus the cross-attention's
    matrices xq, xk, xv, xo (zero in an encoder layer); the header has :data:`CROSS_HEADER_FIELDS` after the
    others, narrow is uint8 [4H] (narrow_in, narrow_ln1, then the cross Q input's and the memory's shifts) and
    ln1 is [16H] bytes: LN1's gain and bias, then the cross block's norm's (LNX)

Weights in a tile: word ``j = nf * SF + sf`` (SF = cols / simd) holds PE x SIMD bytes,
``W[t*tile_rows + nf*pe + p, sf*simd + s]`` at byte ``p*simd + s`` of the word.
:func:`layout` is a pure function of the config; the RTL address generator uses it too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from . import numerics as nx
from .golden import IntLayer, IntMatrix

__all__ = ["ALIGN", "LAYER_ALIGN", "HEADER_FIELDS", "CROSS_HEADER_FIELDS", "header_fields", "CROSS_MATRICES", "SECTION_ORDER", "PRE_LN_SECTION_ORDER", "section_order", "Section",
           "Layout", "layout", "pack_image",
           "unpack_image", "image_layers", "manifest", "pack_tile_weights", "unpack_tile_weights"]

ALIGN = 64            # every section and tile starts at a multiple of this (covers a 512-bit beat)
LAYER_ALIGN = 4096    # layer stride: whole AXI 4 KiB pages
HEADER_FIELDS = ("q_shift", "k_shift", "v_shift", "o_shift", "ffn_up_shift", "ffn_down_shift",
                 "softmax_mult", "softmax_shift", "ctx_mult", "ctx_shift",
                 "ln1_shift", "ln2_shift")
# an encoder-decoder's layer: the cross-attention's (zero in an encoder layer)
CROSS_HEADER_FIELDS = ("xq_shift", "xk_shift", "xv_shift", "xo_shift", "x_softmax_mult", "x_softmax_shift",
                       "x_ctx_mult", "x_ctx_shift", "lnx_shift")
CROSS_MATRICES = ("xq", "xk", "xv", "xo")       # the cross block's Q, K, V, O (IntCross's q, k, v, o)


def bias_words(cfg) -> int:
    """A layer's relative position bias table (``model.position_bias``, T5's): int32 [heads, 2R] after the GELU
    table in its section (per head the distances -(R-1)..R-1 and a zero), or 0 words."""
    return cfg.model.heads * 2 * cfg.bias_radius if cfg.model.position_bias else 0


def _bias_image(cfg, table) -> np.ndarray:
    """A layer's int table [heads, 2R - 1] (or None: zeros) as the image's [heads, 2R]."""
    out = np.zeros((cfg.model.heads, 2 * cfg.bias_radius), np.int64)
    if table is not None:
        if np.shape(table) != (cfg.model.heads, 2 * cfg.bias_radius - 1):
            raise ValueError(f"weight image: a position bias table of shape {list(np.shape(table))}; the config's is "
                             f"[{cfg.model.heads}, {2 * cfg.bias_radius - 1}]")
        out[:, :-1] = table
    return out


def header_fields(cfg) -> tuple[str, ...]:
    """The header's fields of ``cfg``'s layers: :data:`HEADER_FIELDS`, and an encoder-decoder's cross fields."""
    return HEADER_FIELDS + (CROSS_HEADER_FIELDS if cfg.seq2seq else ())


# GELU's table precedes ffn_up: it is applied to FFN-up's outputs while FFN-up's tiles still stream.
SECTION_ORDER = ("header", "narrow", "q", "k", "v", "o", "ln1", "gelu", "ffn_up", "ffn_down", "ln2")
# A pre-LN layer uses LN1 before Q and LN2 before FFN up: the engine streams the sections in this order, so a
# LayerNorm's parameters arrive before the tiles that wait for it (the tile buffer holds two tiles).
PRE_LN_SECTION_ORDER = ("header", "narrow", "ln1", "q", "k", "v", "o", "ln2", "gelu", "ffn_up", "ffn_down")


def section_order(cfg) -> tuple[str, ...]:
    """The weight image's sections of ``cfg``'s layer kind (``model.norm``) in the order the engine consumes them
    (an encoder-decoder's cross matrices last: the tiled engine fetches them in its own order)."""
    return (PRE_LN_SECTION_ORDER if cfg.model.norm == "pre" else SECTION_ORDER) + (CROSS_MATRICES if cfg.seq2seq
                                                                                   else ())


def _align(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


@dataclass(frozen=True)
class Section:
    name: str
    offset: int          # from the start of the layer block
    bytes: int           # including padding
    rows: int = 0        # matrices only
    cols: int = 0
    tile_rows: int = 0
    tile_bytes: int = 0  # padded size of one tile

    @property
    def tiles(self) -> int:
        return self.rows // self.tile_rows if self.tile_rows else 0

    def tile_offset(self, t: int) -> int:
        return self.offset + t * self.tile_bytes


@dataclass(frozen=True)
class Layout:
    sections: tuple[Section, ...]
    layer_bytes: int
    stride: int
    layers: int

    def __getitem__(self, name: str) -> Section:
        for s in self.sections:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def total_bytes(self) -> int:
        return self.stride * self.layers


def tile_weight_bytes(cfg, cols: int) -> int:
    return cfg.folding.tile_rows * cols


def layout(cfg) -> Layout:
    h = cfg.model.hidden
    tr = cfg.folding.tile_rows
    mats = {m.name: m for m in cfg.matrices}
    cross = 2 if cfg.seq2seq else 1
    sizes = {"header": 4 * len(header_fields(cfg)), "narrow": 2 * cross * h, "ln1": 8 * cross * h, "ln2": 8 * h,
             "gelu": (1 << cfg.numerics.act_bits) + 4 * bias_words(cfg)}
    sections, off = [], 0
    for name in section_order(cfg):
        if name in mats:
            m = mats[name]
            tile_bytes = _align(tr * m.cols + 8 * tr)
            sec = Section(name, off, tile_bytes * (m.rows // tr), m.rows, m.cols, tr, tile_bytes)
        else:
            sec = Section(name, off, _align(sizes[name]))
        sections.append(sec)
        off += sec.bytes
    return Layout(tuple(sections), off, _align(off, LAYER_ALIGN), cfg.image_layers)


def pack_tile_weights(w: np.ndarray, pe: int, simd: int) -> np.ndarray:
    """[rows, cols] -> bytes in (nf, sf, pe, simd) order."""
    rows, cols = w.shape
    return w.reshape(rows // pe, pe, cols // simd, simd).transpose(0, 2, 1, 3).reshape(-1)


def unpack_tile_weights(flat: np.ndarray, rows: int, cols: int, pe: int, simd: int) -> np.ndarray:
    return flat.reshape(rows // pe, cols // simd, pe, simd).transpose(0, 2, 1, 3).reshape(rows, cols)


def _le(values, dtype) -> bytes:
    return np.asarray(values).astype(dtype).astype(np.dtype(dtype).newbyteorder("<")).tobytes()


def _header(p: IntLayer, fields) -> list[int]:
    vals = {f"{m}_shift": getattr(p, m).shift for m in IntLayer.MATRICES}
    vals.update(softmax_mult=p.softmax_mult, softmax_shift=p.softmax_shift, ctx_mult=p.ctx_mult,
                ctx_shift=p.ctx_shift, ln1_shift=p.ln1_shift, ln2_shift=p.ln2_shift)
    c = p.cross
    if c is not None:
        vals.update({f"x{m}_shift": getattr(c, m).shift for m in "qkvo"})
        vals.update(x_softmax_mult=c.softmax_mult, x_softmax_shift=c.softmax_shift, x_ctx_mult=c.ctx_mult,
                    x_ctx_shift=c.ctx_shift, lnx_shift=c.ln_shift)
    return [int(vals.get(f, 0)) for f in fields]


def _matrix_of(p: IntLayer, name: str) -> IntMatrix | None:
    """The layer's matrix of a section (a cross matrix of an encoder layer: None, packed as zeros)."""
    if name in CROSS_MATRICES:
        return None if p.cross is None else getattr(p.cross, name[1])
    return getattr(p, name)


def _check_range(name, a, lo, hi):
    a = np.asarray(a)
    if a.size and (a.min() < lo or a.max() > hi):
        raise ValueError(f"weight image: {name} out of range [{lo}, {hi}]")


def pack_image(cfg, layers: list[IntLayer]) -> bytes:
    """All layers' parameters as one image (offsets relative to the weight base address)."""
    lay = layout(cfg)
    if len(layers) != cfg.image_layers:
        raise ValueError(f"weight image: {len(layers)} layers given, the config's image has {cfg.image_layers}")
    fields, h = header_fields(cfg), cfg.model.hidden
    pe, simd, tr = cfg.folding.pe, cfg.folding.simd, cfg.folding.tile_rows
    img = bytearray(lay.total_bytes)
    for l, p in enumerate(layers):
        base = l * lay.stride

        def put(off, data):
            img[base + off: base + off + len(data)] = data

        if cfg.seq2seq and (p.cross is None) != (l < cfg.model.encoder_layers):
            raise ValueError(f"weight image: layer {l} {'has' if p.cross is not None else 'lacks'} a cross-attention "
                             f"block; the first {cfg.model.encoder_layers} (the encoder's) have none")
        put(lay["header"].offset, _le(_header(p, fields), np.uint32))
        for sec in lay.sections:
            if sec.tile_rows:
                m = _matrix_of(p, sec.name)
                if m is None:
                    continue
                _check_range(f"layer {l} {sec.name}.w", m.w, -128, 127)
                _check_range(f"layer {l} {sec.name}.bias", m.bias, -2**31, 2**31 - 1)
                _check_range(f"layer {l} {sec.name}.mult", m.mult, 1, 2**nx.MULT_BITS - 1)
                for t in range(sec.tiles):
                    rows = slice(t * tr, (t + 1) * tr)
                    off = sec.tile_offset(t)
                    wbytes = _le(pack_tile_weights(m.w[rows], pe, simd), np.int8)
                    put(off, wbytes)
                    put(off + len(wbytes), _le(m.bias[rows], np.int32))
                    put(off + len(wbytes) + 4 * tr, _le(m.mult[rows], np.uint32))
        for ln in ("ln1", "ln2"):
            put(lay[ln].offset, _le(getattr(p, f"{ln}_gain"), np.int32) + _le(getattr(p, f"{ln}_bias"), np.int32))
        narrow = np.concatenate([p.narrow_in, p.narrow_ln1])
        if p.cross is not None:
            put(lay["ln1"].offset + 8 * h, _le(p.cross.ln_gain, np.int32) + _le(p.cross.ln_bias, np.int32))
            narrow = np.concatenate([narrow, p.cross.narrow_q, p.cross.narrow_mem])
        _check_range(f"layer {l} gelu", p.gelu, 0, 255)
        _check_range(f"layer {l} narrow", narrow, 0, nx.NARROW_SHIFT_MAX)
        put(lay["gelu"].offset, _le(p.gelu, np.uint8))
        if cfg.model.position_bias:
            table = _bias_image(cfg, p.score_bias)
            _check_range(f"layer {l} position bias", table, -2**31, 2**31 - 1)
            put(lay["gelu"].offset + (1 << cfg.numerics.act_bits), _le(table, np.int32))
        put(lay["narrow"].offset, _le(narrow, np.uint8))
    return bytes(img)


def unpack_image(cfg, img: bytes, layers: int | None = None) -> list[dict]:
    """The inverse of :func:`pack_image`: per layer (all of the image's, or the first ``layers``), a dict of integer
    arrays and header fields."""
    lay = layout(cfg)
    pe, simd, tr, h = cfg.folding.pe, cfg.folding.simd, cfg.folding.tile_rows, cfg.model.hidden
    buf = np.frombuffer(img, dtype=np.uint8)

    def get(off, n, dtype):
        return buf[off: off + n * np.dtype(dtype).itemsize].view(np.dtype(dtype).newbyteorder("<")).astype(np.int64)

    out = []
    fields = header_fields(cfg)
    for l in range(cfg.image_layers if layers is None else layers):
        base = l * lay.stride
        d = dict(zip(fields, (int(v) for v in get(base + lay["header"].offset, len(fields), np.uint32))))
        for sec in lay.sections:
            if not sec.tile_rows:
                continue
            w, bias, mult = [], [], []
            for t in range(sec.tiles):
                off = base + sec.tile_offset(t)
                w.append(unpack_tile_weights(get(off, tr * sec.cols, np.int8), tr, sec.cols, pe, simd))
                bias.append(get(off + tr * sec.cols, tr, np.int32))
                mult.append(get(off + tr * sec.cols + 4 * tr, tr, np.uint32))
            d[f"{sec.name}.w"], d[f"{sec.name}.bias"], d[f"{sec.name}.mult"] = (
                np.concatenate(w), np.concatenate(bias), np.concatenate(mult))
        for ln in ("ln1", "ln2"):
            d[f"{ln}.gain"] = get(base + lay[ln].offset, h, np.int32)
            d[f"{ln}.bias"] = get(base + lay[ln].offset + 4 * h, h, np.int32)
        d["gelu"] = get(base + lay["gelu"].offset, 1 << cfg.numerics.act_bits, np.uint8)
        if cfg.model.position_bias:
            d["position_bias"] = get(base + lay["gelu"].offset + (1 << cfg.numerics.act_bits), bias_words(cfg),
                                     np.int32).reshape(cfg.model.heads, -1)[:, :-1]
        d["narrow_in"] = get(base + lay["narrow"].offset, h, np.uint8)
        d["narrow_ln1"] = get(base + lay["narrow"].offset + h, h, np.uint8)
        if cfg.seq2seq:
            d["lnx.gain"] = get(base + lay["ln1"].offset + 8 * h, h, np.int32)
            d["lnx.bias"] = get(base + lay["ln1"].offset + 12 * h, h, np.int32)
            d["narrow_q"] = get(base + lay["narrow"].offset + 2 * h, h, np.uint8)
            d["narrow_mem"] = get(base + lay["narrow"].offset + 3 * h, h, np.uint8)
        out.append(d)
    return out


def image_layers(cfg, img: bytes, layers: int | None = None, cross: bool | None = None) -> list[IntLayer]:
    """The integer layers an image holds (``cfg.image_layers`` of them, or the first ``layers``): :func:`unpack_image`
    as :class:`IntLayer` objects, the inverse of :func:`pack_image` (float scales are not in the image). An
    encoder-decoder's layers have their cross-attention block from layer ``model.encoder_layers`` on, or (``cross``)
    all of them or none (an image that starts at the decoder's, or holds only the encoder's)."""
    from .golden import IntCross
    out = []
    for l, d in enumerate(unpack_image(cfg, img, layers)):
        mats = {m: IntMatrix(d[f"{m}.w"], d[f"{m}.bias"], d[f"{m}.mult"], d[f"{m}_shift"]) for m in IntLayer.MATRICES}
        cross_block = None
        if cfg.seq2seq and (l >= cfg.model.encoder_layers if cross is None else cross):
            cross_block = IntCross(**{m[1]: IntMatrix(d[f"{m}.w"], d[f"{m}.bias"], d[f"{m}.mult"], d[f"{m}_shift"])
                                for m in CROSS_MATRICES},
                             softmax_mult=d["x_softmax_mult"], softmax_shift=d["x_softmax_shift"],
                             ctx_mult=d["x_ctx_mult"], ctx_shift=d["x_ctx_shift"], narrow_q=d["narrow_q"],
                             narrow_mem=d["narrow_mem"], ln_gain=d["lnx.gain"], ln_bias=d["lnx.bias"],
                             ln_shift=d["lnx_shift"])
        out.append(IntLayer(**mats, softmax_mult=d["softmax_mult"], softmax_shift=d["softmax_shift"],
                            ctx_mult=d["ctx_mult"], ctx_shift=d["ctx_shift"],
                            ln1_gain=d["ln1.gain"], ln1_bias=d["ln1.bias"], ln1_shift=d["ln1_shift"], gelu=d["gelu"],
                            narrow_in=d["narrow_in"], narrow_ln1=d["narrow_ln1"],
                            ln2_gain=d["ln2.gain"], ln2_bias=d["ln2.bias"], ln2_shift=d["ln2_shift"],
                            norm=cfg.model.norm, cross=cross_block, rms=cfg.model.rmsnorm,
                            score_bias=d.get("position_bias")))   # the layer kind is the config's (the manifest records it)
    return out


def manifest(cfg, base: int = 0) -> dict:
    """Every tensor of every layer: name, shape, dtype, offset (absolute), bytes."""
    lay = layout(cfg)
    tr, h = cfg.folding.tile_rows, cfg.model.hidden
    layers = []
    fields = header_fields(cfg)
    for l in range(cfg.image_layers):
        lbase = base + l * lay.stride
        tensors = [{"name": "header", "shape": [len(fields)], "dtype": "uint32",
                    "offset": lbase + lay["header"].offset, "bytes": 4 * len(fields), "fields": list(fields)}]
        for sec in lay.sections:
            if sec.tile_rows:
                for t in range(sec.tiles):
                    off = lbase + sec.tile_offset(t)
                    wb = tr * sec.cols
                    tensors += [
                        {"name": f"{sec.name}.tile{t}.weight", "shape": [tr, sec.cols], "dtype": "int8",
                         "offset": off, "bytes": wb, "order": "nf,sf,pe,simd"},
                        {"name": f"{sec.name}.tile{t}.bias", "shape": [tr], "dtype": "int32",
                         "offset": off + wb, "bytes": 4 * tr},
                        {"name": f"{sec.name}.tile{t}.mult", "shape": [tr], "dtype": "uint32",
                         "offset": off + wb + 4 * tr, "bytes": 4 * tr}]
            elif sec.name in ("ln1", "ln2"):
                for j, ln in enumerate((sec.name, "lnx") if sec.name == "ln1" and cfg.seq2seq else (sec.name,)):
                    off = lbase + sec.offset + 8 * h * j
                    tensors += [{"name": f"{ln}.gain", "shape": [h], "dtype": "int32", "offset": off, "bytes": 4 * h},
                                {"name": f"{ln}.bias", "shape": [h], "dtype": "int32", "offset": off + 4 * h,
                                 "bytes": 4 * h}]
            elif sec.name == "narrow":
                parts = ("in", "ln1", "cross_q", "memory") if cfg.seq2seq else ("in", "ln1")
                tensors += [{"name": f"narrow.{part}", "shape": [h], "dtype": "uint8",
                             "offset": lbase + sec.offset + j * h, "bytes": h} for j, part in enumerate(parts)]
            elif sec.name == "gelu":
                n = 1 << cfg.numerics.act_bits
                tensors.append({"name": "gelu.table", "shape": [n], "dtype": "uint8",
                                "offset": lbase + sec.offset, "bytes": n})
                if cfg.model.position_bias:
                    tensors.append({"name": "position_bias", "shape": [cfg.model.heads, 2 * cfg.bias_radius],
                                    "dtype": "int32", "offset": lbase + sec.offset + n, "bytes": 4 * bias_words(cfg)})
        layers.append({"index": l, "offset": lbase, "tensors": tensors})
    return {"config": cfg.name, "norm": cfg.model.norm, "rmsnorm": cfg.model.rmsnorm, "encoder_layers": cfg.model.encoder_layers, "base": base, "layer_stride": lay.stride, "layer_bytes": lay.layer_bytes,
            "total_bytes": lay.total_bytes, "alignment": ALIGN,
            "folding": {"pe": cfg.folding.pe, "simd": cfg.folding.simd, "tile_rows": cfg.folding.tile_rows},
            "sections": [{"name": s.name, "offset": s.offset, "bytes": s.bytes,
                          **({"rows": s.rows, "cols": s.cols, "tiles": s.tiles, "tile_bytes": s.tile_bytes}
                             if s.tile_rows else {})} for s in lay.sections],
            "layers": layers}


def write_manifest(path, cfg, base: int = 0):
    with open(path, "w") as f:
        json.dump(manifest(cfg, base), f, indent=1)
