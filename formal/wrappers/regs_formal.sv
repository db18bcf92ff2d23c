// Harness: mlo_hw.hw.regs.ControlRegs (Amaranth Verilog, module `regs`) against the AXI4-Lite
// slave properties. The engine-side inputs (busy, done, error ...) are free at every cycle.
// The register file answers one request per channel at a time: asserted here as well
// (port-level facts that also make k-induction converge).
// Mutants (define one): MUTANT_B_WITHOUT_WRITE shows BVALID on the bus in the cycle after a
// read handshake (no write pending): caught by a_b_after_aw / a_b_after_w.
// MUTANT_R_DATA_UNSTABLE flips RDATA[0] in a cycle that follows a stalled R
// (RVALID & !RREADY): caught by a_r_data_stable.
`default_nettype none
`ifndef FAXIL_MODULE
`define FAXIL_MODULE mlo_faxil_slave
`endif
module regs_formal #(
	parameter AW = 32, LW = 8
) (
	input wire		clk,
	input wire		rst,
	input wire		busy, done, error, compute_busy, dma_stall, read_beat,
	input wire [AW-1:0]	error_addr,
	input wire [3:0]	error_code,
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
	wire		awready, wready, bvalid, arready, rvalid;
	wire [1:0]	bresp, rresp;
	wire [31:0]	rdata;
	wire		start, soft_reset, irq;
	wire [15:0]	layers, tokens;
	wire [AW-1:0]	weight_base, input_base, output_base;

	regs dut (
		.clk(clk), .rst(rst),
		.s_axil_awaddr(s_axil_awaddr), .s_axil_awprot(s_axil_awprot), .s_axil_awvalid(s_axil_awvalid),
		.s_axil_awready(awready), .s_axil_wdata(s_axil_wdata), .s_axil_wstrb(s_axil_wstrb),
		.s_axil_wvalid(s_axil_wvalid), .s_axil_wready(wready), .s_axil_bresp(bresp), .s_axil_bvalid(bvalid),
		.s_axil_bready(s_axil_bready), .s_axil_araddr(s_axil_araddr), .s_axil_arprot(s_axil_arprot),
		.s_axil_arvalid(s_axil_arvalid), .s_axil_arready(arready), .s_axil_rdata(rdata), .s_axil_rresp(rresp),
		.s_axil_rvalid(rvalid), .s_axil_rready(s_axil_rready),
		.start(start), .soft_reset(soft_reset), .irq(irq), .layers(layers), .tokens(tokens),
		.weight_base(weight_base), .input_base(input_base), .output_base(output_base),
		.busy(busy), .done(done), .error(error), .error_addr(error_addr), .error_code(error_code),
		.compute_busy(compute_busy), .dma_stall(dma_stall), .read_beat(read_beat)
	);

	// what the bus sees (a mutant perturbs it)
	wire		bus_bvalid;
	wire [31:0]	bus_rdata;
`ifdef MUTANT_B_WITHOUT_WRITE
	reg f_read_taken = 1'b0;
	always @(posedge clk)
		f_read_taken <= !rst && s_axil_arvalid && arready;
	assign bus_bvalid = bvalid || f_read_taken;
`else
	assign bus_bvalid = bvalid;
`endif
`ifdef MUTANT_R_DATA_UNSTABLE
	reg f_rstalled = 1'b0;
	always @(posedge clk)
		f_rstalled <= !rst && rvalid && !s_axil_rready;
	assign bus_rdata = rdata ^ { 31'h0, f_rstalled };
`else
	assign bus_rdata = rdata;
`endif

	wire [3:0]	f_rd_out, f_wr_out, f_awr_out;
	`FAXIL_MODULE #(
		.C_AXI_DATA_WIDTH(32), .C_AXI_ADDR_WIDTH(LW), .F_LGDEPTH(4),
		.F_AXI_MAXWAIT(4), .F_AXI_MAXDELAY(4), .F_AXI_MAXRSTALL(0)
	) props (
		.i_clk(clk), .i_axi_reset_n(!rst),
		.i_axi_awready(awready), .i_axi_awaddr(s_axil_awaddr), .i_axi_awcache(4'h0), .i_axi_awprot(s_axil_awprot),
		.i_axi_awvalid(s_axil_awvalid),
		.i_axi_wready(wready), .i_axi_wdata(s_axil_wdata), .i_axi_wstrb(s_axil_wstrb), .i_axi_wvalid(s_axil_wvalid),
		.i_axi_bresp(bresp), .i_axi_bvalid(bus_bvalid), .i_axi_bready(s_axil_bready),
		.i_axi_arready(arready), .i_axi_araddr(s_axil_araddr), .i_axi_arcache(4'h0), .i_axi_arprot(s_axil_arprot),
		.i_axi_arvalid(s_axil_arvalid),
		.i_axi_rresp(rresp), .i_axi_rvalid(rvalid), .i_axi_rdata(bus_rdata), .i_axi_rready(s_axil_rready),
		.f_axi_rd_outstanding(f_rd_out), .f_axi_wr_outstanding(f_wr_out), .f_axi_awr_outstanding(f_awr_out)
	);

	// one request per channel in flight: the counters follow the response VALIDs
	always @(*)
	begin
		a_regs_one_write: assert(f_awr_out == { 3'h0, bvalid } && f_wr_out == { 3'h0, bvalid });
		a_regs_one_read:  assert(f_rd_out == { 3'h0, rvalid });
	end
endmodule
`default_nettype wire
