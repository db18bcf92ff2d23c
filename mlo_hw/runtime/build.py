"""A build folder as the host runtime sees it: the register map, the weight image, the config and the
scales of the engine's int16 input and output.

``python -m mlo_hw.elaborate`` writes ``runtime.json`` beside ``regs.json`` and ``weights.bin``::

    {"format": 1, "config": {...the config, as config_from_dict takes it...},
     "input_scale": s_in, "output_scale": s_out, "dram_dtype": "<i2"}

:class:`BuildFolder` reads the three files and checks them against one another (the image's size against
the config's layout, the register map's identification); a missing or inconsistent file raises
:class:`BadBuild` with one line naming the file.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cli import BadInput
from ..config import ConfigError, config_from_dict
from ..model.quantize import DRAM_DTYPE, QuantModel
from ..model.weight_image import layout

__all__ = ["BadBuild", "RegisterMap", "BuildFolder", "RUNTIME_JSON", "write_runtime_json"]

RUNTIME_JSON = "runtime.json"
FORMAT = 1


class BadBuild(BadInput):
    """A build folder the runtime cannot use (one line naming the file)."""


def write_runtime_json(out: Path, cfg, input_scale: float, output_scale: float, **scales: float) -> Path:
    """Write ``runtime.json`` (what the host needs besides regs.json and weights.bin) into ``out``; ``scales``: more
    of them (an encoder-decoder's ``decoder_input_scale``, ``memory_scale``)."""
    path = Path(out) / RUNTIME_JSON
    body = {"format": FORMAT, "config": dataclasses.asdict(cfg), "input_scale": float(input_scale),
            "output_scale": float(output_scale), "dram_dtype": DRAM_DTYPE.str,
            **{k: float(v) for k, v in scales.items()}}
    path.write_text(json.dumps(body, indent=1) + "\n")
    return path


class RegisterMap:
    """``regs.json``: register offsets and fields by name (the runtime knows registers only through it)."""

    def __init__(self, data: dict, source: str = "regs.json"):
        try:
            self.registers = {r["name"]: r for r in data["registers"]}
            self.fields = {(r["name"], f["name"]): (int(f["lsb"]), int(f["width"]))
                           for r in data["registers"] for f in r["fields"]}
            for r in self.registers.values():
                int(r["offset"]), int(r["reset"])
        except (KeyError, TypeError, ValueError) as e:
            raise BadBuild(f"{source}: not a register map ({type(e).__name__}: {e})") from None
        self.source = source

    def offset(self, name: str) -> int:
        try:
            return int(self.registers[name]["offset"])
        except KeyError:
            raise BadBuild(f"{self.source}: no register {name}") from None

    def reset(self, name: str) -> int:
        """The reset value of a register (an RO constant's value: ID, SCRATCH_BYTES)."""
        self.offset(name)
        return int(self.registers[name]["reset"])

    def has(self, name: str) -> bool:
        return name in self.registers

    def _field(self, reg: str, field: str) -> tuple[int, int]:
        """``(lsb, width)`` of a field."""
        try:
            return self.fields[reg, field]
        except KeyError:
            raise BadBuild(f"{self.source}: no field {reg}.{field}") from None

    def bit(self, reg: str, field: str) -> int:
        """The mask of a field."""
        lsb, width = self._field(reg, field)
        return ((1 << width) - 1) << lsb

    def get(self, reg: str, field: str, value: int) -> int:
        """The value of a field in the register value ``value``."""
        lsb, width = self._field(reg, field)
        return (value >> lsb) & ((1 << width) - 1)

    def put(self, reg: str, field: str, value: int, v: int) -> int:
        """The register value ``value`` with the field set to ``v`` (truncated to its width)."""
        lsb, mask = self._field(reg, field)[0], self.bit(reg, field)
        return (value & ~mask) | ((v << lsb) & mask)

    def decode(self, reg: str, value: int) -> dict[str, int]:
        """``{field: value}`` of a register value, every field."""
        self.offset(reg)
        return {f["name"]: self.get(reg, f["name"], value) for f in self.registers[reg]["fields"]}

    def set_fields(self, reg: str, value: int) -> list[str]:
        """The names of the fields of ``reg`` that are non-zero in ``value``."""
        return [name for name, v in self.decode(reg, value).items() if v]


@dataclass
class BuildFolder:
    path: Path
    cfg: object                 # mlo_hw.config.Config
    regs: RegisterMap
    weights: bytes
    input_scale: float
    output_scale: float
    decoder_input_scale: float | None = None      # an encoder-decoder: its decoder's int16 input
    memory_scale: float | None = None             # ... its memory's int16
    encoder_output_scale: float | None = None     # ... its encoder's int16 output
    memory_on_host: bool = False                  # ... the memory is the host's function of the encoder's output (T5)

    @property
    def seq_len(self) -> int:
        return self.cfg.model.seq_len

    @property
    def hidden(self) -> int:
        return self.cfg.model.hidden

    @property
    def act_bytes(self) -> int:
        """Bytes of one int16 activation [seq_len, hidden] in DRAM."""
        return self.seq_len * self.hidden * DRAM_DTYPE.itemsize

    @property
    def layer_stride(self) -> int:
        return layout(self.cfg).stride

    @classmethod
    def load(cls, path) -> "BuildFolder":
        p = Path(path)
        if not p.is_dir():
            raise BadBuild(f"build folder {p}: {'not a folder' if p.exists() else 'does not exist'} "
                           "(write one with python -m mlo_hw.elaborate --config CONFIG -o DIR)")

        def read(name: str, binary: bool = False):
            f = p / name
            if not f.is_file():
                raise BadBuild(f"{f}: missing (not a complete build; re-run python -m mlo_hw.elaborate)")
            try:
                return f.read_bytes() if binary else f.read_text()
            except (OSError, UnicodeDecodeError) as e:
                raise BadBuild(f"{f}: cannot read ({getattr(e, 'strerror', None) or e})") from None

        def parse(name: str):
            try:
                return json.loads(read(name))
            except json.JSONDecodeError as e:
                raise BadBuild(f"{p / name}: not JSON ({e.msg} at line {e.lineno})") from None

        rt = parse(RUNTIME_JSON)
        if not isinstance(rt, dict) or rt.get("format") != FORMAT:
            raise BadBuild(f"{p / RUNTIME_JSON}: expected format {FORMAT} (written by another version)")
        try:
            cfg = config_from_dict(rt["config"], name="config")
            input_scale, output_scale = float(rt["input_scale"]), float(rt["output_scale"])
            s2s = {"decoder_input_scale": float(rt["decoder_input_scale"]), "memory_scale": float(rt["memory_scale"]),
                   "encoder_output_scale": float(rt["encoder_output_scale"]),
                   "memory_on_host": bool(rt["memory_on_host"])} if cfg.seq2seq else {}
        except ConfigError as e:
            raise BadBuild(f"{p / RUNTIME_JSON}: config: {e}") from None
        except (KeyError, TypeError, ValueError) as e:
            raise BadBuild(f"{p / RUNTIME_JSON}: missing or bad entry {e}") from None
        if rt.get("dram_dtype", DRAM_DTYPE.str) != DRAM_DTYPE.str:
            raise BadBuild(f"{p / RUNTIME_JSON}: dram_dtype {rt.get('dram_dtype')!r}; this runtime moves "
                           f"{DRAM_DTYPE.str}")
        regs = RegisterMap(parse("regs.json"), str(p / "regs.json"))
        weights = read("weights.bin", binary=True)
        want = layout(cfg).total_bytes
        if len(weights) != want:
            raise BadBuild(f"{p / 'weights.bin'}: {len(weights)} bytes; config {cfg.name} lays out {want}")
        return cls(p, cfg, regs, weights, input_scale, output_scale, **s2s)

    # ---- the host side of the int16 residual stream ----------------------------------------------------
    def quantize_input(self, x) -> np.ndarray:
        """Float activations [seq_len, hidden] (layer 0's input) -> the engine's int16 input (int64)."""
        return QuantModel([], self.input_scale, self.output_scale).quantize_input(x)

    def dequantize_output(self, y) -> np.ndarray:
        """The engine's int16 output -> float activations (the last layer's output)."""
        return QuantModel([], self.input_scale, self.output_scale).dequantize_output(y)

    def quantize_decoder_input(self, y) -> np.ndarray:
        """An encoder-decoder: the decoder's float input [seq_len, hidden] -> its int16 input (int64)."""
        return QuantModel([], self.decoder_input_scale, self.output_scale).quantize_input(y)
