// Harness: mlo_hw.hw.act_dma.WriteDma (Amaranth Verilog, module `writedma`) against the AXI4
// master properties (write channels; the read channels are tied idle).
// Every input of the DMA is free: commands, data beats, cancel and clear at any cycle.
// Mutants (define one): MUTANT_W_LAST_EARLY shows WLAST high on every W beat on the bus:
// caught by a_w_last (a burst of more than one beat). MUTANT_W_VALID_DROP drops WVALID in a
// cycle that follows a stalled W beat (WVALID & !WREADY): caught by a_w_valid_held.
`default_nettype none
module writedma_formal #(
	parameter AW = 32, DW = 64, IW = 1, CMDW = 48, DATAW = 72, ERRW = 3,
	parameter [7:0] MAXBURST = 8'hff, LGQ = 3
) (
	input wire		clk,
	input wire		rst,
	input wire		cmd_valid,
	input wire [CMDW-1:0]	cmd_payload,
	input wire		data_valid,
	input wire [DATAW-1:0]	data_payload,
	input wire		cancel,
	input wire		clear,
	input wire		m_axi_awready,
	input wire		m_axi_wready,
	input wire [IW-1:0]	m_axi_bid,
	input wire [1:0]	m_axi_bresp,
	input wire		m_axi_bvalid
);
	wire		cmd_ready, data_ready, busy, done, error;
	wire [AW-1:0]	error_addr;
	wire [ERRW-1:0]	error_code;
	wire [IW-1:0]	awid;
	wire [AW-1:0]	awaddr;
	wire [7:0]	awlen;
	wire [2:0]	awsize, awprot;
	wire [1:0]	awburst;
	wire		awlock, awvalid, wlast, wvalid, bready;
	wire [3:0]	awcache;
	wire [DW-1:0]	wdata;
	wire [DW/8-1:0]	wstrb;

	writedma dut (
		.clk(clk), .rst(rst),
		.cmd__valid(cmd_valid), .cmd__ready(cmd_ready), .cmd__payload(cmd_payload),
		.data__valid(data_valid), .data__ready(data_ready), .data__payload(data_payload),
		.cancel(cancel), .clear(clear), .busy(busy), .done(done), .error(error),
		.error_addr(error_addr), .error_code(error_code),
		.m_axi_awid(awid), .m_axi_awaddr(awaddr), .m_axi_awlen(awlen), .m_axi_awsize(awsize),
		.m_axi_awburst(awburst), .m_axi_awlock(awlock), .m_axi_awcache(awcache), .m_axi_awprot(awprot),
		.m_axi_awvalid(awvalid), .m_axi_awready(m_axi_awready),
		.m_axi_wdata(wdata), .m_axi_wstrb(wstrb), .m_axi_wlast(wlast), .m_axi_wvalid(wvalid),
		.m_axi_wready(m_axi_wready),
		.m_axi_bid(m_axi_bid), .m_axi_bresp(m_axi_bresp), .m_axi_bvalid(m_axi_bvalid), .m_axi_bready(bready)
	);

	// what the bus sees (a mutant perturbs it)
	wire		bus_wlast, bus_wvalid;
`ifdef MUTANT_W_LAST_EARLY
	assign bus_wlast = 1'b1;
`else
	assign bus_wlast = wlast;
`endif
`ifdef MUTANT_W_VALID_DROP
	reg f_wstalled = 1'b0;
	always @(posedge clk)
		f_wstalled <= !rst && wvalid && !m_axi_wready;
	assign bus_wvalid = wvalid && !f_wstalled;
`else
	assign bus_wvalid = wvalid;
`endif

	mlo_faxi_master #(
		.C_AXI_ID_WIDTH(IW), .C_AXI_DATA_WIDTH(DW), .C_AXI_ADDR_WIDTH(AW),
		.OPT_MAXBURST(MAXBURST), .OPT_EXCLUSIVE(1'b0), .OPT_NARROW_BURST(1'b0),
		.F_LGQUEUE(LGQ), .F_OPT_WRITE_ONLY(1'b1), .F_AXI_MAXBSTALL(1)
	) props (
		.i_clk(clk), .i_axi_reset_n(!rst),
		.i_axi_awready(m_axi_awready), .i_axi_awid(awid), .i_axi_awaddr(awaddr), .i_axi_awlen(awlen),
		.i_axi_awsize(awsize), .i_axi_awburst(awburst), .i_axi_awlock(awlock), .i_axi_awcache(awcache),
		.i_axi_awprot(awprot), .i_axi_awqos(4'h0), .i_axi_awvalid(awvalid),
		.i_axi_wready(m_axi_wready), .i_axi_wdata(wdata), .i_axi_wstrb(wstrb), .i_axi_wlast(bus_wlast),
		.i_axi_wvalid(bus_wvalid),
		.i_axi_bid(m_axi_bid), .i_axi_bresp(m_axi_bresp), .i_axi_bvalid(m_axi_bvalid), .i_axi_bready(bready),
		.i_axi_arready(1'b0), .i_axi_arid({IW{1'b0}}), .i_axi_araddr({AW{1'b0}}), .i_axi_arlen(8'h0),
		.i_axi_arsize(3'h0), .i_axi_arburst(2'h0), .i_axi_arlock(1'b0), .i_axi_arcache(4'h0),
		.i_axi_arprot(3'h0), .i_axi_arqos(4'h0), .i_axi_arvalid(1'b0),
		.i_axi_rid({IW{1'b0}}), .i_axi_rresp(2'h0), .i_axi_rvalid(1'b0),
		.i_axi_rdata({DW{1'b0}}), .i_axi_rlast(1'b0), .i_axi_rready(1'b0),
		.f_axi_awr_nbursts(), .f_axi_wr_pending(), .f_axi_rd_nbursts(), .f_axi_rd_outstanding()
	);
endmodule
`default_nettype wire
