"""The host side of an ONNX model around the engine's layer stack, and the model -> engine flow.

The engine runs the layer stack; the embeddings before it and whatever follows it (pooler, head) stay on
the host (Brainsmith's remove_head / remove_tail). Here the host part is the ONNX model itself, run by
onnxruntime with the layer stack's input and output tensors exposed as extra graph outputs:
:meth:`Host.run` gives, for token ids and an attention mask, the float input of layer 0 (what the front
end quantizes to the engine's int8 input) and the float output of the last layer (what the engine's
dequantized output is compared with). :meth:`Host.tail` takes the engine's (dequantized) output back
and runs the rest of the graph (e.g. BERT's pooler) to the model's outputs.

:func:`build_model_onnx` is ``mlo_hw.model.quantize.build_model`` for ``weights: {source: onnx}`` configs:
float layers by role, calibration on the model's own inputs (random token ids through the embeddings),
then the quantizer. :func:`config_dict` writes a config for a model.
"""

from __future__ import annotations

import math
from functools import cached_property
from pathlib import Path

import numpy as np
import onnx

from ..cli import one_line
from ..config import ConfigError
from . import Frontend
from . import FrontendError
from . import load

__all__ = ["Host", "model_inputs", "build_model_onnx", "build_seq2seq_onnx", "config_dict", "resolve_model_path", "float_check"]

_ORT_HINT = "onnxruntime is needed to run the model's embeddings on the host: pip install onnxruntime"


def ort_session(model: onnx.ModelProto, outputs=(), dtypes=None):
    """An onnxruntime session of ``model`` that also returns the graph tensors ``outputs`` (float, unless ``dtypes``
    maps a name to its ONNX type); onnxruntime missing or refusing the model is a one-line FrontendError."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise FrontendError(_ORT_HINT) from None
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in outputs:
        if name not in have:
            m.graph.output.append(onnx.helper.make_tensor_value_info(
                name, (dtypes or {}).get(name, onnx.TensorProto.FLOAT), None))
    opts = ort.SessionOptions()
    opts.log_severity_level = 4     # errors become FrontendError (one line)
    try:
        return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as e:          # onnxruntime's errors (InvalidGraph, Fail, ...) have no common base
        raise FrontendError(f"onnxruntime cannot load the model: {one_line(e)[:300]}") from None


def ort_subgraph(g, inputs, outputs):
    """An onnxruntime session of the part of graph ``g`` from tensors ``inputs`` to ``outputs``."""
    return ort_session(onnx.utils.Extractor(g.model).extract_model(list(inputs), list(outputs)))


class Host:
    """onnxruntime session of the whole model that also returns the layer stack's input and output."""

    def __init__(self, fe: Frontend):
        if len(fe.groups) != 1:
            raise FrontendError(f"host: {len(fe.groups)} layer groups; the host runs models with one layer stack")
        self.fe = fe
        grp = fe.groups[0]
        self.stack_in, self.stack_out = grp.layers[0].input, grp.layers[-1].output
        self.session = ort_session(fe.graph.model, (self.stack_in, self.stack_out))
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.ids_name = self._ids_input()
        self.vocab = self._vocab()

    def _ids_input(self) -> str:
        for i in self.fe.graph.graph_inputs:
            if _embedding_table(self.fe.graph, i.name) is not None:
                return i.name
        raise FrontendError("host: no graph input feeds an embedding Gather (expected token ids, e.g. input_ids)")

    def _vocab(self) -> int:
        return int(_embedding_table(self.fe.graph, self.ids_name).shape[0])

    def seq_limit(self) -> int | None:
        """The fixed sequence length of the model's inputs, or None when it is symbolic."""
        shape = self.inputs[self.ids_name].shape
        return shape[1] if len(shape) > 1 and isinstance(shape[1], int) else None

    def default_seq_len(self, candidates=(128, 64, 32, 16, 8)) -> int:
        """The fixed input length, else the longest of ``candidates`` the model runs at (e.g. BERT's
        position embeddings limit it), else FrontendError."""
        fixed = self.seq_limit()
        if fixed is not None:
            return fixed
        for seq in candidates:
            try:
                self.run(np.full(seq, min(3, self.vocab - 1)), np.ones(seq, bool))
                return seq
            except FrontendError:
                pass
        raise FrontendError(f"--seq-len: the model runs at none of {', '.join(map(str, candidates))} tokens; "
                            "give one it accepts")

    def run(self, ids, mask) -> tuple[np.ndarray, np.ndarray]:
        """Token ids [S] and mask [S] -> (layer-0 input [S, H], last-layer output [S, H]), float64."""
        feeds = self._feeds(ids, mask)
        try:
            x, y = self.session.run([self.stack_in, self.stack_out], feeds)
        except Exception as e:      # as above
            raise FrontendError(f"onnxruntime cannot run the model at {len(ids)} tokens: {one_line(e)[:300]}") \
                from None
        x, y = np.asarray(x[0], np.float64), np.asarray(y[0], np.float64)
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            raise FrontendError(f"host: the layer stack's input {self.stack_in!r} or output {self.stack_out!r} "
                                "has NaN or infinite values (non-finite weights in the model?)")
        return x, y

    def _feeds(self, ids, mask) -> dict[str, np.ndarray]:
        ids = np.asarray(ids, np.int64)[None, :]
        mask = np.asarray(mask, np.int64)[None, :]
        feeds = {}
        for name, info in self.inputs.items():
            dtype = np.int32 if "int32" in info.type else np.int64
            if name == self.ids_name:
                feeds[name] = ids.astype(dtype)
            elif "mask" in name:
                feeds[name] = mask.astype(dtype)
            elif "token_type" in name:
                feeds[name] = np.zeros_like(ids, dtype)
            else:
                raise FrontendError(f"host: model input {name!r} is neither token ids, a mask nor token types")
        return feeds


    @cached_property
    def _tail(self):
        """onnxruntime session of the graph after the layer stack: stack output (+ model inputs) -> outputs."""
        g = self.fe.graph
        return ort_subgraph(g, [self.stack_out] + [i.name for i in g.graph_inputs], g.graph_outputs)

    def tail(self, ids, mask, y) -> dict[str, np.ndarray]:
        """The model's outputs from the layer stack's output ``y`` [S, H] (the engine's, dequantized):
        the rest of the graph (pooler, head) runs on the host. Keys are the model's output names."""
        session = self._tail
        feeds = self._feeds(ids, mask)
        feeds = {i.name: feeds[i.name] for i in session.get_inputs() if i.name in feeds}
        feeds[self.stack_out] = np.asarray(y, np.float32)[None]
        names = [o.name for o in session.get_outputs()]
        return {n: np.asarray(v[0], np.float64) for n, v in zip(names, session.run(names, feeds))}


# Ops that keep token ids token ids on their way to the embedding Gather (GPT-2 flattens them with a Reshape).
_ID_PASS = ("Reshape", "Cast", "Unsqueeze", "Squeeze", "Flatten", "Identity")


def _embedding_table(g, name: str):
    """The constant table of the embedding Gather that graph input ``name`` indexes (directly or through
    :data:`_ID_PASS` ops), or None."""
    todo, seen = [name], set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        for c in g.consumers.get(t, []):
            n = g.nodes[c]
            if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == t and g.is_const(n.input[0]):
                return g.const(n.input[0])
            if n.op_type in _ID_PASS and n.input[0] == t:
                todo.append(n.output[0])
    return None


def model_inputs(host: Host, seq_len: int, rng: np.random.Generator, count: int):
    """``count`` inputs for the layer stack: random token ids of random valid lengths through the embeddings.

    Returns ``[(x [S, H] float, mask [S] bool, ids [S])]``; the first input has every position valid.
    """
    fixed = host.seq_limit()
    if fixed is not None and fixed != seq_len:
        raise ConfigError(f"model.seq_len: the ONNX model's inputs have a fixed length {fixed}, config says {seq_len}")
    out = []
    for n in range(count):
        valid = seq_len if n == 0 else int(rng.integers(1, seq_len + 1))
        ids = rng.integers(min(3, host.vocab - 1), host.vocab, seq_len)
        mask = np.arange(seq_len) < valid
        x, _ = host.run(ids, mask)
        out.append((x, mask, ids))
    return out


def resolve_model_path(path: str) -> Path:
    """``weights.onnx`` as given (relative to the working directory), else relative to the repository."""
    p = Path(path)
    if p.is_file():
        return p
    alt = Path(__file__).resolve().parents[2] / path
    if alt.is_file():
        return alt
    raise ConfigError(f"weights.onnx: no such file {path!r}")


def _frontend_for(cfg) -> Frontend:
    hierarchy = [list(g) for g in cfg.loop_body_hierarchy]
    try:
        return load(resolve_model_path(cfg.weights.onnx), hierarchy)
    except FrontendError as e:
        raise ConfigError(f"weights.onnx: {e}") from None


def _host_for(fe: Frontend) -> Host:
    try:
        return Host(fe)
    except FrontendError as e:
        raise ConfigError(f"weights.onnx: {e}") from None


def _check_dims(cfg, fe: Frontend):
    d = fe.dims
    for name in ("layers", "hidden", "heads", "intermediate"):
        if getattr(cfg.model, name) != d[name]:
            raise ConfigError(f"model.{name}: config says {getattr(cfg.model, name)}, "
                              f"{cfg.weights.onnx} has {d[name]}")
    if cfg.model.causal != d["causal"]:
        kind = "causal (a decoder)" if d["causal"] else "bidirectional (an encoder)"
        raise ConfigError(f"model.causal: config says {str(cfg.model.causal).lower()}, {cfg.weights.onnx}'s "
                          f"self-attention is {kind}")
    for name, what in (("norm", "layer kind"), ("gelu", "GELU")):
        if getattr(cfg.model, name) != d[name]:
            raise ConfigError(f"model.{name}: config says {getattr(cfg.model, name)!r}, {cfg.weights.onnx}'s {what} "
                              f"is {d[name]!r}")
    if not math.isclose(cfg.model.layernorm_eps, d["layernorm_eps"], rel_tol=1e-4):
        raise ConfigError(f"model.layernorm_eps: config says {cfg.model.layernorm_eps:g}, "
                          f"{cfg.weights.onnx} has {d['layernorm_eps']:g}")


def build_model_onnx(cfg, calib_count: int = 4):
    """Float layers by role and the quantized model, calibrated on the model's own (embedded) inputs."""
    from ..model.quantize import quantize
    fe = _frontend_for(cfg)
    reason = fe.engine_refusal()
    if reason:
        raise ConfigError(f"weights.onnx: not runnable on the engine: {reason}")
    _check_dims(cfg, fe)
    layers = fe.float_layers()
    host = _host_for(fe)
    calib = [(x, m) for x, m, _ in model_inputs(host, cfg.model.seq_len, np.random.default_rng(cfg.weights.seed),
                                                calib_count)]
    return layers, quantize(layers, calib, cfg)


def build_seq2seq_onnx(cfg, calib_count: int = 4):
    """An encoder-decoder's float model (:func:`mlo_hw.frontend.seq2seq.seq2seq_model`) and its quantization,
    calibrated on the model's own inputs (``seq_len`` encoder and decoder tokens); what the engine cannot run
    (T5: RMSNorm, pre-norm, a memory made on the host) is a ConfigError."""
    from ..model.seq2seq import quantize_seq2seq
    from .seq2seq import Seq2SeqHost, seq2seq_inputs, seq2seq_model
    fe = _frontend_for(cfg)
    try:
        model, host = seq2seq_model(fe), Seq2SeqHost(fe)
    except FrontendError as e:
        raise ConfigError(f"weights.onnx: {e}") from None
    m = cfg.model
    for name, got in (("encoder_layers", len(model.encoder)), ("layers", len(model.decoder)),
                      ("hidden", model.hidden), ("heads", model.heads), ("intermediate", model.intermediate),
                      ("norm", model.norm), ("gelu", model.gelu)):
        if getattr(m, name) != got:
            raise ConfigError(f"model.{name}: config says {getattr(m, name)!r}, {cfg.weights.onnx} has {got!r}")
    if model.rms != m.rmsnorm:
        raise ConfigError(f"model.rmsnorm: config says {str(m.rmsnorm).lower()}, {cfg.weights.onnx} has "
                          f"{str(model.rms).lower()}")
    if not math.isclose(m.layernorm_eps, model.eps, rel_tol=1e-4):
        raise ConfigError(f"model.layernorm_eps: config says {m.layernorm_eps:g}, {cfg.weights.onnx} has "
                          f"{model.eps:g}")
    rng = np.random.default_rng(cfg.weights.seed)
    try:
        calib = [host.run(*c) for c in seq2seq_inputs(host, m.seq_len, m.seq_len, rng, calib_count)]
    except FrontendError as e:
        raise ConfigError(f"model.seq_len: {e}") from None
    has_bias = any(c[k].bias is not None for c in calib for k in ("encoder", "self"))
    if has_bias != m.position_bias:
        raise ConfigError(f"model.position_bias: config says {str(m.position_bias).lower()}, {cfg.weights.onnx} "
                          f"{'adds' if has_bias else 'adds no'} position bias to its attention scores")
    try:
        return model, quantize_seq2seq(model, calib, host._between is not None, radius=cfg.bias_radius)
    except ValueError as e:
        raise ConfigError(f"weights.onnx: {e}") from None


def seq2seq_vectors(cfg, rng: np.random.Generator):
    """An encoder-decoder config's float stack inputs from the model's own embeddings: (encoder's, decoder's)
    [seq_len, hidden] of random unpadded token ids, and the host's part between the stacks (float encoder output ->
    float memory: :meth:`mlo_hw.frontend.seq2seq.Seq2SeqHost.memory`)."""
    from .seq2seq import Seq2SeqHost, seq2seq_inputs
    try:
        host = Seq2SeqHost(_frontend_for(cfg))
        r = host.run(*seq2seq_inputs(host, cfg.model.seq_len, cfg.model.seq_len, rng, 1)[0])
    except FrontendError as e:
        raise ConfigError(f"weights.onnx: {e}") from None
    return r["enc_in"], r["dec_in"], host.memory


def onnx_inputs(cfg, rng: np.random.Generator, count: int):
    """Layer-stack inputs of an ONNX config, like :func:`mlo_hw.model.quantize.random_inputs`: [(x, mask)]."""
    host = _host_for(_frontend_for(cfg))
    return [(x, m) for x, m, _ in model_inputs(host, cfg.model.seq_len, rng, count)]


def float_check(fe: Frontend, layers, inputs) -> float:
    """Largest |float reference - onnxruntime| over ``inputs`` [(x, mask, ids)] at the layer stack's output."""
    from ..model.numerics import attention_mask
    from ..model.reference import float_stack
    host = Host(fe)
    d = fe.dims
    worst = 0.0
    for x, mask, ids in inputs:
        _, want = host.run(ids, mask)
        got = float_stack(x, layers, attention_mask(mask, d["causal"]), d["heads"], d["layernorm_eps"],
                          norm=d["norm"], gelu=d["gelu"])
        worst = max(worst, float(np.abs(got - want).max()))
    return worst


def _divisor(n_values, choices) -> int:
    for c in choices:
        if all(v % c == 0 for v in n_values):
            return c
    return 1


def config_dict(fe: Frontend, onnx_path: str, seq_len: int, name: str | None = None) -> dict:
    """A config (as a YAML-ready dict) for running ``fe``'s layer stack on the engine."""
    reason = fe.engine_refusal()
    if reason:
        raise FrontendError(f"not runnable on the engine: {reason}")
    d = fe.dims
    dh = d["hidden"] // d["heads"]
    unit = _divisor((d["hidden"], d["intermediate"], dh), (8, 4, 2, 1))
    tile = _divisor((d["hidden"], d["intermediate"]), (unit * 2, unit))
    return {
        "name": name or Path(onnx_path).stem,
        "model": {"layers": d["layers"], "hidden": d["hidden"], "heads": d["heads"],
                  "intermediate": d["intermediate"], "seq_len": seq_len,
                  "layernorm_eps": float(f"{d['layernorm_eps']:.6g}"), "causal": d["causal"], "norm": d["norm"],
                  "gelu": d["gelu"]},
        "numerics": {"weight_bits": 8, "act_bits": 8},
        "folding": {"pe": unit, "simd": unit, "tile_rows": tile},
        "weights": {"source": "onnx", "onnx": str(onnx_path), "seed": 0},
        "loop_body_hierarchy": [list(fe.groups[0].hierarchy)],
    }
