"""Weights of one layer by their role in the body, found from the graph's structure, never from names.

Optimised dynamo exports fold each Linear's weight into a fresh initializer (``val_123``, stored
[in, out]) and merge identical initializers across layers; the legacy exporter stores MatMul weights as
``onnx::MatMul_123``. So roles come from the wiring:

* a *linear* is a MatMul (or Gemm) with a constant 2-D weight, plus the Add of a constant bias that
  follows it; its weight is returned in PyTorch's [out, in] layout;
* an *attention* is found from each Softmax: the MatMul producing its scores has Q on input 0 and K on
  input 1, the MatMul consuming its probabilities has V on input 1 (each traced back through reshapes,
  transposes, splits and scalings to its linear; one linear for all three is a fused ``qkv``); the
  output projection O is the first linear after that; it is *self* attention when Q, K and V read the
  same tensor, *cross* attention otherwise, and *causal* when its mask compares query and key positions;
* the linears of no attention are the feed-forward network, in graph order (``ffn_up``, ``ffn_down``);
* LayerNormalization nodes in order give ``ln1``, ``ln2``, ...; any other weight-sized constant is
  reported under the op that reads it (``mul1``: T5's RMSNorm weight, for instance).

Role names for a BERT layer are the fields of :class:`mlo_hw.model.reference.FloatLayer` (``q_w``, ``q_b``,
..., ``ln2_b``), so a BERT-family layer converts directly. Exporter noise (Identity, inference-mode
Dropout, same-dtype casts; :meth:`Graph.is_noise`) is looked through wherever tensors are compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .graph import FrontendError, Graph
from .loop import SMALL_CONST, Layer

__all__ = ["Linear", "Attention", "LayerRoles", "layer_roles", "engine_refusal", "norm_kind", "gelu_kind",
           "split_fused_qkv"]

_PASS = {"Reshape", "Transpose", "Mul", "Div", "Cast", "CastLike", "Identity", "Squeeze", "Unsqueeze", "Dropout",
         "Contiguous", "Expand", "Slice", "IsNaN", "Where", "Add", "Split", "SplitToSequence", "SequenceAt"}

# Comparisons that, between a query position and a key position, make a causal (decoder) mask.
_COMPARE = {"Less", "LessOrEqual", "Greater", "GreaterOrEqual"}


@dataclass
class Linear:
    matmul: int                 # node index
    bias_add: int | None
    input: str
    output: str                 # after the bias
    w: np.ndarray               # [out, in]
    b: np.ndarray | None


@dataclass
class Attention:
    q: Linear
    k: Linear
    v: Linear
    o: Linear | None
    scores: int                 # node index of Q @ K^T
    softmax: int
    context: int                # node index of P @ V
    scale: float                # product of the constant scalings between the Q, K linears and Softmax

    causal: str | None = None   # the node that makes the mask causal (decoder self-attention), if any
    inputs: tuple[str, str, str] = ("", "", "")   # the tensors Q, K and V read, exporter noise looked through
    parts: tuple[int | None, int | None, int | None] = (None, None, None)   # fused: the split outputs Q, K, V read

    @property
    def kind(self) -> str:
        return "self" if self.inputs[0] == self.inputs[1] == self.inputs[2] else "cross"

    @property
    def fused(self) -> bool:
        """Q, K and V come from one linear layer (GPT-2's ``c_attn``), split after it."""
        return self.q is self.k is self.v


@dataclass
class LayerRoles:
    """Everything found in one layer; :attr:`weights` maps role to float array ([out, in] for matrices)."""
    layer: Layer
    linears: list[Linear]
    attentions: list[Attention]
    ffn: list[Linear]
    norms: list[int]                          # LayerNormalization node indices
    activations: list[str]                    # op types between the FFN linears
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    heads: int | None = None


class _Body:
    def __init__(self, g: Graph, layer: Layer):
        self.g, self.layer = g, layer
        self.nodes = set(layer.nodes)

    def producer(self, t: str) -> int | None:
        p = self.g.producer.get(t)
        return p if p in self.nodes else None

    def consumers(self, t: str) -> list[int]:
        return [c for c in self.g.consumers.get(t, []) if c in self.nodes]

    def active_inputs(self, i: int) -> list[str]:
        """Inputs of node ``i`` that are activations (not constants, not shape arithmetic)."""
        g = self.g
        return [t for t in g.nodes[i].input if t and not g.is_const(t) and t not in g.plumbing]


def _scaling(g: Graph, node, ins: list[str]) -> float:
    """The factor a Mul or Div node with one activation input ``ins`` applies by a scalar constant, else 1."""
    if node.op_type not in ("Mul", "Div") or len(ins) != 1:
        return 1.0
    slot_of_value = list(node.input).index(ins[0])
    for s, t in enumerate(node.input):
        if s != slot_of_value and t and g.is_const(t) and g.const(t).size == 1:
            c = float(g.const(t).ravel()[0])
            return c if node.op_type == "Mul" else (1.0 / c if c else math.inf)
    return 1.0


def _linears(b: _Body) -> list[Linear]:
    g, out = b.g, []
    for i in b.layer.nodes:
        n = g.nodes[i]
        if n.op_type not in ("MatMul", "Gemm") or len(n.input) < 2:
            continue
        a, w = n.input[0], n.input[1]
        if g.is_const(a) or not g.is_const(w) or g.const(w).ndim != 2:
            continue
        wv = np.asarray(g.const(w), np.float64)
        bias, add, y = None, None, n.output[0]
        if n.op_type == "Gemm":
            if g.attr(i, "transA", 0):
                continue
            wv = wv if g.attr(i, "transB", 0) else wv.T
            if len(n.input) > 2 and n.input[2]:
                bias = np.asarray(g.const(n.input[2]), np.float64) * g.attr(i, "beta", 1.0)
            wv = wv * g.attr(i, "alpha", 1.0)
        else:
            wv = wv.T                                            # MatMul stores [in, out]
        if bias is None:
            cons = b.consumers(y)
            if len(cons) == 1 and g.nodes[cons[0]].op_type == "Add":
                other = [t for t in g.nodes[cons[0]].input if t != y]
                if len(other) == 1 and g.is_const(other[0]):
                    cv = np.asarray(g.const(other[0]), np.float64)
                    if cv.size == wv.shape[0] and cv.shape[-1] == wv.shape[0]:
                        bias, add, y = cv.reshape(-1), cons[0], g.nodes[cons[0]].output[0]
        out.append(Linear(matmul=i, bias_add=add, input=a, output=y, w=wv, b=bias))
    return out


def _walk_back(b: _Body, t: str, scale: list[float], side: list[str] | None = None,
               stop=frozenset(), stop_ops=frozenset()) -> str | None:
    """Follow tensor ``t`` back through the body's pass-through nodes (:data:`_PASS`, first activation input)
    to a tensor in ``stop``, made by an op in ``stop_ops`` or made by another op; None when the path leaves the
    body.

    ``scale[0]`` is multiplied by the constant scalings on the way; the other inputs joining the path
    (the attention mask, and the constants and shape arithmetic a causal mask is computed from without a
    padding mask) go to ``side``."""
    g = b.g
    for _ in range(64):
        p = b.producer(t)
        if p is None:
            return None
        node = g.nodes[p]
        if t in stop or node.op_type not in _PASS or node.op_type in stop_ops:
            return t
        ins = b.active_inputs(p)
        scale[0] *= _scaling(g, node, ins)
        local = [x for x in ins if b.producer(x) is not None]
        if not local:
            return None
        t = local[0]
        if side is not None:
            side.extend(x for x in node.input if x and x != t)
    return None


def _walk_forward(b: _Body, t: str, want, steps: int = 64) -> int | None:
    """The first node ``want(i)`` accepts on the path from tensor ``t`` forward through the body's
    pass-through nodes (each time the first reader), or None."""
    g = b.g
    for _ in range(steps):
        cons = b.consumers(t)
        if not cons:
            return None
        i = cons[0]                                  # consumers are in graph order
        if want(i):
            return i
        if g.nodes[i].op_type not in _PASS:
            return None
        t = g.nodes[i].output[0]
    return None


def _trace_back(b: _Body, t: str, by_output: dict[str, Linear], scale: list[float]) -> Linear | None:
    """The linear producing ``t`` through pass-through nodes; record scalar scalings."""
    return by_output.get(_walk_back(b, t, scale, stop=by_output))


def _fused_part(b: _Body, t: str) -> int | None:
    """Which output of the split after a fused QKV linear tensor ``t`` comes from (looked back through
    pass-through nodes): a Split's output index, or the position a SequenceAt takes from a SplitToSequence."""
    g = b.g
    t = _walk_back(b, t, [1.0], stop_ops={"Split", "SequenceAt"})
    node = None if t is None else g.nodes[b.producer(t)]
    if node is not None and node.op_type == "Split":
        return list(node.output).index(t)
    if node is not None and node.op_type == "SequenceAt" and g.is_const(node.input[1]):
        return int(g.const(node.input[1]))
    return None


def _is_product(b: _Body, i: int) -> bool:
    """Node ``i`` is an activation-by-activation MatMul (Q @ K^T, P @ V)."""
    return b.g.nodes[i].op_type == "MatMul" and len(b.active_inputs(i)) == 2


def _scores_matmul(b: _Body, softmax: int, scale: list[float], mask: list[str]) -> int | None:
    """The MatMul producing a Softmax's scores (through scalings and the mask Add, collected in ``mask``)."""
    t = _walk_back(b, b.g.nodes[softmax].input[0], scale, side=mask)
    p = b.producer(t) if t is not None else None
    return p if p is not None and _is_product(b, p) else None


def _context_matmul(b: _Body, softmax: int) -> int | None:
    """The MatMul reading a Softmax's probabilities (P @ V)."""
    return _walk_forward(b, b.g.nodes[softmax].output[0], lambda i: _is_product(b, i))


def _row_source(g: Graph, t: str) -> str:
    """``t`` looked back through exporter noise and through reshapes that keep each row (the last dim):
    GPT-2 flattens [batch, seq, hidden] to [batch * seq, hidden] around each Gemm."""
    for _ in range(64):
        t = g.source(t)
        p = g.producer.get(t)
        if p is None or g.nodes[p].op_type != "Reshape":
            return t
        a, y = g.shapes.get(g.nodes[p].input[0]), g.shapes.get(t)
        if not a or not y or not isinstance(a[-1], int) or a[-1] != y[-1]:
            return t
        t = g.nodes[p].input[0]
    return t


def _causal(g: Graph, mask: list[str]) -> str | None:
    """The node that makes an attention mask causal, or None: a comparison of two position tensors
    (``kv_idx <= q_idx``), a Trilu, or a constant square mask whose rows differ."""
    seen, todo = set(), list(mask)
    while todo:
        t = todo.pop()
        if not t or t in seen:
            continue
        seen.add(t)
        c = g.const(t)
        if c is not None:
            if c.ndim >= 2 and c.shape[-1] == c.shape[-2] > 1 and len(np.unique(c)) <= 2 \
                    and not (c == c[..., :1, :]).all():
                return f"constant {t!r} (a triangular mask)"
            continue
        p = g.producer.get(t)
        if p is None:
            continue
        node = g.nodes[p]
        if node.op_type == "Trilu" or (node.op_type in _COMPARE and len(node.input) == 2
                                       and all(x in g.positions for x in node.input)):
            return g.describe(p)
        todo.extend(node.input)
    return None


def _reachable(b: _Body, start: str) -> set[int]:
    seen, todo = set(), [start]
    while todo:
        for c in b.consumers(todo.pop()):
            if c not in seen:
                seen.add(c)
                todo.extend(o for o in b.g.nodes[c].output if o)
    return seen


def _ops_between(b: _Body, start: str, end: str) -> list[str]:
    """Op types of the body nodes on the paths from tensor ``start`` to tensor ``end``."""
    ops, todo, seen = set(), [end], set()
    while todo:
        t = todo.pop()
        if t == start or t in seen:
            continue
        seen.add(t)
        p = b.producer(t)
        if p is None:
            continue
        ops.add(b.g.nodes[p].op_type)
        todo.extend(b.active_inputs(p))
    return sorted(ops)


def _heads(b: _Body, lin: Linear, hidden: int) -> int | None:
    """Head count from the Reshape that splits Q into [.., heads, head_dim]."""
    g = b.g
    i = _walk_forward(b, lin.output, lambda i: g.nodes[i].op_type == "Reshape", steps=8)
    if i is None:
        return None
    target = g.nodes[i].input[1]
    vals = None
    if g.is_const(target):
        vals = [int(v) for v in g.const(target).ravel()]
    elif g.producer.get(target) is not None and g.nodes[g.producer[target]].op_type == "Concat":
        vals = []
        for x in g.nodes[g.producer[target]].input:
            vals += [int(v) for v in g.const(x).ravel()] if g.is_const(x) else [None]
    if vals and len(vals) >= 2 and vals[-1] not in (None, -1, 0):
        dh = vals[-1]
        heads = vals[-2] if vals[-2] not in (None, -1, 0) else hidden // dh
        return heads if heads * dh == hidden else None
    return None


def layer_roles(g: Graph, layer: Layer) -> LayerRoles:
    b = _Body(g, layer)
    linears = _linears(b)
    by_output = {}
    for lin in linears:
        by_output[lin.output] = lin
        by_output[g.nodes[lin.matmul].output[0]] = lin
    attentions = []
    for i in layer.nodes:
        if g.nodes[i].op_type != "Softmax":
            continue
        where = f"{g.describe(i)}"
        scale, mask = [1.0], []
        scores = _scores_matmul(b, i, scale, mask)
        context = _context_matmul(b, i)
        if scores is None or context is None:
            raise FrontendError(f"{where}: no score or context MatMul around this Softmax")
        qa, ka = g.nodes[scores].input[:2]
        q = _trace_back(b, qa, by_output, scale)
        k = _trace_back(b, ka, by_output, scale)
        v = _trace_back(b, g.nodes[context].input[1], by_output, [1.0])
        if q is None or k is None or v is None:
            raise FrontendError(f"{where}: cannot trace Q, K and V back to their linear layers")
        after = _reachable(b, g.nodes[context].output[0])
        o = next((lin for lin in linears if lin.matmul in after), None)
        ins = tuple(_row_source(g, x.input) for x in (q, k, v))
        parts = tuple(_fused_part(b, t) for t in (qa, ka, g.nodes[context].input[1])) if q is k is v \
            else (None, None, None)
        attentions.append(Attention(q=q, k=k, v=v, o=o, scores=scores, softmax=i, context=context,
                                    scale=scale[0], causal=_causal(g, mask), inputs=ins, parts=parts))
    used = {id(x) for a in attentions for x in (a.q, a.k, a.v, a.o) if x is not None}
    ffn = [lin for lin in linears if id(lin) not in used]
    norms = [i for i in layer.nodes if g.nodes[i].op_type == "LayerNormalization"]
    activations = _ops_between(b, ffn[0].output, ffn[-1].input) if len(ffn) >= 2 else []
    roles = LayerRoles(layer=layer, linears=linears, attentions=attentions, ffn=ffn, norms=norms,
                       activations=activations)
    _name_weights(g, b, roles)
    if attentions:
        a = attentions[0]
        hidden = a.q.w.shape[1]
        roles.heads = None if a.fused else _heads(b, a.q, hidden)
        if roles.heads is None:     # else from the scores' inferred shape [.., heads, seq, seq]
            shape = g.shapes.get(g.nodes[a.scores].output[0]) or ()
            roles.heads = shape[-3] if len(shape) >= 3 and isinstance(shape[-3], int) else None
    return roles


def _name_weights(g: Graph, b: _Body, r: LayerRoles):
    w = r.weights

    def put(name: str, lin: Linear):
        w[f"{name}_w"] = lin.w
        if lin.b is not None:
            w[f"{name}_b"] = lin.b

    kinds = [a.kind for a in r.attentions]
    for n, a in enumerate(r.attentions):
        if len(r.attentions) == 1:
            pre = ""
        elif kinds.count(a.kind) == 1:
            pre = f"{a.kind}_"
        else:
            pre = f"{a.kind}{n}_"
        for part in ("qkv", "o") if a.fused else ("q", "k", "v", "o"):
            lin = a.q if part == "qkv" else getattr(a, part)
            if lin is not None:
                put(pre + part, lin)
    if len(r.ffn) == 2:
        put("ffn_up", r.ffn[0])
        put("ffn_down", r.ffn[1])
    else:
        for n, lin in enumerate(r.ffn):
            put(f"ffn_{n}", lin)
    used = {t for lin in r.linears for t in g.nodes[lin.matmul].input[1:]}     # Gemm: weight and bias
    used |= {t for lin in r.linears if lin.bias_add is not None for t in g.nodes[lin.bias_add].input}
    for n, i in enumerate(r.norms, start=1):
        ins = g.nodes[i].input
        if len(ins) > 1 and ins[1] and g.is_const(ins[1]):
            w[f"ln{n}_g"] = np.asarray(g.const(ins[1]), np.float64)
        if len(ins) > 2 and ins[2] and g.is_const(ins[2]):
            w[f"ln{n}_b"] = np.asarray(g.const(ins[2]), np.float64)
        used.update(ins)
    count: dict[str, int] = {}
    for i in r.layer.nodes:
        node = g.nodes[i]
        if g.is_static(i):
            continue
        for t in node.input:
            if t and t not in used and g.is_const(t) and g.const(t).size > SMALL_CONST:
                op = node.op_type.lower()
                count[op] = count.get(op, 0) + 1
                w[f"{op}{count[op]}"] = np.asarray(g.const(t), np.float64)
                used.add(t)


def causal_mask_node(r: LayerRoles) -> str | None:
    """The node that makes the layer's self-attention causal (a decoder), or None (an encoder)."""
    return next((a.causal for a in r.attentions if a.causal and a.kind == "self"), None)


def engine_refusal(g: Graph, r: LayerRoles) -> str | None:
    """Why mlo_hw cannot run this layer (a post-LN BERT layer or a pre-LN GPT-2 layer, its self-attention
    bidirectional or causal), or None when it can."""
    reason = _layer_refusal(g, r)
    causal = causal_mask_node(r)
    if reason and causal:
        return f"decoder layer (causal self-attention, the mask made by {causal}): {reason}"
    return reason


def norm_kind(g: Graph, r: LayerRoles) -> str:
    """``model.norm`` of a layer: "pre" when its first LayerNorm feeds the attention (GPT-2), else "post"."""
    if r.attentions and r.norms and _reads(g, r.attentions[0].inputs[0], g.nodes[r.norms[0]]):
        return "pre"
    return "post"


def gelu_kind(g: Graph, r: LayerRoles) -> str:
    """``model.gelu`` of a layer: "tanh" for the tanh approximation (a Tanh between the FFN linears, or a Gelu
    node with ``approximate='tanh'``), else "erf"."""
    if "Tanh" in r.activations:
        return "tanh"
    for i in r.layer.nodes:
        if g.nodes[i].op_type == "Gelu" and g.attr(i, "approximate", b"none") not in (b"none", "none"):
            return "tanh"
    return "erf"


def split_fused_qkv(r: LayerRoles) -> dict:
    """The layer's weights with a fused ``qkv`` linear ([3H, H], [out, in]) split into ``q``, ``k`` and ``v`` by
    the split outputs they read (:attr:`Attention.parts`); other layers' weights unchanged."""
    w = dict(r.weights)
    if "qkv_w" not in w:
        return w
    w_all, b_all = w.pop("qkv_w"), w.pop("qkv_b", None)
    h = w_all.shape[0] // 3
    for name, part in zip("qkv", r.attentions[0].parts):
        w[f"{name}_w"] = w_all[part * h:(part + 1) * h]
        if b_all is not None:
            w[f"{name}_b"] = b_all[part * h:(part + 1) * h]
    return w


def _layer_refusal(g: Graph, r: LayerRoles) -> str | None:
    layer = r.layer
    for i in layer.nodes:
        if g.nodes[i].op_type == "Dropout" and not g.is_noise(i):
            return (f"{g.describe(i)} may be in training mode (export after model.eval()); "
                    f"the engine runs inference")
    if len(r.attentions) != 1:
        return (f"{len(r.attentions)} attention blocks per layer ({', '.join(a.kind for a in r.attentions)}); "
                f"the engine runs exactly one self-attention")
    reason = _llama_refusal(g, r)
    if reason:
        return reason
    if len(r.norms) != 2:
        other = " (it normalises some other way, e.g. T5's RMSNorm)" if not r.norms else ""
        return (f"{len(r.norms)} LayerNormalization nodes per layer{other}; a post-LN (BERT) or pre-LN (GPT-2) "
                f"layer has two")
    a = r.attentions[0]
    pre = norm_kind(g, r) == "pre"
    ln1, ln2 = (g.nodes[i] for i in r.norms)
    q_source = ln1.output[0] if pre else layer.input
    if a.kind != "self" or a.inputs[0] != _row_source(g, q_source):
        return "the attention does not read the layer input as Q, K and V (not a self-attention)"
    reason = _qkv_refusal(g, r, a)
    if reason:
        return reason
    if a.o is None:
        return "no output projection after the attention"
    if len(r.ffn) != 2:
        return f"{len(r.ffn)} feed-forward linear layers; the engine has two (up, down)"
    reason = _shape_refusal(r, a) or _activation_refusal(r)
    if reason:
        return reason
    reason = _pre_ln_refusal(g, r, a) if pre else _post_ln_refusal(g, r, a)
    if reason:
        return reason
    if r.heads is None:
        return "cannot tell the head count from the reshape after Q"
    hidden = a.o.w.shape[0]
    want = 1.0 / math.sqrt(hidden // r.heads)
    if not math.isclose(a.scale, want, rel_tol=1e-5):
        return f"attention scores are scaled by {a.scale:.6g}; the engine scales by 1/sqrt(head size) = {want:.6g}"
    for i in r.norms:
        if g.attr(i, "axis", -1) != -1:
            return "LayerNormalization over an axis other than the last"
    return None


def _llama_refusal(g: Graph, r: LayerRoles) -> str | None:
    """The Llama family's pieces the engine does not have, in one line (its RMSNorm the engine has:
    ``model.rmsnorm``): rotary position embedding (Q and K rotated by position: a Neg and a Concat or Slice of
    halves between the Q linear and the scores), grouped-query attention (K narrower than Q), a gated FFN (SwiGLU:
    three linears); None when there is none of them."""
    a = r.attentions[0]
    b = _Body(g, r.layer)
    pieces = []
    if not a.fused and "Neg" in _ops_between(b, a.q.output, g.nodes[a.scores].input[0]):
        pieces.append("rotary position embedding (Q and K rotated by position: not a linear map the engine has)")
    if not a.fused and a.k.w.shape[0] < a.q.w.shape[0]:
        pieces.append(f"grouped-query attention (K and V {a.k.w.shape[0]} wide for Q's {a.q.w.shape[0]}: the engine "
                      "gives every query head its own K and V)")
    if len(r.ffn) == 3:
        pieces.append(f"a gated FFN ({'SwiGLU' if 'Sigmoid' in r.activations or 'Mul' in r.activations else 'three linears'}"
                      ": the engine's FFN is up, a table, down)")
    if not pieces:
        return None
    norm = "; its RMSNorm the engine has (model.rmsnorm)" if not r.norms else ""
    return "a Llama-family layer: " + "; ".join(pieces) + f" are not in the engine{norm}"


def _qkv_refusal(g: Graph, r: LayerRoles, a: Attention) -> str | None:
    """A fused QKV linear must split into three equal parts, Q, K and V each reading a different one."""
    if not a.fused:
        return None
    rows, hidden = a.q.w.shape
    if rows != 3 * hidden or sorted(p for p in a.parts if p is not None) != [0, 1, 2]:
        return (f"{g.describe(a.q.matmul)}: fused QKV linear of shape {list(a.q.w.shape)} whose split into Q, K "
                f"and V cannot be told (found parts {list(a.parts)}); expected three [hidden, hidden] parts")
    return None


def _shape_refusal(r: LayerRoles, a: Attention) -> str | None:
    hidden = a.o.w.shape[0]
    up, down = r.ffn
    mats = [("qkv", a.q, (3 * hidden, hidden))] if a.fused else \
        [("q", a.q, (hidden, hidden)), ("k", a.k, (hidden, hidden)), ("v", a.v, (hidden, hidden))]
    for name, lin, shape in (*mats, ("o", a.o, (hidden, hidden)), ("ffn_up", up, (up.w.shape[0], hidden)),
                             ("ffn_down", down, (hidden, up.w.shape[0]))):
        if lin.w.shape != shape:
            return f"{name} weight has shape {list(lin.w.shape)}, expected {list(shape)}"
    return None


def _activation_refusal(r: LayerRoles) -> str | None:
    acts = set(r.activations)
    if not ({"Gelu", "Erf", "Tanh"} & acts):
        return f"activation {'/'.join(sorted(acts)) or 'none'} between the FFN linears; the engine implements GELU"
    return None


def _post_ln_refusal(g: Graph, r: LayerRoles, a: Attention) -> str | None:
    """x -> LN1(x + Attn(x)) -> LN2(. + FFN(.)): BERT's wiring."""
    layer, (up, down) = r.layer, r.ffn
    ln1, ln2 = (g.nodes[i] for i in r.norms)
    if not _is_residual(g, ln1.input[0], a.o.output, layer.input):
        return "LayerNorm 1 does not normalise (layer input + attention output): not a post-LN layer"
    if _row_source(g, up.input) != _row_source(g, ln1.output[0]):
        return "the FFN does not read LayerNorm 1's output"
    if not _is_residual(g, ln2.input[0], down.output, ln1.output[0]):
        return "LayerNorm 2 does not normalise (LayerNorm 1 output + FFN output): not a post-LN layer"
    if _row_source(g, layer.output) != _row_source(g, ln2.output[0]):
        return "the layer output is not LayerNorm 2's output"
    return None


def _pre_ln_refusal(g: Graph, r: LayerRoles, a: Attention) -> str | None:
    """x -> r = x + Attn(LN1(x)) -> r + FFN(LN2(r)): GPT-2's wiring (its final LayerNorm is after the stack)."""
    layer, (up, down) = r.layer, r.ffn
    ln1, ln2 = (g.nodes[i] for i in r.norms)
    if _row_source(g, ln1.input[0]) != _row_source(g, layer.input):
        return "LayerNorm 1 does not normalise the layer input: not a pre-LN layer"
    res1 = _residual_add(g, layer, a.o.output, layer.input)
    if res1 is None:
        return "no residual add of the layer input and the attention output: not a pre-LN layer"
    if _row_source(g, ln2.input[0]) != _row_source(g, res1):
        return "LayerNorm 2 does not normalise (layer input + attention output): not a pre-LN layer"
    if _row_source(g, up.input) != _row_source(g, ln2.output[0]):
        return "the FFN does not read LayerNorm 2's output"
    if not _is_residual(g, layer.output, down.output, res1):
        return "the layer output is not (layer input + attention output) + FFN output: not a pre-LN layer"
    return None


def _residual_add(g: Graph, layer: Layer, a: str, b: str) -> str | None:
    """The output of the layer's Add of ``a`` and ``b`` (exporter noise and row-keeping reshapes looked through),
    or None."""
    want = sorted(_row_source(g, x) for x in (a, b))
    for i in layer.nodes:
        node = g.nodes[i]
        if node.op_type == "Add" and len(node.input) == 2 and sorted(_row_source(g, x) for x in node.input) == want:
            return node.output[0]
    return None


def _is_residual(g: Graph, t: str, a: str, b: str) -> bool:
    """``t`` is ``a + b`` (exporter noise and row-keeping reshapes looked through)."""
    p = g.producer.get(_row_source(g, t))
    return p is not None and g.nodes[p].op_type == "Add" and len(g.nodes[p].input) == 2 and \
        sorted(_row_source(g, x) for x in g.nodes[p].input) == sorted(_row_source(g, x) for x in (a, b))


def _reads(g: Graph, t: str, norm) -> bool:
    return _row_source(g, t) == _row_source(g, norm.output[0])
