"""sim/hdl/axi_dram.sv, the AXI4 DRAM simulation model of the C++ harness: lint, the cocotb cross-check
against cocotbext-axi's AxiRam (sim/tb_axi_dram.py), and its DPI-C backdoor from a plain C++ main."""

import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.runner import SIM_BUILD, simulate, verilator_bin

HDL = Path(__file__).resolve().parent.parent / "sim" / "hdl"
TOP = "axi_dram_tb"

# AXI4 signals: (name, width, driven by the master)
AXI_SIGNALS = [
    ("awid", "ID", 1), ("awaddr", "ADDR", 1), ("awlen", 8, 1), ("awsize", 3, 1), ("awburst", 2, 1),
    ("awlock", 1, 1), ("awcache", 4, 1), ("awprot", 3, 1), ("awvalid", 1, 1), ("awready", 1, 0),
    ("wdata", "DATA", 1), ("wstrb", "STRB", 1), ("wlast", 1, 1), ("wvalid", 1, 1), ("wready", 1, 0),
    ("bid", "ID", 0), ("bresp", 2, 0), ("bvalid", 1, 0), ("bready", 1, 1),
    ("arid", "ID", 1), ("araddr", "ADDR", 1), ("arlen", 8, 1), ("arsize", 3, 1), ("arburst", 2, 1),
    ("arlock", 1, 1), ("arcache", 4, 1), ("arprot", 3, 1), ("arvalid", 1, 1), ("arready", 1, 0),
    ("rid", "ID", 0), ("rdata", "DATA", 0), ("rresp", 2, 0), ("rlast", 1, 0), ("rvalid", 1, 0), ("rready", 1, 1),
]
CONTROL_INPUTS = [("seed", 32), ("reseed", 1), ("stall_ar", 8), ("stall_r", 8), ("stall_aw", 8), ("stall_w", 8),
                  ("stall_b", 8), ("err_en", 1), ("err_addr", "ADDR"), ("timing_en", 1), ("t_read", 16),
                  ("t_write", 16), ("t_rcd", 8), ("t_rp", 8), ("t_refi", 16), ("t_rfc", 16), ("t_turn", 8),
                  ("col_bits", 5), ("bank_bits", 4), ("beat_cost", 16)]
OUTPUTS = [("rd_beats", 32), ("wr_beats", 32), ("rd_bursts", 32), ("wr_bursts", 32), ("protocol_error", 1)]


def wrapper_verilog(data_bits=64, addr_bits=32, id_bits=2, depth_log2=13) -> str:
    """``axi_dram_tb``: ``axi_dram`` (instance ``dram``) on slave port ``s0_axi_*``, and a plain
    pass-through from slave port ``s1_axi_*`` to master port ``m1_axi_*`` (for cocotbext-axi's AxiRam)."""
    widths = {"ID": id_bits, "ADDR": addr_bits, "DATA": data_bits, "STRB": data_bits // 8}

    def vec(w):
        w = widths.get(w, w)
        return "" if w == 1 else f"[{w - 1}:0] "

    decls, conns, assigns = ["input wire clk", "input wire rst"], [".clk(clk)", ".rst(rst)"], []
    for name, w, from_master in AXI_SIGNALS:
        decls.append(f"{'input' if from_master else 'output'} wire {vec(w)}s0_axi_{name}")
        conns.append(f".s_axi_{name}(s0_axi_{name})")
        decls.append(f"{'input' if from_master else 'output'} wire {vec(w)}s1_axi_{name}")
        decls.append(f"{'output' if from_master else 'input'} wire {vec(w)}m1_axi_{name}")
        assigns.append(f"  assign m1_axi_{name} = s1_axi_{name};" if from_master
                       else f"  assign s1_axi_{name} = m1_axi_{name};")
    for name, w in CONTROL_INPUTS:
        decls.append(f"input wire {vec(w)}{name}")
        conns.append(f".{name}({name})")
    for name, w in OUTPUTS:
        decls.append(f"output wire {vec(w)}{name}")
        conns.append(f".{name}({name})")
    return "\n".join([
        f"module {TOP} (", ",\n".join(f"  {d}" for d in decls), ");",
        f"  axi_dram #(.DATA_BITS({data_bits}), .ADDR_BITS({addr_bits}), .ID_BITS({id_bits}), "
        f".DEPTH_LOG2({depth_log2}), .QUEUE_LOG2(2)) dram (", ",\n".join(f"    {c}" for c in conns), "  );",
        *assigns, "endmodule", ""])


def full_verilog(**kw) -> str:
    return (HDL / "axi_dram.sv").read_text() + "\n" + wrapper_verilog(**kw)


def _env():
    env = dict(os.environ)
    env["PATH"] = f"{verilator_bin()}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.mark.parametrize("params", [
    {}, {"DATA_BITS": 32, "ID_BITS": 4}, {"DATA_BITS": 128, "DEPTH_LOG2": 24}, {"DATA_BITS": 512},
    {"DATA_BITS": 1024, "ADDR_BITS": 40, "QUEUE_LOG2": 1}, {"DATA_BITS": 256, "QUEUE_LOG2": 3, "DEPTH_LOG2": 4},
])
def test_lint_clean_without_waivers(params):
    """``verilator --lint-only -Wall`` without any -Wno: no warning at all, for several parameter sets."""
    cmd = ["verilator", "--lint-only", "-Wall", "--top-module", "axi_dram",
           *(f"-G{k}={v}" for k, v in params.items()), str(HDL / "axi_dram.sv")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    warnings = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("%")]
    assert r.returncode == 0 and warnings == [], warnings
    # the wrapper used by the tests too (plain -Wall: the pass-through has no unused bits)
    if not params:
        src = SIM_BUILD / "lint" / f"{TOP}.sv"
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(wrapper_verilog())
        r = subprocess.run(["verilator", "--lint-only", "-Wall", "--top-module", TOP, str(HDL / "axi_dram.sv"),
                            str(src)],
                           capture_output=True, text=True, env=_env())
        assert r.returncode == 0, r.stdout + r.stderr


PROTOCOL_MESSAGES = [
    "AR burst crosses a 4 KiB boundary", "AW burst crosses a 4 KiB boundary", "ARSIZE {n} is not the full width {s}",
    "AWBURST 0 is not INCR", "ARBURST 2 is not INCR", "ARVALID dropped before ARREADY",
    "AR payload changed while ARVALID & !ARREADY", "AW payload changed while AWVALID & !AWREADY",
    "W payload changed while WVALID & !WREADY", "WVALID dropped before WREADY", "WLAST 1 on beat 1 of a 4-beat burst",
    "WLAST 0 on beat 3 of a 4-beat burst",
]


# -m slow (30 s and more each): the model answers every full-stack run of the default suite, whose harness fails on any
# line its protocol checker prints (sim/harness.py)
@pytest.mark.slow
@pytest.mark.parametrize("data_bits,id_bits,rounds", [(64, 2, 18), (128, 1, 60), (32, 3, 60)])
def test_axi_dram_against_axi_ram(capfd, data_bits, id_bits, rounds):
    """All cocotb tests of sim/tb_axi_dram.py (see there) on a 64 KiB memory; the protocol checker's
    messages must be in the log."""
    t0 = time.monotonic()
    mem_bytes = 1 << 16
    v = full_verilog(data_bits=data_bits, id_bits=id_bits, depth_log2=(mem_bytes // (data_bits // 8)).bit_length() - 1)
    simulate(v, f"{TOP}", "tb_axi_dram", {"data_bits": data_bits, "addr_bits": 32, "id_bits": id_bits,
                                           "mem_bytes": mem_bytes, "rounds": rounds, "seed": data_bits}, optimize=True)
    out = capfd.readouterr().out
    sys.stdout.write(out[-2500:])
    size = (data_bits // 8 - 1).bit_length()
    for msg in PROTOCOL_MESSAGES:
        msg = msg.format(n=size - 1, s=size)
        assert f"axi_dram: {msg}" in out, f"missing protocol message: {msg}"
    print(f"cocotb run {time.monotonic() - t0:.1f} s")


# ---------------------------------------------------------------------------------------------------------
# The DPI-C backdoor, called from C++ exactly as sim/hdl/harness.cpp does (svSetScope on TOP.<top>.<inst>)
# ---------------------------------------------------------------------------------------------------------
CPP = r"""
#include "Vaxi_dram_tb.h"
#include "Vaxi_dram_tb__Dpi.h"
#include "svdpi.h"
#include "verilated.h"
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
static Vaxi_dram_tb* top;
static uint64_t cycles = 0;
static void tick() { top->clk = 0; top->eval(); top->clk = 1; top->eval(); cycles++; }
#define CHECK(c, ...) do { if (!(c)) { printf("FAIL line %d: ", __LINE__); printf(__VA_ARGS__); \
                                       printf("\n"); exit(1); } } while (0)
static uint8_t pattern(uint64_t a) { return uint8_t((a * 2654435761u) >> 13); }

int main(int argc, char** argv) {
    Verilated::commandArgs(argc, argv);
    top = new Vaxi_dram_tb;
    top->rst = 1; top->col_bits = 11; top->bank_bits = 3; top->beat_cost = 256; top->seed = 5;
    tick(); tick(); top->rst = 0;
    svScope scope = svGetScopeFromName("TOP.axi_dram_tb.dram");
    CHECK(scope, "no scope");
    svSetScope(scope);
    const uint64_t MEM = 1 << 16;
    // backdoor in, bus out: a 16-beat read at 0x1230 (a 4 KiB page: legal)
    for (uint64_t a = 0; a < MEM; a++) dram_write_byte(a, pattern(a));
    for (uint64_t a = 0; a < 64; a++)
        CHECK(dram_read_byte(a) == pattern(a), "backdoor readback %llu", (unsigned long long)a);
    CHECK(dram_read_byte(MEM + 77) == pattern(77), "backdoor wrap");
    top->s0_axi_araddr = 0x1230; top->s0_axi_arlen = 15; top->s0_axi_arsize = 3; top->s0_axi_arburst = 1;
    top->s0_axi_arid = 2; top->s0_axi_arvalid = 1; top->s0_axi_rready = 1;
    int beat = 0;
    for (int i = 0; i < 100 && beat < 16; i++) {
        top->clk = 0; top->eval();
        bool ar = top->s0_axi_arvalid && top->s0_axi_arready, r = top->s0_axi_rvalid && top->s0_axi_rready;
        if (r) {
            uint64_t want = 0;
            for (int b = 0; b < 8; b++) want |= uint64_t(pattern(0x1230 + 8 * beat + b)) << (8 * b);
            CHECK(top->s0_axi_rdata == want, "beat %d: %llx != %llx", beat, (unsigned long long)top->s0_axi_rdata,
                  (unsigned long long)want);
            CHECK(top->s0_axi_rid == 2 && top->s0_axi_rresp == 0 && top->s0_axi_rlast == (beat == 15), "beat %d", beat);
            beat++;
        }
        top->clk = 1; top->eval();
        if (ar) top->s0_axi_arvalid = 0;
    }
    CHECK(beat == 16, "%d beats", beat);
    // bus in, backdoor out: a 4-beat write at 0x2000 with a partial strobe on beat 1
    top->s0_axi_awaddr = 0x2000; top->s0_axi_awlen = 3; top->s0_axi_awsize = 3; top->s0_axi_awburst = 1;
    top->s0_axi_awid = 1; top->s0_axi_awvalid = 1; top->s0_axi_bready = 1; top->s0_axi_wvalid = 1;
    beat = 0;
    bool got_b = false;
    for (int i = 0; i < 100 && !got_b; i++) {
        top->s0_axi_wdata = 0x1111111111111111ull * (beat + 1);
        top->s0_axi_wstrb = beat == 1 ? 0x0f : 0xff;
        top->s0_axi_wlast = beat == 3;
        top->s0_axi_wvalid = beat < 4;
        top->clk = 0; top->eval();
        bool aw = top->s0_axi_awvalid && top->s0_axi_awready, w = top->s0_axi_wvalid && top->s0_axi_wready;
        if (top->s0_axi_bvalid) { got_b = true; CHECK(top->s0_axi_bresp == 0 && top->s0_axi_bid == 1, "B"); }
        top->clk = 1; top->eval();
        if (aw) top->s0_axi_awvalid = 0;
        if (w) beat++;
    }
    CHECK(got_b && beat == 4, "write: %d beats, B %d", beat, got_b);
    for (int b = 0; b < 32; b++) {
        uint8_t want = (b >= 12 && b < 16) ? pattern(0x2000 + b) : uint8_t(0x11 * (b / 8 + 1));
        CHECK(dram_read_byte(0x2000 + b) == want, "byte %d: %02x != %02x", b, dram_read_byte(0x2000 + b), want);
        CHECK(dram_read_byte(0x2000 + b + 3 * MEM) == want, "wrapped byte %d", b);
    }
    CHECK(top->wr_beats == 4 && top->rd_beats == 16 && !top->protocol_error, "counters");
    // speed: back-to-back 256-beat reads with stalls and the timing model on, master always ready
    top->timing_en = 1; top->t_read = 20; top->t_rcd = 5; top->t_rp = 5; top->t_refi = 780; top->t_rfc = 20;
    top->beat_cost = 256; top->stall_r = 32; top->stall_ar = 32;
    top->s0_axi_arlen = 255; top->s0_axi_arvalid = 1; top->s0_axi_wvalid = 0;
    uint64_t n0 = cycles, beats = 0, addr = 0;
    top->s0_axi_araddr = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 2000000; i++) {
        top->clk = 0; top->eval();
        bool ar = top->s0_axi_arvalid && top->s0_axi_arready;
        beats += top->s0_axi_rvalid && top->s0_axi_rready;
        top->clk = 1; top->eval();
        cycles++;
        if (ar) { addr = (addr + 2048) % MEM; top->s0_axi_araddr = addr; }
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(!top->protocol_error, "protocol error");
    printf("speed %.0f cycles/s, %.3f beats/cycle\n", (cycles - n0) / s, double(beats) / (cycles - n0));
    printf("PASS\n");
    top->final();
    delete top;
    return 0;
}
"""


@pytest.mark.slow          # 28 s; every full-stack harness test loads and reads DRAM through this backdoor
def test_dpi_backdoor_from_cpp():
    """dram_write_byte/dram_read_byte from a C++ main via svSetScope("TOP.axi_dram_tb.dram"): backdoor in,
    AXI read out; AXI write (partial strobe) in, backdoor out; addresses wrap; and the model's speed."""
    out = SIM_BUILD / "axi_dram_dpi"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{TOP}.sv").write_text(full_verilog())
    (out / "main.cpp").write_text(CPP)
    exe = out / "Vaxi_dram_tb"
    stamp = out / "stamp"
    key = hashlib.sha256((full_verilog() + CPP).encode()).hexdigest()
    if not exe.exists() or not stamp.exists() or stamp.read_text() != key:
        env = _env()
        env["MAKEFLAGS"] = "CFG_CXXFLAGS_PCH_I=-include"
        r = subprocess.run(["verilator", "--cc", "--exe", "--build", "-O3", "--x-assign", "0", "--x-initial", "0",
                            "-Wno-fatal", "-Mdir", str(out / "obj"), "--top-module", TOP, "-o", str(exe),
                            "-CFLAGS", "-O2", str(out / f"{TOP}.sv"), str(out / "main.cpp")],
                           capture_output=True, text=True, env=env)
        assert r.returncode == 0 and exe.exists(), r.stdout[-3000:] + r.stderr[-3000:]
        stamp.write_text(key)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    print(r.stdout)
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    speed = float(re.search(r"speed (\d+) cycles/s", r.stdout).group(1))
    assert speed > 200_000, f"the model alone runs at {speed:.0f} cycles/s"
