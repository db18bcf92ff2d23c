////////////////////////////////////////////////////////////////////////////////
//
// mlo_faxil_slave.v: formal properties of an AXI4-Lite slave
//
// Part of mlo_hw (Apache-2.0, see the repository's LICENSE). Written for this
// project; no code is copied from elsewhere.
//
// The property catalogue and the interface follow ZipCPU's faxil_slave.v
// (https://github.com/ZipCPU/wb2axip, bench/formal, Apache-2.0,
// (C) Gisselquist Technology): same ports (i_clk, i_axi_reset_n, i_axi_*),
// same parameters where they exist there, the same three counters out, and
// the same convention: the master's outputs (the slave's inputs) are
// assume()d, the slave's outputs are assert()ed. That file is complete as
// published; the checks here are the same list with these differences:
//   * AxPROT and AxCACHE are left free (faxil_slave assumes AxPROT == 0 and a
//     fixed AxCACHE), so the slave is checked for every master;
//   * the response-latency and stall limits are separate parameters with the
//     same names; a limit of 0 turns a check off;
//   * every property carries a name (a_* asserted of the slave, s_* assumed of
//     the master).
// Because the interface is the same, the upstream faxil_slave.v can be used
// instead of this file (formal/run.py --upstream-faxil PATH).
//
////////////////////////////////////////////////////////////////////////////////
`default_nettype none

module mlo_faxil_slave #(
	parameter C_AXI_DATA_WIDTH = 32,
	parameter C_AXI_ADDR_WIDTH = 28,
	parameter [0:0] F_OPT_ASSUME_RESET = 1'b1,
	parameter [0:0] F_OPT_NO_RESET = 1'b1,	// (interface compatibility: resets have no minimum length)
	parameter F_LGDEPTH      = 4,
	// a request must be accepted within F_AXI_MAXWAIT cycles (asserted)
	parameter F_AXI_MAXWAIT  = 12,
	// a response must come within F_AXI_MAXDELAY cycles of its request (asserted)
	parameter F_AXI_MAXDELAY = 12,
	// the master holds BREADY/RREADY low at most F_AXI_MAXRSTALL cycles (assumed; 0: any time)
	parameter F_AXI_MAXRSTALL = 0,
	localparam DW = C_AXI_DATA_WIDTH,
	localparam AW = C_AXI_ADDR_WIDTH
) (
	input wire		i_clk,
	input wire		i_axi_reset_n,
	input wire		i_axi_awready,
	input wire [AW-1:0]	i_axi_awaddr,
	input wire [3:0]	i_axi_awcache,
	input wire [2:0]	i_axi_awprot,
	input wire		i_axi_awvalid,
	input wire		i_axi_wready,
	input wire [DW-1:0]	i_axi_wdata,
	input wire [DW/8-1:0]	i_axi_wstrb,
	input wire		i_axi_wvalid,
	input wire [1:0]	i_axi_bresp,
	input wire		i_axi_bvalid,
	input wire		i_axi_bready,
	input wire		i_axi_arready,
	input wire [AW-1:0]	i_axi_araddr,
	input wire [3:0]	i_axi_arcache,
	input wire [2:0]	i_axi_arprot,
	input wire		i_axi_arvalid,
	input wire [1:0]	i_axi_rresp,
	input wire		i_axi_rvalid,
	input wire [DW-1:0]	i_axi_rdata,
	input wire		i_axi_rready,
	//
	output reg [F_LGDEPTH-1:0]	f_axi_rd_outstanding,	// AR accepted, R not yet
	output reg [F_LGDEPTH-1:0]	f_axi_wr_outstanding,	// W accepted, B not yet
	output reg [F_LGDEPTH-1:0]	f_axi_awr_outstanding	// AW accepted, B not yet
);
	localparam [1:0] RESP_EXOKAY = 2'b01;
	localparam [F_LGDEPTH-1:0] F_MAX = { F_LGDEPTH{1'b1} };

	wire	ar_hs = i_axi_arvalid && i_axi_arready;
	wire	r_hs  = i_axi_rvalid  && i_axi_rready;
	wire	aw_hs = i_axi_awvalid && i_axi_awready;
	wire	w_hs  = i_axi_wvalid  && i_axi_wready;
	wire	b_hs  = i_axi_bvalid  && i_axi_bready;

	reg	f_past_valid;
	initial	f_past_valid = 1'b0;
	always @(posedge i_clk)
		f_past_valid <= 1'b1;

	////////////////////////////////////////////////////////////////////////
	// Reset: VALIDs low in the cycle after a reset cycle (A3.1.2)
	////////////////////////////////////////////////////////////////////////
	generate if (F_OPT_ASSUME_RESET)
	begin : ASSUME_INITIAL_RESET
		always @(*)
		if (!f_past_valid)
			s_initial_reset: assume(!i_axi_reset_n);
	end endgenerate

	always @(posedge i_clk)
	if (!f_past_valid || !$past(i_axi_reset_n))
	begin
		s_reset_arvalid: assume(!i_axi_arvalid);
		s_reset_awvalid: assume(!i_axi_awvalid);
		s_reset_wvalid:  assume(!i_axi_wvalid);
		a_reset_bvalid:  assert(!i_axi_bvalid);
		a_reset_rvalid:  assert(!i_axi_rvalid);
	end

	////////////////////////////////////////////////////////////////////////
	// Handshake stability (A3.2.1)
	////////////////////////////////////////////////////////////////////////
	always @(posedge i_clk)
	if (f_past_valid && $past(i_axi_reset_n))
	begin
		if ($past(i_axi_awvalid && !i_axi_awready))
		begin
			s_aw_valid_held: assume(i_axi_awvalid);
			s_aw_stable:     assume($stable({ i_axi_awaddr, i_axi_awprot, i_axi_awcache }));
		end
		if ($past(i_axi_wvalid && !i_axi_wready))
		begin
			s_w_valid_held:  assume(i_axi_wvalid);
			s_w_stable:      assume($stable({ i_axi_wdata, i_axi_wstrb }));
		end
		if ($past(i_axi_arvalid && !i_axi_arready))
		begin
			s_ar_valid_held: assume(i_axi_arvalid);
			s_ar_stable:     assume($stable({ i_axi_araddr, i_axi_arprot, i_axi_arcache }));
		end
		if ($past(i_axi_bvalid && !i_axi_bready))
		begin
			a_b_valid_held:  assert(i_axi_bvalid);
			a_b_resp_stable: assert($stable(i_axi_bresp));
		end
		if ($past(i_axi_rvalid && !i_axi_rready))
		begin
			a_r_valid_held:  assert(i_axi_rvalid);
			a_r_resp_stable: assert($stable(i_axi_rresp));
			a_r_data_stable: assert($stable(i_axi_rdata));
		end
	end

	// AXI4-Lite has no exclusive accesses (B1.1): no EXOKAY
	always @(*)
	begin
		if (i_axi_bvalid)
			a_b_no_exokay: assert(i_axi_bresp != RESP_EXOKAY);
		if (i_axi_rvalid)
			a_r_no_exokay: assert(i_axi_rresp != RESP_EXOKAY);
	end

	////////////////////////////////////////////////////////////////////////
	// Outstanding requests
	////////////////////////////////////////////////////////////////////////
	initial	begin f_axi_awr_outstanding = 0; f_axi_wr_outstanding = 0; f_axi_rd_outstanding = 0; end
	always @(posedge i_clk)
	if (!i_axi_reset_n)
	begin
		f_axi_awr_outstanding <= 0;
		f_axi_wr_outstanding  <= 0;
		f_axi_rd_outstanding  <= 0;
	end else begin
		f_axi_awr_outstanding <= f_axi_awr_outstanding + (aw_hs ? 1'b1 : 1'b0) - (b_hs ? 1'b1 : 1'b0);
		f_axi_wr_outstanding  <= f_axi_wr_outstanding  + (w_hs  ? 1'b1 : 1'b0) - (b_hs ? 1'b1 : 1'b0);
		f_axi_rd_outstanding  <= f_axi_rd_outstanding  + (ar_hs ? 1'b1 : 1'b0) - (r_hs ? 1'b1 : 1'b0);
	end

	// A response only for an accepted request (A3.3.1: B after both the AW
	// and the W handshake; R after the AR handshake; never in the same cycle)
	always @(*)
	begin
		if (i_axi_bvalid)
		begin
			a_b_after_aw: assert(f_axi_awr_outstanding != 0);
			a_b_after_w:  assert(f_axi_wr_outstanding  != 0);
		end
		if (i_axi_rvalid)
			a_r_after_ar: assert(f_axi_rd_outstanding != 0);
	end

	// The counters never overflow: the slave stops accepting in time
	always @(*)
	begin
		a_awr_no_overflow: assert(f_axi_awr_outstanding < F_MAX);
		a_wr_no_overflow:  assert(f_axi_wr_outstanding  < F_MAX);
		a_rd_no_overflow:  assert(f_axi_rd_outstanding  < F_MAX);
		if (f_axi_awr_outstanding == F_MAX - 1)
			a_aw_full: assert(!i_axi_awready);
		if (f_axi_wr_outstanding == F_MAX - 1)
			a_w_full:  assert(!i_axi_wready);
		if (f_axi_rd_outstanding == F_MAX - 1)
			a_ar_full: assert(!i_axi_arready);
	end

	////////////////////////////////////////////////////////////////////////
	// Timing: requests accepted and answered within bounds (asserted); the
	// master's ready stalls (assumed, if limited)
	////////////////////////////////////////////////////////////////////////
	localparam LGT = 8;
	generate if (F_AXI_MAXWAIT > 0)
	begin : CHECK_STALLS
		reg [LGT-1:0] f_awstall, f_wstall, f_arstall;
		initial begin f_awstall = 0; f_wstall = 0; f_arstall = 0; end
		always @(posedge i_clk)
		begin
			// a slave may wait for the other write channel, and for a
			// response the master has not taken yet
			if (!i_axi_reset_n || !i_axi_awvalid || i_axi_awready || i_axi_bvalid
				|| (f_axi_awr_outstanding >= f_axi_wr_outstanding && !i_axi_wvalid))
				f_awstall <= 0;
			else
				f_awstall <= f_awstall + 1'b1;
			if (!i_axi_reset_n || !i_axi_wvalid || i_axi_wready || i_axi_bvalid
				|| (f_axi_wr_outstanding >= f_axi_awr_outstanding && !i_axi_awvalid))
				f_wstall <= 0;
			else
				f_wstall <= f_wstall + 1'b1;
			if (!i_axi_reset_n || !i_axi_arvalid || i_axi_arready || i_axi_rvalid)
				f_arstall <= 0;
			else
				f_arstall <= f_arstall + 1'b1;
		end
		always @(*)
		begin
			a_aw_stall: assert(f_awstall < F_AXI_MAXWAIT);
			a_w_stall:  assert(f_wstall  < F_AXI_MAXWAIT);
			a_ar_stall: assert(f_arstall < F_AXI_MAXWAIT);
		end
	end endgenerate

	generate if (F_AXI_MAXDELAY > 0)
	begin : CHECK_DELAY
		reg [LGT-1:0] f_wr_delay, f_rd_delay;
		initial begin f_wr_delay = 0; f_rd_delay = 0; end
		always @(posedge i_clk)
		begin
			if (!i_axi_reset_n || i_axi_bvalid || f_axi_awr_outstanding == 0 || f_axi_wr_outstanding == 0)
				f_wr_delay <= 0;
			else
				f_wr_delay <= f_wr_delay + 1'b1;
			if (!i_axi_reset_n || i_axi_rvalid || f_axi_rd_outstanding == 0)
				f_rd_delay <= 0;
			else
				f_rd_delay <= f_rd_delay + 1'b1;
		end
		always @(*)
		begin
			a_b_delay: assert(f_wr_delay < F_AXI_MAXDELAY);
			a_r_delay: assert(f_rd_delay < F_AXI_MAXDELAY);
		end
	end endgenerate

	generate if (F_AXI_MAXRSTALL > 0)
	begin : MASTER_STALLS
		reg [LGT-1:0] f_bstall, f_rstall;
		initial begin f_bstall = 0; f_rstall = 0; end
		always @(posedge i_clk)
		begin
			f_bstall <= (!i_axi_reset_n || !i_axi_bvalid || i_axi_bready) ? 0 : f_bstall + 1'b1;
			f_rstall <= (!i_axi_reset_n || !i_axi_rvalid || i_axi_rready) ? 0 : f_rstall + 1'b1;
		end
		always @(*)
		begin
			s_b_stall: assume(f_bstall < F_AXI_MAXRSTALL);
			s_r_stall: assume(f_rstall < F_AXI_MAXRSTALL);
		end
	end endgenerate

	////////////////////////////////////////////////////////////////////////
	// Cover: a write and a read can complete
	////////////////////////////////////////////////////////////////////////
	always @(posedge i_clk)
	if (i_axi_reset_n)
	begin
		c_write: cover(b_hs);
		c_read:  cover(r_hs);
	end

endmodule
`default_nettype wire
