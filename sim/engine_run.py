"""Running ``sim/tb_engine.py`` from tests and benchmarks: its parameters and one cached build per config."""
from __future__ import annotations

from mlo_hw.hw.layer_engine import LayerEngine
from mlo_hw.hw.mvau import MVAUParams
from mlo_hw.hw.regs import as_dict as register_dict

from .runner import simulate, to_verilog

__all__ = ["engine_params", "run_engine"]


def engine_params(cfg, base_name: str, **extra) -> dict:
    """Parameters of sim/tb_engine.py: the shipped config ``base_name`` (a name or a path) at ``cfg``'s
    sequence length, its register map and the MVAU's accumulator width; ``extra`` adds test parameters."""
    return {"config": base_name, "seq_len": cfg.model.seq_len, "registers": register_dict(cfg)["registers"],
            "acc_bits": MVAUParams.from_config(cfg).acc_bits, **extra}


def run_engine(cfg, params: dict, testcase: str | None = None, top: str | None = None) -> None:
    """Build the engine of ``cfg`` (cached, top ``engine_<config name>`` unless ``top``) and run
    sim/tb_engine.py on it (one ``testcase``, or all)."""
    top = top or f"engine_{cfg.name}"
    simulate(to_verilog(LayerEngine(cfg), top), top, "tb_engine", params, testcase=testcase)
