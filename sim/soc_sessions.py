"""Sessions of the simulated LiteX SoC (:class:`sim.soc_sim.SocSim`) against the golden backend, for a failure too
rare for one test run: the engine's own clock domain gave wrong bits in a few sessions of a hundred (docs/soc.md,
"Clocks").

    PYTHONPATH=. python sim/soc_sessions.py --config small --engine-mhz 120 --sessions 60 [--seed 1000]

Each session is what the slow test does: a fresh simulation (the Verilator build cached), the host's DDR3 init,
``load_weights``, then two runs on random inputs (all tokens, then ``1 + seed % seq_len``), each compared bit for bit
with the golden backend; after the runs the weights are read back and compared with the image (``--check-load``:
right after ``load_weights`` too). Prints a line a session (``ok`` or ``MISMATCH`` and the engine's cycles of each
run, or ``FAILED`` and the error of a session that did not finish), for a mismatch which values differ and whether
the input and the weights read back intact, for changed weights where the bytes differ; then ``sessions N wrong M``
(a session is wrong when a run's bits or the weights differ); exits 1 when a session was wrong or failed.
"""
from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlo_hw.cli import ArgumentParser, command, positive_float, positive_int  # noqa: E402


@command()
def main(argv=None) -> int:
    from mlo_hw.config import _validate, load_config
    from mlo_hw.elaborate import write_build
    ap = ArgumentParser(prog="sim/soc_sessions.py", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="small", help="a YAML file, or the name of a shipped config (small)")
    ap.add_argument("--engine-mhz", type=positive_float, help="the engine's clock (target.clock_mhz; default the config's)")
    ap.add_argument("--sessions", type=positive_int, default=20, help="sessions to run (default 20)")
    ap.add_argument("--seed", type=int, default=0, help="the first session's input seed (default 0)")
    ap.add_argument("--bridge-timeout", type=positive_float, default=30.0,
                    help="seconds a read waits for litex_server (the LiteX backend's bridge_timeout; default 30)")
    ap.add_argument("--check-load", action="store_true",
                    help="read the weights back after load_weights too (slower; changes the session's timing)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    if args.engine_mhz is not None:
        cfg = dataclasses.replace(cfg, target=dataclasses.replace(cfg.target, clock_mhz=args.engine_mhz))
        _validate(cfg)
    with tempfile.TemporaryDirectory(prefix="soc_sessions_") as tmp:     # the build, removed at the end
        build = Path(tmp) / cfg.name
        build.mkdir()
        write_build(cfg, build)
        return _sessions(args, cfg, build)


def _sessions(args, cfg, build: Path) -> int:
    """The sessions of ``main`` on the build folder ``build``; the exit status."""
    import numpy as np

    from mlo_hw.model.quantize import build_model, dram_bytes, random_inputs
    from mlo_hw.runtime import Accelerator
    from sim.soc_sim import SocSim
    model = build_model(cfg)[1]
    wrong = 0
    for seed in range(args.seed, args.seed + args.sessions):
        rng = np.random.default_rng(seed)
        xs = [model.quantize_input(x) for x, _ in random_inputs(cfg, rng, 2, padded=False)]
        runs = [(xs[0], cfg.model.seq_len), (xs[1], 1 + seed % cfg.model.seq_len)]
        with Accelerator(build, backend="golden") as gold:
            want = [gold.run(x, t) for x, t in runs]
        try:
            with SocSim(cfg) as soc:
                soc.sdram_init()
                with Accelerator(build, backend="litex", host="127.0.0.1", port=soc.port,
                                 csr_csv=soc.csr_csv, bridge_timeout=args.bridge_timeout) as acc:
                    acc.load_weights()
                    image = bytes(acc.build.weights)
                    loaded = acc.backend.read_dram(acc.weight_base, len(image)) if args.check_load else image
                    got, checks = [], []
                    for x, t in runs:
                        got.append((acc.run(x, t, timeout=120), acc.profile().rows[0].cycles))
                        # what the engine read: its input buffer (run's first), the weights (at the end)
                        checks.append(acc.backend.read_dram(acc.act_bases[0], len(dram_bytes(x))) == dram_bytes(x))
                    after = acc.backend.read_dram(acc.weight_base, len(image))
                    weights_intact = after == image
                    where = f"weights at {acc.weight_base:#x}, activations at " + \
                        ", ".join(f"{b:#x}" for b in acc.act_bases) + f" ({acc.build.act_bytes} bytes)"
        except Exception as e:          # a session that fails is a finding, not the end of the count
            wrong += 1
            print(f"seed {seed}: FAILED {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
            continue
        for when, got_w in (("after load_weights", loaded), ("after the runs", after)):
            if got_w != image:
                a, b = np.frombuffer(got_w, np.uint8), np.frombuffer(image, np.uint8)
                bad = np.flatnonzero(a != b)
                words = sorted(set((bad // 16).tolist()))
                print(f"  {where}; weights {when}: {len(bad)} bytes differ in {len(words)} 16-byte words, offsets "
                      f"{bad[0]:#x}..{bad[-1]:#x}, words {[hex(16 * w) for w in words[:8]]}; first word got "
                      f"{a[16 * words[0]:16 * words[0] + 16].tobytes().hex()} want "
                      f"{b[16 * words[0]:16 * words[0] + 16].tobytes().hex()}", flush=True)
        oks = [np.array_equal(g, w) for (g, _), w in zip(got, want)]
        wrong += not all(oks) or not weights_intact
        print(f"seed {seed}: " + " ".join(f"{'ok' if ok else 'MISMATCH'} {c}" for ok, (_, c) in zip(oks, got)),
              flush=True)
        for i, ((g, _), w, (_, t)) in enumerate(zip(got, want, runs)):
            if not oks[i]:
                bad = np.argwhere(g != w)
                print(f"  run {i} ({t} tokens): {len(bad)} of {g.size} values differ, tokens "
                      f"{sorted(set(bad[:, 0].tolist()))[:12]}, columns {sorted(set(bad[:, 1].tolist()))[:12]}..., "
                      f"max |diff| {int(np.abs(g.astype(int) - w.astype(int)).max())}; input read back "
                      f"{'intact' if checks[i] else 'CHANGED'}, weights {'intact' if weights_intact else 'CHANGED'}",
                      flush=True)
    print(f"sessions {args.sessions} wrong {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
