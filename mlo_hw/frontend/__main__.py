"""``python -m mlo_hw.frontend MODEL.onnx [--hierarchy H] [--json] [--export-weights DIR] [--engine DIR]``

Prints the layer groups found in an ONNX model (scope prefix, layer count, nodes per layer) and, for each
layer, every weight's role and shape; says whether the layer engine can run the model, or why not.
``--export-weights DIR`` writes ``layer_<group>_<i>.npz`` (float32, keyed by role, matrices [out, in]).
``--engine DIR`` (engine-runnable models) writes a config for the model, then the DRAM weight image and a
golden test vector as ``python -m mlo_hw.elaborate`` does, and checks the float reference against
onnxruntime on the same inputs.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

import numpy as np
import yaml

from ..config import ConfigError, config_from_dict
from . import FrontendError, load

__all__ = ["main"]


def _hierarchy(text: str):
    try:
        h = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise FrontendError(f"--hierarchy: not a list literal: {text!r}; expected e.g. "
                            "\"[['encoder', 'encoder.layer.0']]\"") from None
    if not isinstance(h, list) or not all(isinstance(g, (list, tuple)) and g and all(isinstance(s, str) for s in g)
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
    lines.append(f"engine: {summary['engine'] if summary['engine'] == 'runnable' else 'refused: ' + summary['engine']}")
    return "\n".join(lines)


def _engine(fe, model_path: str, folder: Path, seq_len: int, name: str | None) -> str:
    from ..elaborate import main as elaborate
    from .host import Host, config_dict, float_check, model_inputs
    raw = config_dict(fe, model_path, seq_len, name)
    cfg = config_from_dict(raw, raw["name"])
    folder.mkdir(parents=True, exist_ok=True)
    cfg_path = folder / f"{cfg.name}.yaml"
    cfg_path.write_text(f"# Written by python -m mlo_hw.frontend from {model_path}\n"
                        + yaml.safe_dump(raw, sort_keys=False))
    if elaborate(["--config", str(cfg_path), "-o", str(folder)]) != 0:
        raise FrontendError("elaboration failed (see above)")
    host = Host(fe)
    inputs = model_inputs(host, seq_len, np.random.default_rng(cfg.weights.seed + 2), 4)
    err = float_check(fe, fe.float_layers(), inputs)
    return f"{cfg_path}: config written; float reference vs onnxruntime on {len(inputs)} inputs: max |diff| {err:.2e}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mlo_hw.frontend", description=__doc__.splitlines()[0])
    ap.add_argument("model", help="an ONNX file exported from PyTorch (dynamo=True, or the legacy exporter)")
    ap.add_argument("--hierarchy", help="FINN-style loop body hierarchy, e.g. \"[['encoder', 'encoder.layer.0']]\" "
                                        "(default: discover the repeated layers)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--export-weights", metavar="DIR", help="write layer_<group>_<i>.npz per layer into DIR")
    ap.add_argument("--engine", metavar="DIR", help="write config, DRAM weight image and golden vectors into DIR")
    ap.add_argument("--seq-len", type=int, default=None, help="sequence length for --engine (default: the model's "
                                                              "fixed input length, else 128)")
    ap.add_argument("--name", help="config name for --engine (default: the model file's stem)")
    args = ap.parse_args(argv)
    try:
        fe = load(args.model, _hierarchy(args.hierarchy) if args.hierarchy else None)
        summary = fe.summary()
        print(json.dumps(summary, indent=1) if args.json else _text(summary))
        if args.export_weights:
            written = fe.export_weights(args.export_weights)
            print(f"wrote {len(written)} files into {args.export_weights}",
                  file=sys.stderr if args.json else sys.stdout)
        if args.engine:
            reason = fe.engine_refusal()
            if reason:
                raise FrontendError(f"--engine: not runnable on the engine: {reason}")
            seq = args.seq_len
            if seq is None:
                from .host import Host
                seq = Host(fe).seq_limit() or 128
            print(_engine(fe, args.model, Path(args.engine), seq, args.name))
    except (FrontendError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
