"""cocotb test of mlo_hw.hw.engine.result_writer.ResultWriter: for every placement, random result beats with random
gaps in ``valid``, single- and multi-tile jobs, a head offset (``chan_word``) and a WORK base; the final images
of the row buffer and of the WORK banks compared with a Python placement model; a negative check."""
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from runner import tb_params

P = tb_params()
PE, SIMD, S, H, TR = P["pe"], P["simd"], P["seq"], P["hidden"], P["tile_rows"]
K_LOCAL, V_LOCAL, BANK_WORDS = P["k_local"], P["v_local"], P["bank_words"]
ROWS16, ROWS8, K, VT = range(4)
W = lambda cols: cols // SIMD      # noqa: E731


def model(placement, beats, row_step, chan_word, base, tiles, results):
    """Expected writes: {("rows", addr, lane): int16} or {("bank", bank, addr, lane): byte}."""
    out, i = {}, 0
    n_tiles = len(results) // (S * beats)
    for t in range(n_tiles):
        for s in range(S):
            for nf in range(beats):
                for p in range(PE):
                    v16, v8 = results[i][0][p], results[i][1][p]
                    c = chan_word * SIMD + (t * TR if tiles else 0) + nf * PE + p
                    if placement == ROWS16:
                        out[("rows", s * row_step + c // SIMD, c % SIMD)] = v16
                    elif placement == ROWS8:
                        a = base + s * row_step + c // SIMD
                        out[("bank", a % PE, a // PE, c % SIMD)] = v8
                    elif placement == K:
                        out[("bank", s % PE, K_LOCAL + (s // PE) * W(H) + c // SIMD, c % SIMD)] = v8
                    else:
                        cc = c - chan_word * SIMD
                        out[("bank", cc % PE, V_LOCAL + (cc // PE) * W(S) + s // SIMD, s % SIMD)] = v8
                i += 1
    return out


@cocotb.test()
async def every_placement(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = dut.i__valid.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    jobs = [  # placement, beats per vector, row_step, chan_word, base, tiles, number of tiles
        (ROWS16, TR // PE, W(H), 0, 0, 1, H // TR),          # Q / O -> Y
        (ROWS8, TR // PE, W(2 * H), 0, 0, 1, 2 * H // TR),    # FFN up -> F (I = 2H)
        (ROWS8, (H // 2) // PE, W(H), W(H // 2), 3 * PE, 0, 1),   # PV of head 1 -> CTX at a base
        (K, TR // PE, W(H), 0, 0, 1, H // TR),
        (VT, TR // PE, W(H), 0, 0, 1, H // TR),
    ]
    widths = P["cfg_widths"]                                 # field -> (offset, width) of the start payload
    previous = 0                                             # count after the job before (0 out of reset)
    for trial, (placement, beats, row_step, chan_word, base, tiles, n_tiles) in enumerate(jobs * 2):
        rng = random.Random(trial)
        fields = {"placement": placement, "beats": beats, "row_step": row_step, "chan_word": chan_word,
                  "base": base, "tiles": tiles}
        dut.cfg.value = sum(v << widths[k][0] for k, v in fields.items())
        dut.start.value = 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        # the cycle after start: the counters restart from the registered start, count still holds the job
        # before's (it reads 0 from the next cycle on: checked in the loop's first cycle), no beat arrives
        await ReadOnly()
        assert int(dut.count.value) == previous, \
            f"trial {trial}: count {int(dut.count.value)} in the restart cycle, not the job before's {previous}"
        await RisingEdge(dut.clk)
        results = [([rng.randint(-32768, 32767) for _ in range(PE)], [rng.randrange(256) for _ in range(PE)])
                   for _ in range(n_tiles * S * beats)]
        got = {}
        p_valid = [1.0, 0.5][trial // len(jobs)]
        def writes():
            """The writes on rows/banks in this cycle: {key: value}."""
            out = {}
            rows = int(dut.rows.value)
            ra, rd_ = rows & ((1 << P["rows_addr_bits"]) - 1), rows >> P["rows_addr_bits"]
            data_bits = 16 * SIMD
            rdata, ren = rd_ & ((1 << data_bits) - 1), rd_ >> data_bits
            for lane in range(SIMD):
                if ren >> lane & 1:
                    v = rdata >> (16 * lane) & 0xFFFF
                    out[("rows", ra, lane)] = v - (1 << 16) * (v >> 15)
            banks = int(dut.banks.value)
            bw = P["bank_write_bits"]
            for bank in range(PE):
                word = banks >> (bw * bank) & ((1 << bw) - 1)
                ab = bw - 8 * SIMD - SIMD
                addr, bdata, ben = word & ((1 << ab) - 1), word >> ab & ((1 << 8 * SIMD) - 1), word >> (bw - SIMD)
                for lane in range(SIMD):
                    if ben >> lane & 1:
                        out[("bank", bank, addr, lane)] = bdata >> (8 * lane) & 0xFF
            return out

        # a beat's writes leave the cycle after it is taken (registered), and only then
        k, taken = 0, False
        while k < len(results) or taken:
            offer = k < len(results) and rng.random() < p_valid
            dut.i__valid.value = int(offer)
            if offer:
                w16, w8 = results[k]
                dut.i__payload.value = sum((b & 0xFF) << (8 * p) for p, b in enumerate(w8)) | \
                    sum((v & 0xFFFF) << (16 * p) for p, v in enumerate(w16)) << (8 * PE)
            await ReadOnly()
            if k == 0 and not taken:
                assert int(dut.count.value) == 0, f"trial {trial}: count {int(dut.count.value)} before any beat"
            now = writes()
            assert taken or not now, f"trial {trial}: writes {sorted(now)[:2]} without a beat the cycle before"
            got.update(now)
            taken = offer
            k += offer
            await RisingEdge(dut.clk)
        dut.i__valid.value = 0
        await RisingEdge(dut.clk)
        want = model(placement, beats, row_step, chan_word, base, tiles, results)
        assert int(dut.count.value) == len(results), f"trial {trial}: count {int(dut.count.value)}"
        previous = len(results)
        diff = [key for key in want if got.get(key) != want[key]]
        extra = set(got) - set(want)
        assert not diff and not extra, f"trial {trial} (placement {placement}): {len(diff)} of {len(want)} " \
                                       f"wrong, first {diff[:1]}; {len(extra)} unexpected writes {sorted(extra)[:2]}"
    # negative check: the model tells placements apart
    assert model(K, 1, 1, 0, 0, 0, results[:S]) != model(VT, 1, 1, 0, 0, 0, results[:S])
