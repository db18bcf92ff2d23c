// axi_dram: an AXI4 slave DRAM *simulation model* for Verilator (pure HDL, no per-cycle DPI, no $display
// on the normal path). It stands in for the board's memory controller in full-stack simulations driven
// from C++ (sim/hdl/harness.cpp); sim/tb_axi_dram.py cross-checks it against cocotbext-axi's AxiRam.
//
// Memory: 2**DEPTH_LOG2 words of DATA_BITS; a beat's word index is (beat-aligned byte address / bytes per
// beat) modulo 2**DEPTH_LOG2, i.e. addresses wrap modulo the memory size. INCR bursts of full-width beats
// (the protocol checker flags anything else; such bursts are still served as INCR, full width, and by
// their AxLEN, not by WLAST). Writes honour WSTRB. The memory is not initialised (Verilator's
// --x-initial decides); the backdoor functions below load and dump it without bus cycles:
//   export "DPI-C" dram_write_byte(longint unsigned addr, byte unsigned value)
//   export "DPI-C" dram_read_byte(longint unsigned addr) -> byte unsigned
// (byte addresses, wrapped like the bus; call after svSetScope(svGetScopeFromName("TOP.<top>.<inst>"))).
//
// Queues: up to 2**QUEUE_LOG2 accepted read bursts not yet fully returned, and as many write bursts
// between AW acceptance and their B handshake. Responses come in acceptance order; RID/BID echo the id.
// W beats always belong to the oldest AW whose data is incomplete (WREADY stays low without an AW).
// Ideal memory (timing_en = 0): the first R beat may come the cycle after AR acceptance, B the cycle after
// the last W beat; one R and one W beat a cycle, back-to-back bursts without a dead cycle.
//
// Random stalls: one xorshift32 per channel (AR, R, AW, W, B), seeded from seed ^ a distinct constant at
// rst and on a reseed pulse, advanced every cycle; a channel is stalled in a cycle when the top byte of its
// state is < stall_x (probability stall_x / 256). A stalled AR/AW/W channel holds READY low. A stalled R/B
// channel does not raise VALID; once VALID is up it stays up, with stable payload, until the handshake
// (AXI A3.2.1), so a stall never retracts a beat.
//
// Error injection (err_en): an R beat whose beat-aligned address equals err_addr's beat-aligned address
// has RRESP = SLVERR (the other beats of the burst OKAY); a W beat on that address is not written and
// its burst gets BRESP = SLVERR. err_en/err_addr are sampled when the beat is presented/accepted.
//
// Timing model (timing_en = 1; all numbers in clock cycles; a performance model, not a DDR netlist):
//   * one DRAM timeline, `dram_free`; bursts are scheduled on it in the order they are accepted (an AR
//     and an AW accepted in the same cycle: the AR first), each when its AR/AW is accepted at cycle `now`:
//       start    = max(now, dram_free) + row_penalty + (t_turn if its direction differs from the previous
//                  scheduled burst's)
//       dram_free = start + ceil(beats * beat_cost / 256)
//   * rows: address = row | bank | column, bank = addr[col_bits +: bank_bits] (bank_bits > 4 alias onto 16
//     open-row registers). Opening a row in a bank with no open row costs t_rcd, in a bank with another
//     row open t_rp + t_rcd, a hit 0. A burst whose last beat lies in another row than its first also
//     pays the penalty of that (last) row; rows strictly between are not charged (a burst spans <= 4 KiB).
//   * read: beat k of a burst is available from start + t_read + floor(k * beat_cost / 256), at the
//     earliest the cycle after the AR, at most one beat a cycle, in order (R backpressure and stalls delay
//     beats but do not move the DRAM timeline).
//   * write: W beats are accepted as soon as the AW is (subject to stalls); B is available from
//     max(cycle of the last W beat, end of the burst's DRAM slot) + t_write, at the earliest the cycle
//     after the last W beat, in order.
//   * refresh (t_refi != 0): in the last cycle of every t_refi cycles (counted from when timing_en rose),
//     before that cycle's bursts are scheduled, dram_free = max(dram_free, now) + t_rfc and every row closes.
// Per-burst latencies are computed at acceptance from the timing inputs of that cycle; timing_en = 0
// clears the timeline. Cycles are counted by a free-running 64-bit counter reset by rst.
//
// Counters (cleared by rst and by reseed; events of the reseed cycle are not counted): rd_beats/wr_beats
// = R/W handshakes, rd_bursts/wr_bursts = AR/AW handshakes.
//
// Protocol checker: protocol_error rises (sticky until rst) at the first violation, with one
// `axi_dram: ...` line naming it: an AR/AW burst crossing a 4 KiB boundary, AxSIZE other than the full
// width, AxBURST other than INCR, AR/AW payload (addr, len, size, burst, id) changing or VALID dropping
// while VALID & !READY, W data/strb/last changing or WVALID dropping while WVALID & !WREADY, WLAST not
// on exactly the burst's last beat.

module axi_dram #(
    parameter int DATA_BITS  = 64,  // 32 .. 1024, a power of two
    parameter int ADDR_BITS  = 32,
    parameter int ID_BITS    = 1,
    parameter int DEPTH_LOG2 = 16,  // memory words (of DATA_BITS) = 2**DEPTH_LOG2
    parameter int QUEUE_LOG2 = 2    // accepted read / write bursts in flight: 2**QUEUE_LOG2 each
) (
    input  logic                   clk,
    input  logic                   rst,

    input  logic [ID_BITS-1:0]     s_axi_awid,
    input  logic [ADDR_BITS-1:0]   s_axi_awaddr,
    input  logic [7:0]             s_axi_awlen,
    input  logic [2:0]             s_axi_awsize,
    input  logic [1:0]             s_axi_awburst,
    input  logic                   s_axi_awlock,
    input  logic [3:0]             s_axi_awcache,
    input  logic [2:0]             s_axi_awprot,
    input  logic                   s_axi_awvalid,
    output logic                   s_axi_awready,
    input  logic [DATA_BITS-1:0]   s_axi_wdata,
    input  logic [DATA_BITS/8-1:0] s_axi_wstrb,
    input  logic                   s_axi_wlast,
    input  logic                   s_axi_wvalid,
    output logic                   s_axi_wready,
    output logic [ID_BITS-1:0]     s_axi_bid,
    output logic [1:0]             s_axi_bresp,
    output logic                   s_axi_bvalid,
    input  logic                   s_axi_bready,
    input  logic [ID_BITS-1:0]     s_axi_arid,
    input  logic [ADDR_BITS-1:0]   s_axi_araddr,
    input  logic [7:0]             s_axi_arlen,
    input  logic [2:0]             s_axi_arsize,
    input  logic [1:0]             s_axi_arburst,
    input  logic                   s_axi_arlock,
    input  logic [3:0]             s_axi_arcache,
    input  logic [2:0]             s_axi_arprot,
    input  logic                   s_axi_arvalid,
    output logic                   s_axi_arready,
    output logic [ID_BITS-1:0]     s_axi_rid,
    output logic [DATA_BITS-1:0]   s_axi_rdata,
    output logic [1:0]             s_axi_rresp,
    output logic                   s_axi_rlast,
    output logic                   s_axi_rvalid,
    input  logic                   s_axi_rready,

    input  logic [31:0]            seed,
    input  logic                   reseed,
    input  logic [7:0]             stall_ar,
    input  logic [7:0]             stall_r,
    input  logic [7:0]             stall_aw,
    input  logic [7:0]             stall_w,
    input  logic [7:0]             stall_b,

    input  logic                   err_en,
    input  logic [ADDR_BITS-1:0]   err_addr,

    input  logic                   timing_en,
    input  logic [15:0]            t_read,
    input  logic [15:0]            t_write,
    input  logic [7:0]             t_rcd,
    input  logic [7:0]             t_rp,
    input  logic [15:0]            t_refi,
    input  logic [15:0]            t_rfc,
    input  logic [7:0]             t_turn,
    input  logic [4:0]             col_bits,
    input  logic [3:0]             bank_bits,
    input  logic [15:0]            beat_cost,

    output logic [31:0]            rd_beats,
    output logic [31:0]            wr_beats,
    output logic [31:0]            rd_bursts,
    output logic [31:0]            wr_bursts,
    output logic                   protocol_error
);
    localparam int STRB = DATA_BITS / 8;
    localparam int S    = $clog2(STRB);          // log2 bytes per beat = the only legal AxSIZE
    localparam int BAW  = ADDR_BITS - S;         // beat address width
    localparam int IDXW = DEPTH_LOG2;
    localparam int Q    = 1 << QUEUE_LOG2;
    localparam int PW   = QUEUE_LOG2 + 1;        // queue pointers with a wrap bit
    localparam int NB   = 16;                    // open-row registers (banks)

    if (DATA_BITS < 32 || DATA_BITS > 1024 || (1 << $clog2(DATA_BITS)) != DATA_BITS) begin : g_bad_data
        $fatal(1, "axi_dram: DATA_BITS must be a power of two in 32..1024");
    end
    if (QUEUE_LOG2 < 1 || ADDR_BITS < 13 || ADDR_BITS > 63 || DEPTH_LOG2 < 1) begin : g_bad_param
        $fatal(1, "axi_dram: need QUEUE_LOG2 >= 1, 13 <= ADDR_BITS <= 63, DEPTH_LOG2 >= 1");
    end

    // ------------------------------------------------------------------------------------------------
    // Memory and backdoor
    // ------------------------------------------------------------------------------------------------
    logic [DATA_BITS-1:0] mem [2**IDXW];

    export "DPI-C" function dram_write_byte;
    export "DPI-C" function dram_read_byte;

    function void dram_write_byte(input longint unsigned addr, input byte unsigned value);
        mem[IDXW'(addr >> S)][{addr[S-1:0], 3'b000} +: 8] = value;
    endfunction

    function byte unsigned dram_read_byte(input longint unsigned addr);
        logic [DATA_BITS-1:0] word;
        word = mem[IDXW'(addr >> S)];
        return word[{addr[S-1:0], 3'b000} +: 8];
    endfunction

    // ------------------------------------------------------------------------------------------------
    // Cycle counter and stall generators
    // ------------------------------------------------------------------------------------------------
    logic [63:0] now;
    logic [4:0][31:0] rnd;                       // AR, R, AW, W, B
    localparam logic [4:0][31:0] SEED_XOR = {32'h165667B1, 32'h27D4EB2F, 32'hC2B2AE35, 32'h85EBCA6B,
                                             32'h9E3779B9};

    function automatic logic [31:0] xorshift32(input logic [31:0] x0);
        logic [31:0] x;
        x = x0;
        x = x ^ (x << 13);
        x = x ^ (x >> 17);
        x = x ^ (x << 5);
        return x;
    endfunction

    function automatic logic [31:0] seed_of(input logic [31:0] s, input logic [31:0] c);
        return (s ^ c) == 32'd0 ? c : (s ^ c);
    endfunction

    wire st_ar = rnd[0][31:24] < stall_ar;
    wire st_r  = rnd[1][31:24] < stall_r;
    wire st_aw = rnd[2][31:24] < stall_aw;
    wire st_w  = rnd[3][31:24] < stall_w;
    wire st_b  = rnd[4][31:24] < stall_b;

    always_ff @(posedge clk) begin
        if (rst) now <= 64'd0;
        else     now <= now + 64'd1;
        for (int i = 0; i < 5; i++) begin
            if (rst || reseed) rnd[i] <= seed_of(seed, SEED_XOR[i]);
            else               rnd[i] <= xorshift32(rnd[i]);
        end
    end

    function automatic logic [63:0] max64(input logic [63:0] a, input logic [63:0] b);
        return a > b ? a : b;
    endfunction

    wire [BAW-1:0] err_baddr = err_addr[ADDR_BITS-1:S];

    // ------------------------------------------------------------------------------------------------
    // DRAM timeline (timing_en = 1)
    // ------------------------------------------------------------------------------------------------
    typedef struct packed {
        logic [63:0]                  free;      // first cycle the DRAM data bus is free
        logic [NB-1:0]                open;      // bank has an open row
        logic [NB-1:0][ADDR_BITS-1:0] tag;       // its row (addr >> col_bits: row and bank bits)
        logic                         dir;       // direction of the last scheduled burst (1: write)
        logic                         have;      // a burst was scheduled since rst / refresh
    } dstate_t;

    typedef struct packed {
        dstate_t     s;
        logic [63:0] start;
        logic [63:0] fin;
    } sched_t;

    dstate_t ds_q, ds_ref, ds_ar, ds_aw;
    sched_t  sc_ar, sc_aw;
    logic [31:0] refi_cnt;
    logic do_refresh;

    function automatic logic [3:0] bank_of(input logic [3:0] tg_low);
        logic [3:0] mask;
        mask = bank_bits >= 4'd4 ? 4'hf : 4'((5'd1 << bank_bits) - 5'd1);
        return tg_low & mask;
    endfunction

    // the row penalty of opening row tag `tg` in a bank whose state is (is_open, open_tag)
    function automatic logic [15:0] row_pen(input logic is_open, input logic [ADDR_BITS-1:0] open_tag,
                                            input logic [ADDR_BITS-1:0] tg);
        if (!is_open)       return {8'd0, t_rcd};
        if (open_tag != tg) return {8'd0, t_rcd} + {8'd0, t_rp};
        return 16'd0;
    endfunction

    function automatic sched_t schedule(input dstate_t s0, input logic dir, input logic [ADDR_BITS-1:0] addr,
                                        input logic [7:0] len);
        sched_t r;
        logic [ADDR_BITS-1:0] a0, a1, tg0, tg1;
        logic [3:0] b0, b1;
        logic [31:0] pen;
        logic [24:0] data_time;
        r.s = s0;
        a0 = addr & ~ADDR_BITS'(STRB - 1);
        a1 = a0 + ((ADDR_BITS'(len) + ADDR_BITS'(1)) << S) - ADDR_BITS'(1);
        tg0 = a0 >> col_bits;
        tg1 = a1 >> col_bits;
        b0 = bank_of(tg0[3:0]);
        b1 = bank_of(tg1[3:0]);
        pen = 32'(row_pen(r.s.open[b0], r.s.tag[b0], tg0));
        r.s.open[b0] = 1'b1;
        r.s.tag[b0] = tg0;
        if (tg1 != tg0) begin
            pen = pen + 32'(row_pen(r.s.open[b1], r.s.tag[b1], tg1));
            r.s.open[b1] = 1'b1;
            r.s.tag[b1] = tg1;
        end
        if (r.s.have && r.s.dir != dir) pen = pen + 32'(t_turn);
        data_time = ((25'(len) + 25'd1) * 25'(beat_cost) + 25'd255) >> 8;
        r.start = max64(now, r.s.free) + 64'(pen);
        r.fin = r.start + 64'(data_time);
        r.s.free = r.fin;
        r.s.dir = dir;
        r.s.have = 1'b1;
        return r;
    endfunction

    wire ar_fire = s_axi_arvalid && s_axi_arready;
    wire aw_fire = s_axi_awvalid && s_axi_awready;

    always_comb begin
        do_refresh = timing_en && t_refi != 16'd0 && refi_cnt + 32'd1 >= 32'(t_refi);
        ds_ref = ds_q;
        if (do_refresh) begin
            ds_ref.free = max64(ds_q.free, now) + 64'(t_rfc);
            ds_ref.open = '0;
        end
        sc_ar = '0;
        sc_aw = '0;
        ds_ar = ds_ref;
        if (ar_fire && timing_en) begin
            sc_ar = schedule(ds_ref, 1'b0, s_axi_araddr, s_axi_arlen);
            ds_ar = sc_ar.s;
        end
        ds_aw = ds_ar;
        if (aw_fire && timing_en) begin
            sc_aw = schedule(ds_ar, 1'b1, s_axi_awaddr, s_axi_awlen);
            ds_aw = sc_aw.s;
        end
    end

    always_ff @(posedge clk) begin
        if (rst || !timing_en) begin
            ds_q <= '0;
            refi_cnt <= 32'd0;
        end else begin
            ds_q <= ds_aw;
            refi_cnt <= do_refresh ? 32'd0 : refi_cnt + 32'd1;
        end
    end

    // ------------------------------------------------------------------------------------------------
    // Read channel
    // ------------------------------------------------------------------------------------------------
    logic [ID_BITS-1:0]   rq_id   [Q];
    logic [ADDR_BITS-1:0] rq_addr [Q];
    logic [7:0]           rq_len  [Q];
    logic [63:0]          rq_t0   [Q];           // first beat available from this cycle
    logic [15:0]          rq_cost [Q];           // beat_cost (0 in ideal mode)
    logic [PW-1:0]        rq_wp, rq_rp;
    logic [7:0]           r_beat;
    logic                 r_hold;                // RVALID was up and not taken last cycle
    logic [DATA_BITS-1:0] r_data_q;
    logic [1:0]           r_resp_q;

    wire [QUEUE_LOG2-1:0] rq_h = rq_rp[QUEUE_LOG2-1:0];
    wire rq_empty = rq_wp == rq_rp;
    wire rq_full  = (rq_wp - rq_rp) == PW'(Q);
    wire [BAW-1:0] r_baddr = rq_addr[rq_h][ADDR_BITS-1:S] + BAW'(r_beat);
    wire [23:0] r_prod = 24'(r_beat) * 24'(rq_cost[rq_h]);
    wire [15:0] r_off = 16'(r_prod >> 8);       // floor(beat * beat_cost / 256)
    wire r_avail = !rq_empty && now >= rq_t0[rq_h] + 64'(r_off);
    wire r_err = err_en && r_baddr == err_baddr;

    assign s_axi_arready = !rst && !rq_full && !st_ar;
    assign s_axi_rvalid  = !rst && r_avail && (r_hold || !st_r);
    assign s_axi_rid     = rq_id[rq_h];
    assign s_axi_rlast   = r_beat == rq_len[rq_h];
    assign s_axi_rdata   = r_hold ? r_data_q : mem[IDXW'(r_baddr)];
    assign s_axi_rresp   = r_hold ? r_resp_q : (r_err ? 2'b10 : 2'b00);
    wire r_fire = s_axi_rvalid && s_axi_rready;

    always_ff @(posedge clk) begin
        r_data_q <= s_axi_rdata;
        r_resp_q <= s_axi_rresp;
        if (rst) begin
            rq_wp <= '0;
            rq_rp <= '0;
            r_beat <= 8'd0;
            r_hold <= 1'b0;
        end else begin
            r_hold <= s_axi_rvalid && !s_axi_rready;
            if (ar_fire) begin
                rq_id[rq_wp[QUEUE_LOG2-1:0]]   <= s_axi_arid;
                rq_addr[rq_wp[QUEUE_LOG2-1:0]] <= s_axi_araddr;
                rq_len[rq_wp[QUEUE_LOG2-1:0]]  <= s_axi_arlen;
                rq_t0[rq_wp[QUEUE_LOG2-1:0]]   <= timing_en ? sc_ar.start + 64'(t_read) : 64'd0;
                rq_cost[rq_wp[QUEUE_LOG2-1:0]] <= timing_en ? beat_cost : 16'd0;
                rq_wp <= rq_wp + PW'(1);
            end
            if (r_fire) begin
                if (s_axi_rlast) begin
                    r_beat <= 8'd0;
                    rq_rp <= rq_rp + PW'(1);
                end else begin
                    r_beat <= r_beat + 8'd1;
                end
            end
        end
    end

    // ------------------------------------------------------------------------------------------------
    // Write channels: entries [wq_bp, wq_dp) have all their data and wait for B, [wq_dp, wq_wp) take W
    // ------------------------------------------------------------------------------------------------
    logic [ID_BITS-1:0]   wq_id   [Q];
    logic [ADDR_BITS-1:0] wq_addr [Q];
    logic [7:0]           wq_len  [Q];
    logic [63:0]          wq_fin  [Q];           // end of the DRAM slot (0 in ideal mode)
    logic                 wq_err  [Q];
    logic [63:0]          wq_bt   [Q];           // B available from this cycle
    logic [PW-1:0]        wq_wp, wq_dp, wq_bp;
    logic [7:0]           w_beat;
    logic                 b_hold;

    wire [QUEUE_LOG2-1:0] wq_d = wq_dp[QUEUE_LOG2-1:0];
    wire [QUEUE_LOG2-1:0] wq_b = wq_bp[QUEUE_LOG2-1:0];
    wire wq_full = (wq_wp - wq_bp) == PW'(Q);
    wire [BAW-1:0] w_baddr = wq_addr[wq_d][ADDR_BITS-1:S] + BAW'(w_beat);
    wire w_err = err_en && w_baddr == err_baddr;
    wire w_last_beat = w_beat == wq_len[wq_d];
    logic [DATA_BITS-1:0] w_mask;
    always_comb
        for (int i = 0; i < STRB; i++) w_mask[8*i +: 8] = {8{s_axi_wstrb[i]}};

    assign s_axi_awready = !rst && !wq_full && !st_aw;
    assign s_axi_wready  = !rst && wq_dp != wq_wp && !st_w;
    wire w_fire = s_axi_wvalid && s_axi_wready;
    wire b_avail = wq_bp != wq_dp && now >= wq_bt[wq_b];
    assign s_axi_bvalid  = !rst && b_avail && (b_hold || !st_b);
    assign s_axi_bid     = wq_id[wq_b];
    assign s_axi_bresp   = wq_err[wq_b] ? 2'b10 : 2'b00;
    wire b_fire = s_axi_bvalid && s_axi_bready;

    always_ff @(posedge clk) begin
        if (w_fire && !w_err)
            mem[IDXW'(w_baddr)] <= (mem[IDXW'(w_baddr)] & ~w_mask) | (s_axi_wdata & w_mask);
    end

    always_ff @(posedge clk) begin
        if (rst) begin
            wq_wp <= '0;
            wq_dp <= '0;
            wq_bp <= '0;
            w_beat <= 8'd0;
            b_hold <= 1'b0;
        end else begin
            b_hold <= s_axi_bvalid && !s_axi_bready;
            if (aw_fire) begin
                wq_id[wq_wp[QUEUE_LOG2-1:0]]   <= s_axi_awid;
                wq_addr[wq_wp[QUEUE_LOG2-1:0]] <= s_axi_awaddr;
                wq_len[wq_wp[QUEUE_LOG2-1:0]]  <= s_axi_awlen;
                wq_fin[wq_wp[QUEUE_LOG2-1:0]]  <= timing_en ? sc_aw.fin : 64'd0;
                wq_err[wq_wp[QUEUE_LOG2-1:0]]  <= 1'b0;
                wq_wp <= wq_wp + PW'(1);
            end
            if (w_fire) begin
                if (w_err) wq_err[wq_d] <= 1'b1;
                if (w_last_beat) begin
                    wq_bt[wq_d] <= timing_en ? max64(now, wq_fin[wq_d]) + 64'(t_write) : 64'd0;
                    w_beat <= 8'd0;
                    wq_dp <= wq_dp + PW'(1);
                end else begin
                    w_beat <= w_beat + 8'd1;
                end
            end
            if (b_fire) wq_bp <= wq_bp + PW'(1);
        end
    end

    // ------------------------------------------------------------------------------------------------
    // Counters
    // ------------------------------------------------------------------------------------------------
    always_ff @(posedge clk) begin
        if (rst || reseed) begin
            rd_beats <= 32'd0;
            wr_beats <= 32'd0;
            rd_bursts <= 32'd0;
            wr_bursts <= 32'd0;
        end else begin
            rd_beats <= rd_beats + 32'(r_fire);
            wr_beats <= wr_beats + 32'(w_fire);
            rd_bursts <= rd_bursts + 32'(ar_fire);
            wr_bursts <= wr_bursts + 32'(aw_fire);
        end
    end

    // ------------------------------------------------------------------------------------------------
    // Protocol checker
    // ------------------------------------------------------------------------------------------------
    // a burst of len + 1 beats from (the beat containing) page offset `offs` ends beyond its 4 KiB page
    function automatic logic crosses_4k(input logic [11:0] offs, input logic [7:0] len);
        logic [11:0] start_offs;
        logic [19:0] end_offs;
        start_offs = offs & ~12'(STRB - 1);
        end_offs = 20'(start_offs) + ((20'(len) + 20'd1) << S);
        return end_offs > 20'd4096;
    endfunction

    localparam int ARPW = ADDR_BITS + 8 + 3 + 2 + ID_BITS;
    wire [ARPW-1:0] ar_pl = {s_axi_araddr, s_axi_arlen, s_axi_arsize, s_axi_arburst, s_axi_arid};
    wire [ARPW-1:0] aw_pl = {s_axi_awaddr, s_axi_awlen, s_axi_awsize, s_axi_awburst, s_axi_awid};
    wire [DATA_BITS+STRB:0] w_pl = {s_axi_wdata, s_axi_wstrb, s_axi_wlast};
    logic [ARPW-1:0] ar_pl_q, aw_pl_q;
    logic [DATA_BITS+STRB:0] w_pl_q;
    logic ar_wait_q, aw_wait_q, w_wait_q;        // VALID & !READY last cycle

    wire v_ar_4k    = ar_fire && crosses_4k(s_axi_araddr[11:0], s_axi_arlen);
    wire v_aw_4k    = aw_fire && crosses_4k(s_axi_awaddr[11:0], s_axi_awlen);
    wire v_ar_size  = ar_fire && s_axi_arsize != 3'(S);
    wire v_aw_size  = aw_fire && s_axi_awsize != 3'(S);
    wire v_ar_burst = ar_fire && s_axi_arburst != 2'b01;
    wire v_aw_burst = aw_fire && s_axi_awburst != 2'b01;
    wire v_ar_drop  = ar_wait_q && !s_axi_arvalid;
    wire v_aw_drop  = aw_wait_q && !s_axi_awvalid;
    wire v_w_drop   = w_wait_q && !s_axi_wvalid;
    wire v_ar_chg   = ar_wait_q && s_axi_arvalid && ar_pl != ar_pl_q;
    wire v_aw_chg   = aw_wait_q && s_axi_awvalid && aw_pl != aw_pl_q;
    wire v_w_chg    = w_wait_q && s_axi_wvalid && w_pl != w_pl_q;
    wire v_wlast    = w_fire && s_axi_wlast != w_last_beat;
    wire any_violation = v_ar_4k | v_aw_4k | v_ar_size | v_aw_size | v_ar_burst | v_aw_burst | v_ar_drop |
                         v_aw_drop | v_w_drop | v_ar_chg | v_aw_chg | v_w_chg | v_wlast;

    always_ff @(posedge clk) begin
        ar_pl_q <= ar_pl;
        aw_pl_q <= aw_pl;
        w_pl_q <= w_pl;
        if (rst) begin
            ar_wait_q <= 1'b0;
            aw_wait_q <= 1'b0;
            w_wait_q <= 1'b0;
            protocol_error <= 1'b0;
        end else begin
            ar_wait_q <= s_axi_arvalid && !s_axi_arready;
            aw_wait_q <= s_axi_awvalid && !s_axi_awready;
            w_wait_q <= s_axi_wvalid && !s_axi_wready;
            if (any_violation && !protocol_error) begin
                protocol_error <= 1'b1;
                if (v_ar_4k)
                    $display("axi_dram: AR burst crosses a 4 KiB boundary (araddr %h arlen %0d) at cycle %0d",
                             s_axi_araddr, s_axi_arlen, now);
                else if (v_aw_4k)
                    $display("axi_dram: AW burst crosses a 4 KiB boundary (awaddr %h awlen %0d) at cycle %0d",
                             s_axi_awaddr, s_axi_awlen, now);
                else if (v_ar_size)
                    $display("axi_dram: ARSIZE %0d is not the full width %0d at cycle %0d", s_axi_arsize, S, now);
                else if (v_aw_size)
                    $display("axi_dram: AWSIZE %0d is not the full width %0d at cycle %0d", s_axi_awsize, S, now);
                else if (v_ar_burst)
                    $display("axi_dram: ARBURST %0d is not INCR at cycle %0d", s_axi_arburst, now);
                else if (v_aw_burst)
                    $display("axi_dram: AWBURST %0d is not INCR at cycle %0d", s_axi_awburst, now);
                else if (v_ar_drop)
                    $display("axi_dram: ARVALID dropped before ARREADY at cycle %0d", now);
                else if (v_aw_drop)
                    $display("axi_dram: AWVALID dropped before AWREADY at cycle %0d", now);
                else if (v_w_drop)
                    $display("axi_dram: WVALID dropped before WREADY at cycle %0d", now);
                else if (v_ar_chg)
                    $display("axi_dram: AR payload changed while ARVALID & !ARREADY at cycle %0d", now);
                else if (v_aw_chg)
                    $display("axi_dram: AW payload changed while AWVALID & !AWREADY at cycle %0d", now);
                else if (v_w_chg)
                    $display("axi_dram: W payload changed while WVALID & !WREADY at cycle %0d", now);
                else
                    $display("axi_dram: WLAST %0d on beat %0d of a %0d-beat burst at cycle %0d", s_axi_wlast,
                             w_beat, 32'(wq_len[wq_d]) + 1, now);
            end
        end
    end

    wire _unused_ok = &{1'b0, s_axi_awlock, s_axi_awcache, s_axi_awprot, s_axi_arlock, s_axi_arcache,
                        s_axi_arprot, err_addr[S-1:0], sc_ar.fin, sc_aw.start};
endmodule
