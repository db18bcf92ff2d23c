// Standalone check of litedram_dram (sim/litedram_model.py) from C++ (tests/test_litedram.py builds it):
//   Vlitedram_dram SIZE                 backdoor -> AXI reads (single beat, 16 beats, the whole memory in 16-beat
//                                       bursts back to back: bytes/cycle), AXI writes with a partial strobe ->
//                                       backdoor, then a streaming write; prints "PASS" at the end
//   Vlitedram_dram SIZE LEN N           N write bursts of LEN beats at 0x3000, prints their cycles (or FAIL)
// BYTES (-D) is the AXI data width in bytes (8: 64-bit bus).
#include "Vlitedram_dram.h"
#include "Vlitedram_dram__Dpi.h"
#include "svdpi.h"
#include "verilated.h"
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#ifndef BYTES
#define BYTES 8
#endif
static Vlitedram_dram* top;
static uint64_t cycle = 0;
struct HS { bool ar, r, aw, w, b; uint64_t rdata; bool rlast; };
static HS tick() {
    top->clk = 0; top->eval();
    HS h{top->s_axi_arvalid && top->s_axi_arready, top->s_axi_rvalid && top->s_axi_rready,
         top->s_axi_awvalid && top->s_axi_awready, top->s_axi_wvalid && top->s_axi_wready,
         top->s_axi_bvalid && top->s_axi_bready, (uint64_t)top->s_axi_rdata, (bool)top->s_axi_rlast};
    top->clk = 1; top->eval(); cycle++;
    return h;
}
static void fail(const char* m, uint64_t a) { printf("FAIL %s %llx at cycle %llu\n", m, (unsigned long long)a, (unsigned long long)cycle); exit(1); }
static uint8_t pat(uint64_t a) { return (uint8_t)((a * 2654435761u) >> 13); }

// read `bursts` bursts of `len` beats from addr, consecutive; returns cycles from first AR to last R
static uint64_t axi_read(uint64_t addr, int len, int bursts, bool check) {
    int ars = 0, rb = 0, total = len * bursts;
    uint64_t t0 = cycle, beat_addr = addr;
    top->s_axi_rready = 1;
    while (rb < total) {
        if (ars < bursts) {
            top->s_axi_arvalid = 1; top->s_axi_araddr = addr + (uint64_t)ars * len * BYTES;
            top->s_axi_arlen = len - 1; top->s_axi_arsize = __builtin_ctz(BYTES); top->s_axi_arburst = 1; top->s_axi_arid = 0;
        } else top->s_axi_arvalid = 0;
        HS h = tick();
        if (h.ar) ars++;
        if (h.r) {
            if (check) for (int k = 0; k < BYTES; k++) if (((h.rdata >> (8 * k)) & 0xff) != pat(beat_addr + k)) fail("read data", beat_addr + k);
            if (h.rlast != ((rb % len) == len - 1)) fail("rlast", beat_addr);
            beat_addr += BYTES; rb++;
        }
        if (cycle - t0 > 1000000) fail("read timeout", addr);
    }
    top->s_axi_arvalid = 0;
    return cycle - t0;
}
static uint64_t axi_write(uint64_t addr, int len, int bursts, uint64_t strb) {
    int aws = 0, wb = 0, bs = 0, total = len * bursts;
    uint64_t t0 = cycle;
    top->s_axi_bready = 1;
    while (bs < bursts) {
        if (aws < bursts) {
            top->s_axi_awvalid = 1; top->s_axi_awaddr = addr + (uint64_t)aws * len * BYTES;
            top->s_axi_awlen = len - 1; top->s_axi_awsize = __builtin_ctz(BYTES); top->s_axi_awburst = 1; top->s_axi_awid = 0;
        } else top->s_axi_awvalid = 0;
        if (wb < total) {
            uint64_t a = addr + (uint64_t)wb * BYTES, d = 0;
            for (int k = 0; k < BYTES; k++) d |= (uint64_t)(uint8_t)~pat(a + k) << (8 * k);
            top->s_axi_wvalid = 1; top->s_axi_wdata = d; top->s_axi_wstrb = strb; top->s_axi_wlast = (wb % len) == len - 1;
        } else top->s_axi_wvalid = 0;
        HS h = tick();
        if (h.aw) aws++;
        if (h.w) wb++;
        if (h.b) bs++;
        if (cycle - t0 > 1000000) fail("write timeout", addr);
    }
    top->s_axi_awvalid = 0; top->s_axi_wvalid = 0;
    return cycle - t0;
}
int main(int argc, char** argv) {
    Verilated::commandArgs(argc, argv);
    top = new Vlitedram_dram;
    svSetScope(svGetScopeFromName("TOP.litedram_dram"));
    uint64_t size = strtoull(argv[1], 0, 0);
    top->rst = 1; for (int i = 0; i < 4; i++) tick(); top->rst = 0;
    for (uint64_t a = 0; a < size; a++) dram_write_byte(a, pat(a));
    for (uint64_t a = 0; a < size; a += 997) if (dram_read_byte(a) != pat(a)) fail("backdoor", a);
    for (int i = 0; i < 100; i++) tick();
    if (argc > 2) {
        int len = atoi(argv[2]), n = atoi(argv[3]);
        uint64_t t = axi_write(0x3000, len, n, (1ull << BYTES) - 1);
        printf("write %d x %d: %llu cycles\n", n, len, (unsigned long long)t);
        return 0;
    }
    uint64_t t = axi_read(0x1000, 1, 1, true);
    printf("single-beat read latency %llu cycles\n", (unsigned long long)t);
    t = axi_read(0x2000, 16, 1, true);
    printf("16-beat read: %llu cycles\n", (unsigned long long)t);
    int nb = size / (16 * BYTES);
    t = axi_read(0, 16, nb, true);
    printf("stream read %d x 16 beats: %llu cycles, %.3f bytes/cycle\n", nb, (unsigned long long)t, (double)nb * 16 * BYTES / t);
    uint64_t strb = (BYTES == 8) ? 0xF5 : 0xF5F5;
    t = axi_write(0x3000, 16, 4, strb);
    printf("4 x 16-beat write: %llu cycles\n", (unsigned long long)t);
    for (int i = 0; i < 100; i++) tick();
    for (uint64_t a = 0x3000; a < 0x3000 + 64 * BYTES; a++) {
        bool en = (strb >> (a % BYTES)) & 1;
        uint8_t want = en ? (uint8_t)~pat(a) : pat(a);
        if (dram_read_byte(a) != want) fail("write via AXI, read via backdoor", a);
    }
    for (uint64_t a = 0x3000; a < 0x3000 + 64 * BYTES; a++) dram_write_byte(a, pat(a));
    // bursts starting on an odd narrow beat of the controller word, odd lengths
    t = axi_write(0x3000 + BYTES, 5, 3, (1ull << BYTES) - 1);
    for (int i = 0; i < 100; i++) tick();
    for (uint64_t a = 0x3000; a < 0x3000 + 20 * BYTES; a++) {
        bool in = a >= 0x3000 + BYTES && a < 0x3000 + 16 * BYTES;
        if (dram_read_byte(a) != (in ? (uint8_t)~pat(a) : pat(a))) fail("misaligned write", a);
    }
    for (uint64_t a = 0x3000; a < 0x3000 + 64 * BYTES; a++) dram_write_byte(a, pat(a));
    t = axi_read(0x3000 + 3 * BYTES, 7, 3, true);
    t = axi_write(0, 16, nb, (1ull << BYTES) - 1);
    printf("stream write %d x 16 beats: %llu cycles, %.3f bytes/cycle\n", nb, (unsigned long long)t, (double)nb * 16 * BYTES / t);
    printf("PASS\n");
    top->final();
    return 0;
}
