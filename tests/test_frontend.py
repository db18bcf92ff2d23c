"""ONNX front end: loop-body discovery, structure check, weights by role, host path, CLI, MiniLM.

The fixtures in tests/fixtures/onnx/ are tiny Hugging Face models exported by tools/export_fixtures.py
(needs torch; the tests do not). Float checks run the models with onnxruntime.
"""

import copy
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml

from mlo_hw.config import ConfigError, config_from_dict, load_config
from mlo_hw.frontend import ENGINE_ROLES, Frontend, FrontendError, load
from mlo_hw.frontend.__main__ import main as cli
from mlo_hw.frontend.graph import Graph

FIXTURES = Path(__file__).parent / "fixtures" / "onnx"
RUNNABLE = ["bert", "bert_merged", "bert_sdpa", "bert_pooler", "roberta", "distilbert", "bert_legacy",
            "bert_legacy_static", "bert_noopt", "bert_noopt_sdpa"]
GROUPS = {
    "bert": [("encoder.layer", 3)],
    "bert_merged": [("encoder.layer", 2)],
    "bert_sdpa": [("encoder.layer", 3)],
    "bert_pooler": [("encoder.layer", 2)],
    "roberta": [("encoder.layer", 2)],
    "distilbert": [("transformer.layer", 2)],
    "bert_legacy": [("model.encoder.layer", 2)],
    "bert_legacy_static": [("model.encoder.layer", 2)],
    "bert_noopt": [("encoder.layer", 2)],
    "bert_noopt_sdpa": [("encoder.layer", 2)],
    "bert_decoder": [("encoder.layer", 2)],
    "bert_decoder_legacy": [("model.encoder.layer", 2)],
    "gpt2": [("h", 2)],
    "gpt2_noopt": [("h", 2)],
    "llama": [("layers", 2)],
    "t5": [("encoder.block", 2), ("decoder.block", 2)],
    "bart": [("encoder.layers", 2), ("decoder.layers", 2)],
}


def fixture(name: str) -> Path:
    return FIXTURES / f"{name}.onnx"


@pytest.fixture(scope="module")
def frontends():
    return {name: load(fixture(name)) for name in GROUPS}


def test_fixtures_are_small():
    for name in GROUPS:
        assert fixture(name).stat().st_size < 512 * 1024, name


# ---- loop body -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(GROUPS))
def test_discovers_layer_groups(frontends, name):
    fe = frontends[name]
    assert [(g.prefix, len(g.layers)) for g in fe.groups] == GROUPS[name]
    assert fe.graph.legacy == (name in ("bert_legacy", "bert_legacy_static", "bert_decoder_legacy"))
    for grp in fe.groups:
        sizes = {len(layer.compute) for layer in grp.layers}
        assert sizes == {grp.body_size} and grp.body_size > 20
        assert grp.layers[0].input and grp.layers[-1].output
        for a, b in zip(grp.layers, grp.layers[1:]):
            assert b.input == a.output


def test_finn_hierarchy_matches_discovery(frontends):
    fe = load(fixture("bert"), [["encoder", "encoder.layer.0"]])
    auto = frontends["bert"]
    assert [l.nodes for l in fe.groups[0].layers] == [l.nodes for l in auto.groups[0].layers]
    assert fe.groups[0].hierarchy == ("encoder", "encoder.layer.0")
    # BART's encoder alone, by hierarchy; the legacy export's wrapper prefix ('model.') is found by suffix
    assert [g.prefix for g in load(fixture("bart"), [["encoder", "encoder.layers.0"]]).groups] == ["encoder.layers"]
    assert load(fixture("bert_legacy"), [["encoder", "encoder.layer.0"]]).groups[0].prefix == "model.encoder.layer"


def test_bad_hierarchy_is_one_line():
    with pytest.raises(FrontendError, match=r"scope 'encoder\.block\.0' not found.*encoder\.layer\.0") as e:
        load(fixture("bert"), [["encoder", "encoder.block.0"]])
    assert "\n" not in str(e.value)
    with pytest.raises(FrontendError, match=r"ending in '\.0'"):
        load(fixture("bert"), [["encoder", "encoder.layer.1"]])


def test_mask_preparation_is_hoisted(frontends):
    fe = frontends["bert_sdpa"]
    g, grp = fe.graph, fe.groups[0]
    assert len(grp.hoisted) == 1
    node = grp.hoisted[0]
    assert g.nodes[node].op_type == "Where" and "encoder.layer.0" in g.scopes(node)
    readers = {c for o in g.nodes[node].output for c in g.consumers[o]}
    assert all(any(c in layer.nodes for c in readers) for layer in grp.layers)   # every layer uses it


def _mutated(name: str, layer_scope: str, op: str, change) -> Graph:
    model = onnx.load(str(fixture(name)))
    g = Graph(model)
    hits = [i for i, n in enumerate(g.nodes) if n.op_type == op and layer_scope in g.scopes(i)]
    change(model.graph.node[hits[-1]])
    return Graph(model)


def test_structure_mismatch_names_layer_and_node():
    def eps(node):
        for a in node.attribute:
            if a.name == "epsilon":
                a.f = 1e-5
    g = _mutated("bert", "encoder.layer.2", "LayerNormalization", eps)
    with pytest.raises(FrontendError) as e:
        Frontend(g)
    msg = str(e.value)
    assert msg.startswith("encoder.layer.2: node 33 (LayerNormalization") and "attributes" in msg
    assert "\n" not in msg

    def swap(node):
        node.input[0], node.input[1] = node.input[1], node.input[0]
    g = _mutated("bert", "encoder.layer.1", "MatMul", swap)
    with pytest.raises(FrontendError, match=r"^encoder\.layer\.1: node \d+ \(MatMul .*input 0"):
        Frontend(g)


def test_shapes_compare_by_structure():
    """Legacy static export: shape inference leaves layer 0's batch dim symbolic, layer 1's is 1; that is
    no structural difference, but a concrete dim that differs is."""
    from mlo_hw.frontend.loop import _same_dims
    fe = load(fixture("bert_legacy_static"))
    g, (l0, l1) = fe.graph, fe.groups[0].layers
    shapes = [[g.shapes.get(g.nodes[i].output[0]) for i in layer.compute] for layer in (l0, l1)]
    assert any(a != b for a, b in zip(*shapes))              # the fixture has the mismatch the check must allow
    assert all(_same_dims(a, b) for a, b in zip(*shapes))
    assert not _same_dims((1, 8, 32), (1, 8, 64)) and not _same_dims(("?", 8, 32), (8, 32))


def _without_norm(model: onnx.ModelProto, node: onnx.NodeProto):
    """Delete a LayerNormalization and let its readers take its input instead."""
    src, out = node.input[0], node.output[0]
    model.graph.node.remove(node)
    for n in model.graph.node:
        for k, t in enumerate(n.input):
            if t == out:
                n.input[k] = src
    for o in model.graph.output:
        if o.name == out:
            o.name = src


def _layer_nodes(model, scope, op):
    g = Graph(model)
    return [model.graph.node[i] for i, n in enumerate(g.nodes) if n.op_type == op and scope in g.scopes(i)]


def test_noise_in_one_layer_only():
    """An Identity and a same-dtype Cast that only layer 1 has are no structural difference; a Cast to
    another dtype is."""
    def insert(model, cast_to=None):
        g = Graph(model)
        k = next(i for i, n in enumerate(g.nodes) if n.op_type == "LayerNormalization"
                 and "encoder.layer.1" in g.scopes(i))
        node = model.graph.node[k]
        src = node.input[0]
        extra = [onnx.helper.make_node("Identity", [src], ["noise_0"], name="noise_id")]
        for to in [onnx.TensorProto.FLOAT] + ([cast_to] if cast_to else []):
            extra.append(onnx.helper.make_node("Cast", [extra[-1].output[0]], [f"noise_{len(extra)}"],
                                               name=f"noise_cast{len(extra)}", to=to))
        node.input[0] = extra[-1].output[0]
        for n in reversed(extra):
            n.metadata_props.extend(node.metadata_props)           # in layer 1's scope
            model.graph.node.insert(k, n)
        return Frontend(Graph(model))

    fe = insert(onnx.load(str(fixture("bert"))))
    assert fe.engine_refusal() is None
    for got, want in zip(fe.float_layers(), load(fixture("bert")).float_layers()):
        for role in ENGINE_ROLES:
            np.testing.assert_array_equal(getattr(got, role), getattr(want, role))
    with pytest.raises(FrontendError, match=r"^encoder\.layer\.1: node \d+ \(Cast 'noise_cast2'\) differs"):
        insert(onnx.load(str(fixture("bert"))), cast_to=onnx.TensorProto.FLOAT16)


@pytest.mark.parametrize("name", ["bert", "bert_noopt"])
def test_broken_models_are_refused(name):
    """Looking through exporter noise must not make a broken layer pass."""
    model = onnx.load(str(fixture(name)))                     # one layer loses its second LayerNorm
    _without_norm(model, _layer_nodes(model, "encoder.layer.1", "LayerNormalization")[1])
    with pytest.raises(FrontendError, match=r"^encoder\.layer\.1: node \d+ .*differs from encoder\.layer\.0"):
        Frontend(Graph(model))
    model = onnx.load(str(fixture(name)))                     # every layer loses its first
    for k in range(GROUPS[name][0][1]):
        _without_norm(model, _layer_nodes(model, f"encoder.layer.{k}", "LayerNormalization")[0])
    fe = Frontend(Graph(model))
    assert fe.engine_refusal() == ("encoder.layer: 1 LayerNormalization nodes per layer; "
                                   "a post-LN (BERT) or pre-LN (GPT-2) layer has two")
    model = onnx.load(str(fixture(name)))                     # LN1 normalises the attention output alone
    for k in range(GROUPS[name][0][1]):
        ln1 = _layer_nodes(model, f"encoder.layer.{k}", "LayerNormalization")[0]
        add = next(n for n in model.graph.node if ln1.input[0] in n.output)
        add.input[1] = add.input[0]
    assert Frontend(Graph(model)).engine_refusal() == ("encoder.layer: LayerNorm 1 does not normalise "
                                                      "(layer input + attention output): not a post-LN layer")


@pytest.mark.parametrize("training,refused", [(True, True), (False, False)])
def test_dropout_in_training_mode_is_refused(training, refused):
    """bert_noopt's dropouts are Identity nodes; as Dropout nodes they are noise in inference mode only."""
    model = onnx.load(str(fixture("bert_noopt")))
    model.graph.initializer.extend([onnx.numpy_helper.from_array(np.array(0.1, np.float32), "p_drop"),
                                    onnx.numpy_helper.from_array(np.array(training), "train")])
    for node in model.graph.node:
        if node.op_type == "Identity" and node.input[0].startswith("linear"):
            node.op_type = "Dropout"
            node.input.extend(["p_drop", "train"])
    fe = Frontend(Graph(model))
    reason = fe.engine_refusal()
    if refused:
        assert reason.startswith("encoder.layer: Dropout 'node_clone_3' may be in training mode")
    else:
        assert reason is None


def test_unreadable_models():
    with pytest.raises(FrontendError, match="no such ONNX file"):
        load(FIXTURES / "missing.onnx")
    with pytest.raises(FrontendError, match="not a readable ONNX model"):
        load(FIXTURES / "bert.json")
    with pytest.raises(FrontendError, match="not a file"):
        load(FIXTURES)


def test_truncated_models(tmp_path):
    """A file cut inside the graph does not parse; one cut just after the graph parses without its opset."""
    data = fixture("bert").read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(FrontendError, match="not a readable ONNX model"):
        load(cut)
    model = onnx.load(str(fixture("bert")))
    del model.opset_import[:]                  # what a cut after the graph leaves (opset_import follows it)
    cut.write_bytes(model.SerializeToString())
    with pytest.raises(FrontendError, match=r"cut\.onnx: no opset import .*truncated"):
        load(cut)


def test_noise_passes_only_its_first_output():
    """An inference-mode Dropout passes its input through as output 0; its mask (output 1) is another tensor."""
    model = onnx.load(str(fixture("bert_noopt")))
    node = next(n for n in model.graph.node if n.op_type == "Identity" and n.input[0].startswith("linear"))
    node.op_type = "Dropout"
    node.output.append("dropout_mask")
    g = Graph(model)
    assert g.is_noise(g.producer["dropout_mask"])
    assert g.source(node.output[0]) == g.source(node.input[0])
    assert g.source("dropout_mask") == "dropout_mask"


# ---- weights by role -----------------------------------------------------------------------------

NAMED = {"q_b": "attention.self.query.bias", "k_b": "attention.self.key.bias", "v_b": "attention.self.value.bias",
         "o_b": "attention.output.dense.bias", "ln1_g": "attention.output.LayerNorm.weight",
         "ln1_b": "attention.output.LayerNorm.bias", "ffn_up_b": "intermediate.dense.bias",
         "ffn_down_b": "output.dense.bias", "ln2_g": "output.LayerNorm.weight", "ln2_b": "output.LayerNorm.bias"}


@pytest.mark.parametrize("name,prefix", [("bert", "encoder.layer"), ("bert_legacy", "model.encoder.layer"),
                                         ("bert_legacy_static", "model.encoder.layer")])
def test_roles_agree_with_surviving_names(frontends, name, prefix):
    """Where the exporter kept PyTorch's names (biases, LayerNorm), the structural roles must agree."""
    fe = frontends[name]
    for r in fe.roles(0):
        assert set(r.weights) == set(ENGINE_ROLES)
        for role, param in NAMED.items():
            want = fe.graph.const(f"{prefix}.{r.layer.index}.{param}")
            np.testing.assert_array_equal(r.weights[role], want, err_msg=f"{name} layer {r.layer.index} {role}")


WEIGHTS = {"q_w": "attention.self.query.weight", "k_w": "attention.self.key.weight",
           "v_w": "attention.self.value.weight", "o_w": "attention.output.dense.weight",
           "ffn_up_w": "intermediate.dense.weight", "ffn_down_w": "output.dense.weight"}


@pytest.mark.parametrize("name", ["bert_noopt", "bert_noopt_sdpa"])
def test_unoptimised_export_roles_equal_parameters(frontends, name):
    """optimize=False keeps every PyTorch name; weights reach the MatMul through a Transpose ([in, out]),
    and the roles found by structure equal the [out, in] parameters."""
    fe = frontends[name]
    for r in fe.roles(0):
        assert set(r.weights) == set(ENGINE_ROLES)
        for role, param in {**NAMED, **WEIGHTS}.items():
            want = fe.graph.const(f"encoder.layer.{r.layer.index}.{param}")
            np.testing.assert_array_equal(r.weights[role], want, err_msg=f"{name} layer {r.layer.index} {role}")
    assert fe.engine_refusal() is None and fe.dims["heads"] == 2
    assert fe.roles(0)[0].attentions[0].scale == pytest.approx(0.25)


def test_merged_initializers(frontends):
    """bert_merged keeps HF's fresh init: the optimizer shares zero biases / unit gammas across layers."""
    fe = frontends["bert_merged"]
    g, (l0, l1) = fe.graph, fe.groups[0].layers
    read = [{t for i in layer.nodes for t in g.nodes[i].input if t in g.initializers} for layer in (l0, l1)]
    assert read[0] & read[1], "the fixture should share initializers between layers"
    r0, r1 = fe.roles(0)
    np.testing.assert_array_equal(r0.weights["ln2_g"], np.ones(32))
    np.testing.assert_array_equal(r1.weights["q_b"], np.zeros(32))
    assert not np.array_equal(r0.weights["q_w"], r1.weights["q_w"])


def test_t5_and_bart_roles(frontends):
    t5, bart = frontends["t5"], frontends["bart"]
    assert {"q_w", "k_w", "v_w", "o_w", "ffn_up_w", "ffn_down_w"} <= set(t5.roles(0)[0].weights)
    dec = bart.roles(1)[1].weights
    assert {"self_q_w", "cross_k_w", "cross_o_b", "ln3_g"} <= set(dec)
    assert dec["ffn_up_w"].shape == (64, 32) and dec["ffn_down_w"].shape == (32, 64)   # [out, in]
    # the decoders' self-attention is causal (BART's mask is shape arithmetic alone: no decoder mask input)
    for fe in (t5, bart):
        enc, dec = fe.roles(0)[0].attentions, fe.roles(1)[0].attentions
        assert [(a.kind, bool(a.causal)) for a in enc] == [("self", False)]
        assert [(a.kind, bool(a.causal)) for a in dec] == [("self", True), ("cross", False)]


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_encoder_decoder_is_not_one_stack(frontends, name, capsys, tmp_path):
    """Neither is one stack (float_layers() refuses); --engine builds both as encoder-decoders (T5's config with its
    kind: pre-RMSNorm, ReLU, the relative position bias; tests/test_encoder_decoder.py runs them)."""
    fe = frontends[name]
    reason = fe.engine_refusal()
    assert reason and "\n" not in reason and "decoder" in reason
    with pytest.raises(FrontendError, match="not runnable on the engine"):
        fe.float_layers()
    assert cli([str(fixture(name)), "--engine", str(tmp_path / "out"), "--seq-len", "16"]) == 0
    out = capsys.readouterr().out
    assert "engine: runnable as an encoder-decoder" in out and "an encoder-decoder: 2 + 2 layers" in out
    m = load_config(str(tmp_path / "out" / f"{name}.yaml")).model
    assert (m.encoder_layers, m.layers, m.seq_len) == (2, 2, 16)
    assert (m.norm, m.rmsnorm, m.gelu, m.position_bias) == (("pre", True, "relu", True) if name == "t5" else
                                                            ("post", False, "erf", False))
    assert (tmp_path / "out" / "golden_memory.bin").stat().st_size == 16 * 32 * 2


@pytest.mark.parametrize("name", ["gpt2", "gpt2_noopt"])
def test_gpt2_loop_body_and_roles(frontends, name):
    """GPT-2: 'h.N' blocks, fused QKV (Conv1D weights stored [in, out], Gemm) split after it: by a Split
    the optimizer made without scope (adopted into its layer), or unoptimised by SplitToSequence."""
    fe = frontends[name]
    g = fe.graph
    grp = fe.groups[0]
    assert grp.hierarchy == ("h.0",)
    for r in fe.roles(0):
        split = [i for i in r.layer.nodes if g.nodes[i].op_type in ("Split", "SplitToSequence")]
        assert len(split) == 1 and bool(g.scopes(split[0])) == (name == "gpt2_noopt")
        k = r.layer.index
        assert set(r.weights) == {"qkv_w", "qkv_b", "o_w", "o_b", "ffn_up_w", "ffn_up_b", "ffn_down_w", "ffn_down_b",
                                  "ln1_g", "ln1_b", "ln2_g", "ln2_b"}
        for role, param in (("qkv", "attn.c_attn"), ("o", "attn.c_proj"), ("ffn_up", "mlp.c_fc"),
                            ("ffn_down", "mlp.c_proj")):
            np.testing.assert_array_equal(r.weights[f"{role}_w"], g.const(f"h.{k}.{param}.weight").T)
            np.testing.assert_array_equal(r.weights[f"{role}_b"], g.const(f"h.{k}.{param}.bias"))
        np.testing.assert_array_equal(r.weights["ln2_g"], g.const(f"h.{k}.ln_2.weight"))
        a = r.attentions[0]
        assert a.fused and a.kind == "self" and a.causal and r.heads == 2 and a.scale == pytest.approx(0.25)
    assert fe.roles(0)[0].weights["qkv_w"].shape == (96, 32)


@pytest.mark.parametrize("name,prefix,by,why", [
    ("llama", "layers", "LessOrEqual 'node_le_1'",
     "a Llama-family layer: rotary position embedding (Q and K rotated by position: not a linear map the engine has); "
     "grouped-query attention (K and V 16 wide for Q's 32: the engine gives every query head its own K and V); "
     "a gated FFN (SwiGLU: the engine's FFN is up, a table, down) are not in the engine; its RMSNorm the engine has "
     "(model.rmsnorm)")])
def test_decoders_the_engine_cannot_run_are_refused(frontends, name, prefix, by, why, capsys, tmp_path):
    """Causal masks (a comparison of query and key positions) are found; a decoder whose layer is neither post-LN
    BERT's nor pre-LN GPT-2's is refused naming the mask and the reason."""
    fe = frontends[name]
    reason = fe.engine_refusal()
    assert reason.startswith(f"{prefix}: decoder layer (causal self-attention, the mask made by {by}): {why}")
    assert "\n" not in reason
    assert cli([str(fixture(name))]) == 0                        # the loop body is still reported
    out = capsys.readouterr().out
    assert f"group 0: {prefix}" in out and "2 layers" in out and f"engine: refused: {reason}" in out
    assert "; attention causal self" in out
    assert cli([str(fixture(name)), "--engine", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: --engine: not runnable on the engine: {reason}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["gpt2", "gpt2_noopt"])
def test_gpt2_is_a_pre_ln_decoder_for_the_engine(frontends, name, capsys, tmp_path):
    """GPT-2: a pre-LN causal decoder with tanh GELU; its fused QKV (Conv1D, stored [in, out]) splits into Q, K and
    V by the split outputs they read; its config says so, and ``--engine`` builds it (its weight image in the
    pre-LN section order, the manifest naming the layer kind)."""
    from mlo_hw.frontend.host import config_dict
    fe = frontends[name]
    assert fe.engine_refusal() is None
    d = fe.dims
    assert (d["norm"], d["gelu"], d["causal"], d["hidden"], d["heads"], d["layernorm_eps"]) == \
        ("pre", "tanh", True, 32, 2, 1e-5)
    for k, layer in enumerate(fe.float_layers()):
        w, b = fe.graph.const(f"h.{k}.attn.c_attn.weight"), fe.graph.const(f"h.{k}.attn.c_attn.bias")
        for n, name_ in enumerate(("q", "k", "v")):
            np.testing.assert_array_equal(getattr(layer, f"{name_}_w"), w[:, 32 * n:32 * (n + 1)].T)
            np.testing.assert_array_equal(getattr(layer, f"{name_}_b"), b[32 * n:32 * (n + 1)])
    raw = config_dict(fe, "m.onnx", 16)
    assert (raw["model"]["norm"], raw["model"]["gelu"], raw["model"]["causal"]) == ("pre", "tanh", True)
    assert config_from_dict(raw).model.norm == "pre"
    assert cli([str(fixture(name))]) == 0
    assert "engine: runnable\n" in capsys.readouterr().out
    assert cli([str(fixture(name)), "--engine", str(tmp_path / "out"), "--seq-len", "16"]) == 0
    assert "config written" in capsys.readouterr().out
    written = load_config(str(tmp_path / "out" / f"{name}.yaml"))
    assert (written.model.norm, written.model.gelu, written.model.causal) == ("pre", "tanh", True)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["norm"] == "pre" and [s["name"] for s in manifest["sections"]][:4] == ["header", "narrow", "ln1", "q"]


@pytest.mark.parametrize("name", ["gpt2", "gpt2_noopt"])
def test_gpt2_float_and_integer_models_against_onnxruntime(frontends, name):
    """The float reference (pre-LN, tanh GELU, causal) matches onnxruntime at the stack output within 1e-4 (1.2e-7
    measured); the integer golden model, quantized on the model's own inputs, tracks it (cosine printed); ln_f runs
    on the host after the stack (Host.tail gives the model's last_hidden_state)."""
    ort = pytest.importorskip("onnxruntime")
    from mlo_hw.frontend.host import Host, config_dict, float_check, model_inputs
    from mlo_hw.model.quantize import quantize, run_int
    fe = frontends[name]
    layers = fe.float_layers()
    host = Host(fe)
    inputs = model_inputs(host, 16, np.random.default_rng(3), 6)
    err = float_check(fe, layers, inputs)
    assert err < 1e-4
    layers[0].q_w, layers[0].k_w = layers[0].k_w, layers[0].q_w          # Q and K swapped is caught
    assert float_check(fe, layers, inputs) > 1e-3
    layers = fe.float_layers()
    cfg = config_from_dict(config_dict(fe, "m.onnx", 16))
    q = quantize(layers, [(x, m) for x, m, _ in inputs[:3]], cfg)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    full = ort.InferenceSession(str(fixture(name)), opts, providers=["CPUExecutionProvider"])
    worst = 1.0
    for x, mask, ids in inputs[3:]:
        _, want = host.run(ids, mask)
        got = q.dequantize_output(run_int(q, q.quantize_input(x), mask, cfg))
        cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
        worst = min(worst, float(cos[mask].min()))
        feeds = {"input_ids": ids[None], "attention_mask": mask[None].astype(np.int64)}
        np.testing.assert_allclose(host.tail(ids, mask, want)["last_hidden_state"],
                                   full.run(["last_hidden_state"], feeds)[0][0], atol=1e-5)
    print(f"{name}: float vs onnxruntime max |diff| {err:.2e}; integer vs float cosine min {worst:.4f}")
    assert worst > 0.99


@pytest.mark.parametrize("name", ["bert_decoder", "bert_decoder_legacy"])
def test_a_post_ln_decoder_runs_with_a_causal_mask(frontends, name):
    """bert_decoder (BERT with is_decoder=True; the legacy static export folds its mask into a triangular constant)
    is BERT's layer with a causal mask: runnable, ``causal`` in its dims and its config."""
    from mlo_hw.frontend.host import config_dict
    fe = frontends[name]
    assert fe.engine_refusal() is None and fe.dims["causal"] is True
    assert config_dict(fe, "m.onnx", 8)["model"]["causal"] is True
    assert frontends["bert"].dims["causal"] is False


def test_llama_roles(frontends):
    """A current decoder: grouped-query attention (K and V narrower than Q), three FFN linears (SwiGLU),
    RMSNorm weights reported under the Mul that applies them."""
    fe = frontends["llama"]
    for r in fe.roles(0):
        w, k = r.weights, r.layer.index
        assert (w["q_w"].shape, w["k_w"].shape, w["v_w"].shape, w["o_w"].shape) == ((32, 32), (16, 32), (16, 32),
                                                                                      (32, 32))
        assert [w[f"ffn_{n}_w"].shape for n in range(3)] == [(64, 32), (64, 32), (32, 64)]
        assert not r.norms and r.heads == 4
        np.testing.assert_array_equal(w["mul1"], fe.graph.const(f"layers.{k}.input_layernorm.weight"))
        np.testing.assert_array_equal(w["mul2"], fe.graph.const(f"layers.{k}.post_attention_layernorm.weight"))


def test_causal_float_reference_matches_onnxruntime(frontends):
    """The float reference with the causal mask matches onnxruntime on both decoder exports; with the encoder's
    padding mask it would not (the mask is what differs from bert)."""
    pytest.importorskip("onnxruntime")
    from mlo_hw.frontend.host import Host, float_check, model_inputs
    from mlo_hw.model.reference import FloatLayer
    for name in ("bert_decoder", "bert_decoder_legacy"):
        fe = frontends[name]
        layers = [FloatLayer.from_dict(r.weights) for r in fe.roles(0)]
        inputs = model_inputs(Host(fe), 8, np.random.default_rng(3), 3)
        assert float_check(fe, layers, inputs) < 1e-5, name
        fe.dims["causal"] = False                   # the cached dims: the check with a padding mask only
        try:
            assert float_check(fe, layers, inputs) > 1e-2, name
        finally:
            fe.dims["causal"] = True


def test_t5_encoder_alone_is_refused_for_its_norm():
    fe = load(fixture("t5"), [["encoder", "encoder.block.0"]])
    assert "LayerNormalization" in fe.engine_refusal()


# ---- host path: float reference against onnxruntime ----------------------------------------------

@pytest.mark.parametrize("name", RUNNABLE)
def test_float_reference_matches_onnxruntime(frontends, name):
    pytest.importorskip("onnxruntime")
    from mlo_hw.frontend.host import Host, float_check, model_inputs
    fe = frontends[name]
    layers = fe.float_layers()
    inputs = model_inputs(Host(fe), 8, np.random.default_rng(3), 3)
    assert not inputs[1][1].all() or not inputs[2][1].all()     # some padded inputs
    assert float_check(fe, layers, inputs) < 1e-5
    # negative check: Q and V swapped is caught
    layers[0].q_w, layers[0].v_w = layers[0].v_w, layers[0].q_w
    assert float_check(fe, layers, inputs) > 1e-3


def test_tail_runs_on_the_engine_output():
    """The host takes the engine's output back: BERT's pooler runs on it (remove_tail)."""
    ort = pytest.importorskip("onnxruntime")
    from mlo_hw.frontend.host import Host, model_inputs
    from mlo_hw.model.quantize import quantize, run_int
    fe = load(fixture("bert_pooler"))
    host = Host(fe)
    full = ort.InferenceSession(str(fixture("bert_pooler")), providers=["CPUExecutionProvider"])
    cfg = config_from_dict({"name": "p", "model": {"layers": 2, "hidden": 32, "heads": 2, "intermediate": 64,
                                                   "seq_len": 8}})
    inputs = model_inputs(host, 8, np.random.default_rng(5), 4)
    q = quantize(fe.float_layers(), [(x, m) for x, m, _ in inputs[:2]], cfg)
    for x, mask, ids in inputs[2:]:
        feeds = {"input_ids": ids[None], "attention_mask": mask[None].astype(np.int64)}
        want = full.run(["pooler_output"], feeds)[0][0]
        _, y = host.run(ids, mask)
        np.testing.assert_allclose(host.tail(ids, mask, y)["pooler_output"], want, atol=1e-6)
        y_engine = q.dequantize_output(run_int(q, q.quantize_input(x), mask, cfg))
        got = host.tail(ids, mask, y_engine)["pooler_output"]
        assert got @ want / np.linalg.norm(got) / np.linalg.norm(want) > 0.95
        assert np.abs(host.tail(ids, mask, y + 0.5)["pooler_output"] - want).max() > 1e-2   # it does read y


def test_cli_text_json_and_export(tmp_path, capsys):
    assert cli([str(fixture("bert"))]) == 0
    text = capsys.readouterr().out
    assert "group 0: encoder.layer" in text and "3 layers" in text and "engine: runnable" in text
    assert "encoder.layer.2: q_w [32, 32], q_b [32]" in text
    assert cli([str(fixture("bert_sdpa")), "--json", "--export-weights", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    grp = summary["groups"][0]
    assert (grp["prefix"], grp["layers"], grp["hoisted_nodes"], grp["heads"]) == ("encoder.layer", 3, 1, 2)
    assert grp["per_layer"][1]["weights"]["ffn_up_w"] == [64, 32]
    fe = load(fixture("bert_sdpa"))
    for i, r in enumerate(fe.roles(0)):
        with np.load(tmp_path / f"layer_0_{i}.npz") as z:
            assert set(z.files) == set(ENGINE_ROLES)
            assert z["ffn_down_w"].dtype == np.float32 and z["ffn_down_w"].shape == (32, 64)
            np.testing.assert_array_equal(z["q_w"], r.weights["q_w"].astype(np.float32))


def test_cli_errors(capsys):
    assert cli([str(fixture("bert")), "--hierarchy", "encoder.layer.0"]) == 2
    assert "--hierarchy" in capsys.readouterr().err
    assert cli([str(FIXTURES / "nope.onnx")]) == 2
    capsys.readouterr()
    assert cli([str(FIXTURES)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a file" in err


# ---- model -> engine -----------------------------------------------------------------------------

@pytest.mark.parametrize("name,layers,causal", [("bert", 3, False), ("bert_decoder", 2, True)])
def test_onnx_config_end_to_end(tmp_path, capsys, name, layers, causal):
    """--engine writes a config; elaborate's image and golden vectors follow from it; the integer model tracks float
    (onnxruntime's output; for the decoder, under its causal mask)."""
    pytest.importorskip("onnxruntime")
    from mlo_hw.frontend.host import Host, model_inputs
    from mlo_hw.model.quantize import build_model, dram_bytes, from_dram, run_int
    from mlo_hw.model.weight_image import pack_image
    assert cli([str(fixture(name)), "--engine", str(tmp_path), "--seq-len", "8"]) == 0
    out = capsys.readouterr().out
    assert "float reference vs onnxruntime" in out
    cfg = load_config(tmp_path / f"{name}.yaml")
    assert (cfg.model.layers, cfg.model.hidden, cfg.model.heads, cfg.model.intermediate) == (layers, 32, 2, 64)
    assert cfg.weights.source == "onnx" and cfg.model.causal is causal
    float_layers, model = build_model(cfg)
    assert (tmp_path / "weights.bin").read_bytes() == pack_image(cfg, model.layers)
    x_int = from_dram((tmp_path / "golden_input.bin").read_bytes(), 8, 32)
    y = run_int(model, x_int, np.ones(8, bool), cfg)
    assert (tmp_path / "golden_output.bin").read_bytes() == dram_bytes(y)
    # the integer golden model against onnxruntime's float output, on fresh inputs
    fe = load(fixture(name))
    host = Host(fe)
    for x, mask, ids in model_inputs(host, 8, np.random.default_rng(7), 3):
        _, want = host.run(ids, mask)
        got = model.dequantize_output(run_int(model, model.quantize_input(x), mask, cfg))
        cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
        assert cos[mask].min() > 0.95


def test_onnx_config_must_match_model():
    raw = yaml.safe_load(Path(FIXTURES / "bert.onnx").with_suffix(".json").read_text())
    assert raw["model"] == "BertModel"
    cfg = config_from_dict({"name": "x", "model": {"layers": 3, "hidden": 32, "heads": 4, "intermediate": 64,
                                                   "seq_len": 8},
                            "weights": {"source": "onnx", "onnx": str(fixture("bert"))}})
    from mlo_hw.model.quantize import build_model
    with pytest.raises(ConfigError, match=r"^model\.heads: config says 4, .* has 2$"):
        build_model(cfg)
    for model, causal, kind in (("bert", True, "bidirectional"), ("bert_decoder", False, "causal")):
        cfg = config_from_dict({"name": "x", "model": {"layers": 3 if model == "bert" else 2, "hidden": 32, "heads": 2,
                                                       "intermediate": 64, "seq_len": 8, "causal": causal},
                                "weights": {"source": "onnx", "onnx": str(fixture(model))}})
        with pytest.raises(ConfigError, match=rf"^model\.causal: config says {str(causal).lower()}, .*{model}\.onnx's "
                                              rf"self-attention is {kind}"):
            build_model(cfg)
    gpt2 = {"name": "x", "model": {"layers": 2, "hidden": 32, "heads": 2, "intermediate": 64, "seq_len": 8,
                                   "causal": True, "layernorm_eps": 1e-5, "norm": "pre", "gelu": "tanh"},
            "weights": {"source": "onnx", "onnx": str(fixture("gpt2"))}, "loop_body_hierarchy": [["h.0"]]}
    assert build_model(config_from_dict(gpt2))[1].layers[0].norm == "pre"
    for field, value, kind, want in (("norm", "post", "layer kind", "pre"), ("gelu", "erf", "GELU", "tanh")):
        raw = copy.deepcopy(gpt2)
        raw["model"][field] = value
        with pytest.raises(ConfigError, match=rf"^model\.{field}: config says '{value}', .*gpt2\.onnx's {kind} is "
                                              rf"'{want}'$"):
            build_model(config_from_dict(raw))
    cfg = config_from_dict({"name": "x", "model": {"layers": 2, "hidden": 32, "heads": 2, "intermediate": 64,
                                                   "seq_len": 8},
                            "weights": {"source": "onnx", "onnx": str(fixture("t5"))},
                            "loop_body_hierarchy": [["encoder", "encoder.block.0"]]})
    with pytest.raises(ConfigError, match="not runnable on the engine: encoder.block: 0 LayerNormalization"):
        build_model(cfg)


# ---- all-MiniLM-L6-v2 (needs the PyPI package; skipped without it) -------------------------------

def _minilm():
    from mlo_hw.frontend.minilm import MiniLMUnavailable, load_minilm
    try:
        return load_minilm()
    except MiniLMUnavailable as e:
        pytest.skip(str(e))


def test_minilm_int8_tracks_float_on_real_sentences():
    import dataclasses
    from mlo_hw.model.quantize import quantize, run_int
    from mlo_hw.model.reference import float_stack
    m = _minilm()
    assert (len(m.layers), m.hidden, m.heads) == (6, 384, 12)
    cfg = load_config("minilm_l6")
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, seq_len=16))
    sentences = ["A man is playing a guitar.", "Someone plays an acoustic guitar.",
                 "The stock market fell sharply today.", "Share prices dropped after the news."]
    calib = ["An orchestra rehearses in the concert hall.", "The farmer harvested wheat before the storm."]
    cids, cmask = m.tokenize(calib, 16)
    q = quantize(m.layers, [(m.embed(i), k) for i, k in zip(cids, cmask)], cfg)
    ids, mask = m.tokenize(sentences, 16)
    ref, got = [], []
    for i, k in zip(ids, mask):
        x = m.embed(i)
        ref.append(m.pool(float_stack(x, m.layers, k, m.heads, m.eps), k))
        got.append(m.pool(q.dequantize_output(run_int(q, q.quantize_input(x), k, cfg)), k))
    ref, got = np.array(ref), np.array(got)
    sim = ref @ ref.T
    assert min(sim[0, 1], sim[2, 3]) > 0.5 > max(sim[0, 2], sim[1, 3])    # paraphrases are close
    assert (ref * got).sum(1).min() > 0.98


@pytest.mark.slow
def test_minilm_reference_matches_transformers():
    """The torch-free loader and float reference against Hugging Face's BertModel (needs torch)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from mlo_hw.frontend.minilm import model_dir
    from mlo_hw.model.reference import float_stack
    m = _minilm()
    hf = transformers.BertModel.from_pretrained(str(model_dir()), attn_implementation="eager").eval()
    ids, mask = m.tokenize(["The quick brown fox jumps over the lazy dog.", "Hello world"], 16)
    with torch.no_grad():
        want = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask.astype(np.int64))).last_hidden_state
    for n in range(2):
        got = float_stack(m.embed(ids[n]), m.layers, mask[n], m.heads, m.eps)
        assert np.abs(got[mask[n]] - want[n].numpy()[mask[n]]).max() < 1e-3


@pytest.mark.slow
def test_minilm_onnx_export_roles(tmp_path):
    """A real dynamo export of all-MiniLM-L6-v2: roles found by structure equal the trained weights."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("onnxruntime")
    from mlo_hw.frontend.host import Host, float_check, model_inputs
    from mlo_hw.frontend.minilm import model_dir
    m = _minilm()
    hf = transformers.BertModel.from_pretrained(str(model_dir()), attn_implementation="eager",
                                                add_pooling_layer=False).eval()
    path = tmp_path / "minilm.onnx"
    ids = torch.randint(1000, 2000, (1, 16))
    torch.onnx.export(hf, (ids,), kwargs={"attention_mask": torch.ones_like(ids)}, dynamo=True,
                      input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                      opset_version=18,
                      dynamic_axes={"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}}).save(str(path))
    fe = load(path)
    assert fe.engine_refusal() is None and fe.dims["heads"] == 12 and len(fe.groups[0].layers) == 6
    for got, want in zip(fe.float_layers(), m.layers):
        for role in ENGINE_ROLES:
            np.testing.assert_array_equal(getattr(got, role).astype(np.float32), getattr(want, role).astype(np.float32))
    assert float_check(fe, fe.float_layers(), model_inputs(Host(fe), 16, np.random.default_rng(0), 2)) < 1e-4


def test_a_fused_qkv_whose_split_cannot_be_told_is_refused_naming_the_node():
    """GPT-2's fused QKV is split by the split outputs Q, K and V read; when two read the same part (or a part
    cannot be told), the layer is refused naming the fused linear's node."""
    from mlo_hw.frontend.roles import engine_refusal
    fe = load(fixture("gpt2"))
    r = fe.roles(0)[0]
    assert r.attentions[0].parts == (0, 1, 2)
    r.attentions[0].parts = (0, 0, 2)
    reason = engine_refusal(fe.graph, r)
    assert reason.startswith("decoder layer (causal self-attention, the mask made by LessOrEqual 'node_le_1'): Gemm ")
    assert "fused QKV linear of shape [96, 32] whose split into Q, K and V cannot be told (found parts [0, 0, 2])" \
        in reason and "\n" not in reason
