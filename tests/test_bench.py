"""The benchmarks' derived figures (bench/cycles.py's throughput line)."""
import importlib.util
from pathlib import Path

from mlo_hw.config import load_config

ROOT = Path(__file__).resolve().parent.parent


def _cycles_module():
    spec = importlib.util.spec_from_file_location("bench_cycles", ROOT / "bench" / "cycles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_throughput_line_counts_every_product_of_every_layer():
    cfg = load_config("bert_tiny")                 # 2 layers, 128 tokens, hidden 128, intermediate 512, XC7A35T
    s, h, i = 128, 128, 512
    macs = 2 * (4 * s * h * h + 2 * s * h * i + 2 * s * s * h)        # Q K V O, FFN up/down, Q.K^T and P.V
    cycles = 1_000_000                                                  # 100 inferences/s at 100 MHz
    line = _cycles_module().throughput(cfg, cycles)
    assert line.startswith(f"throughput: inferences/s=100.0 GMAC/s={macs * 100 / 1e9:.2f} ")
    assert f"dsp_peak_fraction={macs * 100 / 1e9 / (2 * 90 * 0.1):.3f}" in line
    assert "at the config's 100 MHz, not a routed clock" in line
