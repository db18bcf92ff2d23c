"""The host runtime's one API: an engine built by ``python -m mlo_hw.elaborate``, on any backend.

    acc = Accelerator("build/bert_tiny", backend="sim")     # or "golden", LiteXBackend(...), PynqBackend(...)
    acc.load_weights()                                      # weights.bin into the engine's DRAM
    y = acc.run(x, tokens)                                  # int16 [seq_len, hidden] in and out
    print(acc.profile())                                    # CYCLES / COMPUTE / STALL of the last run

A run writes the input into DRAM, programs WEIGHT_BASE, INPUT_BASE, OUTPUT_BASE, LAYERS and TOKENS
(offsets from the build's ``regs.json``), sets CTRL.start with CTRL.irq_enable, waits for the interrupt or
STATUS.done/error, and reads the output back. A run that ends with ERROR raises :class:`DeviceError`
naming ERROR_CODE's fields and ERROR_ADDR (and what lives there); no DONE or ERROR within the timeout
raises :class:`DeviceTimeout` naming the timeout and STATUS's bits. After either, the engine is soft-reset
so that the next run starts clean. Bad arguments raise :class:`RuntimeInputError` (one line).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..cli import BadInput
from ..model.quantize import QuantModel, DRAM_DTYPE, dram_bytes, from_dram
from ..model.weight_image import layout
from ..perf import layer_bound
from .backend import Backend, BackendUnavailable
from .build import BuildFolder

__all__ = ["Accelerator", "DeviceError", "DeviceTimeout", "RuntimeInputError", "Profile", "ProfileRow", "BACKENDS",
           "make_backend"]


RESP_NAMES = {2: "SLVERR", 3: "DECERR"}      # ERROR_CODE.rresp: the AXI response of the failing beat


class RuntimeInputError(BadInput):
    """A bad argument to the runtime (one line naming it)."""


class DeviceError(RuntimeError):
    """A run ended with STATUS.error."""

    def __init__(self, message: str, status: int, code: int, fields: list[str], addr: int | None):
        super().__init__(message)
        self.status, self.code, self.fields, self.addr = status, code, fields, addr


class DeviceTimeout(DeviceError):
    """No DONE or ERROR within the timeout."""


@dataclass
class ProfileRow:
    layers: range               # the layers this row covers
    cycles: int                 # CYCLES: clock cycles while busy (input load to output store)
    compute: int                # COMPUTE_CYCLES: the MAC array busy
    stall: int                  # STALL_CYCLES: compute waiting for DRAM
    bytes_read: int             # BYTES_READ

    @property
    def label(self) -> str:
        r = self.layers
        return f"layer {r.start}" if len(r) == 1 else f"layers {r.start}..{r.stop - 1}"


@dataclass
class Profile:
    """The counters of the last run: one row per layer (``run(..., per_layer=True)``) or one for the stack.
    ``phases``: where the backend can see the engine's phases (the simulation), per engine run (``run``: its
    index) and per (``layer``, ``op``) as the engine counts them (``layer`` from 0 in each engine run, the
    output store after the last layer at ``layer`` = LAYERS; ``op``: ``mlo_hw.hw.layer_engine.Op``) the
    ``cycles`` spent there and the ``compute`` and ``stall`` cycles among them; else None."""
    backend: str
    clock_mhz: float
    rows: list[ProfileRow]
    has_clock: bool = True
    phases: list[dict] | None = field(default=None, repr=False)

    @property
    def cycles(self) -> int:
        return sum(r.cycles for r in self.rows)

    def __str__(self) -> str:
        if not self.has_clock:
            return f"{self.backend} backend: no clock, no counters ({len(self.rows)} runs)"
        lines = [f"{'':12} {'cycles':>10} {'compute':>10} {'stall':>10} {'util':>6} {'bytes read':>11} {'ms':>8}"]
        for r in self.rows + ([ProfileRow(range(self.rows[0].layers.start, self.rows[-1].layers.stop),
                                          *(sum(getattr(x, k) for x in self.rows)
                                            for k in ("cycles", "compute", "stall", "bytes_read")))]
                              if len(self.rows) > 1 else []):
            util = r.compute / r.cycles if r.cycles else 0.0
            lines.append(f"{r.label:12} {r.cycles:10d} {r.compute:10d} {r.stall:10d} {util:6.1%} {r.bytes_read:11d} "
                         f"{r.cycles / self.clock_mhz / 1000:8.3f}")
        return "\n".join(lines)


def _golden(**kw):
    from .golden import GoldenBackend
    return GoldenBackend(**kw)


def _sim(**kw):
    from .sim import SimBackend
    return SimBackend(**kw)


def _litex(**kw):
    from .litex import LiteXBackend
    return LiteXBackend(**kw)


def _pynq(**kw):
    from .pynq import PynqBackend
    return PynqBackend(**kw)


BACKENDS = {"golden": _golden, "sim": _sim, "litex": _litex, "pynq": _pynq}


def make_backend(backend, **options) -> Backend:
    """A backend instance from a name in :data:`BACKENDS` (with its options) or an instance."""
    if isinstance(backend, Backend):
        if options:
            raise RuntimeInputError(f"backend options {sorted(options)} given with a backend instance")
        return backend
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise RuntimeInputError(f"backend: expected one of {', '.join(BACKENDS)} or a Backend, got {backend!r}")
    try:
        return BACKENDS[backend](**options)
    except TypeError as e:
        raise RuntimeInputError(f"backend {backend}: {e}") from None


class Accelerator:
    """One engine on one backend (see the module docstring). Use as a context manager, or call
    :meth:`close`."""

    def __init__(self, build_dir, backend="golden", **options):
        self.build = BuildFolder.load(build_dir)
        self.cfg, self.regs = self.build.cfg, self.build.regs
        self.backend = make_backend(backend, **options)
        try:
            self.backend.open(self.build)
            self._check_id()
            act = self.build.act_bytes
            self.weight_base = self.backend.alloc(len(self.build.weights))
            self.act_bases = (self.backend.alloc(act), self.backend.alloc(act))
            # an encoder-decoder: the memory (the encoder's output) the decoder's runs read
            self.memory_base = self.backend.alloc(act) if self.cfg.seq2seq else None
            self.memory_tokens = 0          # of the last encode() (or set_memory())
            self._memory_pending = False    # a T5-like build's encode() awaits the host's set_memory()
            # a plan with activations in DRAM: the engine's scratch (SCRATCH_BYTES, 4 KiB aligned; 0 on chip)
            scratch = self.regs.reset("SCRATCH_BYTES") if self.regs.has("SCRATCH_BYTES") else 0
            self.scratch = (self.backend.alloc(scratch), scratch) if scratch else None
            self._check_addresses()
        except BaseException:
            self.backend.close()
            raise
        self.weights_loaded = False
        self._profile: Profile | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.backend.close()

    # ---- registers -------------------------------------------------------------------------------
    def read(self, name: str) -> int:
        return self.backend.read_reg(self.regs.offset(name))

    def write(self, name: str, value: int) -> None:
        self.backend.write_reg(self.regs.offset(name), value)

    def _check_id(self):
        want = self.regs.reset("ID")
        got = self.read("ID")
        if got != want:
            raise BackendUnavailable(f"{self.backend.name} backend: no engine answers: ID reads {got:#010x}, "
                                     f"expected {want:#010x} ({self.regs.source})")

    def _check_addresses(self):
        bits, act = self.cfg.memory.axi_addr_bits, self.build.act_bytes
        for what, base, size in (("weights", self.weight_base, len(self.build.weights)),
                                 ("activations", self.act_bases[0], act), ("activations", self.act_bases[1], act),
                                 *((("scratch", *self.scratch),) if self.scratch else ()),
                                 *((("memory", self.memory_base, act),) if self.memory_base is not None else ())):
            if base + size > 1 << bits:
                raise BackendUnavailable(f"{self.backend.name} backend: {what} at {base:#x} are beyond the engine's "
                                         f"{bits}-bit AXI address space (memory.axi_addr_bits)")

    def _set_base(self, name: str, addr: int):
        self.write(f"{name}_LO", addr & 0xFFFFFFFF)
        if addr >> 32:
            self.write(f"{name}_HI", addr >> 32)

    # ---- host side -------------------------------------------------------------------------------
    def quantize_input(self, x) -> np.ndarray:
        """Float layer-0 input [seq_len, hidden] -> the int16 values :meth:`run` takes."""
        return self.build.quantize_input(x)

    def dequantize_output(self, y) -> np.ndarray:
        return self.build.dequantize_output(y)

    def default_timeout(self, layers: int) -> float:
        """Seconds: 20 times the analytical bound of ``layers`` layers at ``target.clock_mhz``, plus 1 ms
        and the backend's own latency."""
        return 20 * layer_bound(self.cfg) * layers / (self.cfg.target.clock_mhz * 1e6) + 1e-3 + \
            self.backend.host_latency_s

    # ---- runs ------------------------------------------------------------------------------------
    def load_weights(self) -> None:
        """Write ``weights.bin`` at the weight base (every run reads it from there)."""
        self.backend.write_dram(self.weight_base, self.build.weights)
        self.weights_loaded = True

    def _check_x(self, x, tokens, layers):
        seq, hidden, n = self.cfg.model.seq_len, self.cfg.model.hidden, self.cfg.model.layers
        a = np.asarray(x)
        if a.shape != (seq, hidden):
            raise RuntimeInputError(f"x: expected shape ({seq}, {hidden}) [seq_len, hidden] of config "
                                    f"{self.cfg.name}, got {a.shape}")
        if a.dtype.kind not in "iu":
            raise RuntimeInputError(f"x: expected integers (the int16 residual stream; quantize_input() turns "
                                    f"floats into it), got dtype {a.dtype}")
        info = np.iinfo(DRAM_DTYPE)
        if a.size and (a.min() < info.min or a.max() > info.max):
            raise RuntimeInputError(f"x: values {a.min()}..{a.max()} outside int16 [{info.min}, {info.max}]")
        tokens = seq if tokens is None else tokens
        if isinstance(tokens, (bool, np.bool_)) or not isinstance(tokens, (int, np.integer)) or not 1 <= tokens <= seq:
            raise RuntimeInputError(f"tokens: expected an integer 1..{seq} (valid tokens of the padded input), "
                                    f"got {tokens!r}")
        layers = n if layers is None else layers
        if isinstance(layers, (bool, np.bool_)) or not isinstance(layers, (int, np.integer)) or not 1 <= layers <= n:
            raise RuntimeInputError(f"layers: expected an integer 1..{n}, got {layers!r}")
        return a, int(tokens), int(layers)

    def encode(self, x, tokens: int | None = None, *, timeout: float | None = None) -> np.ndarray:
        """An encoder-decoder build (``model.encoder_layers``, ``docs/seq2seq.md``): run the encoder's layers on the
        int16 input ``x`` [seq_len, hidden] with ``tokens`` valid tokens into the memory buffer, where the decoder's
        runs read it; returns the memory (int16, as int64)."""
        n = self._seq2seq("encode")
        x, tokens, _ = self._check_x(x, tokens, None)
        self._check_timeout(timeout)
        if not self.weights_loaded:
            self.load_weights()
        a = self.act_bases[0]
        self.backend.write_dram(a, dram_bytes(x))
        self.memory_tokens = 0
        row, ph = self.execute(self.weight_base, a, self.memory_base, n, tokens,
                               timeout if timeout is not None else self.default_timeout(n), 0, memory_tokens=0)
        self._profile = Profile(self.backend.name, self.cfg.target.clock_mhz, [ProfileRow(range(n), *row)],
                                self.backend.has_clock, ph or None)
        self.memory_tokens = tokens
        self._memory_pending = self.build.memory_on_host
        return from_dram(self.backend.read_dram(self.memory_base, self.build.act_bytes), self.cfg.model.seq_len,
                         self.cfg.model.hidden)

    def set_memory(self, memory, tokens: int | None = None) -> None:
        """An encoder-decoder build: write the int16 memory [seq_len, hidden] the decoder's cross-attention reads
        (``tokens`` of it attended; default the last :meth:`encode`'s). A build whose memory the host makes from the
        encoder's output (T5's final norm: ``memory_on_host`` in runtime.json) needs it after every encode(): the
        host dequantizes encode()'s result (:meth:`dequantize_encoder_output`), applies its part and requantizes
        (:meth:`quantize_memory`)."""
        self._seq2seq("set_memory")
        tokens = self.memory_tokens or None if tokens is None else tokens
        memory, tokens, _ = self._check_x(memory, tokens, None)
        self.backend.write_dram(self.memory_base, dram_bytes(memory))
        self.memory_tokens, self._memory_pending = tokens, False

    def dequantize_encoder_output(self, e) -> np.ndarray:
        self._seq2seq("dequantize_encoder_output")
        return np.asarray(e, np.float64) * self.build.encoder_output_scale

    def quantize_memory(self, m) -> np.ndarray:
        self._seq2seq("quantize_memory")
        return QuantModel([], self.build.memory_scale, 1.0).quantize_input(m)

    def decode(self, y, tokens: int | None = None, *, cache_len: int | None = None,
               timeout: float | None = None) -> np.ndarray:
        """An encoder-decoder build: run the decoder's layers on the int16 input ``y`` [seq_len, hidden]
        (:meth:`quantize_decoder_input`) with cross-attention over the memory of the last :meth:`encode`;
        ``cache_len`` as in :meth:`run` (0 or None: the prefill, which also computes the memory's cross K and V;
        above 0: a decode step)."""
        self._seq2seq("decode")
        if not self.memory_tokens:
            raise RuntimeInputError("decode: no memory yet (call encode() first)")
        if self._memory_pending:
            raise RuntimeInputError(f"decode: build {self.cfg.name}'s memory is made on the host from the encoder's output "
                                    "(T5's final norm): call set_memory() after encode()")
        if cache_len is not None and (isinstance(cache_len, (bool, np.bool_))
                                      or not isinstance(cache_len, (int, np.integer)) or cache_len < 0):
            raise RuntimeInputError(f"cache_len: expected a non-negative integer, got {cache_len!r}")
        return self.run(y, tokens, cache_len=cache_len, timeout=timeout, _decoder=True)

    def quantize_decoder_input(self, y) -> np.ndarray:
        """An encoder-decoder: the decoder's float input [seq_len, hidden] -> the int16 values :meth:`decode` takes."""
        self._seq2seq("quantize_decoder_input")
        return self.build.quantize_decoder_input(y)

    def _seq2seq(self, what: str) -> int:
        """The encoder's layer count of an encoder-decoder build, else RuntimeInputError."""
        if not self.cfg.seq2seq:
            raise RuntimeInputError(f"{what}: build {self.cfg.name} is not an encoder-decoder (model.encoder_layers "
                                    f"is 0); use run()")
        return self.cfg.model.encoder_layers

    @staticmethod
    def _check_timeout(timeout):
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise RuntimeInputError(f"timeout: expected a positive number of seconds, got {timeout!r}")

    def run(self, x, tokens: int | None = None, *, layers: int | None = None, per_layer: bool = False,
            timeout: float | None = None, cache_len: int | None = None, _decoder: bool = False) -> np.ndarray:
        """Run the first ``layers`` layers (default all) on the int16 input ``x`` [seq_len, hidden] with
        ``tokens`` valid tokens (default seq_len; keys beyond are masked); returns the int16 output
        [seq_len, hidden] (as int64). ``per_layer``: one engine run per layer (LAYERS = 1, the weight base
        advanced by the layer stride, the activations ping-ponged in DRAM), so that :meth:`profile` has a
        row per layer. ``timeout``: seconds of the device's time per engine run (default
        :meth:`default_timeout`). ``cache_len`` (a build with a KV cache: register CACHE_LEN, ``docs/decode.md``):
        the keys already in the cache; ``x``'s rows are then the tokens from position ``cache_len`` on (a multiple
        of lcm(pe, simd): a decode step recomputes the tokens from there to its own), and only the first block of
        output rows is written. None or 0: a prefill, which fills the cache. An encoder-decoder build runs
        :meth:`encode` and :meth:`decode` instead."""
        if self.cfg.seq2seq and not _decoder:
            raise RuntimeInputError(f"run: build {self.cfg.name} is an encoder-decoder: call encode(), then decode()")
        x, tokens, layers = self._check_x(x, tokens, layers)
        if cache_len is not None:
            if not self.regs.has("CACHE_LEN"):
                raise RuntimeInputError(f"cache_len: build {self.cfg.name} has no KV cache (a causal model with "
                                        f"activations in DRAM has one)")
            if isinstance(cache_len, (bool, np.bool_)) or not isinstance(cache_len, (int, np.integer)) \
                    or cache_len < 0:
                raise RuntimeInputError(f"cache_len: expected a non-negative integer, got {cache_len!r}")
            if per_layer:
                raise RuntimeInputError("cache_len: a KV cache run keeps every layer's keys at the layer's own place; "
                                        "per_layer runs each layer as layer 0")
        self._check_timeout(timeout)
        if not self.weights_loaded:
            self.load_weights()
        a, b = self.act_bases
        self.backend.write_dram(a, dram_bytes(x))
        stride = self.build.layer_stride
        first_layer = self.cfg.model.encoder_layers if _decoder else 0      # the decoder's layers follow the encoder's
        steps = [(l, 1) for l in range(layers)] if per_layer else [(0, layers)]
        rows, phases = [], []
        for i, (first, count) in enumerate(steps):
            row, ph = self.execute(self.weight_base + (first_layer + first) * stride, a, b, count, tokens,
                                   timeout if timeout is not None else self.default_timeout(count),
                                   int(cache_len or 0), memory_tokens=self.memory_tokens if _decoder else 0)
            rows.append(ProfileRow(range(first, first + count), *row))
            phases += [dict(p, run=i) for p in ph or ()]
            a, b = b, a
        self._profile = Profile(self.backend.name, self.cfg.target.clock_mhz, rows, self.backend.has_clock,
                                phases or None)
        return from_dram(self.backend.read_dram(a, self.build.act_bytes), self.cfg.model.seq_len,
                         self.cfg.model.hidden)

    def execute(self, weight_base: int, input_base: int, output_base: int, layers: int, tokens: int,
                timeout: float, cache_len: int = 0, memory_tokens: int = 0):
        """One engine run on data already in DRAM (the register sequence of :meth:`run`): returns the
        counters (cycles, compute, stall, bytes_read) and the backend's per-phase profile (or None);
        ``memory_tokens``: an encoder-decoder's MEMORY_TOKENS (0: the encoder's run)."""
        status = self.read("STATUS")
        if status & self.regs.bit("STATUS", "busy"):
            self.reset()
        for name, addr in (("WEIGHT_BASE", weight_base), ("INPUT_BASE", input_base), ("OUTPUT_BASE", output_base)):
            self._set_base(name, addr)
        if self.scratch:
            self._set_base("SCRATCH_BASE", self.scratch[0])
        self.write("LAYERS", layers)
        self.write("TOKENS", tokens)
        if self.regs.has("CACHE_LEN"):       # always written: a prefill after a decode step starts at 0
            self.write("CACHE_LEN", cache_len)
        if self.memory_base is not None:
            self._set_base("MEMORY_BASE", self.memory_base)
            self.write("MEMORY_TOKENS", memory_tokens)
        self.backend.phase_profile_begin()
        self.write("CTRL", self.regs.bit("CTRL", "irq_enable") | self.regs.bit("CTRL", "start"))
        finished = self.backend.wait(timeout)
        status = self.read("STATUS")
        if status & self.regs.bit("STATUS", "error"):
            code = self.read("ERROR_CODE")
            addr = self.read("ERROR_ADDR_LO") | (self.read("ERROR_ADDR_HI") << 32)
            fields = self.regs.set_fields("ERROR_CODE", code)
            self.reset()
            resp = RESP_NAMES.get(self.regs.get("ERROR_CODE", "rresp", code))
            what = ", ".join(f"rresp={resp}" if f == "rresp" and resp else f for f in fields)
            # ERROR_ADDR is the failing beat's or the bad command's; a START check (bad_tokens, bad_scratch,
            # bad_cache) sets none
            where = f" ERROR_ADDR {addr:#x}{self._where(addr)}" if {"rresp", "bad_command"} & set(fields) else ""
            raise DeviceError(f"engine ERROR: ERROR_CODE {code:#x} ({what or 'no field set'}){where} "
                              f"[{self.backend.name} backend]", status, code, fields, addr)
        if not status & self.regs.bit("STATUS", "done"):
            bits = ", ".join(self.regs.set_fields("STATUS", status)) or "none"
            self.reset()
            raise DeviceTimeout(f"engine timeout: no DONE or ERROR within {timeout:g} s "
                                f"({'the interrupt never came' if not finished else 'the interrupt came without DONE'}); "
                                f"STATUS {status:#x} (set: {bits}) [{self.backend.name} backend]",
                                status, 0, [], None)
        counters = tuple(self.read(n) for n in ("CYCLES", "COMPUTE_CYCLES", "STALL_CYCLES", "BYTES_READ"))
        self.write("STATUS", self.regs.bit("STATUS", "done"))          # W1C: the interrupt drops
        return counters, self.backend.phase_profile()

    def _where(self, addr: int) -> str:
        """What the runtime keeps at a DRAM address (for error messages)."""
        lay, act = layout(self.cfg), self.build.act_bytes
        if self.weight_base <= addr < self.weight_base + lay.total_bytes:
            layer, off = divmod(addr - self.weight_base, lay.stride)
            sec = next((s.name for s in lay.sections if s.offset <= off < s.offset + s.bytes), "padding")
            return f" (weights: layer {layer} section {sec}, offset {off:#x})"
        for i, base in enumerate(self.act_bases):
            if base <= addr < base + act:
                return f" (activation buffer {i}, byte {addr - base})"
        if self.memory_base is not None and self.memory_base <= addr < self.memory_base + act:
            return f" (memory, byte {addr - self.memory_base})"
        if self.scratch and self.scratch[0] <= addr < sum(self.scratch):
            return f" (scratch, byte {addr - self.scratch[0]})"
        return " (outside the runtime's buffers)"

    def reset(self, timeout: float = 1e-3) -> None:
        """CTRL.soft_reset, then wait until STATUS.busy drops (the bursts in flight drained)."""
        self.write("CTRL", self.regs.bit("CTRL", "soft_reset"))
        busy = self.regs.bit("STATUS", "busy")
        for _ in range(100):
            if not self.read("STATUS") & busy:
                return
            self.backend.pause(timeout / 100)
        raise DeviceTimeout(f"engine busy after a soft reset (STATUS {self.read('STATUS'):#x}) "
                            f"[{self.backend.name} backend]", self.read("STATUS"), 0, [], None)

    def profile(self) -> Profile:
        """The counters of the last :meth:`run` (per layer if it ran with ``per_layer=True``)."""
        if self._profile is None:
            raise RuntimeInputError("profile: no run yet (call run() first)")
        return self._profile
