"""The layer engine's on-chip tensors against the golden model, tensor by tensor (numpy, no simulator).

A run's trace is three record arrays, in the order the engine produced them (int64):
    ``mvau``  [n, 2 + pe]: layer, op, the ``pe`` lanes of an MVAU result beat
    ``probs`` [n, 2]:      layer, a softmax probability (uint8)
    ``ln``    [n, 4]:      layer, op, LayerNorm lane, an output element (int16)
:func:`observed` turns them into named tensors per layer, :func:`expected` the golden model's per-layer
trace into the same streams (with a mask of the values that exist: padded rows and keys are not in
the golden model), and :func:`first_difference` names the first layer, tensor and index that differ.
"""
from __future__ import annotations

import numpy as np

from mlo_hw.hw.layer_engine import Op

__all__ = ["order", "Trace", "expected", "observed", "first_difference", "check_run", "check_run_rejects_corruption"]

MATRIX_NAMES = {Op.Q: "q", Op.K: "k", Op.V: "v", Op.O: "attn_out", Op.FFN_UP: "ffn_up", Op.FFN_DOWN: "ffn_down"}


def order(heads: int, norm: str = "post") -> list[str]:
    """The engine's tensors of one layer of kind ``norm`` in the order it produces them (a pre-LN layer's output is
    the saturated sum res1 + FFN down, checked in the next layer's LN1 input and in DRAM)."""
    attention = ["q", "k", "v"] + [f"{t}.h{h}" for h in range(heads) for t in ("scores", "probs", "ctx")]
    if norm == "pre":
        return ["ln1"] + attention + ["attn_out", "ln2", "ffn_up", "ffn_down"]
    return attention + ["attn_out", "ln1", "ffn_up", "ffn_down", "out"]


def ln_names(norm: str) -> dict:
    """The golden tensor each LayerNorm op makes: post-LN LN1 and the layer output; pre-LN LN1 and LN2."""
    return {Op.LN1: "ln1", Op.LN2: "ln2" if norm == "pre" else "out"}



class Trace:
    """The record arrays of one run (see the module docstring)."""

    def __init__(self, mvau, probs, ln):
        self.mvau, self.probs, self.ln = (np.asarray(a, dtype=np.int64) for a in (mvau, probs, ln))

    @classmethod
    def from_records(cls, mvau, probs, ln, pe: int) -> "Trace":
        """From lists of tuples: (layer, op, [pe values]), (layer, value), (layer, op, lane, value)."""
        def arr(rows, cols):
            return np.array(rows, dtype=np.int64).reshape(len(rows), cols)
        return cls(arr([(layer, op, *vals) for layer, op, vals in mvau], 2 + pe), arr(probs, 2), arr(ln, 4))


def _runs(keys: np.ndarray):
    """(start, end) of each run of equal consecutive rows of ``keys`` [n, k]."""
    if len(keys) == 0:
        return []
    change = np.flatnonzero((keys[1:] != keys[:-1]).any(axis=1)) + 1
    bounds = np.concatenate([[0], change, [len(keys)]])
    return list(zip(bounds[:-1], bounds[1:]))


def _pad(t, rows, seq_len):
    out = np.zeros((rows,) + t.shape[1:], dtype=np.int64)
    out[:seq_len] = t[:seq_len]
    return out


def _block(cfg) -> int:
    """Token rows per block of the engine's plan (the padded sequence when every activation stays on chip)."""
    from mlo_hw.plan import plan
    return plan(cfg).block


def expected(cfg, trace: dict, seq_len: int) -> dict:
    """One layer's golden tensors as the engine streams them: name -> (values, valid mask), flat. A weight
    matrix's results come block by block (the DRAM-tiled engine's token blocks; one block on chip); every other
    tensor in row order."""
    S, H, TR, DH = cfg.seq_padded, cfg.model.hidden, cfg.folding.tile_rows, cfg.head_dim
    B = _block(cfg)
    row_ok = np.arange(S) < seq_len
    exp = {}

    def matrix(t):
        rows = t.shape[1]
        # per block, for tile, for token s of the block, the tile's channels (nf, p) in order
        vals = _pad(t, S, seq_len).reshape(S // B, B, rows // TR, TR).transpose(0, 2, 1, 3).reshape(-1)
        ok = np.broadcast_to(row_ok.reshape(S // B, 1, B, 1), (S // B, rows // TR, B, TR)).reshape(-1)
        return vals, ok

    for name in ("q", "k", "v", "attn_out", "ffn_up", "ffn_down"):
        exp[name] = matrix(np.asarray(trace[name]))
    key_ok = row_ok[:, None] & row_ok[None, :]
    for h in range(cfg.model.heads):
        scores = np.zeros((S, S), dtype=np.int64)
        scores[:seq_len, :seq_len] = np.asarray(trace["scores"])[h, :seq_len, :seq_len]
        exp[f"scores.h{h}"] = (scores.reshape(-1), key_ok.reshape(-1))
        probs = np.zeros((S, S), dtype=np.int64)          # masked keys of a valid row must be 0
        probs[:seq_len, :seq_len] = np.asarray(trace["probs"])[h, :seq_len, :seq_len]
        exp[f"probs.h{h}"] = (probs.reshape(-1), np.repeat(row_ok, S))
        ctx = _pad(np.asarray(trace["ctx"]), S, seq_len)[:, h * DH:(h + 1) * DH]
        exp[f"ctx.h{h}"] = (ctx.reshape(-1), np.repeat(row_ok, DH))
    for name in ln_names(cfg.model.norm).values():
        exp[name] = (_pad(np.asarray(trace[name]), S, seq_len).reshape(-1), np.repeat(row_ok, H))
    return exp


def observed(cfg, tr: Trace, layers: int) -> list[dict]:
    """Per layer, name -> the values the engine produced (flat; the DRAM-tiled engine's blocks one after another in
    block order, each head's attention tensors gathered over the blocks)."""
    S, H, heads, B = cfg.seq_padded, cfg.model.hidden, cfg.model.heads, _block(cfg)
    lanes, names = cfg.folding.ln_lanes, ln_names(cfg.model.norm)
    parts = [dict() for _ in range(layers)]

    def add(layer, name, vals):
        parts[layer].setdefault(name, []).append(vals)
    count = {}
    for a, b in _runs(tr.mvau[:, :2]):
        layer, op = int(tr.mvau[a, 0]), Op(int(tr.mvau[a, 1]))
        if layer >= layers:
            continue
        vals = tr.mvau[a:b, 2:].reshape(-1)
        if op in MATRIX_NAMES:
            add(layer, MATRIX_NAMES[op], vals)
        elif op in (Op.SCORES, Op.PV):
            c = count.get((layer, op), 0)
            count[layer, op] = c + 1
            add(layer, f"{'scores' if op == Op.SCORES else 'ctx'}.h{c % heads}", vals)
    for a, b in _runs(tr.probs[:, :1]):
        layer = int(tr.probs[a, 0])
        if layer < layers:
            probs = tr.probs[a:b, 1]
            for c in range(-(-len(probs) // (B * S))):         # per block, per head: B rows of S keys
                add(layer, f"probs.h{c % heads}", probs[c * B * S:(c + 1) * B * S])
    for a, b in _runs(tr.ln[:, :2]):
        layer, op = int(tr.ln[a, 0]), Op(int(tr.ln[a, 1]))
        if layer >= layers:
            continue
        # a block's row r comes from LayerNorm lane r % folding.ln_lanes, in row order within a lane; a run may
        # hold several blocks (a pre-LN layer's LN1 runs once per block in pass 1), each finished before the next
        for c in range(a, b, B * H):
            lane, vals = tr.ln[c:min(b, c + B * H), 2], tr.ln[c:min(b, c + B * H), 3]
            per_lane = [vals[lane == i] for i in range(lanes)]
            if all(len(v) == len(range(i, B, lanes)) * H for i, v in enumerate(per_lane)):
                rows = np.zeros((B, H), dtype=np.int64)
                for i, v in enumerate(per_lane):
                    rows[i::lanes] = v.reshape(-1, H)
                vals = rows.reshape(-1)
            add(layer, names[op], vals)
    # the DRAM-tiled engine's pass 2 runs its blocks from the last one on (T - 1, 0, .., T - 2: the sequencer's
    # start_pass): a tensor of it, one part a block, back in block order (pass 1's Q, K, V and pre-LN's LN1 are in it)
    blocks, pass1 = S // B, {"q", "k", "v"} | ({"ln1"} if cfg.model.norm == "pre" else set())
    for p in parts:
        for name, v in p.items():
            if len(v) > 1 and name not in pass1:        # (a decode step's run computes one block)
                assert len(v) == blocks, f"{name}: {len(v)} parts, expected one a block ({blocks})"
                p[name] = v[1:] + v[:1]
    return [{name: np.concatenate(v) for name, v in p.items()} for p in parts]


def first_difference(cfg, traces: list[dict], obs: list[dict], seq_len: int):
    """The first (layer, tensor, index, got, want) where the engine differs from the golden traces, or None."""
    for layer, trace in enumerate(traces):
        exp = expected(cfg, trace, seq_len)
        for name in order(cfg.model.heads, cfg.model.norm):
            want, ok = exp[name]
            got = obs[layer].get(name)
            if got is None:
                return layer, name, -1, "missing", f"{len(want)} values"
            if len(got) != len(want):
                return layer, name, -1, f"{len(got)} values", f"{len(want)} values"
            bad = np.flatnonzero(ok & (got != want))
            if len(bad):
                i = int(bad[0])
                return layer, name, i, int(got[i]), int(want[i])
    return None


def check_run(cfg, got, want, traces: list[dict], tr: Trace, seq_len: int, layers: int):
    """AssertionError naming the first layer and tensor that differ, else the output in DRAM if it differs."""
    diff = first_difference(cfg, traces, observed(cfg, tr, layers), seq_len)
    if diff is not None:
        layer, name, i, g, w = diff
        raise AssertionError(f"layer {layer} tensor {name} differs first at index {i}: got {g}, want {w}")
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)[0]
        raise AssertionError(f"output in DRAM differs at {tuple(int(b) for b in bad)} (on-chip tensors matched)")


def check_run_rejects_corruption(cfg, r, want, traces: list[dict], tokens: int, layers: int, rng):
    """Negative checks of a run that passed :func:`check_run`: with one valid output element flipped, and with one
    on-chip tensor value changed, the checker must reject it (naming the output in DRAM, and a tensor)."""
    seq = cfg.model.seq_len
    bad = r.output.copy()
    bad[rng.randrange(tokens), rng.randrange(cfg.model.hidden)] ^= 0x20
    for got, tr, needle in ((bad, r.trace, "output in DRAM differs"), (r.output, None, " differs first at index ")):
        if tr is None:
            tr = Trace(r.trace.mvau.copy(), r.trace.probs, r.trace.ln)
            tr.mvau[0, 2 + rng.randrange(cfg.folding.pe)] += 1      # layer 0's Q of token 0: always checked
        try:
            check_run(cfg, got, want, traces, tr, seq, layers)
        except AssertionError as e:
            assert needle in str(e), f"the checker rejected a corrupted run for another reason: {e}"
        else:
            raise AssertionError(f"the checker accepted a corrupted run ({needle.strip()})")
