// mlo_axi_upsizer: AXI4 up-converter from a DW-bit slave (s_axi_*, the engine's master) to a CDW-bit master
// (m_axi_*, LiteDRAMAXI2Native at the DRAM controller's native width). Part of mlo_hw (mlo_hw/rtl/): the LiteX
// SoCs of mlo_hw.soc instantiate it, and sim/litedram_model.py simulates the same file with LiteDRAM.
//
// For INCR bursts of full-width beats (what the engine issues): each narrow burst becomes the wide burst
// covering the same bytes (wide beats, the narrow beats' lanes chosen by the address), write strobes only on
// the narrow beats' lanes, read lanes picked out of the wide beats; a 4-deep FIFO of (first lane, narrow
// length) per direction keeps bursts in order. IDs and responses pass through. CDW / DW must be a power of
// two >= 2; AW >= 8. Plain Verilog-2005 (Vivado, yosys and Verilator read it as is).
module mlo_axi_upsizer #(
    parameter DW = 64,
    parameter CDW = 128,
    parameter AW = 32,
    parameter IDW = 1
) (
    input  wire             clk,
    input  wire             rst,             // synchronous, active high
    // narrow slave
    input  wire [IDW-1:0]   s_axi_awid,
    input  wire [AW-1:0]    s_axi_awaddr,
    input  wire [7:0]       s_axi_awlen,
    input  wire [2:0]       s_axi_awsize,
    input  wire [1:0]       s_axi_awburst,
    input  wire             s_axi_awlock,
    input  wire [3:0]       s_axi_awcache,
    input  wire [2:0]       s_axi_awprot,
    input  wire             s_axi_awvalid,
    output wire             s_axi_awready,
    input  wire [DW-1:0]    s_axi_wdata,
    input  wire [DW/8-1:0]  s_axi_wstrb,
    input  wire             s_axi_wlast,
    input  wire             s_axi_wvalid,
    output wire             s_axi_wready,
    output wire [IDW-1:0]   s_axi_bid,
    output wire [1:0]       s_axi_bresp,
    output wire             s_axi_bvalid,
    input  wire             s_axi_bready,
    input  wire [IDW-1:0]   s_axi_arid,
    input  wire [AW-1:0]    s_axi_araddr,
    input  wire [7:0]       s_axi_arlen,
    input  wire [2:0]       s_axi_arsize,
    input  wire [1:0]       s_axi_arburst,
    input  wire             s_axi_arlock,
    input  wire [3:0]       s_axi_arcache,
    input  wire [2:0]       s_axi_arprot,
    input  wire             s_axi_arvalid,
    output wire             s_axi_arready,
    output wire [IDW-1:0]   s_axi_rid,
    output wire [DW-1:0]    s_axi_rdata,
    output wire [1:0]       s_axi_rresp,
    output wire             s_axi_rlast,
    output wire             s_axi_rvalid,
    input  wire             s_axi_rready,
    // wide master
    output wire [IDW-1:0]   m_axi_awid,
    output wire [AW-1:0]    m_axi_awaddr,
    output wire [7:0]       m_axi_awlen,
    output wire [2:0]       m_axi_awsize,
    output wire [1:0]       m_axi_awburst,
    output wire             m_axi_awlock,
    output wire [3:0]       m_axi_awcache,
    output wire [2:0]       m_axi_awprot,
    output wire             m_axi_awvalid,
    input  wire             m_axi_awready,
    output wire [CDW-1:0]   m_axi_wdata,
    output wire [CDW/8-1:0] m_axi_wstrb,
    output wire             m_axi_wlast,
    output wire             m_axi_wvalid,
    input  wire             m_axi_wready,
    input  wire [IDW-1:0]   m_axi_bid,
    input  wire [1:0]       m_axi_bresp,
    input  wire             m_axi_bvalid,
    output wire             m_axi_bready,
    output wire [IDW-1:0]   m_axi_arid,
    output wire [AW-1:0]    m_axi_araddr,
    output wire [7:0]       m_axi_arlen,
    output wire [2:0]       m_axi_arsize,
    output wire [1:0]       m_axi_arburst,
    output wire             m_axi_arlock,
    output wire [3:0]       m_axi_arcache,
    output wire [2:0]       m_axi_arprot,
    output wire             m_axi_arvalid,
    input  wire             m_axi_arready,
    input  wire [IDW-1:0]   m_axi_rid,
    input  wire [CDW-1:0]   m_axi_rdata,
    input  wire [1:0]       m_axi_rresp,
    input  wire             m_axi_rlast,
    input  wire             m_axi_rvalid,
    output wire             m_axi_rready
);
    localparam R = CDW / DW;                 // narrow lanes of a wide beat
    localparam LB = $clog2(R);               // lane index bits
    localparam NB = $clog2(DW / 8);          // log2 narrow bytes
    localparam WB = $clog2(CDW / 8);         // log2 wide bytes
    localparam [2:0] WSIZE = WB;
    localparam [LB-1:0] LAST_LANE = R - 1;

    // wide beats - 1 of the wide burst covering the bytes of a narrow burst (addr, len)
    function [7:0] wide_len;
        input [AW-1:0] addr;
        input [7:0] len;
        reg [AW:0] first, last, diff;
        begin
            first = {1'b0, addr};
            last = first + ({{(AW - 7){1'b0}}, len} << NB) + {{(AW + 1 - NB){1'b0}}, {NB{1'b1}}};
            diff = (last >> WB) - (first >> WB);
            wide_len = diff[7:0];
        end
    endfunction

    // ---- read side ----
    reg [LB-1:0] rf_lane [0:3];
    reg [7:0] rf_len [0:3];
    reg [2:0] rf_wp, rf_rp;
    reg [LB-1:0] r_lane;
    reg [7:0] r_cnt;
    reg r_started;
    wire [2:0] rf_count = rf_wp - rf_rp;
    wire rf_full = rf_count == 3'd4;
    wire rf_empty = rf_count == 3'd0;
    wire [LB-1:0] r_cur = r_started ? r_lane : rf_lane[rf_rp[1:0]];
    wire r_last = r_cnt == rf_len[rf_rp[1:0]];
    assign m_axi_arid = s_axi_arid;
    assign m_axi_araddr = {s_axi_araddr[AW-1:WB], {WB{1'b0}}};
    assign m_axi_arlen = wide_len(s_axi_araddr, s_axi_arlen);
    assign m_axi_arsize = WSIZE;
    assign m_axi_arburst = s_axi_arburst;
    assign m_axi_arlock = s_axi_arlock;
    assign m_axi_arcache = s_axi_arcache;
    assign m_axi_arprot = s_axi_arprot;
    assign m_axi_arvalid = s_axi_arvalid && !rf_full;
    assign s_axi_arready = m_axi_arready && !rf_full;
    assign s_axi_rvalid = m_axi_rvalid && !rf_empty;
    assign s_axi_rdata = m_axi_rdata[DW * r_cur +: DW];
    assign s_axi_rresp = m_axi_rresp;
    assign s_axi_rid = m_axi_rid;
    assign s_axi_rlast = r_last;
    assign m_axi_rready = s_axi_rready && !rf_empty && (r_cur == LAST_LANE || r_last);
    always @(posedge clk) begin
        if (rst) begin
            rf_wp <= 3'd0; rf_rp <= 3'd0; r_cnt <= 8'd0; r_started <= 1'b0; r_lane <= {LB{1'b0}};
        end else begin
            if (s_axi_arvalid && s_axi_arready) begin
                rf_lane[rf_wp[1:0]] <= s_axi_araddr[WB-1:NB];
                rf_len[rf_wp[1:0]] <= s_axi_arlen;
                rf_wp <= rf_wp + 3'd1;
            end
            if (s_axi_rvalid && s_axi_rready) begin
                if (r_last) begin
                    r_cnt <= 8'd0; r_started <= 1'b0; rf_rp <= rf_rp + 3'd1;
                end else begin
                    r_cnt <= r_cnt + 8'd1; r_started <= 1'b1; r_lane <= r_cur + 1'b1;
                end
            end
        end
    end

    // ---- write side ----
    reg [LB-1:0] wf_lane [0:3];
    reg [7:0] wf_len [0:3];
    reg [2:0] wf_wp, wf_rp;
    reg [LB-1:0] w_lane;
    reg [7:0] w_cnt;
    reg w_started;
    reg [CDW-1:0] w_hold;
    reg [CDW/8-1:0] w_hold_strb;
    reg [CDW-1:0] w_data_now;
    reg [CDW/8-1:0] w_strb_now;
    wire [2:0] wf_count = wf_wp - wf_rp;
    wire wf_full = wf_count == 3'd4;
    wire wf_empty = wf_count == 3'd0;
    wire [LB-1:0] w_cur = w_started ? w_lane : wf_lane[wf_rp[1:0]];
    wire w_last = w_cnt == wf_len[wf_rp[1:0]];
    wire w_emit = w_cur == LAST_LANE || w_last;           // this narrow beat completes a wide beat
    always @* begin
        w_data_now = w_hold;
        w_strb_now = w_hold_strb;
        w_data_now[DW * w_cur +: DW] = s_axi_wdata;
        w_strb_now[(DW / 8) * w_cur +: DW / 8] = s_axi_wstrb;
    end
    assign m_axi_awid = s_axi_awid;
    assign m_axi_awaddr = {s_axi_awaddr[AW-1:WB], {WB{1'b0}}};
    assign m_axi_awlen = wide_len(s_axi_awaddr, s_axi_awlen);
    assign m_axi_awsize = WSIZE;
    assign m_axi_awburst = s_axi_awburst;
    assign m_axi_awlock = s_axi_awlock;
    assign m_axi_awcache = s_axi_awcache;
    assign m_axi_awprot = s_axi_awprot;
    assign m_axi_awvalid = s_axi_awvalid && !wf_full;
    assign s_axi_awready = m_axi_awready && !wf_full;
    assign m_axi_wdata = w_data_now;
    assign m_axi_wstrb = w_strb_now;
    assign m_axi_wlast = w_last;
    assign m_axi_wvalid = s_axi_wvalid && !wf_empty && w_emit;
    assign s_axi_wready = !wf_empty && (w_emit ? m_axi_wready : 1'b1);
    assign s_axi_bid = m_axi_bid;
    assign s_axi_bresp = m_axi_bresp;
    assign s_axi_bvalid = m_axi_bvalid;
    assign m_axi_bready = s_axi_bready;
    always @(posedge clk) begin
        if (rst) begin
            wf_wp <= 3'd0; wf_rp <= 3'd0; w_cnt <= 8'd0; w_started <= 1'b0; w_lane <= {LB{1'b0}};
            w_hold <= {CDW{1'b0}}; w_hold_strb <= {(CDW / 8){1'b0}};
        end else begin
            if (s_axi_awvalid && s_axi_awready) begin
                wf_lane[wf_wp[1:0]] <= s_axi_awaddr[WB-1:NB];
                wf_len[wf_wp[1:0]] <= s_axi_awlen;
                wf_wp <= wf_wp + 3'd1;
            end
            if (s_axi_wvalid && s_axi_wready) begin
                if (w_emit) begin
                    w_hold_strb <= {(CDW / 8){1'b0}};
                end else begin
                    w_hold <= w_data_now;
                    w_hold_strb <= w_strb_now;
                end
                if (w_last) begin
                    w_cnt <= 8'd0; w_started <= 1'b0; wf_rp <= wf_rp + 3'd1;
                end else begin
                    w_cnt <= w_cnt + 8'd1; w_started <= 1'b1; w_lane <= w_cur + 1'b1;
                end
            end
        end
    end
endmodule
