// Harness: mlo_hw.hw.weight_dma.ReadDma (Amaranth Verilog, module `readdma`) against the AXI4
// master properties (read channels; the write channels are tied idle).
// Every input of the DMA is free: commands, downstream ready, cancel and clear at any cycle.
// Mutants (define one): MUTANT_AR_LEN_UNSTABLE shows ARLEN as 0 on the bus in every
// cycle that follows a stalled AR (ARVALID & !ARREADY): caught by a_ar_len_stable.
// MUTANT_AR_4K moves ARADDR up by 0xFC0 bytes: a burst then crosses 4 KiB (a_ar_4k).
`default_nettype none
module readdma_formal #(
	parameter AW = 32, DW = 64, IW = 1, CMDW = 41, BEATW = 66, ERRW = 3,
	parameter [7:0] MAXBURST = 8'hff, LGQ = 3
) (
	input wire		clk,
	input wire		rst,
	input wire		cmd_valid,
	input wire [CMDW-1:0]	cmd_payload,
	input wire		beats_ready,
	input wire		cancel,
	input wire		clear,
	input wire		m_axi_arready,
	input wire [IW-1:0]	m_axi_rid,
	input wire [DW-1:0]	m_axi_rdata,
	input wire [1:0]	m_axi_rresp,
	input wire		m_axi_rlast,
	input wire		m_axi_rvalid
);
	wire		cmd_ready, beats_valid, busy, error;
	wire [BEATW-1:0] beats_payload;
	wire [AW-1:0]	error_addr;
	wire [ERRW-1:0]	error_code;
	wire [IW-1:0]	arid;
	wire [AW-1:0]	araddr;
	wire [7:0]	arlen;
	wire [2:0]	arsize, arprot;
	wire [1:0]	arburst;
	wire		arlock, arvalid, rready;
	wire [3:0]	arcache;

	readdma dut (
		.clk(clk), .rst(rst),
		.cmd__valid(cmd_valid), .cmd__ready(cmd_ready), .cmd__payload(cmd_payload),
		.beats__valid(beats_valid), .beats__ready(beats_ready), .beats__payload(beats_payload),
		.cancel(cancel), .clear(clear), .busy(busy), .error(error),
		.error_addr(error_addr), .error_code(error_code),
		.m_axi_arid(arid), .m_axi_araddr(araddr), .m_axi_arlen(arlen), .m_axi_arsize(arsize),
		.m_axi_arburst(arburst), .m_axi_arlock(arlock), .m_axi_arcache(arcache), .m_axi_arprot(arprot),
		.m_axi_arvalid(arvalid), .m_axi_arready(m_axi_arready),
		.m_axi_rid(m_axi_rid), .m_axi_rdata(m_axi_rdata), .m_axi_rresp(m_axi_rresp),
		.m_axi_rlast(m_axi_rlast), .m_axi_rvalid(m_axi_rvalid), .m_axi_rready(rready)
	);

	// what the bus sees (a mutant perturbs it)
	wire [7:0]	bus_arlen;
	wire [AW-1:0]	bus_araddr;
`ifdef MUTANT_AR_LEN_UNSTABLE
	reg f_stalled = 1'b0;
	always @(posedge clk)
		f_stalled <= !rst && arvalid && !m_axi_arready;
	assign bus_arlen = f_stalled ? 8'h0 : arlen;
`else
	assign bus_arlen = arlen;
`endif
`ifdef MUTANT_AR_4K
	assign bus_araddr = araddr + 32'hFC0;
`else
	assign bus_araddr = araddr;
`endif

	mlo_faxi_master #(
		.C_AXI_ID_WIDTH(IW), .C_AXI_DATA_WIDTH(DW), .C_AXI_ADDR_WIDTH(AW),
		.OPT_MAXBURST(MAXBURST), .OPT_EXCLUSIVE(1'b0), .OPT_NARROW_BURST(1'b0),
		.F_LGQUEUE(LGQ), .F_OPT_READ_ONLY(1'b1)
	) props (
		.i_clk(clk), .i_axi_reset_n(!rst),
		.i_axi_awready(1'b0), .i_axi_awid({IW{1'b0}}), .i_axi_awaddr({AW{1'b0}}), .i_axi_awlen(8'h0),
		.i_axi_awsize(3'h0), .i_axi_awburst(2'h0), .i_axi_awlock(1'b0), .i_axi_awcache(4'h0),
		.i_axi_awprot(3'h0), .i_axi_awqos(4'h0), .i_axi_awvalid(1'b0),
		.i_axi_wready(1'b0), .i_axi_wdata({DW{1'b0}}), .i_axi_wstrb({(DW/8){1'b0}}), .i_axi_wlast(1'b0),
		.i_axi_wvalid(1'b0),
		.i_axi_bid({IW{1'b0}}), .i_axi_bresp(2'h0), .i_axi_bvalid(1'b0), .i_axi_bready(1'b0),
		.i_axi_arready(m_axi_arready), .i_axi_arid(arid), .i_axi_araddr(bus_araddr), .i_axi_arlen(bus_arlen),
		.i_axi_arsize(arsize), .i_axi_arburst(arburst), .i_axi_arlock(arlock), .i_axi_arcache(arcache),
		.i_axi_arprot(arprot), .i_axi_arqos(4'h0), .i_axi_arvalid(arvalid),
		.i_axi_rid(m_axi_rid), .i_axi_rresp(m_axi_rresp), .i_axi_rvalid(m_axi_rvalid),
		.i_axi_rdata(m_axi_rdata), .i_axi_rlast(m_axi_rlast), .i_axi_rready(rready),
		.f_axi_awr_nbursts(), .f_axi_wr_pending(), .f_axi_rd_nbursts(), .f_axi_rd_outstanding()
	);
endmodule
`default_nettype wire
