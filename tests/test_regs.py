"""Control/status registers: AXI4-Lite slave behaviour, and the emitted register map files."""

import json
import shutil
import subprocess


from mlo_hw.config import load_config
from mlo_hw.hw.regs import ControlRegs, as_dict, markdown, register_map, write_register_map
from mlo_hw.synth import synth_verilog
from sim.runner import ROOT, lint, simulate, to_verilog


def test_regs_over_axi_lite():
    cfg = load_config("bert_tiny")
    v = to_verilog(ControlRegs(cfg), "control_regs")
    assert lint(v, "control_regs") == []
    d = as_dict(cfg)
    simulate(v, "control_regs", "tb_regs", {"registers": d["registers"], "seed": 5,
                                            "beat_bytes": cfg.axi_data_bytes})
    r = synth_verilog(v, "control_regs")
    assert r.latches == 0 and r.used["DSP"] == 0


def test_register_map_is_consistent():
    for name in ("bert_tiny", "small"):
        regs = register_map(load_config(name))
        offsets = [r.offset for r in regs]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        assert all(o % 4 == 0 and o < 256 for o in offsets)
        for r in regs:
            used = 0
            for f in r.fields:
                assert f.access in ("RO", "RW", "W1C", "W1P")
                assert used & f.mask == 0 and f.lsb + f.width <= 32, f"{r.name}.{f.name} overlaps"
                used |= f.mask


def test_emitted_files(tmp_path):
    cfg = load_config("bert_tiny")
    js, h = write_register_map(tmp_path, cfg)
    data = json.loads(js.read_text())
    assert [r["name"] for r in data["registers"]][:3] == ["ID", "CTRL", "STATUS"]
    text = h.read_text()
    assert "#define MLO_REG_WEIGHT_BASE_LO 0x10u" in text and "#define MLO_STATUS_DONE_MASK 0x00000002u" in text
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        src = tmp_path / "t.c"
        src.write_text('#include "mlo_hw_regs.h"\nint main(void){return MLO_REG_STATUS == 8u ? 0 : 1;}\n')
        subprocess.run([cc, "-Wall", "-Werror", "-I", str(tmp_path), str(src), "-o", str(tmp_path / "t")], check=True)
        assert subprocess.run([str(tmp_path / "t")]).returncode == 0


def test_docs_match_the_map():
    doc = ROOT / "docs" / "registers.md"
    assert doc.read_text() == markdown(load_config("bart_tiny")), \
        "docs/registers.md is stale: regenerate with python -m mlo_hw.hw.regs --config bart_tiny --markdown docs/registers.md"
