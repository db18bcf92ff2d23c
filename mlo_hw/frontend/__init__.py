"""ONNX front end: find the repeated layers of an exported transformer and take their weights by role.

    from . import load
    fe = load("model.onnx")                    # or load(path, hierarchy=[['encoder', 'encoder.layer.0']])
    fe.groups[0].prefix, len(fe.groups[0].layers)
    fe.roles(0)[i].weights                     # {'q_w': [out, in] array, 'q_b': ..., 'ln2_b': ...}
    fe.float_layers()                          # [FloatLayer] for the engine, or FrontendError with the reason

``python -m mlo_hw.frontend MODEL.onnx`` prints the same (see :mod:`mlo_hw.frontend.__main__`).
:mod:`mlo_hw.frontend.host` runs the embeddings and the rest of the model around the layer stack
(onnxruntime) and turns a model into a config, a quantized model and a DRAM image.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np

from ..model.reference import FloatLayer
from .graph import FrontendError, Graph
from .loop import Group, Layer, find_groups
from .roles import LayerRoles, causal_mask_node, engine_refusal, gelu_kind, layer_roles, norm_kind, split_fused_qkv

__all__ = ["FrontendError", "Frontend", "load", "Group", "Layer", "LayerRoles", "ENGINE_ROLES"]

# The roles of a layer mlo_hw runs (post-LN BERT, or pre-LN GPT-2 once its fused QKV is split): FloatLayer's fields.
ENGINE_ROLES = ("q_w", "q_b", "k_w", "k_b", "v_w", "v_b", "o_w", "o_b", "ln1_g", "ln1_b",
                "ffn_up_w", "ffn_up_b", "ffn_down_w", "ffn_down_b", "ln2_g", "ln2_b")


class Frontend:
    """An ONNX model split into layer groups; roles and engine layers computed on demand."""

    def __init__(self, graph: Graph, hierarchy=None):
        self.graph = graph
        self.groups: list[Group] = find_groups(graph, hierarchy)
        self._roles: dict[int, list[LayerRoles]] = {}

    @property
    def path(self) -> Path | None:
        return self.graph.path

    def roles(self, group: int = 0) -> list[LayerRoles]:
        if group not in self._roles:
            grp = self.groups[group]
            rs = [layer_roles(self.graph, layer) for layer in grp.layers]
            for r in rs:
                for role, v in r.weights.items():
                    if not np.isfinite(v).all():
                        raise FrontendError(f"{grp.scope(r.layer.index)}: weight {role} has NaN or infinite values")
            ref = {k: v.shape for k, v in rs[0].weights.items()}
            for r in rs[1:]:
                got = {k: v.shape for k, v in r.weights.items()}
                if got != ref:
                    diff = sorted(set(ref.items()) ^ set(got.items()))[0][0]
                    raise FrontendError(f"{grp.scope(r.layer.index)}: weight role {diff!r} differs from "
                                        f"{grp.scope(0)}")
            self._roles[group] = rs
        return self._roles[group]

    def engine_refusal(self) -> str | None:
        """One line saying why the layer engine cannot run this model, or None."""
        if len(self.groups) != 1:
            names = ", ".join(g.prefix for g in self.groups)
            if len(self.groups) == 2 and self._is_seq2seq():
                return (f"2 layer groups ({names}): an encoder-decoder model, not one stack (--check runs it in the "
                        "float and integer golden models; --engine builds BART-style ones, model.encoder_layers)")
            return (f"{len(self.groups)} layer groups ({names}); the engine runs one encoder stack "
                    + self._group_reasons())
        reason = engine_refusal(self.graph, self.roles(0)[0])
        return f"{self.groups[0].prefix}: {reason}" if reason else None

    def _is_seq2seq(self) -> bool:
        from .seq2seq import seq2seq_model
        try:
            seq2seq_model(self)
        except FrontendError:
            return False
        return True

    def _group_reasons(self) -> str:
        for k, grp in enumerate(self.groups):
            reason = engine_refusal(self.graph, self.roles(k)[0])
            if reason:
                return f"({grp.prefix}: {reason})"
        return ""

    def float_layers(self) -> list[FloatLayer]:
        """The layers as :class:`FloatLayer` (float64, [out, in]; a fused QKV split into Q, K and V); biases a
        model lacks are zeros."""
        reason = self.engine_refusal()
        if reason:
            raise FrontendError(f"not runnable on the engine: {reason}")
        out = []
        for r in self.roles(0):
            w = split_fused_qkv(r)
            for name in ("q", "k", "v", "o", "ffn_up", "ffn_down"):
                w.setdefault(f"{name}_b", np.zeros(w[f"{name}_w"].shape[0]))
            for ln in ("ln1", "ln2"):
                w.setdefault(f"{ln}_b", np.zeros_like(w[f"{ln}_g"]))
            out.append(FloatLayer.from_dict(w))
        return out

    @cached_property
    def dims(self) -> dict:
        """Model figures of the (engine-runnable) layer stack: layers, hidden, heads, intermediate, eps, causal, and
        the layer kind: norm ("post" or "pre") and gelu ("erf" or "tanh"), as :class:`mlo_hw.config.Model` names
        them."""
        r = self.roles(0)[0]
        w = r.weights
        eps = self.graph.attr(r.norms[0], "epsilon", 1e-5) if r.norms else 1e-5
        return {"layers": len(self.groups[0].layers), "hidden": int(w["o_w"].shape[0]),
                "heads": int(r.heads or 0), "intermediate": int(w["ffn_up_w"].shape[0]),
                "layernorm_eps": float(f"{eps:.6g}"), "causal": causal_mask_node(r) is not None,
                "norm": norm_kind(self.graph, r), "gelu": gelu_kind(self.graph, r)}

    def summary(self) -> dict:
        """What was found, as plain data (the CLI's --json)."""
        groups = []
        for k, grp in enumerate(self.groups):
            rs = self.roles(k)
            groups.append({
                "prefix": grp.prefix, "hierarchy": list(grp.hierarchy), "layers": len(grp.layers),
                "nodes_per_layer": grp.body_size, "hoisted_nodes": len(grp.hoisted),
                "input": grp.layers[0].input, "output": grp.layers[-1].output,
                "heads": rs[0].heads,
                "attention": [("causal " if a.causal else "") + a.kind + (" (fused QKV)" if a.fused else "")
                              for a in rs[0].attentions],
                "per_layer": [{"scope": grp.scope(r.layer.index),
                               "weights": {name: list(v.shape) for name, v in r.weights.items()}} for r in rs]})
        return {"model": str(self.path) if self.path else None,
                "exporter": "legacy (scopes from node names)" if self.graph.legacy else "dynamo (name-scope metadata)",
                "groups": groups, "engine": self._engine_verdict()}

    def _engine_verdict(self) -> str:
        """'runnable', or the refusal (an encoder-decoder: as one, ``model.encoder_layers``)."""
        if len(self.groups) == 2 and self._is_seq2seq():
            from .seq2seq import seq2seq_refusal
            reason = seq2seq_refusal(self)
            return (f"refused as an encoder-decoder: {reason}" if reason else
                    "runnable as an encoder-decoder (model.encoder_layers: both stacks, cross-attention)")
        return self.engine_refusal() or "runnable"

    def export_weights(self, folder: str | Path) -> list[Path]:
        """One ``layer_<group>_<i>.npz`` per layer: float32 arrays keyed by role, matrices [out, in]."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for k in range(len(self.groups)):
            for r in self.roles(k):
                p = folder / f"layer_{k}_{r.layer.index}.npz"
                np.savez(p, **{name: v.astype(np.float32) for name, v in r.weights.items()})
                written.append(p)
        return written


def load(path: str | Path, hierarchy=None) -> Frontend:
    """Load an ONNX model and find its layer groups (``hierarchy``: FINN-style list, or None to discover)."""
    return Frontend(Graph.load(path), hierarchy)
