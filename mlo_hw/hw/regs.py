"""Control and status registers: the register map (defined once, here) and its AXI4-Lite slave.

:func:`register_map` is the single definition of names, offsets, access, reset values and
descriptions; :func:`write_register_map` emits it as ``regs.json`` and ``mlo_hw_regs.h`` (and
:func:`markdown` renders ``docs/registers.md``). :class:`ControlRegs` implements it: 32-bit
registers on an AXI4-Lite slave (``s_axil_*``), unmapped addresses answer SLVERR.

Field access: ``RO`` read only, ``RW`` read/write, ``W1C`` sticky, cleared by writing 1, ``W1P``
write 1 to pulse the output for one cycle (reads 0). Performance counters are 32 bits, cleared by
START, and count while the engine is busy (cycles), while compute is busy, while compute waits for
a weight tile (DMA stall), and AXI bytes read. At 100 MHz they wrap after 42.9 s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from amaranth import C, Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import RESP_OKAY, RESP_SLVERR, axil_slave_members
from .pipeline import SplitCounter, delayed
from ..plan import kv_cache, plan

__all__ = ["ID_VALUE", "Field", "Register", "register_map", "ControlRegs", "write_register_map", "c_header",
           "markdown", "as_dict", "AXIL_ADDR_BITS"]

ID_VALUE = 0x4D4C4F01        # "MLO" + register map version 1
AXIL_ADDR_BITS = 8
LAYER_BITS = 16
TOKEN_BITS = 16


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    access: str          # RO, RW, W1C, W1P
    reset: int = 0
    description: str = ""

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    description: str
    fields: tuple = field(default_factory=tuple)

    @property
    def reset(self) -> int:
        return sum(f.reset << f.lsb for f in self.fields)

    @property
    def access(self) -> str:
        kinds = {f.access for f in self.fields}
        return kinds.pop() if len(kinds) == 1 else "mixed"


def _word(name, offset, access, description, reset=0, width=32):
    return Register(name, offset, description, (Field("value", 0, width, access, reset, description),))


def register_map(cfg) -> tuple[Register, ...]:
    """Every register of the engine's control interface, in address order (CACHE_LEN and ERROR_CODE.bad_cache only
    with a KV cache: :func:`mlo_hw.plan.kv_cache`)."""
    kv = kv_cache(cfg)
    hi_bits = max(cfg.memory.axi_addr_bits - 32, 0)
    lo_bits = min(cfg.memory.axi_addr_bits, 32)
    regs = [
        _word("ID", 0x00, "RO", "identification: 0x4D4C4F01 ('MLO', map version 1)", ID_VALUE),
        Register("CTRL", 0x04, "control", (
            Field("start", 0, 1, "W1P", 0, "write 1 while STATUS.busy is 0: clear DONE/ERROR/counters and run "
                                           "LAYERS layers; ignored (no effect at all) while STATUS.busy is 1"),
            Field("soft_reset", 1, 1, "W1P", 0, "write 1: abandon the run in any phase (input load and output "
                                                "store too): no new AXI burst, the bursts in flight are completed "
                                                "(R beats accepted, an accepted write burst finished with WSTRB 0), "
                                                "buffers emptied; STATUS.busy stays 1 until the bus is idle"),
            Field("irq_enable", 2, 1, "RW", 0, "drive the interrupt output while DONE or ERROR is set"))),
        Register("STATUS", 0x08, "status", (
            Field("busy", 0, 1, "RO", 0, "a run is in progress, or AXI transactions of an abandoned run (soft "
                                         "reset, error) are still in flight: an AR/AW pending, or R beats, W "
                                         "beats or a B response owed; START is ignored while 1"),
            Field("done", 1, 1, "W1C", 0, "the run finished (sticky)"),
            Field("error", 2, 1, "RO", 0, "an AXI error response or a bad address stopped the run; see ERROR_*"))),
        _word("LAYERS", 0x0C, "RW", "number of encoder layers to run", cfg.model.layers, LAYER_BITS),
    ]
    off = 0x10
    for base, what in (("WEIGHT_BASE", "DRAM byte address of the weight image (layer 0)"),
                       ("INPUT_BASE", "DRAM byte address of the input activations"),
                       ("OUTPUT_BASE", "DRAM byte address of the output activations")):
        regs.append(_word(f"{base}_LO", off, "RW", f"{what}, bits 31:0", 0, lo_bits))
        regs.append(_word(f"{base}_HI", off + 4, "RW" if hi_bits else "RO",
                          f"{what}, bits 63:32 (reads 0 above bit {cfg.memory.axi_addr_bits - 1})", 0,
                          max(hi_bits, 1)))
        off += 8
    regs += [
        _word("ERROR_ADDR_LO", off, "RO", "byte address of the failing read beat, of the first beat of the failing write burst, or of a bad command, bits 31:0",
              0, lo_bits),
        _word("ERROR_ADDR_HI", off + 4, "RO", "... bits 63:32", 0, max(hi_bits, 1)),
        Register("ERROR_CODE", off + 8, "cause of ERROR", (
            Field("rresp", 0, 2, "RO", 0, "RRESP of the failing read beat, or BRESP of the failing write burst: 2 SLVERR, 3 DECERR"),
            Field("bad_command", 2, 1, "RO", 0, "a zero-length or misaligned (not a multiple of the AXI "
                                                "beat) address"),
            Field("bad_tokens", 3, 1, "RO", 0, f"START with TOKENS outside 1..{cfg.model.seq_len} (no run)"),
            Field("bad_scratch", 4, 1, "RO", 0, "activations in DRAM: START with SCRATCH_BASE not 4 KiB aligned, or "
                                                 f"its SCRATCH_BYTES overlapping the weight image ({cfg.model.layers} layers), the "
                                                 "input or the output (no run)"),
            *([Field("bad_cache", 5, 1, "RO", 0, f"START with CACHE_LEN not a multiple of {kv.unit}, or above 0 with "
                                                 f"TOKENS above {kv.block}, or CACHE_LEN + TOKENS above the cache's "
                                                 f"{kv.capacity} keys (no run)")] if kv else []),
            *([Field("bad_memory", 6, 1, "RO", 0, f"an encoder-decoder: START with MEMORY_TOKENS above "
                                                  f"{cfg.model.seq_len}, or with CACHE_LEN above 0 and MEMORY_TOKENS 0 "
                                                  "(an encoder run has no decode steps) (no run)")]
              if cfg.seq2seq else []))),
        _word("CYCLES", off + 12, "RO", "clock cycles while busy"),
        _word("COMPUTE_CYCLES", off + 16, "RO", "cycles the compute array was busy"),
        _word("STALL_CYCLES", off + 20, "RO", "cycles compute waited for DRAM: a weight tile, a layer header or a "
                                              "parameter section not yet arrived"),
        _word("BYTES_READ", off + 24, "RO", "bytes read over AXI"),
        _word("TOKENS", off + 28, "RW", f"valid tokens of the input, 1..{cfg.model.seq_len}: keys 0..TOKENS-1 are "
              f"attended, the rest (padding) masked; read at START", cfg.model.seq_len, TOKEN_BITS),
    ]
    off += 32
    pl = plan(cfg)
    what = "DRAM byte address of the activation scratch (SCRATCH_BYTES bytes, 4 KiB aligned; unused when BLOCK_ROWS = the sequence)"
    regs += [_word("SCRATCH_BASE_LO", off, "RW", f"{what}, bits 31:0", 0, lo_bits),
             _word("SCRATCH_BASE_HI", off + 4, "RW" if hi_bits else "RO", f"{what}, bits 63:32", 0, max(hi_bits, 1)),
             _word("SCRATCH_BYTES", off + 8, "RO", "bytes of scratch DRAM the run uses (0: all activations on chip)",
                   pl.scratch_bytes),
             _word("BLOCK_ROWS", off + 12, "RO", "token rows per block of the DRAM-tiled schedule (the padded sequence: "
                   "on chip)", pl.block)]
    if kv:
        regs.append(_word("CACHE_LEN", off + 16, "RW", f"KV cache (a decoder with activations in DRAM): keys already "
                          f"in every layer's K and V^T in the scratch; the input rows are tokens CACHE_LEN.. (a "
                          f"multiple of {kv.unit}: tokens from the last multiple on are recomputed), TOKENS of "
                          f"them; 0: a prefill (docs/decode.md); read at START", 0, TOKEN_BITS))
    if cfg.seq2seq:
        what = ("DRAM byte address of the memory, the encoder's output int16 [MEMORY_TOKENS, hidden] that the "
                "decoder layers' cross-attention reads")
        regs += [_word("MEMORY_BASE_LO", off + 20, "RW", f"{what}, bits 31:0", 0, lo_bits),
                 _word("MEMORY_BASE_HI", off + 24, "RW" if hi_bits else "RO", f"{what}, bits 63:32", 0,
                       max(hi_bits, 1)),
                 _word("MEMORY_TOKENS", off + 28, "RW", f"an encoder-decoder: 0 runs encoder layers (self-attention, "
                       f"not causal); 1..{cfg.model.seq_len} runs decoder layers (causal self-attention, then "
                       "cross-attention over that many memory rows at MEMORY_BASE; a prefill (CACHE_LEN 0) computes "
                       "their cross K and V into the scratch, a decode step reuses them); read at START",
                       0, TOKEN_BITS)]
    return tuple(regs)


class ControlRegs(wiring.Component):
    """AXI4-Lite slave of :func:`register_map`.

    Outputs: ``start``, ``soft_reset`` (one-cycle pulses from a register, the cycle after the write, with B;
    ``start`` only when CTRL.start is written while ``busy`` is low: a START while busy is ignored, and clears
    nothing; STATUS.busy reads 1 in its pulse's cycle, so a read taken then already sees the run), ``layers``,
    ``weight_base``, ``input_base``, ``output_base``, ``scratch_base``, ``tokens``, ``cache_len`` (0 without a KV
    cache), ``memory_base`` and ``memory_tokens`` (an encoder-decoder's; 0 otherwise), ``irq`` (level: irq_enable
    and (done or error)).
    Inputs from the engine: ``busy``, ``done`` (pulse), ``error``, ``error_addr``, ``error_code``,
    ``compute_busy``, ``dma_stall``, ``read_beat`` (one AXI read beat of ``cfg.axi_data_bytes``).
    AXI4-Lite: a write is taken when AWVALID and WVALID are both high (one cycle), answered on B the
    next cycle; a read is answered on R the cycle after AR. WSTRB is honoured.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        self.regs = register_map(cfg)
        a = cfg.memory.axi_addr_bits
        super().__init__({
            **axil_slave_members(AXIL_ADDR_BITS),
            "start": Out(1), "soft_reset": Out(1), "irq": Out(1), "layers": Out(LAYER_BITS), "tokens": Out(TOKEN_BITS),
            "cache_len": Out(TOKEN_BITS), "memory_tokens": Out(TOKEN_BITS),
            "weight_base": Out(a), "input_base": Out(a), "output_base": Out(a), "scratch_base": Out(a),
            "memory_base": Out(a),
            "busy": In(1), "done": In(1), "error": In(1), "error_addr": In(a), "error_code": In(7),
            "compute_busy": In(1), "dma_stall": In(1), "read_beat": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        a = self.cfg.memory.axi_addr_bits
        store = {}                              # (register, field) -> Signal, for RW and W1C fields
        for r in self.regs:
            for f in r.fields:
                if f.access in ("RW", "W1C"):
                    store[r.name, f.name] = Signal(f.width, init=f.reset, name=f"{r.name.lower()}_{f.name}")

        done = store["STATUS", "done"]
        # CTRL's pulses as the write is taken; the engine gets them a cycle later from a register, so that its
        # run-start enables (a fan-out across the sequencer) do not wait on the AXI-Lite address decode
        pulses = {"start": Signal(name="start_written"), "soft_reset": Signal(name="soft_reset_written")}
        m.d.sync += [self.start.eq(pulses["start"]), self.soft_reset.eq(pulses["soft_reset"])]
        cleared = pulses["start"] | pulses["soft_reset"]
        # the performance counters, each a SplitCounter (two 16-bit carry chains); BYTES_READ counts beats, its low
        # bits (a beat's byte count, a power of two) read as zeros
        beat_log2 = (self.cfg.axi_data_bytes - 1).bit_length()
        counting = {"CYCLES": (32, self.busy), "COMPUTE_CYCLES": (32, self.compute_busy),
                    "STALL_CYCLES": (32, self.dma_stall), "BYTES_READ": (32 - beat_log2, self.read_beat)}
        counters = {}
        for n, (width, inc) in counting.items():
            m.submodules[n.lower()] = c = SplitCounter(width)
            # the increment registered: it is the engine's decode from across the die (the stall's, from the tile
            # buffer's ready, into the counter's enables was 7.12 ns at 22d8044's seed 1 on an ECP5-85F); a count
            # lands a cycle late, long before the host reads it after DONE
            m.d.comb += [c.inc.eq(delayed(m, inc, 1, f"{n.lower()}_inc")), c.clear.eq(cleared)]
            counters[n] = Cat(C(0, 32 - width), c.count)

        def base(name):
            lo, hi = store[f"{name}_LO", "value"], store.get((f"{name}_HI", "value"))
            return lo if hi is None else Cat(lo, hi)[:a]

        m.d.comb += [
            self.layers.eq(store["LAYERS", "value"]), self.tokens.eq(store["TOKENS", "value"]),
            self.weight_base.eq(base("WEIGHT_BASE")), self.input_base.eq(base("INPUT_BASE")),
            self.output_base.eq(base("OUTPUT_BASE")), self.scratch_base.eq(base("SCRATCH_BASE")),
            self.cache_len.eq(store.get(("CACHE_LEN", "value"), 0)),
            self.memory_tokens.eq(store.get(("MEMORY_TOKENS", "value"), 0)),
            self.memory_base.eq(base("MEMORY_BASE") if ("MEMORY_BASE_LO", "value") in store else 0),
            self.irq.eq(store["CTRL", "irq_enable"] & (done | self.error)),
        ]
        ro = {                                  # RO fields driven by the engine (the others read their reset value)
            ("STATUS", "busy"): self.busy | self.start, ("STATUS", "error"): self.error,
            ("ERROR_ADDR_LO", "value"): self.error_addr[:32],
            ("ERROR_ADDR_HI", "value"): self.error_addr[32:] if a > 32 else Const(0, 1),
            ("ERROR_CODE", "rresp"): self.error_code[:2], ("ERROR_CODE", "bad_command"): self.error_code[2],
            ("ERROR_CODE", "bad_tokens"): self.error_code[3], ("ERROR_CODE", "bad_scratch"): self.error_code[4],
            ("ERROR_CODE", "bad_cache"): self.error_code[5], ("ERROR_CODE", "bad_memory"): self.error_code[6],
            **{(n, "value"): s for n, s in counters.items()},
        }

        def value(r):
            v = Const(0, 32)
            for f in r.fields:
                src = store.get((r.name, f.name), ro.get((r.name, f.name)))
                if src is None and f.access == "RO":        # a constant: ID, SCRATCH_BYTES, BLOCK_ROWS, *_HI
                    src = Const(f.reset, f.width)
                if src is not None:
                    v = v | (src.as_unsigned() << f.lsb)
            return v[:32]

        # ---- write channel ------------------------------------------------------------------------
        p = "s_axil"
        awaddr, wdata, wstrb = (getattr(self, f"{p}_{n}") for n in ("awaddr", "wdata", "wstrb"))
        bvalid, bresp = Signal(), Signal(2)
        take_w = getattr(self, f"{p}_awvalid") & getattr(self, f"{p}_wvalid") & ~bvalid
        m.d.comb += [getattr(self, f"{p}_awready").eq(take_w), getattr(self, f"{p}_wready").eq(take_w),
                     getattr(self, f"{p}_bvalid").eq(bvalid), getattr(self, f"{p}_bresp").eq(bresp)]
        with m.If(bvalid & getattr(self, f"{p}_bready")):
            m.d.sync += bvalid.eq(0)
        bytemask = Cat(*(b.replicate(8) for b in wstrb))
        with m.If(take_w):
            m.d.sync += [bvalid.eq(1), bresp.eq(RESP_SLVERR)]
            with m.Switch(awaddr[2:]):
                for r in self.regs:
                    with m.Case(r.offset >> 2):
                        m.d.sync += bresp.eq(RESP_OKAY)
                        merged = (value(r) & ~bytemask) | (wdata & bytemask)
                        hit = wdata & bytemask
                        for f in r.fields:
                            bits = slice(f.lsb, f.lsb + f.width)
                            if f.access == "RW":
                                m.d.sync += store[r.name, f.name].eq(merged[bits])
                            elif f.access == "W1P":
                                pulse = hit[bits] != 0
                                if f.name == "start":       # refused while a run or a drain is under way
                                    pulse = pulse & ~self.busy
                                m.d.comb += pulses[f.name].eq(pulse)

        # ---- sticky status and counters ----------------------------------------------------------------
        status = next(r for r in self.regs if r.name == "STATUS")
        done_bit = next(f.lsb for f in status.fields if f.name == "done")
        with m.If(take_w & (awaddr[2:] == status.offset >> 2) & (wdata & bytemask)[done_bit]):
            m.d.sync += done.eq(0)
        with m.If(self.done):
            m.d.sync += done.eq(1)
        with m.If(cleared):
            m.d.sync += done.eq(0)

        # ---- read channel ----------------------------------------------------------------------------
        rvalid, rdata, rresp = Signal(), Signal(32), Signal(2)
        take_r = getattr(self, f"{p}_arvalid") & ~rvalid
        m.d.comb += [getattr(self, f"{p}_arready").eq(take_r), getattr(self, f"{p}_rvalid").eq(rvalid),
                     getattr(self, f"{p}_rdata").eq(rdata), getattr(self, f"{p}_rresp").eq(rresp)]
        with m.If(rvalid & getattr(self, f"{p}_rready")):
            m.d.sync += rvalid.eq(0)
        with m.If(take_r):
            m.d.sync += [rvalid.eq(1), rdata.eq(0), rresp.eq(RESP_SLVERR)]
            with m.Switch(getattr(self, f"{p}_araddr")[2:]):
                for r in self.regs:
                    with m.Case(r.offset >> 2):
                        m.d.sync += [rdata.eq(value(r)), rresp.eq(RESP_OKAY)]
        return m


# ---- emission --------------------------------------------------------------------------------------

def as_dict(cfg) -> dict:
    """The register map as plain data (``regs.json``; testbenches take its ``registers``)."""
    return {"config": cfg.name, "bus": "AXI4-Lite", "data_bits": 32, "addr_bits": AXIL_ADDR_BITS,
            "registers": [{"name": r.name, "offset": r.offset, "access": r.access, "reset": r.reset,
                           "description": r.description,
                           "fields": [{"name": f.name, "lsb": f.lsb, "width": f.width, "access": f.access,
                                       "reset": f.reset, "description": f.description} for f in r.fields]}
                          for r in register_map(cfg)]}


def c_header(cfg) -> str:
    lines = ["/* mlo_hw control registers (generated by mlo_hw.hw.regs; do not edit). */",
             "#ifndef MLO_HW_REGS_H", "#define MLO_HW_REGS_H", "",
             f"#define MLO_HW_ID_VALUE 0x{ID_VALUE:08X}u", ""]
    for r in register_map(cfg):
        lines.append(f"#define MLO_REG_{r.name} 0x{r.offset:02X}u  /* {r.access}: {r.description} */")
        if len(r.fields) > 1:
            for f in r.fields:
                n = f"MLO_{r.name}_{f.name.upper()}"
                lines += [f"#define {n}_SHIFT {f.lsb}u", f"#define {n}_MASK 0x{f.mask:08X}u"]
    lines += ["", "#endif /* MLO_HW_REGS_H */", ""]
    return "\n".join(lines)


def markdown(cfg) -> str:
    lines = ["# Control and status registers", "",
             f"Generated from `mlo_hw/hw/regs.py` (`register_map`) for config `{cfg.name}`; the same map is "
             "emitted as `regs.json` and `mlo_hw_regs.h` by `mlo_hw.hw.regs.write_register_map(out_dir, cfg)`. "
             "It has every register: CACHE_LEN exists only with a KV cache and MEMORY_* only in an encoder-decoder (as "
             "do ERROR_CODE's `bad_cache` and `bad_memory`), and the read-only sizes and the reset values in the "
             "descriptions are the config's; a build's own map is its `regs.json`.", "",
             "32-bit registers on an AXI4-Lite slave (`s_axil_*`); unmapped addresses answer SLVERR. "
             "Access: RO read only, RW read/write, W1C cleared by writing 1, W1P write 1 to pulse (reads 0).", "",
             "| offset | name | access | reset | description |", "|---:|---|---|---:|---|"]
    for r in register_map(cfg):
        lines.append(f"| 0x{r.offset:02X} | {r.name} | {r.access} | 0x{r.reset:X} | {r.description} |")
        if len(r.fields) > 1:
            for f in r.fields:
                bits = f"[{f.lsb}]" if f.width == 1 else f"[{f.lsb + f.width - 1}:{f.lsb}]"
                lines.append(f"| | `{f.name}` {bits} | {f.access} | {f.reset} | {f.description} |")
    return "\n".join(lines) + "\n"


def write_register_map(out_dir, cfg) -> list[Path]:
    """Write ``regs.json`` and ``mlo_hw_regs.h`` into ``out_dir``; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    js, h = out / "regs.json", out / "mlo_hw_regs.h"
    js.write_text(json.dumps(as_dict(cfg), indent=1) + "\n")
    h.write_text(c_header(cfg))
    return [js, h]


def _main(argv=None) -> int:
    from ..cli import ArgumentParser, UsageError, folder
    from ..config import load_config
    ap = ArgumentParser(prog="python -m mlo_hw.hw.regs", description="emit the register map")
    ap.add_argument("--config", default="bert_tiny")
    ap.add_argument("-o", "--output", type=folder, help="folder for regs.json and mlo_hw_regs.h")
    ap.add_argument("--markdown", help="write the Markdown table to this file")
    args = ap.parse_args(argv)
    if not (args.output or args.markdown):
        raise UsageError("nothing to write: give -o FOLDER and/or --markdown FILE")
    if args.markdown is not None and ("\0" in args.markdown or Path(args.markdown).is_dir()):
        raise UsageError(f"--markdown: {args.markdown!r} is not a file path")
    cfg = load_config(args.config)
    if args.output:
        for path in write_register_map(args.output, cfg):
            print(path)
    if args.markdown:
        Path(args.markdown).write_text(markdown(cfg))
    return 0


def main(argv=None) -> int:
    from ..cli import command
    return command()(_main)(argv)


if __name__ == "__main__":
    raise SystemExit(main())
