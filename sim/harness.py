"""The fast full-stack simulation: the layer engine and an AXI4 DRAM model in one Verilated design,
driven by a C++ harness, with Python only at the edges.

``sim_top`` (generated here) holds the traced engine (:class:`mlo_hw.hw.layer_engine.LayerEngine` with
``trace=True``) and ``axi_dram`` (``sim/hdl/axi_dram.sv``: an AXI4 slave memory with random stalls on all
five channels from seeded LFSRs, error injection, an optional DRAM timing model and a backdoor), and
``sim/hdl/harness.cpp`` clocks it: it programs the registers over AXI4-Lite, waits for the interrupt,
loads and dumps DRAM through the backdoor, records the engine's trace ports (every MVAU, softmax and
LayerNorm output) and a per-phase cycle profile into files. Python writes the script, runs the binary
once per script, and reads the files. Nothing in Python runs per cycle.

    sim = EngineSim(cfg, model)             # builds once per config (cached under sim_build/)
    r = sim.run(x, tokens, stall=0.3, memory="ddr3")
    r, want, traces = sim.run_checked(x, tokens, stall=0.3)  # the same, DONE and bit exact (sim/engine_check.py)

:class:`Harness` runs a raw script (see ``harness.cpp`` for the commands) for tests that need another
sequence (soft reset mid-run, error injection, several runs in one simulation).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from amaranth.hdl import Shape
from amaranth.lib.wiring import Out

from mlo_hw.hw.layer_engine import EngineGeometry, LayerEngine
from mlo_hw.hw.mvau import MVAUParams
from mlo_hw.model.golden import int_stack
from mlo_hw.model.numerics import RES_BITS, attention_mask
from mlo_hw.model.quantize import DRAM_DTYPE, dram_bytes, from_dram, random_inputs
from mlo_hw.model.tiled import scratch_layout
from mlo_hw.hw.regs import register_map
from mlo_hw.plan import plan
from mlo_hw.model.weight_image import layout, pack_image

from .engine_check import Trace, check_run
from .runner import LINT_WAIVERS, build_folder, to_verilog, verilator_bin

__all__ = ["DramTiming", "IDEAL", "LITEDRAM", "MEMORIES", "ddr3", "memory_model", "backend_of", "DramMap", "Harness", "RunResult", "Run", "EngineSim",
           "HDL", "small_tiled_config", "random_input"]

HDL = Path(__file__).resolve().parent / "hdl"
ENGINE_MODULE = "mlo_engine_traced"


@dataclass(frozen=True)
class DramTiming:
    """The timing inputs of ``axi_dram`` (cycles of the engine's clock; see axi_dram.sv)."""
    name: str
    timing_en: int = 0
    t_read: int = 0        # AR accepted -> first R beat, row hit
    t_write: int = 0       # last W beat -> B
    t_rcd: int = 0         # row activate
    t_rp: int = 0          # precharge of another open row
    t_refi: int = 0        # refresh interval (0: none)
    t_rfc: int = 0         # refresh duration
    t_turn: int = 0        # read <-> write turnaround
    col_bits: int = 11     # log2 of the row (page) bytes
    bank_bits: int = 3
    beat_cost: int = 256   # DRAM data time of one AXI beat, 1/256 cycles

    def inputs(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "name"}


IDEAL = DramTiming("ideal")


def ddr3(cfg) -> DramTiming:
    """A DDR3-800 x16 part behind a LiteDRAM-class controller (the Arty A7's: 1.6 GB/s peak, 8 banks, 2 KiB
    rows, tRCD = tRP = 13.75 ns, refresh every 7.8 us for 160 ns), in cycles of ``target.clock_mhz``; the
    controller's read latency (about 20 cycles at 100 MHz: AXI and crossbar, command queue, CL, PHY) and
    write response latency (about 10) scale with the clock too."""
    mhz = cfg.target.clock_mhz
    ns = 1000.0 / mhz

    def cycles(t_ns):
        return max(1, -(-int(t_ns * 1000) // int(ns * 1000)))

    dram_bytes_per_cycle = 1600e6 / (mhz * 1e6)
    return DramTiming("ddr3", timing_en=1, t_read=cycles(200), t_write=cycles(100), t_rcd=cycles(13.75),
                      t_rp=cycles(13.75), t_refi=cycles(7800), t_rfc=cycles(160) + cycles(13.75), t_turn=cycles(20),
                      col_bits=11, bank_bits=3,
                      beat_cost=max(1, round(256 * cfg.axi_data_bytes / dram_bytes_per_cycle)))


LITEDRAM = DramTiming("litedram")     # LiteDRAM's controller in the design: axi_dram's timing inputs unused

MEMORIES = ("ideal", "ddr3", "litedram")
TIMEOUT_CYCLES = 50_000_000     # a run not done within this many cycles (by default) has hung


def memory_model(cfg, name: str) -> DramTiming:
    """``ideal`` or ``ddr3`` (axi_dram's timing inputs), or ``litedram`` (another design: LiteDRAM's controller
    and DRAM model, :mod:`sim.litedram_model`, in place of axi_dram; its timing inputs are not used)."""
    if name == "ideal":
        return IDEAL
    if name == "ddr3":
        return ddr3(cfg)
    if name == "litedram":
        return LITEDRAM
    raise ValueError(f"memory: expected one of {', '.join(MEMORIES)}, got {name!r}")


def backend_of(memory: str) -> str:
    """The DRAM model a ``memory`` choice runs on: ``axi_dram`` or ``litedram``."""
    if memory not in MEMORIES:
        raise ValueError(f"memory: expected one of {', '.join(MEMORIES)}, got {memory!r}")
    return "litedram" if memory == "litedram" else "axi_dram"


@dataclass(frozen=True)
class DramMap:
    """Where a run keeps its input, output, weight image and activation scratch in the simulated DRAM (4 KiB
    aligned; the scratch is empty when the plan keeps every activation on chip)."""
    input_base: int
    output_base: int
    weight_base: int
    scratch_base: int
    size: int              # bytes, a power of two
    memory_base: int = 0   # an encoder-decoder: the memory (the encoder's output) the decoder runs read

    @classmethod
    def for_config(cls, cfg) -> "DramMap":
        page = 4096
        act = cfg.model.seq_len * cfg.model.hidden * DRAM_DTYPE.itemsize

        def up(n):
            return -(-n // page) * page
        inp = page
        out = up(inp + act) + page
        weights = up(out + act) + page
        scratch = up(weights + layout(cfg).total_bytes) + page
        end = scratch + plan(cfg).scratch_bytes
        memory = up(end) + page if cfg.seq2seq else 0
        end = memory + act if cfg.seq2seq else end
        return cls(inp, out, weights, scratch, 1 << (end - 1).bit_length(), memory)


def random_input(cfg, model, seed: int) -> np.ndarray:
    """A random int16 layer-0 input [seq_len, hidden] of ``model`` (BERT-like embeddings, quantized)."""
    x_float, _ = random_inputs(cfg, np.random.default_rng(seed), 1, padded=False)[0]
    return model.quantize_input(x_float)


def small_tiled_config(seq: int = 64, budget: float = 9.5, base=None):
    """The small config (or ``base``) forced through the DRAM-tiled schedule (for tests): at 64 tokens a 9.5 BRAM36
    budget leaves blocks of 32 rows (two per pass)."""
    from mlo_hw.config import load_config
    from mlo_hw.hw.layer_engine import with_seq_len
    return with_seq_len(load_config("small") if base is None else base, seq, bram36_budget=budget)


def gpt2_like(cfg):
    """``cfg``'s sizes as GPT-2 layers: pre-LN, causal, tanh GELU."""
    return dataclasses.replace(cfg, name=cfg.name + "_pre",
                               model=dataclasses.replace(cfg.model, norm="pre", causal=True, gelu="tanh"))


def small_seq2seq_tiled_config(encoder_layers: int = 2, norm: str = "post", rmsnorm: bool = False,
                               gelu: str = "erf", position_bias: bool = False):
    """small as an encoder-decoder (``encoder_layers`` encoder layers, then small's two decoder layers with causal
    self-attention and cross-attention; BART's post-LN kind by default, mBART's with ``norm="pre"``, T5's with
    ``rmsnorm``, ``gelu="relu"`` and ``position_bias``) at 64 tokens, in two blocks of 32 rows (the pre-LN buffer
    and the bias tables in the parameter store each need one more BRAM36 of budget)."""
    base = small_tiled_config(budget=9.5 + (norm == "pre") + position_bias)
    kind = f"{norm}{'_rms' if rmsnorm else ''}{'' if gelu == 'erf' else '_' + gelu}{'_pb' if position_bias else ''}"
    return dataclasses.replace(base, name=f"small_s2s{encoder_layers}_{kind}",
                               model=dataclasses.replace(base.model, encoder_layers=encoder_layers, causal=True,
                                                         norm=norm, rmsnorm=rmsnorm, gelu=gelu,
                                                         position_bias=position_bias))


def small_gpt2_tiled_config():
    """small as GPT-2 layers at 64 tokens through the DRAM-tiled schedule in two blocks of 32 rows (a pre-LN layer's
    extra [block, H] int16 buffer needs a budget of 10.5 BRAM36 where post-LN fits 9.5): a KV cache of 64 keys."""
    from mlo_hw.config import load_config
    return small_tiled_config(budget=10.5, base=gpt2_like(load_config("small")))


def _width(member) -> int:
    return Shape.cast(member.shape).width


def _decl(direction: str, width: int, name: str) -> str:
    return f"  {direction} {'' if width == 1 else f'[{width - 1}:0] '}{name}"


DRAM_INPUTS = {"reseed": 1, "seed": 32, "stall_ar": 8, "stall_r": 8, "stall_aw": 8, "stall_w": 8, "stall_b": 8,
               "err_en": 1, "timing_en": 1, "t_read": 16, "t_write": 16, "t_rcd": 8, "t_rp": 8,
               "t_refi": 16, "t_rfc": 16, "t_turn": 8, "col_bits": 5, "bank_bits": 4, "beat_cost": 16}
DRAM_OUTPUTS = {"rd_beats": 32, "wr_beats": 32, "rd_bursts": 32, "wr_bursts": 32, "protocol_error": 1}


def sim_top_verilog(cfg, engine: LayerEngine, backend: str = "axi_dram") -> str:
    """``sim_top``: the engine's AXI4 master on ``axi_dram`` (or, ``backend="litedram"``, on ``litedram_dram``
    of :mod:`sim.litedram_model`, which has the same ports); every other engine port, the DRAM model's
    control inputs and its counters are ports of ``sim_top``."""
    ap = engine.axi
    members = engine.signature.members
    ports, decls, conns = ["clk", "rst"], ["  input clk", "  input rst"], [".clk(clk)", ".rst(rst)"]
    wires, dram_conns = [], []
    for name, member in members.items():
        w = _width(member)
        if name.startswith("m_axi_"):
            wires.append(f"  wire {'' if w == 1 else f'[{w - 1}:0] '}{name};")
            dram_conns.append(f".s_axi_{name[len('m_axi_'):]}({name})")
        else:
            ports.append(name)
            decls.append(_decl("output" if member.flow == Out else "input", w, name))
        conns.append(f".{name}({name})")
    dram_ports = {**DRAM_INPUTS, "err_addr": ap.addr_bits}
    for name, w in dram_ports.items():
        ports.append(name)
        decls.append(_decl("input", w, name))
        dram_conns.append(f".{name}({name})")
    for name, w in DRAM_OUTPUTS.items():
        ports.append(name)
        decls.append(_decl("output", w, name))
        dram_conns.append(f".{name}({name})")
    words_log2 = (DramMap.for_config(cfg).size // ap.data_bytes - 1).bit_length()
    return "\n".join([
        "// generated by sim/harness.py: the traced engine on the axi_dram model",
        f"module sim_top({', '.join(ports)});",
        *(d + ";" for d in decls),
        *wires,
        f"  {ENGINE_MODULE} engine({', '.join(conns)});",
        (f"  axi_dram #(.DATA_BITS({ap.data_bits}), .ADDR_BITS({ap.addr_bits}), .ID_BITS({ap.id_bits}), "
         f".DEPTH_LOG2({words_log2}))" if backend == "axi_dram" else "  litedram_dram") +
        f" dram(.clk(clk), .rst(rst), {', '.join(dram_conns)});",
        "endmodule", ""])


def build(cfg, backend: str = "axi_dram") -> Path:
    """The harness binary for ``cfg`` with the DRAM model ``backend`` (``axi_dram`` or ``litedram``; built once:
    cached by a hash of every source and flag)."""
    engine = LayerEngine(cfg, trace=True)
    mp = MVAUParams.from_config(cfg)
    sources = {"engine.v": to_verilog(engine, ENGINE_MODULE), "sim_top.sv": sim_top_verilog(cfg, engine, backend)}
    if backend == "axi_dram":
        sources["axi_dram.sv"] = (HDL / "axi_dram.sv").read_text()
    elif backend == "litedram":
        from .litedram_model import litedram_verilog
        sources["litedram.sv"] = litedram_verilog(cfg, DramMap.for_config(cfg).size, engine.axi.id_bits)
    else:
        raise ValueError(f"backend: expected 'axi_dram' or 'litedram', got {backend!r}")
    sources["harness.cpp"] = (HDL / "harness.cpp").read_text()
    defines = (f"-DPE={mp.pe} -DACC_BITS={mp.acc_bits} -DSOFTMAX_LANES={EngineGeometry.from_config(cfg).softmax_lanes} "
               f"-DLN_LANES={cfg.folding.ln_lanes} -DLN_WIDTH={cfg.folding.ln_width} -DRES_BITS={RES_BITS}")
    flags = ["-O3", "--x-assign", "0", "--x-initial", "0", "-Wno-fatal", *(f"-Wno-{w}" for w in LINT_WAIVERS),
             "-CFLAGS", f"-O2 {defines}"]
    key = hashlib.sha256("\0".join([*sources.values(), *flags]).encode()).hexdigest()[:16]
    out = build_folder(f"harness-{cfg.name}{'' if backend == 'axi_dram' else '-' + backend}", key)
    exe = out / "Vsim_top"
    if exe.exists():
        return exe
    src = out / "src"
    src.mkdir(parents=True, exist_ok=True)
    for name, text in sources.items():
        (src / name).write_text(text)
    env = dict(os.environ)
    env["PATH"] = f"{verilator_bin()}{os.pathsep}{env.get('PATH', '')}"
    env["MAKEFLAGS"] = " ".join(filter(None, [env.get("MAKEFLAGS"), "CFG_CXXFLAGS_PCH_I=-include"]))
    cmd = ["verilator", "--cc", "--exe", "--build", "-j", "2", "-Mdir", str(out / "obj"), "--top-module", "sim_top",
           "-o", str(exe), *flags, *(str(src / n) for n in sources)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0 or not exe.exists():
        tail = "\n".join((r.stdout + r.stderr).splitlines()[-30:])
        raise RuntimeError(f"harness build failed for {cfg.name} ({backend}):\n{tail}")
    return exe


class Harness:
    """Runs scripts of ``harness.cpp`` commands on the design of ``cfg`` (DRAM model ``backend``: ``axi_dram`` or
    ``litedram``)."""

    def __init__(self, cfg, backend: str = "axi_dram"):
        self.cfg, self.backend = cfg, backend
        self.exe = build(cfg, backend)
        self.dram = DramMap.for_config(cfg)
        self.regs = {r.name: r for r in register_map(cfg)}

    def reg(self, name: str) -> int:
        return self.regs[name].offset

    def bit(self, reg: str, field: str) -> int:
        return next(1 << f.lsb for f in self.regs[reg].fields if f.name == field)

    def run(self, script: list[str], timeout_s: float = 3600) -> list[str]:
        """The harness's output lines; AssertionError on a protocol error of the DRAM model or a bad script."""
        with tempfile.NamedTemporaryFile("w", suffix=".cmd", delete=False) as f:
            f.write("\n".join(script) + "\n")
        try:
            r = subprocess.run([str(self.exe), f.name], capture_output=True, text=True, timeout=timeout_s)
        finally:
            os.unlink(f.name)
        lines = r.stdout.splitlines()
        if r.returncode != 0:
            detail = "; ".join(line for line in (r.stdout + r.stderr).splitlines()
                               if line.startswith(("axi_dram", "protocol_error", "buffer_collision", "stale_op", "error", "%")))
            raise AssertionError(f"harness exited with {r.returncode}: {detail or r.stderr[-500:]}")
        return lines


@dataclass
class RunResult:
    output: np.ndarray          # [seq_len, hidden] int64, read back from DRAM
    status: int
    error_code: int
    error_addr: int
    cycles: int                 # the CYCLES register
    compute_cycles: int
    stall_cycles: int
    irq: bool                   # False: the run timed out
    trace: Trace | None
    profile: list[dict]         # per (layer, op): cycles, compute, stall
    stats: dict                 # DRAM model counters and the simulated cycles of the whole script
    wall_s: float               # the harness process (all runs of its script), loads and dumps included
    scratch: bytes | None = None  # the scratch region after the run (Run.dump_scratch)
    timeline: list = field(default_factory=list)   # per stretch of one (layer, op): cycle, layer, op, cycles, mvau_beats


@dataclass
class Run:
    """One engine run of :meth:`EngineSim.run_many`. ``soft_reset_first``: write CTRL.soft_reset and wait
    ``drain_cycles`` before this run (recovery after an abandoned one)."""
    x: np.ndarray
    tokens: int
    layers: int | None = None
    err_addr: int | None = None
    trace: bool = True
    soft_reset_first: bool = False
    drain_cycles: int = 2000
    scratch_base: int | None = None     # SCRATCH_BASE for this run (None: the DRAM map's)
    cache_len: int | None = None        # CACHE_LEN for this run (a KV cache engine; None: not written)
    dump_scratch: bool = False          # read the scratch region (its SCRATCH_BYTES) back after the run
    # an encoder-decoder: MEMORY_TOKENS (0: an encoder run; None: not written), the first layer of the image this
    # run reads (WEIGHT_BASE), and the run's output into the memory region instead (the encoder's run)
    memory_tokens: int | None = None
    weight_layer: int = 0
    output_to_memory: bool = False
    memory: np.ndarray | None = None    # int16 [seq_len, hidden] loaded into the memory region first (the host's, T5)


class EngineSim:
    """Engine runs in one simulation: the image loaded through the backdoor, then per run the input loaded,
    registers written, START, wait for the interrupt, the output dumped, the trace and the profile read
    back."""

    def __init__(self, cfg, model, backend: str = "axi_dram"):
        self.cfg, self.model = cfg, model
        self.h = Harness(cfg, backend)
        self._harness = {backend: self.h}
        self.image = pack_image(cfg, model.layers)

    def golden(self, x, tokens: int, layers: int | None = None):
        """The golden model of a run: (output, per-layer traces) of ``layers`` layers on ``x`` with keys ``tokens``..
        masked (and the causal mask of a ``model.causal`` config)."""
        layers = self.cfg.model.layers if layers is None else layers
        traces: list = []
        mask = attention_mask(np.arange(self.cfg.model.seq_len) < tokens, self.cfg.model.causal)
        return int_stack(x, self.model.layers[:layers], mask, self.cfg.model.heads, traces), traces

    def run_checked(self, x, tokens: int, layers: int | None = None, **kw):
        """One run (:meth:`run_many`'s keywords) that must end with DONE and equal the golden model tensor by
        tensor and in DRAM (:func:`~sim.engine_check.check_run`); returns (result, golden output, golden traces)."""
        layers = self.cfg.model.layers if layers is None else layers
        r = self.run(x, tokens, layers, **kw)
        what = f"{self.cfg.name} tokens={tokens} layers={layers} {kw}"
        assert r.irq, f"{what}: no interrupt after {r.cycles} cycles (STATUS {r.status:#x})"
        assert r.status & self.h.bit("STATUS", "done") and not r.status & self.h.bit("STATUS", "error"), \
            f"{what}: STATUS {r.status:#x} ERROR_CODE {r.error_code:#x}"
        want, traces = self.golden(x, tokens, layers)
        check_run(self.cfg, r.output, want, traces, r.trace, self.cfg.model.seq_len, layers)
        return r, want, traces

    def run(self, x, tokens: int, layers: int | None = None, *, err_addr: int | None = None, trace: bool = True,
            **kw) -> RunResult:
        """One run (see :meth:`run_many` for the keyword arguments)."""
        return self.run_many([Run(x, tokens, layers, err_addr, trace)], **kw)[0]

    def run_many(self, runs: list[Run], *, seed: int = 1, stall: float = 0.0, memory: str = "ideal",
                 image: bytes | None = None, timeout_cycles: int = TIMEOUT_CYCLES) -> list[RunResult]:
        """``runs`` one after another in one simulation (no reset between them), the DRAM model stalling each
        channel with probability ``stall`` and timed by ``memory`` (``ideal`` or ``ddr3``: axi_dram; or
        ``litedram``: LiteDRAM's controller and DRAM model, built on first use, which neither stalls at random
        nor injects errors); a run not done within ``timeout_cycles`` fails its check (no interrupt)."""
        cfg, h = self.cfg, self.harness(backend_of(memory))
        d = h.dram
        if h.backend == "litedram" and (stall or any(r.err_addr is not None for r in runs)):
            raise ValueError("memory='litedram' has no random stalls and no error injection")
        p = min(255, round(stall * 256))
        act_bytes = cfg.model.seq_len * cfg.model.hidden * DRAM_DTYPE.itemsize
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "image.bin").write_bytes(self.image if image is None else image)
            script = [f"dram {k} {v}" for k, v in memory_model(cfg, memory).inputs().items()]
            script += [f"dram seed {seed}", *(f"dram stall_{c} {p}" for c in ("ar", "r", "aw", "w", "b")),
                       "reset 4", "reseed", f"load {d.weight_base} {tmp / 'image.bin'}",
                       f"write {h.reg('WEIGHT_BASE_LO')} {d.weight_base}",
                       f"write {h.reg('INPUT_BASE_LO')} {d.input_base}",
                       f"write {h.reg('OUTPUT_BASE_LO')} {d.output_base}"]
            rng = np.random.default_rng(seed)
            for i, r in enumerate(runs):
                (tmp / f"input{i}.bin").write_bytes(dram_bytes(r.x))
                (tmp / f"garbage{i}.bin").write_bytes(rng.integers(0, 256, act_bytes, dtype=np.uint8).tobytes())
                script += [f"echo run {i}"]
                if r.soft_reset_first:
                    script += [f"write {h.reg('CTRL')} {h.bit('CTRL', 'soft_reset')}", f"wait {r.drain_cycles}"]
                out_base = d.memory_base if r.output_to_memory else d.output_base
                seq2seq = [f"write {h.reg('WEIGHT_BASE_LO')} {d.weight_base + r.weight_layer * layout(cfg).stride}",
                           f"write {h.reg('OUTPUT_BASE_LO')} {out_base}",
                           f"write {h.reg('MEMORY_BASE_LO')} {d.memory_base}",
                           f"write {h.reg('MEMORY_TOKENS')} {r.memory_tokens}"] if r.memory_tokens is not None else []
                if r.memory is not None:
                    (tmp / f"memory{i}.bin").write_bytes(dram_bytes(r.memory))
                    script += [f"load {d.memory_base} {tmp / f'memory{i}.bin'}"]
                script += [f"dram err_en {int(r.err_addr is not None)}", f"dram err_addr {r.err_addr or 0}",
                           f"load {d.input_base} {tmp / f'input{i}.bin'}",
                           f"load {out_base} {tmp / f'garbage{i}.bin'}",
                           *seq2seq,
                           f"write {h.reg('LAYERS')} {cfg.model.layers if r.layers is None else r.layers}",
                           f"write {h.reg('TOKENS')} {r.tokens}", "profile /dev/null",
                           f"write {h.reg('SCRATCH_BASE_LO')} {d.scratch_base if r.scratch_base is None else r.scratch_base}",
                           *([f"write {h.reg('CACHE_LEN')} {r.cache_len}"] if r.cache_len is not None else []),
                           f"trace {tmp / f'trace{i}'}" if r.trace else "trace off",
                           f"write {h.reg('CTRL')} {h.bit('CTRL', 'irq_enable') | h.bit('CTRL', 'start')}",
                           f"wait_irq {timeout_cycles}", "trace off", f"timeline {tmp / f'timeline{i}.txt'}",
                           f"profile {tmp / f'profile{i}.txt'}",
                           *(f"read {h.reg(n)}" for n in ("STATUS", "ERROR_CODE", "ERROR_ADDR_LO", "CYCLES",
                                                          "COMPUTE_CYCLES", "STALL_CYCLES")),
                           "stats", f"dump {d.memory_base if r.output_to_memory else d.output_base} {act_bytes} "
                                    f"{tmp / f'output{i}.bin'}"]
                if r.dump_scratch:
                    base = d.scratch_base if r.scratch_base is None else r.scratch_base
                    script += [f"dump {base} {scratch_layout(cfg).bytes} {tmp / f'scratch{i}.bin'}"]
            t0 = time.time()
            # the wall-clock limit: an hour, or the cycle limit at 20,000 simulated cycles a second if longer
            lines = h.run(script, timeout_s=max(3600, timeout_cycles * len(runs) / 20_000))
            wall = time.time() - t0
            marks = [k for k, line in enumerate(lines) if line.startswith("echo run ")] + [len(lines)]
            return [self._result(h, tmp, i, r, lines[marks[i]:marks[i + 1]], wall) for i, r in enumerate(runs)]

    def harness(self, backend: str = "axi_dram") -> Harness:
        """The harness with DRAM model ``backend`` (built on first use)."""
        if backend not in self._harness:
            self._harness[backend] = Harness(self.cfg, backend)
        return self._harness[backend]

    def _result(self, h: Harness, tmp: Path, i: int, run: Run, lines: list[str], wall: float) -> RunResult:
        cfg = self.cfg
        reads = {int(w[1]): int(w[2]) for w in (line.split() for line in lines) if w[0] == "read"}
        stats = {k: int(v) for k, v in (kv.split("=") for line in lines if line.startswith("stats ")
                                        for kv in line.split()[1:])}
        tr = None
        if run.trace:
            def rec(name, cols):
                return np.fromfile(tmp / f"trace{i}.{name}.bin", dtype=np.int32).reshape(-1, cols)
            tr = Trace(rec("mvau", 2 + cfg.folding.pe), rec("probs", 2), rec("ln", 4))
        profile = [dict(zip(("layer", "op", "cycles", "compute", "stall"), map(int, line.split())))
                   for line in (tmp / f"profile{i}.txt").read_text().splitlines()]
        timeline = [dict(zip(("cycle", "layer", "op", "cycles", "mvau_beats"), map(int, line.split())))
                    for line in (tmp / f"timeline{i}.txt").read_text().splitlines()]
        output = from_dram((tmp / f"output{i}.bin").read_bytes(), cfg.model.seq_len, cfg.model.hidden)
        scratch = (tmp / f"scratch{i}.bin").read_bytes() if run.dump_scratch else None
        return RunResult(output, reads[h.reg("STATUS")], reads[h.reg("ERROR_CODE")], reads[h.reg("ERROR_ADDR_LO")],
                         reads[h.reg("CYCLES")], reads[h.reg("COMPUTE_CYCLES")], reads[h.reg("STALL_CYCLES")],
                         any(line.startswith("irq ") for line in lines), tr, profile, stats, wall, scratch, timeline)
