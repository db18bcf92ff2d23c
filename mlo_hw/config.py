"""The one configuration object every block takes its parameters from.

A YAML file is loaded into a frozen :class:`Config`; validation raises :class:`ConfigError` whose
message is one line naming the field and what was expected. Every derived figure (head size,
accumulator widths, padded sequence length, matrix shapes) is a property here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .cli import BadInput

__all__ = ["ConfigError", "NORMS", "GELUS", "Model", "Numerics", "Folding", "Memory", "Target", "Weights", "Config",
           "Matrix", "PARTS", "BOARD_PARTS", "CLOCK_MHZ", "load_config", "config_from_dict", "check_name"]


class ConfigError(BadInput):
    """A configuration problem; ``str(err)`` is one line naming the field."""


# The layer kinds (model.norm): "post" x -> LN1(x + Attn(x)) -> LN2(. + FFN(.)) (BERT); "pre"
# x -> x + Attn(LN1(x)) -> . + FFN(LN2(.)) (GPT-2; its final LayerNorm runs on the host).
NORMS = ("post", "pre")
# The FFN's activation table (model.gelu): the exact erf GELU (BERT), the tanh approximation (GPT-2's gelu_new),
# or T5's ReLU: a table over the int8 input like the others, so any of them runs in RTL.
GELUS = ("erf", "tanh", "relu")


# FPGA parts we know the resources of (AMD DS180, 7-series overview): LUT, FF, DSP48E1, BRAM36 (a
# RAMB18 is half of one), CARRY4 (one per slice) and LUTRAM (LUTs usable as memory: distributed RAM / 64 bits).
PARTS = {
    "xc7a35t":  {"LUT": 20800,  "FF": 41600,  "DSP": 90,  "BRAM36": 50,  "CARRY4": 5200,  "LUTRAM": 6400},
    "xc7a50t":  {"LUT": 32600,  "FF": 65200,  "DSP": 120, "BRAM36": 75,  "CARRY4": 8150,  "LUTRAM": 9600},
    "xc7a100t": {"LUT": 63400,  "FF": 126800, "DSP": 240, "BRAM36": 135, "CARRY4": 15850, "LUTRAM": 19000},
    "xc7a200t": {"LUT": 134600, "FF": 269200, "DSP": 740, "BRAM36": 365, "CARRY4": 33650, "LUTRAM": 46200},
    # Zynq-7020 programmable logic (AMD DS190): 13,300 slices, 220 DSP48E1, 140 BRAM36, 4,350 SLICEM.
    "xc7z020":  {"LUT": 53200,  "FF": 106400, "DSP": 220, "BRAM36": 140, "CARRY4": 13300, "LUTRAM": 17400},
    # Lattice ECP5-85F (FPGA-DS-02012), in the units above so that the planner (mlo_hw.plan) sizes the engine:
    # LUT4s, FFs, MULT18X18D as DSP, DP16KD (18 Kbit) / 2 as BRAM36, CCU2C carry bits / 4 as CARRY4,
    # distributed RAM (669 Kbit) / 64 as LUTRAM. Synthesis figures for it come from nextpnr (mlo_hw.soc).
    "lfe5um5g-85f": {"LUT": 83640, "FF": 83640, "DSP": 156, "BRAM36": 104, "CARRY4": 20910, "LUTRAM": 10450},
}


# The FPGA family of each board of mlo_hw.boards and mlo_hw.soc (checked against their tables there).
BOARD_PARTS = {"arty_a7_35": "xc7a35t", "arty_a7_100": "xc7a100t", "nexys_video": "xc7a200t",
               "pynq_z2": "xc7z020", "ecpix5": "lfe5um5g-85f"}

# Clock range of the parts (Artix-7, -1 speed grade): the MMCM's slowest output (VCO 600 MHz / 128) up to
# the global clock buffer's maximum (BUFG F_MAX, DS181).
CLOCK_MHZ = (600 / 128, 464.0)

# The rest of a part number after its family, per vendor (by the family's prefix): its pattern, shape and
# an example. AMD: temperature grade, package and pins, speed grade (xc7a35t + icsg324-1L); Lattice: speed
# grade, package and pins, temperature grade (lfe5um5g-85f + -8bg554i).
_PART = {"xc": (re.compile(r"[a-z]{3,5}\d{3,4}-[1-3][a-z]{0,2}", re.IGNORECASE), "<package><pins>-<speed grade>",
                "xc7a35ticsg324-1L"),
         "lfe": (re.compile(r"-[6-8][a-z]{2}\d{3}[ci]?", re.IGNORECASE), "-<speed grade><package><pins>",
                 "lfe5um5g-85f-8bg554i")}
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def _part_family(part: str) -> str:
    for name in PARTS:
        if part.lower().startswith(name):
            rest, shape, example = next(v for prefix, v in _PART.items() if name.startswith(prefix))
            if part[len(name):] and not rest.fullmatch(part[len(name):]):
                raise ConfigError(f"target.part: {part!r} is not a part number; expected {name} or "
                                  f"{name}{shape}, e.g. {example}")
            return name
    raise ConfigError(f"target.part: unknown part {part!r}; expected one of "
                      + ", ".join(f"{p}*" for p in PARTS))


def check_name(value: Any, field: str = "name") -> str:
    """A config or build name: one path component (it names the build folder) of safe characters."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ConfigError(f"{field}: {value!r} is not a name; expected 1..64 letters, digits, '_', '.' or '-', "
                          "not starting with '.' or '-' (it names the build folder)")
    return value


@dataclass(frozen=True)
class Model:
    layers: int
    hidden: int
    heads: int
    intermediate: int
    seq_len: int
    layernorm_eps: float = 1e-12
    causal: bool = False        # a decoder's self-attention: query row i attends keys 0..i (prefill mode)
    norm: str = "post"          # where the LayerNorms sit: "post" (BERT) or "pre" (GPT-2)
    gelu: str = "erf"           # the FFN's activation table: GELU "erf" (exact), "tanh" (GPT-2's) or "relu" (T5's)
    rmsnorm: bool = False       # the norms are RMSNorms (T5, Llama): LayerNorm without the mean, in the golden model and RTL
    position_bias: bool = False  # T5's relative position bias: a table per layer over key - query (an encoder-decoder)
    # an encoder-decoder (BART): the encoder's layers (run first, self-attention only, not causal); then ``layers``
    # decoder layers, each with a cross-attention block over the encoder's output (docs/seq2seq.md)
    encoder_layers: int = 0


@dataclass(frozen=True)
class Numerics:
    weight_bits: int = 8
    act_bits: int = 8


@dataclass(frozen=True)
class Folding:
    """One matrix-vector array serves every matrix of the rolled layer (they run one after another).

    ``pe`` output channels and ``simd`` input elements are computed per cycle. ``tile_rows`` output
    channels form one weight tile: the unit of DMA transfer and of double buffering. ``ln_lanes`` LayerNorm
    blocks work on alternate rows of the two LayerNorm phases (:class:`~mlo_hw.hw.engine.layernorm_lanes.
    LayerNormLanes`: one element a cycle each, so a phase of S rows takes about ``ceil(S / ln_lanes) * hidden``
    cycles, :func:`mlo_hw.perf.layernorm_cycles`, of which the part beyond the last weight tile before it shows,
    :func:`mlo_hw.perf.layernorm_visible_cycles`); 1..``simd``: one buffer read port of ``simd`` pairs a cycle
    feeds them all, so more lanes would only wait. The default 2 is what the engine had before the field existed
    (the resource calibration of ``folding: auto`` is at 2; each lane costs LUTs, DSPs and block RAM,
    ``docs/synthesis.md``); ``folding: auto`` chooses it with the rest. ``ln_width`` elements a cycle each lane
    takes and gives (1, 2, 4, ..: a power of two dividing ``simd``, with ``ln_lanes * ln_width <= simd``): a lane's row
    takes ``hidden / ln_width`` cycles (its statistics still 50 a row) for ``ln_width`` times a lane's multipliers
    (DSPs) and its output pipeline, but no second set of its serial units, queues and row gather.
    """
    pe: int = 8
    simd: int = 8
    tile_rows: int = 8
    ln_lanes: int = 2
    ln_width: int = 1


@dataclass(frozen=True)
class Memory:
    axi_data_bits: int = 64
    axi_addr_bits: int = 32
    max_burst_beats: int = 256


@dataclass(frozen=True)
class Target:
    part: str = "xc7a35ticsg324-1L"
    board: str = "arty_a7_35"
    clock_mhz: float = 100.0
    bram36_budget: float | None = None     # block RAM the plan may use (default: the part's; see mlo_hw.plan)
    block_rows: int | None = None          # the DRAM-tiled plan's token rows per block (default: the planner's choice)


@dataclass(frozen=True)
class Weights:
    source: str = "random"      # "random" or "onnx"
    seed: int = 0
    onnx: str | None = None     # path of an ONNX model when source == "onnx"


@dataclass(frozen=True)
class Matrix:
    """A weight matrix of the layer: ``rows`` output channels, ``cols`` inputs (PyTorch [out, in])."""
    name: str
    rows: int
    cols: int


@dataclass(frozen=True)
class Config:
    name: str
    model: Model
    numerics: Numerics
    folding: Folding
    memory: Memory
    target: Target
    weights: Weights
    loop_body_hierarchy: tuple[tuple[str, ...], ...] = (("encoder", "encoder.layer.0"),)

    # ---- derived figures: computed here, nowhere else -------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.model.hidden // self.model.heads

    @property
    def seq2seq(self) -> bool:
        """An encoder-decoder: ``model.encoder_layers`` encoder layers, then decoder layers with cross-attention."""
        return self.model.encoder_layers > 0

    @property
    def bias_radius(self) -> int:
        """A relative position bias table's radius: distances -(R-1)..R-1 over the padded sequence (R = seq_padded)."""
        return self.seq_padded

    @property
    def image_layers(self) -> int:
        """Layers in the weight image: the encoder's, then the decoder's (or the one stack's)."""
        return self.model.encoder_layers + self.model.layers

    @property
    def matrices(self) -> tuple[Matrix, ...]:
        """The layer's weight matrices in the order the engine consumes them (an encoder-decoder's layer: the
        cross-attention's last, ``xq`` .. ``xo``; an encoder layer leaves them zero)."""
        h, i = self.model.hidden, self.model.intermediate
        cross = tuple(Matrix(n, h, h) for n in ("xq", "xk", "xv", "xo")) if self.seq2seq else ()
        return (Matrix("q", h, h), Matrix("k", h, h), Matrix("v", h, h), Matrix("o", h, h),
                Matrix("ffn_up", i, h), Matrix("ffn_down", h, i)) + cross

    def acc_bits(self, k: int) -> int:
        """Signed accumulator width for a K-term dot product plus a bias of the same range (``numerics.acc_bits``)."""
        from .model.numerics import acc_bits
        return acc_bits(k, self.numerics.weight_bits, self.numerics.act_bits)

    @property
    def seq_padded(self) -> int:
        """Sequence length padded so attention products fold evenly (padded keys are masked)."""
        unit = math.lcm(self.folding.pe, self.folding.simd)
        return -(-self.model.seq_len // unit) * unit

    @property
    def axi_data_bytes(self) -> int:
        return self.memory.axi_data_bits // 8

    @property
    def part_family(self) -> str:
        return _part_family(self.target.part)

    @property
    def mac_lanes(self) -> int:
        return self.folding.pe * self.folding.simd


_SECTIONS = {"model": Model, "numerics": Numerics, "folding": Folding, "memory": Memory,
             "target": Target, "weights": Weights}


def _build(section: str, cls, raw: Any):
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{section}: expected a mapping, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = _unknown(raw, fields)
    if unknown:
        raise ConfigError(f"{section}.{unknown}: unknown key; expected one of {', '.join(fields)}")
    values = {}
    for name, field in fields.items():
        if name not in raw:
            if field.default is dataclasses.MISSING:
                raise ConfigError(f"{section}.{name}: missing; required")
            continue
        value = raw[name]
        want = field.type
        if want == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{section}.{name}: expected an integer, got {value!r}")
        elif want == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
                raise ConfigError(f"{section}.{name}: expected a finite number, got {value!r}")
            value = float(value)
        elif want == "bool":
            if not isinstance(value, bool):
                raise ConfigError(f"{section}.{name}: expected true or false, got {value!r}")
        elif want == "str":
            if not isinstance(value, str):
                raise ConfigError(f"{section}.{name}: expected a string, got {value!r}")
        elif want == "float | None":
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not _finite(value)):
                raise ConfigError(f"{section}.{name}: expected a finite number or null, got {value!r}")
            value = None if value is None else float(value)
        elif want == "int | None":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{section}.{name}: expected an integer or null, got {value!r}")
        elif want == "str | None":
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{section}.{name}: expected a string or null, got {value!r}")
        values[name] = value
    return cls(**values)


def _finite(x: int | float) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:       # an int beyond float range
        return False


def _unknown(raw: dict, allowed) -> str | None:
    """The first key of ``raw`` not in ``allowed`` (quoted unless it is a plain name, a non-string key shown as
    such), or None."""
    for key in raw:
        if key not in allowed:
            if not isinstance(key, str):
                return f"{key!r} (not a string)"
            return key if re.fullmatch(r"[\w.\-]+", key) else repr(key)
    return None


def _require(cond: bool, msg: str):
    if not cond:
        raise ConfigError(msg)


def _validate(cfg: Config):
    m, n, f, mem, t, w = cfg.model, cfg.numerics, cfg.folding, cfg.memory, cfg.target, cfg.weights
    for name in ("layers", "hidden", "heads", "intermediate", "seq_len"):
        _require(getattr(m, name) > 0, f"model.{name}: expected a positive integer, got {getattr(m, name)}")
    _require(m.hidden % m.heads == 0,
             f"model.hidden: {m.hidden} is not divisible by model.heads={m.heads}")
    _require(m.layernorm_eps > 0, f"model.layernorm_eps: expected > 0, got {m.layernorm_eps}")
    _require(m.norm in NORMS, f"model.norm: expected 'post' (BERT: LayerNorm after each residual add) or 'pre' "
                              f"(GPT-2: LayerNorm before attention and FFN), got {m.norm!r}")
    _require(m.gelu in GELUS, f"model.gelu: expected 'erf' (exact GELU), 'tanh' (GPT-2's approximation) or 'relu', "
                              f"got {m.gelu!r}")
    _require(m.encoder_layers >= 0, f"model.encoder_layers: expected 0 (one stack) or the encoder's layer count, got "
                                    f"{m.encoder_layers}")
    if m.encoder_layers:
        _require(m.causal, "model.causal: an encoder-decoder's decoder self-attention is causal: expected true")
    _require(not m.position_bias or m.encoder_layers, "model.position_bias: a relative position bias (T5's) needs an "
                                                      "encoder-decoder (model.encoder_layers > 0)")
    _require(2 <= n.weight_bits <= 8, f"numerics.weight_bits: expected 2..8, got {n.weight_bits}")
    _require(n.act_bits == 8, f"numerics.act_bits: expected 8 (int8 matrix inputs, int16 residual stream), "
                              f"got {n.act_bits}")
    for name in ("pe", "simd", "tile_rows"):
        _require(getattr(f, name) > 0, f"folding.{name}: expected a positive integer, got {getattr(f, name)}")
    for what, k in (("model.hidden", m.hidden), ("model.intermediate", m.intermediate),
                    ("head size (hidden/heads)", cfg.head_dim)):
        _require(k % f.simd == 0, f"folding.simd: {f.simd} does not divide {what}={k}")
        _require(k % f.pe == 0, f"folding.pe: {f.pe} does not divide {what}={k}")
    _require(f.tile_rows % f.pe == 0, f"folding.tile_rows: {f.tile_rows} is not a multiple of folding.pe={f.pe}")
    _require(f.ln_width >= 1 and f.ln_width & (f.ln_width - 1) == 0 and f.simd % f.ln_width == 0,
             f"folding.ln_width: expected a power of two dividing folding.simd={f.simd} (a LayerNorm lane takes "
             f"that many pairs of a {f.simd}-pair word a cycle), got {f.ln_width}")
    _require(1 <= f.ln_lanes <= f.simd // f.ln_width,
             f"folding.ln_lanes: expected 1..{f.simd // f.ln_width} (folding.simd / folding.ln_width: one read port "
             f"feeds the LayerNorm lanes {f.simd} pairs a cycle and a lane takes {f.ln_width}, so more lanes only "
             f"wait), got {f.ln_lanes}")
    for what, k in (("model.hidden", m.hidden), ("model.intermediate", m.intermediate)):
        _require(k % f.tile_rows == 0, f"folding.tile_rows: {f.tile_rows} does not divide {what}={k}")
    _require(mem.axi_data_bits in (32, 64, 128, 256, 512),
             f"memory.axi_data_bits: expected 32, 64, 128, 256 or 512, got {mem.axi_data_bits}")
    _require(16 <= mem.axi_addr_bits <= 64, f"memory.axi_addr_bits: expected 16..64, got {mem.axi_addr_bits}")
    _require(1 <= mem.max_burst_beats <= 256 and (mem.max_burst_beats & (mem.max_burst_beats - 1)) == 0,
             f"memory.max_burst_beats: expected a power of two in 1..256, got {mem.max_burst_beats}")
    family = _part_family(t.part)
    _require(t.board in BOARD_PARTS, f"target.board: unknown board {t.board!r}; expected one of "
                                     f"{', '.join(BOARD_PARTS)}")
    _require(BOARD_PARTS[t.board] == family, f"target.board: {t.board} carries an {BOARD_PARTS[t.board]}, "
                                             f"not the config's part {t.part}")
    _require(t.bram36_budget is None or (t.bram36_budget > 0 and _finite(t.bram36_budget)),
             f"target.bram36_budget: expected a positive number of BRAM36 (or null: the part's), got {t.bram36_budget}")
    _require(w.source in ("random", "onnx"), f"weights.source: expected 'random' or 'onnx', got {w.source!r}")
    _require(w.source != "onnx" or w.onnx, "weights.onnx: required when weights.source is 'onnx'")
    _require(w.seed >= 0, f"weights.seed: expected a non-negative integer, got {w.seed}")
    h = cfg.loop_body_hierarchy
    _require(len(h) > 0 and all(len(g) >= 1 and all(isinstance(s, str) for s in g) for g in h),
             "loop_body_hierarchy: expected a list of lists of scope names, e.g. [['encoder', 'encoder.layer.0']]")
    _check_limits(cfg)


def _check_limits(cfg: Config):
    """The hardware's limits: register widths, the AXI address space and the part's clock range."""
    from .hw.regs import LAYER_BITS, TOKEN_BITS
    from .model.weight_image import layout
    m, mem, t = cfg.model, cfg.memory, cfg.target
    _require(m.layers < 1 << LAYER_BITS, f"model.layers: {m.layers} exceeds the {LAYER_BITS}-bit LAYERS register "
                                         f"(at most {(1 << LAYER_BITS) - 1})")
    _require(m.seq_len < 1 << TOKEN_BITS, f"model.seq_len: {m.seq_len} exceeds the {TOKEN_BITS}-bit TOKENS register "
                                          f"(at most {(1 << TOKEN_BITS) - 1})")
    lo, hi = CLOCK_MHZ
    _require(lo <= t.clock_mhz <= hi, f"target.clock_mhz: expected {lo:g}..{hi:g} MHz (the part's clock range), "
                                      f"got {t.clock_mhz:g}")
    beat = cfg.axi_data_bytes
    act = -(-m.seq_len * m.hidden * 2 // beat) * beat          # int16 [seq_len, hidden], in and out
    image = layout(cfg).total_bytes
    _require(image + 2 * act <= 1 << mem.axi_addr_bits,
             f"memory.axi_addr_bits: {mem.axi_addr_bits} bits address {1 << mem.axi_addr_bits} bytes; the weight image "
             f"({image} bytes) and the input and output activations (2 x {act} bytes) need {image + 2 * act}")


def _check_fit(cfg: Config):
    """A plan that fits the block RAM budget exists (all on chip, or activations in DRAM: mlo_hw.plan)."""
    from .hw.layer_engine import EngineGeometry
    from .plan import plan
    try:
        EngineGeometry.from_config(cfg)
    except ConfigError:
        return          # e.g. int4 weights for the golden model: the engine refuses it when built
    plan(cfg)


def config_from_dict(raw: Any, name: str = "config") -> Config:
    if not isinstance(raw, dict):
        raise ConfigError(f"{name}: expected a mapping at the top level")
    allowed = set(_SECTIONS) | {"name", "loop_body_hierarchy"}
    unknown = _unknown(raw, allowed)
    if unknown:
        raise ConfigError(f"{unknown}: unknown top-level key; expected one of {', '.join(sorted(allowed))}")
    if "model" not in raw:
        raise ConfigError("model: missing; required")
    auto = _folding_is_auto(raw.get("folding"))
    sections = {key: _build(key, cls, raw.get(key)) for key, cls in _SECTIONS.items() if key != "folding"}
    sections["folding"] = Folding(1, 1, 1, 1, 1) if auto else _build("folding", Folding, raw.get("folding"))
    hierarchy = raw.get("loop_body_hierarchy", [["encoder", "encoder.layer.0"]])
    if not isinstance(hierarchy, list) or not all(isinstance(g, list) for g in hierarchy):
        raise ConfigError("loop_body_hierarchy: expected a list of lists of scope names, "
                          "e.g. [['encoder', 'encoder.layer.0']]")
    cfg_name = check_name(raw["name"]) if "name" in raw else check_name(name, "name (from the file name)")
    cfg = Config(name=cfg_name, loop_body_hierarchy=tuple(tuple(g) for g in hierarchy), **sections)
    _validate(cfg)          # auto: everything but the folding (1 x 1 x 1 x 1 divides every size)
    if auto:
        from .folding import choose
        cfg = choose(cfg)
        _validate(cfg)
    _check_fit(cfg)
    return cfg


def _folding_is_auto(raw: Any) -> bool:
    """``folding: auto`` (mlo_hw.folding) rather than a mapping; anything else but a mapping or null is refused."""
    if raw == "auto":
        return True
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError(f"folding: expected a mapping with pe, simd, tile_rows, ln_lanes, ln_width or 'auto', "
                          f"got {raw!r}")
    return False


def resolve_config_path(path: str | Path) -> Path:
    """A path as given, else (for a bare name or ``configs/NAME``) a config that ships with the package by file
    name or stem."""
    p = Path(path)
    if p.is_file():
        return p
    if p.is_dir():
        raise ConfigError(f"--config: {str(path)!r} is a folder; expected a YAML config file")
    if str(path) == p.name or p.parent == Path("configs"):       # configs/ in the repository is the shipped folder
        shipped = resources.files("mlo_hw") / "configs"
        for cand in (p.name, p.name + ".yaml"):
            q = shipped / cand
            if q.is_file():
                return Path(str(q))
        raise ConfigError(f"--config: no such file {str(path)!r} and no shipped config of that name "
                          f"({', '.join(sorted(q.name[:-5] for q in shipped.iterdir() if q.name.endswith('.yaml')))})")
    raise ConfigError(f"--config: no such file {str(path)!r}")


class _Loader(yaml.SafeLoader):
    """YAML's safe loader that refuses duplicate and non-string mapping keys instead of passing them on."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, str):
                    raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is not a string",
                                                            key_node.start_mark)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                            key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def load_config(path: str | Path) -> Config:
    p = resolve_config_path(path)
    try:
        raw = yaml.load(p.read_bytes(), Loader=_Loader)      # bytes: UTF-8, or UTF-16 with a BOM
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror})") from None
    except yaml.reader.ReaderError as e:
        raise ConfigError(f"{p}: not a YAML text file ({e.reason} at byte {e.position})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark else ""
        raise ConfigError(f"{p}:{where} not valid YAML ({getattr(e, 'problem', None) or type(e).__name__})") from None
    except RecursionError:
        raise ConfigError(f"{p}: not valid YAML (nested too deeply)") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: expected a mapping of config sections, got {type(raw).__name__}")
    return config_from_dict(raw, name=p.stem)
