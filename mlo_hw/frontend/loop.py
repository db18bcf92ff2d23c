"""Loop-body discovery: group an ONNX graph's nodes into repeated layers and check they share one structure.

A *group* is one stack of layers, e.g. BERT's ``encoder.layer`` (scopes ``encoder.layer.0``,
``encoder.layer.1``, ...); encoder-decoder models have two. A FINN-style ``loop_body_hierarchy``
(``[['encoder', 'encoder.layer.0']]``) names each group by its first layer's scope; without one the
groups are discovered: every scope ``<prefix>.<n>`` whose indices run 0..N-1, outermost only.

Each layer's nodes are those whose scopes contain ``<prefix>.<i>``, plus nodes without scope that lie
inside one layer (the optimiser's fused-QKV ``Split`` in GPT-2). Nodes that the exporter attributes
to one layer but that every layer uses (the attention-mask preparation lands in layer 0, T5's position
bias in block 0) are *hoisted* out of the body: a node is hoisted when another layer of the group reads
one of its outputs, other than the layer's own output, or when only hoisted nodes read it.

The structure check then compares every layer with layer 0 node by node, exporter noise
(:meth:`Graph.is_noise`) left out and looked through: op type, domain, attributes, inferred output
shapes (by structure: a dim symbolic in one layer and concrete in another is no difference) and wiring
(an input is a node of the same layer, the layer input, a constant of a given shape, or a named tensor
outside the body that every layer must share). Small constants (at most :data:`SMALL_CONST` elements:
reshape targets, scales) are compared by value, weights by shape only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import onnx

from .graph import FrontendError, Graph

__all__ = ["Layer", "Group", "find_groups", "SMALL_CONST"]

SMALL_CONST = 16
_NUMBERED = re.compile(r"^(.+)\.(\d+)$")


@dataclass
class Layer:
    """One iteration of the loop body: its nodes (graph indices, graph order) and boundary tensors."""
    index: int
    nodes: list[int]
    compute: list[int] = field(default_factory=list)   # ``nodes`` less constants and shape arithmetic
    input: str = ""          # the hidden-state tensor entering the layer
    output: str = ""         # the hidden-state tensor leaving it


@dataclass
class Group:
    prefix: str                              # e.g. 'encoder.layer'
    hierarchy: tuple[str, ...]               # FINN style, e.g. ('encoder', 'encoder.layer.0')
    layers: list[Layer]
    hoisted: list[int] = field(default_factory=list)

    @property
    def body_size(self) -> int:
        """Nodes per layer that the structure check compares (constants and shape arithmetic excluded)."""
        return len(self.layers[0].compute)

    def scope(self, i: int) -> str:
        return f"{self.prefix}.{i}"


# ---- discovering and naming groups ---------------------------------------------------------------

def _numbered_prefixes(g: Graph) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for s in g.all_scopes:
        m = _NUMBERED.match(s)
        if m:
            found.setdefault(m.group(1), set()).add(int(m.group(2)))
    return found


def _discover(g: Graph) -> list[str]:
    found = {p: idx for p, idx in _numbered_prefixes(g).items() if idx == set(range(len(idx)))}
    outer = []
    for p in sorted(found, key=lambda p: (p.count("."), p)):
        if not any(re.match(re.escape(q) + r"\.\d+\.", p + ".") for q in outer):
            outer.append(p)
    return outer


def _resolve(g: Graph, hierarchy) -> list[str]:
    prefixes = []
    for k, group in enumerate(hierarchy):
        if not group:
            raise FrontendError(f"loop_body_hierarchy[{k}]: empty; expected e.g. ['encoder', 'encoder.layer.0']")
        first = group[-1]
        if first not in g.all_scopes:        # a wrapper module adds a prefix (legacy exports: 'model.')
            cands = sorted(s for s in g.all_scopes if s.endswith("." + first))
            if len(cands) != 1:
                known = ", ".join(f"{p}.0" for p in _discover(g)) or "none"
                raise FrontendError(f"loop_body_hierarchy[{k}]: scope {first!r} not found in the model; "
                                    f"numbered layer scopes found: {known}")
            first = cands[0]
        m = _NUMBERED.match(first)
        if not m or m.group(2) != "0":
            raise FrontendError(f"loop_body_hierarchy[{k}]: {group[-1]!r} should name the first layer, "
                                f"ending in '.0' (e.g. 'encoder.layer.0')")
        prefixes.append(m.group(1))
    return prefixes


def _hierarchy(prefix: str) -> tuple[str, ...]:
    parts = prefix.split(".")
    return tuple(".".join(parts[:k]) for k in range(1, len(parts))) + (prefix + ".0",)


# ---- layers, hoisting, boundaries ----------------------------------------------------------------

def _layer_nodes(g: Graph, prefix: str) -> list[list[int]]:
    per: dict[int, list[int]] = {}
    pat = re.compile(re.escape(prefix) + r"\.(\d+)$")
    for i in range(len(g.nodes)):
        for s in g.scopes(i):
            m = pat.match(s)
            if m:
                per.setdefault(int(m.group(1)), []).append(i)
                break
    n = len(per)
    if sorted(per) != list(range(n)):
        raise FrontendError(f"{prefix}: layer scopes are not numbered 0..{n - 1}: {sorted(per)}")
    return _adopt_unscoped(g, [per[k] for k in range(n)])


def _adopt_unscoped(g: Graph, layers: list[list[int]]) -> list[list[int]]:
    """Give a layer the nodes without scope that lie inside it: nodes the exporter's optimizer made
    without metadata (GPT-2's fused QKV Split) whose activations all come from one layer and whose
    results only that layer reads."""
    owner = {i: k for k, nodes in enumerate(layers) for i in nodes}
    adopted = [list(nodes) for nodes in layers]
    for i, n in enumerate(g.nodes):
        if i in owner or g.scopes(i) or g.is_static(i):
            continue
        srcs = {owner.get(g.producer.get(t)) for t in n.input if t and not g.is_const(t) and t not in g.plumbing}
        readers = {owner.get(c) for o in n.output if o for c in g.consumers.get(o, [])}
        if len(srcs) == 1 and srcs == readers and None not in srcs and not any(o in g.graph_outputs for o in n.output):
            k = srcs.pop()
            owner[i] = k
            adopted[k].append(i)
    return [sorted(nodes) for nodes in adopted]


def _escapes(g: Graph, nodes: set[int], i: int) -> bool:
    outs = g.nodes[i].output
    return any(o in g.graph_outputs or any(c not in nodes for c in g.consumers.get(o, [])) for o in outs if o)


def _split_layers(g: Graph, prefix: str) -> Group:
    raw = _layer_nodes(g, prefix)
    owner = {i: k for k, nodes in enumerate(raw) for i in nodes}
    sets = [set(n) for n in raw]
    # the layer's output: the last node (graph order) whose result leaves the layer
    out_node = []
    for k, nodes in enumerate(raw):
        leaving = [i for i in nodes if _escapes(g, sets[k], i)]
        if not leaving:
            raise FrontendError(f"{prefix}.{k}: no node of the layer is read outside it")
        out_node.append(max(leaving))
    hoisted: set[int] = set()
    for k, nodes in enumerate(raw):
        for i in nodes:
            if i == out_node[k]:
                continue
            readers = {owner.get(c) for o in g.nodes[i].output if o for c in g.consumers.get(o, [])}
            if any(r is not None and r != k for r in readers):
                hoisted.add(i)
    changed = True
    while changed:                      # ancestors read only by hoisted nodes are hoisted too
        changed = False
        for k, nodes in enumerate(raw):
            for i in nodes:
                if i in hoisted or i == out_node[k]:
                    continue
                readers = [c for o in g.nodes[i].output if o for c in g.consumers.get(o, [])]
                if readers and all(c in hoisted for c in readers) and not _escapes(g, sets[k] - hoisted, i):
                    hoisted.add(i)
                    changed = True
    layers = []
    for k, nodes in enumerate(raw):
        body = [i for i in nodes if i not in hoisted]
        outs = [o for o in g.nodes[out_node[k]].output if o]
        compute = [i for i in body if not g.is_static(i) and not g.is_noise(i)]
        layers.append(Layer(index=k, nodes=body, compute=compute, output=outs[0]))
    for k in range(1, len(layers)):
        layers[k].input = layers[k - 1].output
    layers[0].input = _first_input(g, layers)
    return Group(prefix=prefix, hierarchy=_hierarchy(prefix), layers=layers, hoisted=sorted(hoisted))


def _first_input(g: Graph, layers: list[Layer]) -> str:
    """Layer 0's hidden input: where layer 1 reads its input, or (one layer) the most-read outside tensor."""
    first = layers[0]
    n0, n1 = (layers[0].compute, layers[1].compute) if len(layers) > 1 else (None, None)
    if n1 is not None and len(n0) == len(n1):
        for a, b in zip(n1, n0):
            for slot, t in enumerate(g.nodes[a].input):
                if t and g.same(t, layers[1].input) and slot < len(g.nodes[b].input):
                    return g.nodes[b].input[slot]
    inside = {o for i in first.nodes for o in g.nodes[i].output}
    reads: dict[str, int] = {}
    for i in first.nodes:
        for t in g.nodes[i].input:
            if t and t not in inside and not g.is_const(t) and t not in g.plumbing:
                reads[t] = reads.get(t, 0) + 1
    if not reads:
        raise FrontendError("layer 0 reads no tensor from outside the layer")
    return max(reads, key=lambda t: (reads[t], g.producer.get(t, -1)))


# ---- structure signature -------------------------------------------------------------------------

def _value_key(a: np.ndarray):
    a = np.asarray(a)
    small = a.size <= SMALL_CONST
    return ("const", str(a.dtype), tuple(a.shape), tuple(np.ravel(a).tolist()) if small else None)


def _attr_key(a: onnx.AttributeProto):
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, onnx.TensorProto):
        return a.name, _value_key(onnx.numpy_helper.to_array(v))
    if isinstance(v, (onnx.GraphProto, onnx.TypeProto)):
        return a.name, type(v).__name__
    if isinstance(v, list):
        v = tuple(x if not isinstance(x, bytes) else x.decode() for x in v)
    elif isinstance(v, bytes):
        v = v.decode()
    return a.name, v


def _signature(g: Graph, layer: Layer) -> tuple[list[int], list[tuple]]:
    """Per compute node: op, domain, attributes, inputs (exporter noise looked through), output shapes."""
    nodes = layer.compute
    local = {}
    for k, i in enumerate(nodes):
        for s, o in enumerate(g.nodes[i].output):
            local[o] = (k, s)
    layer_input = g.source(layer.input)
    sig = []
    for i in nodes:
        n = g.nodes[i]
        ins = []
        for t in n.input:
            t = g.source(t)
            if not t:
                ins.append(("none",))
            elif t in local:
                ins.append(("node",) + local[t])
            elif t == layer_input:
                ins.append(("layer input",))
            elif g.is_const(t):
                ins.append(_value_key(g.const(t)))
            elif t in g.plumbing:
                ins.append(("shape arithmetic",))
            else:
                ins.append(("tensor", t))
        attrs = tuple(sorted(_attr_key(a) for a in n.attribute))
        shapes = tuple(g.shapes.get(o) for o in n.output)
        sig.append((n.op_type, n.domain, attrs, tuple(ins), shapes))
    return nodes, sig


def _same_dims(a, b) -> bool:
    """Inferred shapes agree: same rank, and equal wherever both dims are known numbers. A dim that
    one layer has symbolic and another concrete is no structural difference (legacy exports with
    static shapes leave layer 0's batch dim symbolic and infer the later layers' as 1)."""
    if a is None or b is None:
        return True
    return len(a) == len(b) and all(x == y or not isinstance(x, int) or not isinstance(y, int)
                                    for x, y in zip(a, b))


def _same_node(a: tuple, b: tuple) -> bool:
    return a[:4] == b[:4] and len(a[4]) == len(b[4]) and all(_same_dims(x, y) for x, y in zip(a[4], b[4]))


def _first_difference(a: tuple, b: tuple) -> str:
    names = ("op", "domain", "attributes", "inputs", "output shapes")
    for name, x, y in zip(names, a, b):
        if x != y and (name != "output shapes" or not _same_node(a, b)):
            if name == "inputs":
                for s, (p, q) in enumerate(zip(x, y)):
                    if p != q:
                        return f"input {s}: {_show(q)} where layer 0 has {_show(p)}"
                return f"{len(y)} inputs where layer 0 has {len(x)}"
            return f"{name} {_show(y)} where layer 0 has {_show(x)}"
    return "?"


def _show(v) -> str:
    s = repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def check_structure(g: Graph, group: Group):
    """Raise :class:`FrontendError` naming the first layer and node that differ from layer 0."""
    _, ref = _signature(g, group.layers[0])
    for layer in group.layers[1:]:
        nodes, sig = _signature(g, layer)
        for k, (a, b) in enumerate(zip(ref, sig)):
            if not _same_node(a, b):
                raise FrontendError(f"{group.scope(layer.index)}: node {k} ({g.describe(nodes[k])}) differs "
                                    f"from {group.scope(0)}: {_first_difference(a, b)}")
        if len(sig) != len(ref):
            k = min(len(sig), len(ref))
            what = g.describe(nodes[k]) if k < len(sig) else "end of layer"
            raise FrontendError(f"{group.scope(layer.index)}: node {k} ({what}) differs from {group.scope(0)}: "
                                f"{len(sig)} nodes where layer 0 has {len(ref)} after hoisting shared nodes")


def find_groups(g: Graph, hierarchy=None, check: bool = True) -> list[Group]:
    """The layer groups of ``g`` (``hierarchy`` FINN style, or discovered), each checked for one structure."""
    prefixes = _resolve(g, hierarchy) if hierarchy else _discover(g)
    if not prefixes:
        how = "legacy node names" if g.legacy else "name-scope metadata"
        raise FrontendError(f"no repeated layers found: no scope of the form '<name>.<n>' in the {how}; "
                            f"give --hierarchy, e.g. \"[['encoder', 'encoder.layer.0']]\"")
    groups = sorted((_split_layers(g, p) for p in prefixes), key=lambda grp: grp.layers[0].nodes[0])
    if check:
        for grp in groups:
            check_structure(g, grp)
    return groups
