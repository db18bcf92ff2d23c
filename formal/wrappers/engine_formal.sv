// Harness: the engine's top level mlo_hw.hw.layer_engine.EngineTop (Amaranth Verilog, module
// `engine_top`; aclk, aresetn active low) with the AXI4 master properties on m_axi_* and
// the AXI4-Lite slave properties on s_axil_*. Both sides are free within their properties:
// the host may write any register at any cycle (START, CTRL.soft_reset ...), the memory
// may stall, answer in any order the properties allow and return error responses.
// Mutants (define one): MUTANT_AR_SIZE_UNSTABLE shows ARSIZE one smaller on the bus in a
// cycle that follows a stalled AR: caught by a_ar_size_stable. MUTANT_AXIL_B_WITHOUT_WRITE
// shows s_axil BVALID in the cycle after a register read handshake: caught by
// a_b_after_aw / a_b_after_w.
`default_nettype none
`ifndef FAXIL_MODULE
`define FAXIL_MODULE mlo_faxil_slave
`endif
module engine_formal #(
	parameter AW = 32, DW = 64, IW = 1, LW = 8,
	parameter [7:0] MAXBURST = 8'hff, LGQ = 3
) (
	input wire		clk,
	input wire		aresetn,
	input wire		m_axi_arready,
	input wire [IW-1:0]	m_axi_rid,
	input wire [DW-1:0]	m_axi_rdata,
	input wire [1:0]	m_axi_rresp,
	input wire		m_axi_rlast,
	input wire		m_axi_rvalid,
	input wire		m_axi_awready,
	input wire		m_axi_wready,
	input wire [IW-1:0]	m_axi_bid,
	input wire [1:0]	m_axi_bresp,
	input wire		m_axi_bvalid,
	input wire [LW-1:0]	s_axil_awaddr,
	input wire [2:0]	s_axil_awprot,
	input wire		s_axil_awvalid,
	input wire [31:0]	s_axil_wdata,
	input wire [3:0]	s_axil_wstrb,
	input wire		s_axil_wvalid,
	input wire		s_axil_bready,
	input wire [LW-1:0]	s_axil_araddr,
	input wire [2:0]	s_axil_arprot,
	input wire		s_axil_arvalid,
	input wire		s_axil_rready
);
	wire [IW-1:0]	arid, awid;
	wire [AW-1:0]	araddr, awaddr;
	wire [7:0]	arlen, awlen;
	wire [2:0]	arsize, arprot, awsize, awprot;
	wire [1:0]	arburst, awburst;
	wire		arlock, arvalid, rready, awlock, awvalid, wlast, wvalid, bready;
	wire [3:0]	arcache, awcache;
	wire [DW-1:0]	wdata;
	wire [DW/8-1:0]	wstrb;
	wire		s_awready, s_wready, s_bvalid, s_arready, s_rvalid, irq;
	wire [1:0]	s_bresp, s_rresp;
	wire [31:0]	s_rdata;

	engine_top dut (
		.aclk(clk), .aresetn(aresetn),
		.m_axi_arid(arid), .m_axi_araddr(araddr), .m_axi_arlen(arlen), .m_axi_arsize(arsize),
		.m_axi_arburst(arburst), .m_axi_arlock(arlock), .m_axi_arcache(arcache), .m_axi_arprot(arprot),
		.m_axi_arvalid(arvalid), .m_axi_arready(m_axi_arready),
		.m_axi_rid(m_axi_rid), .m_axi_rdata(m_axi_rdata), .m_axi_rresp(m_axi_rresp), .m_axi_rlast(m_axi_rlast),
		.m_axi_rvalid(m_axi_rvalid), .m_axi_rready(rready),
		.m_axi_awid(awid), .m_axi_awaddr(awaddr), .m_axi_awlen(awlen), .m_axi_awsize(awsize),
		.m_axi_awburst(awburst), .m_axi_awlock(awlock), .m_axi_awcache(awcache), .m_axi_awprot(awprot),
		.m_axi_awvalid(awvalid), .m_axi_awready(m_axi_awready),
		.m_axi_wdata(wdata), .m_axi_wstrb(wstrb), .m_axi_wlast(wlast), .m_axi_wvalid(wvalid),
		.m_axi_wready(m_axi_wready),
		.m_axi_bid(m_axi_bid), .m_axi_bresp(m_axi_bresp), .m_axi_bvalid(m_axi_bvalid), .m_axi_bready(bready),
		.s_axil_awaddr(s_axil_awaddr), .s_axil_awprot(s_axil_awprot), .s_axil_awvalid(s_axil_awvalid),
		.s_axil_awready(s_awready), .s_axil_wdata(s_axil_wdata), .s_axil_wstrb(s_axil_wstrb),
		.s_axil_wvalid(s_axil_wvalid), .s_axil_wready(s_wready), .s_axil_bresp(s_bresp), .s_axil_bvalid(s_bvalid),
		.s_axil_bready(s_axil_bready), .s_axil_araddr(s_axil_araddr), .s_axil_arprot(s_axil_arprot),
		.s_axil_arvalid(s_axil_arvalid), .s_axil_arready(s_arready), .s_axil_rdata(s_rdata), .s_axil_rresp(s_rresp),
		.s_axil_rvalid(s_rvalid), .s_axil_rready(s_axil_rready),
		.irq(irq)
	);

	// what the buses see (a mutant perturbs them)
	wire [2:0]	bus_arsize;
	wire		bus_s_bvalid;
`ifdef MUTANT_AR_SIZE_UNSTABLE
	reg f_stalled = 1'b0;
	always @(posedge clk)
		f_stalled <= aresetn && arvalid && !m_axi_arready;
	assign bus_arsize = f_stalled ? arsize - 3'h1 : arsize;
`else
	assign bus_arsize = arsize;
`endif
`ifdef MUTANT_AXIL_B_WITHOUT_WRITE
	reg f_read_taken = 1'b0;
	always @(posedge clk)
		f_read_taken <= aresetn && s_axil_arvalid && s_arready;
	assign bus_s_bvalid = s_bvalid || f_read_taken;
`else
	assign bus_s_bvalid = s_bvalid;
`endif

	mlo_faxi_master #(
		.C_AXI_ID_WIDTH(IW), .C_AXI_DATA_WIDTH(DW), .C_AXI_ADDR_WIDTH(AW),
		.OPT_MAXBURST(MAXBURST), .OPT_EXCLUSIVE(1'b0), .OPT_NARROW_BURST(1'b1),
		.F_LGQUEUE(LGQ)
	) m_props (
		.i_clk(clk), .i_axi_reset_n(aresetn),
		.i_axi_awready(m_axi_awready), .i_axi_awid(awid), .i_axi_awaddr(awaddr), .i_axi_awlen(awlen),
		.i_axi_awsize(awsize), .i_axi_awburst(awburst), .i_axi_awlock(awlock), .i_axi_awcache(awcache),
		.i_axi_awprot(awprot), .i_axi_awqos(4'h0), .i_axi_awvalid(awvalid),
		.i_axi_wready(m_axi_wready), .i_axi_wdata(wdata), .i_axi_wstrb(wstrb), .i_axi_wlast(wlast),
		.i_axi_wvalid(wvalid),
		.i_axi_bid(m_axi_bid), .i_axi_bresp(m_axi_bresp), .i_axi_bvalid(m_axi_bvalid), .i_axi_bready(bready),
		.i_axi_arready(m_axi_arready), .i_axi_arid(arid), .i_axi_araddr(araddr), .i_axi_arlen(arlen),
		.i_axi_arsize(bus_arsize), .i_axi_arburst(arburst), .i_axi_arlock(arlock), .i_axi_arcache(arcache),
		.i_axi_arprot(arprot), .i_axi_arqos(4'h0), .i_axi_arvalid(arvalid),
		.i_axi_rid(m_axi_rid), .i_axi_rresp(m_axi_rresp), .i_axi_rvalid(m_axi_rvalid),
		.i_axi_rdata(m_axi_rdata), .i_axi_rlast(m_axi_rlast), .i_axi_rready(rready),
		.f_axi_awr_nbursts(), .f_axi_wr_pending(), .f_axi_rd_nbursts(), .f_axi_rd_outstanding()
	);

	`FAXIL_MODULE #(
		.C_AXI_DATA_WIDTH(32), .C_AXI_ADDR_WIDTH(LW), .F_LGDEPTH(4),
		.F_AXI_MAXWAIT(4), .F_AXI_MAXDELAY(4), .F_AXI_MAXRSTALL(0)
	) s_props (
		.i_clk(clk), .i_axi_reset_n(aresetn),
		.i_axi_awready(s_awready), .i_axi_awaddr(s_axil_awaddr), .i_axi_awcache(4'h0), .i_axi_awprot(s_axil_awprot),
		.i_axi_awvalid(s_axil_awvalid),
		.i_axi_wready(s_wready), .i_axi_wdata(s_axil_wdata), .i_axi_wstrb(s_axil_wstrb), .i_axi_wvalid(s_axil_wvalid),
		.i_axi_bresp(s_bresp), .i_axi_bvalid(bus_s_bvalid), .i_axi_bready(s_axil_bready),
		.i_axi_arready(s_arready), .i_axi_araddr(s_axil_araddr), .i_axi_arcache(4'h0), .i_axi_arprot(s_axil_arprot),
		.i_axi_arvalid(s_axil_arvalid),
		.i_axi_rresp(s_rresp), .i_axi_rvalid(s_rvalid), .i_axi_rdata(s_rdata), .i_axi_rready(s_axil_rready),
		.f_axi_rd_outstanding(), .f_axi_wr_outstanding(), .f_axi_awr_outstanding()
	);
endmodule
`default_nettype wire
