"""The golden backend: the engine as a register-level model around the integer golden model.

It has a DRAM (sparse, 4 KiB pages, any address) and the register file of ``regs.json`` (reset values,
RW fields stored, W1C/W1P as documented in ``docs/registers.md``). Writing CTRL.start runs what the
registers describe, as the engine does: TOKENS checked (outside 1..seq_len: ERROR with
ERROR_CODE.bad_tokens and no run), with a scratch (SCRATCH_BYTES > 0) SCRATCH_BASE checked (not 4 KiB aligned,
or overlapping the weight image, the input or the output: ERROR with ERROR_CODE.bad_scratch and no run), the
input base, the weight base and the output base checked in the
order the engine issues them (not a multiple of the AXI beat: ERROR with ERROR_CODE.bad_command and
ERROR_ADDR the base; nothing after it happens, so a bad output base leaves the output untouched), then
LAYERS layers decoded from the weight image in DRAM at WEIGHT_BASE (``weight_image.image_layers``), the
int16 input read at INPUT_BASE, :func:`mlo_hw.model.golden.int_stack` with keys TOKENS.. masked, and the
int16 output written at OUTPUT_BASE; then STATUS.done. Nothing is taken from anywhere but the DRAM and
the registers, so a run here and a run on the RTL see the same bytes.

With a KV cache (a causal model with activations in DRAM: register CACHE_LEN, ``docs/decode.md``) it runs what the
engine runs: CACHE_LEN checked (ERROR_CODE.bad_cache), the block's rows (all of them at CACHE_LEN 0) through each
layer against the keys before CACHE_LEN read from the layer's K_h and V_h^T in the scratch, its own K and V written
there from key CACHE_LEN on (cut at the capacity), and the rows the engine stores written at OUTPUT_BASE.

An encoder-decoder (``model.encoder_layers``, ``docs/seq2seq.md``): MEMORY_TOKENS checked (ERROR_CODE.bad_memory);
0 runs the layers at WEIGHT_BASE as encoder layers (not causal, no cache); above 0 as decoder layers whose
cross-attention reads the memory at MEMORY_BASE (its first MEMORY_TOKENS keys). Unlike the engine, a decode step
recomputes the memory's cross K and V from MEMORY_BASE rather than reading the prefill's from the scratch (the same
values while the memory is unchanged).

It has no clock: CYCLES, COMPUTE_CYCLES, STALL_CYCLES and BYTES_READ read 0.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..model.golden import IntMemory, int_layer, int_stack
from ..model.numerics import attention_mask
from ..model.quantize import dram_bytes, from_dram
from ..model.tiled import kv_head, kv_writes, scratch_layout
from ..model.weight_image import image_layers, layout
from ..plan import kv_cache
from .backend import PAGE, Backend

__all__ = ["GoldenBackend"]


class GoldenBackend(Backend):
    name = "golden"
    has_clock = False

    def __init__(self, dram_base: int = 0, dram_size: int = 1 << 32):
        super().__init__(dram_base, dram_size)
        self.pages: dict[int, bytearray] = {}
        self.values: dict[str, int] = {}

    def open(self, build) -> None:
        super().open(build)
        self.regs = build.regs
        self.by_offset = {int(r["offset"]): r for r in self.regs.registers.values()}
        self.values = {name: self.regs.reset(name) for name in self.regs.registers}

    # ---- DRAM ------------------------------------------------------------------------------------
    @staticmethod
    def _spans(addr: int, n: int):
        """``n`` bytes at ``addr`` page by page: (page, offset in the page, bytes, offset in the data)."""
        done = 0
        while done < n:
            page, off = divmod(addr + done, PAGE)
            k = min(PAGE - off, n - done)
            yield page, off, k, done
            done += k

    def write_dram(self, addr: int, data: bytes) -> None:
        data = bytes(data)
        for page, off, k, i in self._spans(addr, len(data)):
            self.pages.setdefault(page, bytearray(PAGE))[off:off + k] = data[i:i + k]

    def read_dram(self, addr: int, n: int) -> bytes:
        return b"".join(bytes(self.pages.get(page, bytes(PAGE))[off:off + k])
                        for page, off, k, _ in self._spans(addr, n))

    # ---- registers -------------------------------------------------------------------------------
    def _reg(self, offset: int) -> dict:
        if offset not in self.by_offset:
            raise ValueError(f"golden backend: no register at offset {offset:#x} (the engine answers SLVERR)")
        return self.by_offset[offset]

    def _set(self, reg: str, field: str, value: int):
        self.values[reg] = self.regs.put(reg, field, self.values[reg], value)

    def _get(self, reg: str, field: str = "value") -> int:
        return self.regs.get(reg, field, self.values[reg])

    def read_reg(self, offset: int) -> int:
        r = self._reg(offset)
        return self.values[r["name"]] & 0xFFFFFFFF

    def write_reg(self, offset: int, value: int) -> None:
        r = self._reg(offset)
        name = r["name"]
        pulses = []
        written = self.regs.decode(name, value)
        for f in r["fields"]:
            v = written[f["name"]]
            if f["access"] == "RW":
                self._set(name, f["name"], v)
            elif f["access"] == "W1C" and v:
                self._set(name, f["name"], 0)
            elif f["access"] == "W1P" and v:
                pulses.append(f["name"])
        if "soft_reset" in pulses:
            self._clear_run_state(error=False)
        if "start" in pulses and not self._get("STATUS", "busy"):
            self._clear_run_state(error=True)
            self._run()

    def _clear_run_state(self, error: bool):
        self._set("STATUS", "done", 0)
        for c in ("CYCLES", "COMPUTE_CYCLES", "STALL_CYCLES", "BYTES_READ"):
            self.values[c] = 0
        if error:
            self._set("STATUS", "error", 0)
            self.values["ERROR_CODE"] = 0

    def _error(self, field: str, addr: int | None = None):
        self._set("STATUS", "error", 1)
        self._set("ERROR_CODE", field, 1)
        if addr is not None:
            self.values["ERROR_ADDR_LO"] = addr & 0xFFFFFFFF
            self.values["ERROR_ADDR_HI"] = addr >> 32

    def _base(self, name: str) -> int:
        return self.values[f"{name}_LO"] | (self.values.get(f"{name}_HI", 0) << 32)

    def _scratch_bad(self) -> bool:
        """The engine's START check of a DRAM-tiled plan's scratch (SCRATCH_BYTES > 0): SCRATCH_BASE 4 KiB aligned,
        overlapping neither the weight image (the configured layers) nor the input or the output."""
        size = self.values.get("SCRATCH_BYTES", 0)
        if not size:
            return False
        sb, io, cfg = self._base("SCRATCH_BASE"), self.build.act_bytes, self.build.cfg
        # an encoder-decoder's run reads the encoder's or the decoder's layers (as the engine's check counts them)
        img = (max(cfg.model.layers, cfg.model.encoder_layers) * layout(cfg).stride if cfg.seq2seq
               else len(self.build.weights))
        regions = ((self._base("WEIGHT_BASE"), img), (self._base("INPUT_BASE"), io), (self._base("OUTPUT_BASE"), io),
                   *(((self._base("MEMORY_BASE"), io),) if cfg.seq2seq else ()))
        return sb % PAGE != 0 or any(sb < b + n and b < sb + size for b, n in regions)

    # ---- the run ---------------------------------------------------------------------------------
    def _run(self):
        cfg = self.build.cfg
        seq, hidden, beat = cfg.model.seq_len, cfg.model.hidden, cfg.axi_data_bytes
        tokens, layers = self._get("TOKENS"), self._get("LAYERS")
        if not 1 <= tokens <= seq:
            return self._error("bad_tokens")
        if self._scratch_bad():
            return self._error("bad_scratch")
        kv, cache_len = kv_cache(cfg), self.values.get("CACHE_LEN", 0)
        if kv is not None and kv.refuses(cache_len, tokens):
            return self._error("bad_cache")
        mem_tokens = self.values.get("MEMORY_TOKENS", 0)
        if cfg.seq2seq and (mem_tokens > seq or (mem_tokens == 0 and cache_len)):
            return self._error("bad_memory")
        if layers == 0:
            raise ValueError("golden backend: LAYERS = 0 is not modelled")
        bases = ("INPUT_BASE", "WEIGHT_BASE", "OUTPUT_BASE") + (("MEMORY_BASE",) if mem_tokens else ())
        for base in bases:       # the order the engine issues them
            if self._base(base) % beat:
                return self._error("bad_command", self._base(base))
        lay = layout(cfg)
        image = self.read_dram(self._base("WEIGHT_BASE"), lay.stride * layers)
        x = from_dram(self.read_dram(self._base("INPUT_BASE"), self.build.act_bytes), seq, hidden)
        if cfg.seq2seq:          # the image's layers here are the encoder's (MEMORY_TOKENS 0) or the decoder's
            stack = image_layers(cfg, image, layers=layers, cross=mem_tokens > 0)
        else:
            stack = image_layers(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, layers=layers)), image)
        memory = None
        if mem_tokens:
            memory = IntMemory(from_dram(self.read_dram(self._base("MEMORY_BASE"), self.build.act_bytes), seq,
                                         hidden), np.arange(seq) < mem_tokens)
        if kv is None or (cfg.seq2seq and not mem_tokens):       # no cache, or an encoder's run
            mask = attention_mask(np.arange(seq) < tokens, cfg.model.causal and not cfg.seq2seq)
            y = int_stack(x, stack, mask, cfg.model.heads)
        else:
            y = self._cached_stack(stack, x, tokens, cache_len, kv.block, memory)
        self.write_dram(self._base("OUTPUT_BASE"), dram_bytes(y))
        self._set("STATUS", "done", 1)

    def _cached_stack(self, layers, x, tokens: int, cache_len: int, block: int, memory=None):
        """The layers of a KV-cache engine's run (module docstring): the output rows it stores."""
        cfg = self.build.cfg
        s, h, heads, dh = cfg.seq_padded, cfg.model.hidden, cfg.model.heads, cfg.head_dim
        sc, scratch = scratch_layout(cfg), self._base("SCRATCH_BASE")
        rows = s if cache_len == 0 else block                      # a step after a prefill computes one block
        xr = np.zeros((rows, h), np.int64)
        n = min(rows, len(x))
        xr[:n] = x[:n]
        keys = np.arange(cache_len + rows)
        mask = (keys[None, :] < cache_len + tokens) & (keys[None, :] <= cache_len + np.arange(rows)[:, None])
        stored = min(rows, s - cache_len)                          # K and V rows that fit below the capacity
        for li, p in enumerate(layers):
            base = {region: scratch + getattr(sc, region) + li * sc.kv_stride for region in ("k", "vt")}
            past = None
            if cache_len:
                heads_kv = [kv_head(cfg, self.read_dram(base["k"] + hh * s * dh, s * dh),
                                    self.read_dram(base["vt"] + hh * s * dh, s * dh)) for hh in range(heads)]
                past = (np.concatenate([k[:cache_len] for k, _ in heads_kv], axis=1),
                        np.concatenate([vt[:, :cache_len].T for _, vt in heads_kv], axis=1))
            t: dict = {}
            xr = int_layer(xr, p, mask, heads, t, past, memory=memory)
            for region, off, data in kv_writes(cfg, t["k"][:stored], t["v"][:stored], cache_len):
                self.write_dram(base[region] + off, data)
        y = np.zeros((len(x), h), np.int64)          # rows the engine does not store keep what DRAM held
        y[:] = from_dram(self.read_dram(self._base("OUTPUT_BASE"), self.build.act_bytes), len(x), h)
        y[:min(rows, len(x))] = xr[:min(rows, len(x))]
        return y
