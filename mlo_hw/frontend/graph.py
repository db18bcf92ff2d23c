"""An ONNX graph with the look-ups the front end needs: producers, consumers, constants, shapes, scopes.

Scopes: the dynamo exporter (``torch.onnx.export(..., dynamo=True)``) stores on every node the metadata
``pkg.torch.onnx.name_scopes``, a Python list literal of module paths ending with the FX node name, e.g.
``['', 'encoder', 'encoder.layer.0', 'encoder.layer.0.attention', ..., 'linear']``. The legacy
TorchScript exporter (``dynamo=False``) has no metadata; its node names carry the path instead
(``/encoder/layer.0/attention/self/query/MatMul``). :meth:`Graph.scopes` returns the module paths of a
node for either, as a tuple of dotted names from the outermost in.

Exporter noise: :meth:`Graph.is_noise` (nodes that pass their input through at inference) and
:meth:`Graph.source` (a tensor with such nodes looked through); :meth:`Graph.const` folds what is
computed from constants alone (a weight behind a Transpose, a scale behind CastLike and Sqrt).
"""

from __future__ import annotations

import ast
from functools import cached_property
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from ..cli import BadInput

__all__ = ["FrontendError", "Graph", "SCOPES_KEY"]

SCOPES_KEY = "pkg.torch.onnx.name_scopes"

# Ops whose output is a constant when every input is: folded by :meth:`Graph.const`.
_FOLD = {
    "Identity": lambda a, n: a[0],
    "Cast": lambda a, n: a[0],          # dtype changes do not matter for weights (kept float64)
    "Transpose": lambda a, n: np.transpose(a[0], _attr(n, "perm", None)),
    "Reshape": lambda a, n: a[0].reshape([int(d) if d != 0 else a[0].shape[i] for i, d in enumerate(a[1])]),
    "Squeeze": lambda a, n: np.squeeze(a[0], tuple(int(d) for d in a[1]) if len(a) > 1 else None),
    "Unsqueeze": lambda a, n: np.expand_dims(a[0], tuple(int(d) for d in a[1])),
    "CastLike": lambda a, n: a[0],      # the second input gives only the dtype (see _FIRST_ONLY)
    "Concat": lambda a, n: np.concatenate(a, axis=_attr(n, "axis", 0)),
    "Sqrt": lambda a, n: np.sqrt(a[0]),
    "Neg": lambda a, n: -a[0],
    "Mul": lambda a, n: a[0] * a[1],
    "Div": lambda a, n: a[0] / a[1],
    "Add": lambda a, n: a[0] + a[1],
    "Sub": lambda a, n: a[0] - a[1],
    "Less": lambda a, n: a[0] < a[1],       # a causal mask over static shapes: arange(s)[None] <= arange(s)[:, None]
    "LessOrEqual": lambda a, n: a[0] <= a[1],
    "Greater": lambda a, n: a[0] > a[1],
    "GreaterOrEqual": lambda a, n: a[0] >= a[1],
}
_FIRST_ONLY = {"CastLike"}              # folded when the first input alone is constant
_FOLD_MAX = 1 << 20                     # elementwise folds of larger constants are not attempted

# Exporter noise: nodes that pass their first input through unchanged in inference (see Graph.is_noise).
_NOISE = {"Identity", "Dropout", "Cast", "CastLike"}


class FrontendError(BadInput):
    """A model the front end cannot handle; ``str(err)`` is one line saying where and why."""


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


class Graph:
    """Read-only view of an ONNX model's main graph (subgraphs of If/Loop nodes are not looked into)."""

    def __init__(self, model: onnx.ModelProto, path: str | Path | None = None):
        self.model = model
        self.path = Path(path) if path else None
        self.nodes = list(model.graph.node)
        self.index = {id(n): i for i, n in enumerate(self.nodes)}
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = {}
        self.initializers = {t.name: t for t in model.graph.initializer}
        known = set(self.initializers) | {i.name for i in model.graph.input}
        for i, n in enumerate(self.nodes):
            for t in n.input:
                if t:
                    if t not in known:    # the walks below follow graph order and would not end on a cycle
                        raise FrontendError(f"node {n.name or i!r} ({n.op_type}): input {t!r} is not produced "
                                            "by an earlier node (a cycle, or an unsorted or truncated graph)")
                    self.consumers.setdefault(t, []).append(i)
            for o in n.output:
                if o:
                    if o in self.producer:
                        raise FrontendError(f"node {n.name or i!r} ({n.op_type}): output {o!r} is already "
                                            f"produced by node {self.nodes[self.producer[o]].name!r}")
                    self.producer[o] = i
                    known.add(o)
        for o in model.graph.output:
            if o.name not in known:
                raise FrontendError(f"graph output {o.name!r} is produced by no node (a truncated graph?)")
        self.graph_inputs = [i for i in model.graph.input if i.name not in self.initializers]
        self.graph_outputs = [o.name for o in model.graph.output]
        self.legacy = not any(p.key == SCOPES_KEY for n in self.nodes for p in n.metadata_props)
        self._const: dict[str, np.ndarray | None] = {}

    @classmethod
    def load(cls, path: str | Path) -> "Graph":
        p = Path(path)
        if not p.exists():
            raise FrontendError(f"{p}: no such ONNX file")
        if not p.is_file():
            raise FrontendError(f"{p}: not a file; expected an ONNX model file")
        try:
            model = onnx.load(str(p))
        except Exception as e:     # onnx raises DecodeError and friends
            raise FrontendError(f"{p}: not a readable ONNX model ({type(e).__name__})") from None
        if not model.graph.node:
            raise FrontendError(f"{p}: not an ONNX model with a graph (no nodes)")
        if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
            # the graph precedes opset_import in the file: a file cut just after the graph still parses
            raise FrontendError(f"{p}: no opset import for the ONNX domain (a truncated file?)")
        return cls(model, p)

    # ---- scopes ------------------------------------------------------------------------------
    def scopes(self, i: int) -> tuple[str, ...]:
        """Module paths of node ``i`` from the outermost in (root ``''`` dropped)."""
        node = self.nodes[i]
        if not self.legacy:
            for p in node.metadata_props:
                if p.key == SCOPES_KEY:
                    try:
                        names = ast.literal_eval(p.value)
                    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                        names = None
                    if not isinstance(names, list) or not all(isinstance(s, str) for s in names):
                        raise FrontendError(f"node {node.name!r}: metadata {SCOPES_KEY} is not a list of strings: "
                                            f"{p.value[:60]!r}")
                    return tuple(s for s in names[:-1] if s)   # the last entry is the FX node name
            return ()
        parts = [p for p in node.name.split("/") if p][:-1]     # '/encoder/layer.0/.../MatMul'
        return tuple(".".join(parts[:k + 1]) for k in range(len(parts)))

    @cached_property
    def all_scopes(self) -> set[str]:
        return {s for i in range(len(self.nodes)) for s in self.scopes(i)}

    # ---- constants and shapes ----------------------------------------------------------------
    def const(self, name: str) -> np.ndarray | None:
        """The value of tensor ``name`` if it is a constant (initializer, Constant node or a fold of one)."""
        if name in self._const:
            return self._const[name]
        value = None
        if name in self.initializers:
            value = numpy_helper.to_array(self.initializers[name])
        elif name in self.producer:
            node = self.nodes[self.producer[name]]
            if node.op_type == "Constant" and node.attribute:
                a = node.attribute[0]
                if a.name == "value":
                    value = numpy_helper.to_array(a.t)
                elif a.name in ("value_float", "value_int"):
                    value = np.array(onnx.helper.get_attribute_value(a))
                elif a.name in ("value_floats", "value_ints"):
                    value = np.array(list(onnx.helper.get_attribute_value(a)))
            elif node.op_type in _FOLD and node.input:
                ins = [t for t in node.input if t][:1] if node.op_type in _FIRST_ONLY else [t for t in node.input if t]
                args = [self.const(t) for t in ins]
                if all(a is not None for a in args) and (len(args) == 1 or sum(a.size for a in args) <= _FOLD_MAX):
                    try:
                        with np.errstate(all="ignore"):
                            value = _FOLD[node.op_type](args, node)
                    except (ValueError, IndexError, TypeError):
                        value = None
        self._const[name] = value
        return value

    def is_const(self, name: str) -> bool:
        return self.const(name) is not None

    # ---- exporter noise ----------------------------------------------------------------------
    def is_noise(self, i: int) -> bool:
        """Node ``i`` passes its first input through unchanged at inference: Identity, Dropout in
        inference mode (no or a constant false ``training_mode``), a Cast or CastLike to the dtype the
        input already has. Constants are not noise (they are folded instead)."""
        n = self.nodes[i]
        if n.op_type not in _NOISE or not n.input or not n.input[0] or self.is_const(n.output[0]):
            return False
        if n.op_type == "Dropout":
            mode = n.input[2] if len(n.input) > 2 else ""
            return not mode or (self.is_const(mode) and not bool(np.ravel(self.const(mode))[0]))
        if n.op_type in ("Cast", "CastLike"):
            src = self.dtypes.get(n.input[0])
            return src is not None and src == self.dtypes.get(n.output[0])
        return True

    def source(self, t: str) -> str:
        """Tensor ``t`` with the exporter noise that produced it looked through (see :meth:`is_noise`).
        Only a noise node's first output is its input passed through (Dropout's mask output is not)."""
        for _ in range(len(self.nodes)):
            p = self.producer.get(t)
            if p is None or self.nodes[p].output[0] != t or not self.is_noise(p):
                return t
            t = self.nodes[p].input[0]
        return t

    def same(self, a: str, b: str) -> bool:
        """``a`` and ``b`` are the same tensor once exporter noise is looked through."""
        return self.source(a) == self.source(b)

    @cached_property
    def positions(self) -> set[str]:
        """Integer tensors computed from a ``Range`` (token positions, as in ``arange(seq)``)."""
        ints = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8}
        out: set[str] = set()
        for n in self.nodes:                        # graph order is topological
            if n.op_type == "Range" or any(t in out for t in n.input if t):
                out.update(o for o in n.output if o and (n.op_type == "Range" or self.dtypes.get(o) in ints))
        return out

    @cached_property
    def dtypes(self) -> dict[str, int]:
        """Element types (``onnx.TensorProto`` codes) of every tensor shape inference can tell."""
        out = {t.name: t.data_type for t in self.model.graph.initializer}
        for vi in list(self._inferred.graph.value_info) + list(self._inferred.graph.input) + \
                list(self._inferred.graph.output):
            if vi.type.tensor_type.elem_type:
                out[vi.name] = vi.type.tensor_type.elem_type
        return out

    @cached_property
    def _inferred(self) -> onnx.ModelProto:
        try:
            return onnx.shape_inference.infer_shapes(self.model)
        except Exception:          # shape inference is best effort; unknown shapes compare as None
            return self.model

    @cached_property
    def shapes(self) -> dict[str, tuple]:
        """Inferred shapes of every tensor ONNX can infer: ints, the graph inputs' dim names ('seq'), or '?'.

        Names that shape inference invents ('unk__8') or that name an output differ from layer to layer
        for the same dim, so they compare as '?'.
        """
        inferred = self._inferred
        out = {}
        g = inferred.graph
        named = {d.dim_param for vi in self.graph_inputs for d in vi.type.tensor_type.shape.dim if d.dim_param}
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            t = vi.type.tensor_type
            if t.HasField("shape"):
                out[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else
                                     (d.dim_param if d.dim_param in named else "?") for d in t.shape.dim)
        return out

    @cached_property
    def plumbing(self) -> set[str]:
        """Tensors that are shape arithmetic: a Shape's output and what is computed from such and constants."""
        out: set[str] = set()
        for n in self.nodes:                        # graph order is topological
            ins = [t for t in n.input if t]
            if n.op_type == "Shape" or (ins and any(t in out for t in ins)
                                         and all(t in out or self.is_const(t) for t in ins)):
                out.update(o for o in n.output if o)
        return out

    def is_static(self, i: int) -> bool:
        """Node ``i`` computes only constants or shape arithmetic (no activations, no weights of its own)."""
        outs = [o for o in self.nodes[i].output if o]
        return bool(outs) and all(o in self.plumbing or self.is_const(o) for o in outs)

    def attr(self, i: int, name: str, default=None):
        return _attr(self.nodes[i], name, default)

    def describe(self, i: int) -> str:
        n = self.nodes[i]
        return f"{n.op_type} {n.name!r}" if n.name else n.op_type
