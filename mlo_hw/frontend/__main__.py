"""``python -m mlo_hw.frontend MODEL.onnx [--hierarchy H] [--json] [--export-weights DIR] [--engine DIR] [--check]``

Prints the layer groups found in an ONNX model (scope prefix, layer count, nodes per layer) and, for each
layer, every weight's role and shape; says whether the layer engine can run the model, or why not.
``--export-weights DIR`` writes ``layer_<group>_<i>.npz`` (float32, keyed by role, matrices [out, in]).
``--engine DIR`` (engine-runnable models) writes a config for the model, then the DRAM weight image and a
golden test vector as ``python -m mlo_hw.elaborate`` does, and checks the float reference against
onnxruntime on the same inputs; for an encoder-decoder of BART's kind (two layer groups, post-LN) the config has
``model.encoder_layers`` and the build holds both stacks (``docs/seq2seq.md``). ``--check`` runs an encoder-decoder
model (T5, BART) through the float reference, against onnxruntime, and through the integer golden model, against
the float reference (:func:`mlo_hw.frontend.seq2seq.check`).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import numpy as np
import yaml

from ..cli import ArgumentParser, command, folder, positive_int, staged_folder
from ..config import check_name, config_from_dict
from . import FrontendError
from . import load

__all__ = ["main"]


def _hierarchy(text: str):
    try:
        h = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise FrontendError(f"--hierarchy: not a list literal: {text!r}; expected e.g. "
                            "\"[['encoder', 'encoder.layer.0']]\"") from None
    if not isinstance(h, list) or not h or not all(isinstance(g, (list, tuple)) and g and all(isinstance(s, str) for s in g)
                                          for g in h):
        raise FrontendError("--hierarchy: expected a list of lists of scope names, e.g. "
                            "\"[['encoder', 'encoder.layer.0']]\"")
    return h


def _text(summary: dict) -> str:
    lines = [f"{summary['model']}: {summary['exporter']}, {len(summary['groups'])} layer group(s)"]
    for k, g in enumerate(summary["groups"]):
        lines.append(f"group {k}: {g['prefix']}  hierarchy {g['hierarchy']}  {g['layers']} layers, "
                     f"{g['nodes_per_layer']} compute nodes per layer ({g['hoisted_nodes']} shared nodes hoisted)")
        lines.append(f"  input {g['input']!r} -> output {g['output']!r}; attention {', '.join(g['attention'])}; "
                     f"heads {g['heads']}")
        for layer in g["per_layer"]:
            roles = ", ".join(f"{name} {shape}" for name, shape in layer["weights"].items())
            lines.append(f"  {layer['scope']}: {roles}")
    verdict = summary["engine"]
    lines.append(f"engine: {verdict if verdict.startswith(('runnable', 'refused')) else 'refused: ' + verdict}")
    return "\n".join(lines)


def _engine_seq2seq(fe, model_path: str, out: Path, seq_len: int | None, name: str) -> str:
    """An encoder-decoder's config (both stacks), DRAM image and golden vectors into ``out`` (staged)."""
    from ..elaborate import BUILD_MARKS, write_build
    from .seq2seq import Seq2SeqHost, config_dict, float_check, seq2seq_inputs, seq2seq_model
    config_dict(fe, model_path, 16, name)              # refused (one line) before the host runs anything
    host = Seq2SeqHost(fe)
    raw = config_dict(fe, model_path, 16, name, position_bias=host.has_position_bias())
    if seq_len is None:
        seq_len = host.default_seq_len()
    raw["model"]["seq_len"] = seq_len
    cfg = config_from_dict(raw, raw["name"])
    try:
        inputs = seq2seq_inputs(host, seq_len, seq_len, np.random.default_rng(cfg.weights.seed + 2), 4)
        err = float_check(seq2seq_model(fe), host, inputs)
    except FrontendError as e:
        raise FrontendError(f"--seq-len {seq_len}: {e}") from None
    with staged_folder(out, "--engine", BUILD_MARKS) as tmp:
        (tmp / f"{cfg.name}.yaml").write_text(f"# Written by python -m mlo_hw.frontend from {model_path}\n"
                                              + yaml.safe_dump(raw, sort_keys=False))
        write_build(cfg, tmp)
    return (f"{out / (cfg.name + '.yaml')}: config written (an encoder-decoder: {cfg.model.encoder_layers} + "
            f"{cfg.model.layers} layers); float reference vs onnxruntime on {len(inputs)} inputs: max |diff| "
            f"encoder {err['encoder']:.2e}, decoder {err['decoder']:.2e}")


def _engine(fe, model_path: str, out: Path, seq_len: int | None, name: str) -> str:
    """Config, DRAM image and golden vectors into ``out`` (staged: nothing is left behind on an error)."""
    from ..elaborate import BUILD_MARKS, write_build
    from .host import Host, config_dict, float_check, model_inputs
    host = Host(fe)
    if seq_len is None:
        seq_len = host.default_seq_len()
    raw = config_dict(fe, model_path, seq_len, name)
    cfg = config_from_dict(raw, raw["name"])
    try:
        inputs = model_inputs(host, seq_len, np.random.default_rng(cfg.weights.seed + 2), 4)
    except FrontendError as e:
        raise FrontendError(f"--seq-len {seq_len}: {e}") from None
    err = float_check(fe, fe.float_layers(), inputs)
    with staged_folder(out, "--engine", BUILD_MARKS) as tmp:
        (tmp / f"{cfg.name}.yaml").write_text(f"# Written by python -m mlo_hw.frontend from {model_path}\n"
                                              + yaml.safe_dump(raw, sort_keys=False))
        write_build(cfg, tmp)
    return (f"{out / (cfg.name + '.yaml')}: config written; float reference vs onnxruntime on {len(inputs)} inputs: "
            f"max |diff| {err:.2e}")


@command()
def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m mlo_hw.frontend", description=__doc__.splitlines()[0])
    ap.add_argument("model", help="an ONNX file exported from PyTorch (dynamo=True, or the legacy exporter)")
    ap.add_argument("--hierarchy", help="FINN-style loop body hierarchy, e.g. \"[['encoder', 'encoder.layer.0']]\" "
                                        "(default: discover the repeated layers)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--export-weights", metavar="DIR", type=folder, help="write layer_<group>_<i>.npz per layer into DIR")
    ap.add_argument("--engine", metavar="DIR", type=folder, help="write config, DRAM weight image and golden vectors into DIR")
    ap.add_argument("--seq-len", type=positive_int, default=None,
                    help="sequence length for --engine (default: the model's fixed input length, else the longest "
                         "of 128, 64, 32, 16, 8 tokens it runs at)")
    ap.add_argument("--name", help="config name for --engine (default: the model file's stem)")
    ap.add_argument("--check", action="store_true",
                    help="encoder-decoder models: check the float reference against onnxruntime and the integer "
                         "golden model against the float reference (--seq-len encoder tokens, default 16)")
    args = ap.parse_args(argv)
    hierarchy = _hierarchy(args.hierarchy) if args.hierarchy is not None else None
    if args.engine:
        name = check_name(args.name, "--name") if args.name is not None else \
            check_name(Path(args.model).stem, "--name (default: the model file's stem)")
    fe = load(args.model, hierarchy)
    summary = fe.summary()
    print(json.dumps(summary, indent=1) if args.json else _text(summary))
    if args.export_weights:
        with staged_folder(args.export_weights, "--export-weights", ("layer_0_0.npz",)) as tmp:
            written = fe.export_weights(tmp)
        print(f"wrote {len(written)} files into {args.export_weights}", file=sys.stderr if args.json else sys.stdout)
    if args.engine:
        if len(fe.groups) == 2 and fe._is_seq2seq():
            from .seq2seq import seq2seq_refusal
            reason = seq2seq_refusal(fe)
            if reason:
                raise FrontendError(f"--engine: not runnable on the engine: {reason}")
            print(_engine_seq2seq(fe, args.model, args.engine, args.seq_len, name))
        else:
            reason = fe.engine_refusal()
            if reason:
                raise FrontendError(f"--engine: not runnable on the engine: {reason}")
            print(_engine(fe, args.model, args.engine, args.seq_len, name))
    if args.check:
        from .seq2seq import check
        if len(fe.groups) != 2:
            raise FrontendError(f"--check: {len(fe.groups)} layer group(s); it checks encoder-decoder models (two "
                                "groups); for one stack use --engine, which checks the float reference")
        print(check(fe, args.seq_len or 16))
    return 0


if __name__ == "__main__":
    sys.exit(main())
