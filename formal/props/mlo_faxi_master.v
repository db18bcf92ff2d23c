////////////////////////////////////////////////////////////////////////////////
//
// mlo_faxi_master.v: formal properties of an AXI4 (full) master
//
// Part of mlo_hw (Apache-2.0, see the repository's LICENSE). Written for this
// project; no code is copied from elsewhere.
//
// Where the properties come from
// ------------------------------
// The property *catalogue* and the module interface follow ZipCPU's
// faxi_master.v (https://github.com/ZipCPU/wb2axip, bench/formal, Apache-2.0,
// (C) Gisselquist Technology): the same port names (i_clk, i_axi_reset_n,
// i_axi_*), the same parameters where they exist there, the same counters
// out (f_axi_awr_nbursts, f_axi_wr_pending, f_axi_rd_nbursts,
// f_axi_rd_outstanding), and the same convention: properties of the master's
// outputs are assert()ed, properties of the slave's outputs are assume()d.
// The published faxi_master.v is a deliberately incomplete subset (its own
// header says so): it elides the write-data tracking (WLAST, WSTRB, WVALID
// before AW), burst legality (4 KiB, WRAP/FIXED lengths, AxSIZE), RLAST
// placement and ID handling, and it does not parse as published. Those parts
// are written here from the AMBA AXI specification (ARM IHI 0022, sections
// named at each property) instead; see docs/formal.md for the full list.
//
// Deliberate restrictions of the environment (assumptions that are stricter
// than the AXI specification, so that the checker stays small):
//   * in-order, one ID at a time: a new AxID is only asserted-equal to the ID of
//     the bursts still outstanding on that side (asserted on the master), and
//     responses carry that ID (assumed). Masters that tie AxID to 0 (all of
//     mlo_hw) lose nothing.
//   * the slave accepts at most 2**F_LGQUEUE read bursts and 2**F_LGQUEUE
//     write bursts ahead of their data (it holds AxREADY low otherwise), and it
//     accepts a W beat only once that beat's AW handshake has happened (at the
//     latest in the same cycle). As in ZipCPU's set, a master may not raise
//     WVALID before it has raised AWVALID for that burst (asserted).
//   * WSTRB is checked for INCR and FIXED bursts; WRAP bursts are checked for
//     length and alignment only.
//   * a reset may come at any cycle (F_OPT_NO_RESET=1 semantics: no minimum
//     length), synchronous, active low.
//
// Labels: every assertion and assumption has a name (a_* asserted on the
// master, s_* assumed of the slave); sim/formal.py reports failures by them.
//
////////////////////////////////////////////////////////////////////////////////
`default_nettype none

module mlo_faxi_master #(
	parameter C_AXI_ID_WIDTH   = 1,
	parameter C_AXI_DATA_WIDTH = 64,
	parameter C_AXI_ADDR_WIDTH = 32,
	parameter [7:0] OPT_MAXBURST   = 8'hff,	// largest AxLEN allowed
	parameter [0:0] OPT_EXCLUSIVE  = 1'b0,	// exclusive accesses allowed
	parameter [0:0] OPT_NARROW_BURST = 1'b1,	// AxSIZE below the bus width allowed
	parameter [0:0] F_OPT_ASSUME_RESET = 1'b1,	// the first cycle is a reset cycle
	parameter [0:0] F_OPT_NO_RESET = 1'b1,	// (interface compatibility: resets have no minimum length)
	parameter F_LGDEPTH      = 12,		// bits of the outstanding-beat counters
	parameter F_LGQUEUE      = 3,		// log2 of the bursts tracked between address and data
	// assert the checker's own invariants (help k-induction; cost BMC time)
	parameter [0:0] F_OPT_INVARIANTS = 1'b0,
	// a master of one direction only: the other's VALIDs are asserted low
	// (and its cover statement dropped)
	parameter [0:0] F_OPT_READ_ONLY  = 1'b0,
	parameter [0:0] F_OPT_WRITE_ONLY = 1'b0,
	// Environment limits (0: none). Stalls of the slave: AxREADY and
	// WREADY low while valid (assumed); responses: cycles until the first
	// RVALID / BVALID of an outstanding burst (assumed).
	parameter F_AXI_MAXSTALL  = 0,
	parameter F_AXI_MAXDELAY  = 0,
	// Master limits (0: none): cycles RVALID / BVALID may wait for
	// RREADY / BREADY (asserted).
	parameter F_AXI_MAXRSTALL = 0,
	parameter F_AXI_MAXBSTALL = 0,
	localparam IW = C_AXI_ID_WIDTH,
	localparam DW = C_AXI_DATA_WIDTH,
	localparam AW = C_AXI_ADDR_WIDTH,
	localparam DWB = DW/8,
	localparam NQ = (1 << F_LGQUEUE)
) (
	input wire		i_clk,
	input wire		i_axi_reset_n,
	// write address
	input wire		i_axi_awready,
	input wire [IW-1:0]	i_axi_awid,
	input wire [AW-1:0]	i_axi_awaddr,
	input wire [7:0]	i_axi_awlen,
	input wire [2:0]	i_axi_awsize,
	input wire [1:0]	i_axi_awburst,
	input wire [0:0]	i_axi_awlock,
	input wire [3:0]	i_axi_awcache,
	input wire [2:0]	i_axi_awprot,
	input wire [3:0]	i_axi_awqos,
	input wire		i_axi_awvalid,
	// write data
	input wire		i_axi_wready,
	input wire [DW-1:0]	i_axi_wdata,
	input wire [DW/8-1:0]	i_axi_wstrb,
	input wire		i_axi_wlast,
	input wire		i_axi_wvalid,
	// write response
	input wire [IW-1:0]	i_axi_bid,
	input wire [1:0]	i_axi_bresp,
	input wire		i_axi_bvalid,
	input wire		i_axi_bready,
	// read address
	input wire		i_axi_arready,
	input wire [IW-1:0]	i_axi_arid,
	input wire [AW-1:0]	i_axi_araddr,
	input wire [7:0]	i_axi_arlen,
	input wire [2:0]	i_axi_arsize,
	input wire [1:0]	i_axi_arburst,
	input wire [0:0]	i_axi_arlock,
	input wire [3:0]	i_axi_arcache,
	input wire [2:0]	i_axi_arprot,
	input wire [3:0]	i_axi_arqos,
	input wire		i_axi_arvalid,
	// read data
	input wire [IW-1:0]	i_axi_rid,
	input wire [1:0]	i_axi_rresp,
	input wire		i_axi_rvalid,
	input wire [DW-1:0]	i_axi_rdata,
	input wire		i_axi_rlast,
	input wire		i_axi_rready,
	//
	output reg [F_LGDEPTH-1:0]	f_axi_awr_nbursts,	// AW accepted, B not yet
	output reg [8:0]		f_axi_wr_pending,	// W beats left in the current burst
	output reg [F_LGDEPTH-1:0]	f_axi_rd_nbursts,	// AR accepted, RLAST not yet
	output reg [F_LGDEPTH-1:0]	f_axi_rd_outstanding	// R beats still expected
);
	localparam [1:0] BURST_FIXED = 2'b00, BURST_INCR = 2'b01, BURST_WRAP = 2'b10;
	localparam [1:0] RESP_EXOKAY = 2'b01;

	wire	ar_hs = i_axi_arvalid && i_axi_arready;
	wire	r_hs  = i_axi_rvalid  && i_axi_rready;
	wire	aw_hs = i_axi_awvalid && i_axi_awready;
	wire	w_hs  = i_axi_wvalid  && i_axi_wready;
	wire	b_hs  = i_axi_bvalid  && i_axi_bready;

	reg	f_past_valid;
	initial	f_past_valid = 1'b0;
	always @(posedge i_clk)
		f_past_valid <= 1'b1;

	initial	assert(DW >= 8 && (DW & (DW - 1)) == 0 && DW <= 1024);
	initial	assert(AW >= 12);

	////////////////////////////////////////////////////////////////////////
	// Reset (A3.1.2): the VALIDs a master drives are low in the cycle after
	// a reset cycle; so are the slave's.
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
		a_reset_arvalid: assert(!i_axi_arvalid);
		a_reset_awvalid: assert(!i_axi_awvalid);
		a_reset_wvalid:  assert(!i_axi_wvalid);
		s_reset_rvalid:  assume(!i_axi_rvalid);
		s_reset_bvalid:  assume(!i_axi_bvalid);
	end

	////////////////////////////////////////////////////////////////////////
	// Handshake stability (A3.2.1): once VALID is high, VALID and the
	// payload are held until READY.
	////////////////////////////////////////////////////////////////////////
	always @(posedge i_clk)
	if (f_past_valid && $past(i_axi_reset_n))
	begin
		if ($past(i_axi_arvalid && !i_axi_arready))
		begin
			a_ar_valid_held:    assert(i_axi_arvalid);
			a_ar_addr_stable:   assert($stable(i_axi_araddr));
			a_ar_len_stable:    assert($stable(i_axi_arlen));
			a_ar_size_stable:   assert($stable(i_axi_arsize));
			a_ar_burst_stable:  assert($stable(i_axi_arburst));
			a_ar_id_stable:     assert($stable(i_axi_arid));
			a_ar_attr_stable:   assert($stable({ i_axi_arlock, i_axi_arcache, i_axi_arprot, i_axi_arqos }));
		end
		if ($past(i_axi_awvalid && !i_axi_awready))
		begin
			a_aw_valid_held:    assert(i_axi_awvalid);
			a_aw_addr_stable:   assert($stable(i_axi_awaddr));
			a_aw_len_stable:    assert($stable(i_axi_awlen));
			a_aw_size_stable:   assert($stable(i_axi_awsize));
			a_aw_burst_stable:  assert($stable(i_axi_awburst));
			a_aw_id_stable:     assert($stable(i_axi_awid));
			a_aw_attr_stable:   assert($stable({ i_axi_awlock, i_axi_awcache, i_axi_awprot, i_axi_awqos }));
		end
		if ($past(i_axi_wvalid && !i_axi_wready))
		begin
			a_w_valid_held:     assert(i_axi_wvalid);
			a_w_data_stable:    assert($stable(i_axi_wdata));
			a_w_strb_stable:    assert($stable(i_axi_wstrb));
			a_w_last_stable:    assert($stable(i_axi_wlast));
		end
		if ($past(i_axi_rvalid && !i_axi_rready))
		begin
			s_r_valid_held:     assume(i_axi_rvalid);
			s_r_stable:         assume($stable({ i_axi_rid, i_axi_rresp, i_axi_rdata, i_axi_rlast }));
		end
		if ($past(i_axi_bvalid && !i_axi_bready))
		begin
			s_b_valid_held:     assume(i_axi_bvalid);
			s_b_stable:         assume($stable({ i_axi_bid, i_axi_bresp }));
		end
	end

	////////////////////////////////////////////////////////////////////////
	// Burst legality of a request (A3.4.1 size/length/4 KiB, A3.4.2 WRAP,
	// A4.4 AxCACHE, A7.2.4 exclusive accesses)
	////////////////////////////////////////////////////////////////////////
	reg [15:0] f_ar_bytes, f_ar_end, f_aw_bytes, f_aw_end;
	reg [11:0] f_ar_page_lo, f_aw_page_lo;
	always @(*)
	begin
		f_ar_bytes   = ({ 8'h0, i_axi_arlen } + 16'h1) << i_axi_arsize;
		f_ar_page_lo = i_axi_araddr[11:0] & ~((12'h1 << i_axi_arsize) - 12'h1);
		f_ar_end     = { 4'h0, f_ar_page_lo } + f_ar_bytes;
		f_aw_bytes   = ({ 8'h0, i_axi_awlen } + 16'h1) << i_axi_awsize;
		f_aw_page_lo = i_axi_awaddr[11:0] & ~((12'h1 << i_axi_awsize) - 12'h1);
		f_aw_end     = { 4'h0, f_aw_page_lo } + f_aw_bytes;
	end

	always @(*)
	if (i_axi_arvalid)
	begin
		a_ar_len_max:       assert(i_axi_arlen <= OPT_MAXBURST);
		a_ar_size_max:      assert((16'h1 << i_axi_arsize) <= DWB);
		if (!OPT_NARROW_BURST)
			a_ar_size_full: assert((16'h1 << i_axi_arsize) == DWB);
		a_ar_burst_type:    assert(i_axi_arburst != 2'b11);
		if (i_axi_arburst == BURST_INCR)
			a_ar_4k:        assert(f_ar_end <= 16'd4096);
		if (i_axi_arburst == BURST_FIXED)
			a_ar_fixed_len: assert(i_axi_arlen <= 8'd15);
		if (i_axi_arburst == BURST_WRAP)
		begin
			a_ar_wrap_len:   assert(i_axi_arlen == 8'd1 || i_axi_arlen == 8'd3
						|| i_axi_arlen == 8'd7 || i_axi_arlen == 8'd15);
			a_ar_wrap_align: assert(i_axi_araddr[11:0] == f_ar_page_lo);
		end
		a_ar_cache:         assert(i_axi_arcache[1] || i_axi_arcache[3:2] == 2'b00);
		if (!OPT_EXCLUSIVE)
			a_ar_no_lock:   assert(!i_axi_arlock);
		else if (i_axi_arlock)
			a_ar_excl:      assert(i_axi_arlen <= 8'd15 && f_ar_bytes <= 16'd128
					&& (f_ar_bytes & (f_ar_bytes - 1)) == 0
					&& ({ 9'h0, i_axi_araddr[6:0] } & (f_ar_bytes - 1)) == 0);
	end

	always @(*)
	if (i_axi_awvalid)
	begin
		a_aw_len_max:       assert(i_axi_awlen <= OPT_MAXBURST);
		a_aw_size_max:      assert((16'h1 << i_axi_awsize) <= DWB);
		if (!OPT_NARROW_BURST)
			a_aw_size_full: assert((16'h1 << i_axi_awsize) == DWB);
		a_aw_burst_type:    assert(i_axi_awburst != 2'b11);
		if (i_axi_awburst == BURST_INCR)
			a_aw_4k:        assert(f_aw_end <= 16'd4096);
		if (i_axi_awburst == BURST_FIXED)
			a_aw_fixed_len: assert(i_axi_awlen <= 8'd15);
		if (i_axi_awburst == BURST_WRAP)
		begin
			a_aw_wrap_len:   assert(i_axi_awlen == 8'd1 || i_axi_awlen == 8'd3
						|| i_axi_awlen == 8'd7 || i_axi_awlen == 8'd15);
			a_aw_wrap_align: assert(i_axi_awaddr[11:0] == f_aw_page_lo);
		end
		a_aw_cache:         assert(i_axi_awcache[1] || i_axi_awcache[3:2] == 2'b00);
		if (!OPT_EXCLUSIVE)
			a_aw_no_lock:   assert(!i_axi_awlock);
		else if (i_axi_awlock)
			a_aw_excl:      assert(i_axi_awlen <= 8'd15 && f_aw_bytes <= 16'd128
					&& (f_aw_bytes & (f_aw_bytes - 1)) == 0
					&& ({ 9'h0, i_axi_awaddr[6:0] } & (f_aw_bytes - 1)) == 0);
	end

	////////////////////////////////////////////////////////////////////////
	// Read side: the bursts accepted on AR, in order (A3.3.1, A5.3)
	////////////////////////////////////////////////////////////////////////
	reg [8*NQ-1:0]		f_rq_len;	// ARLEN of every outstanding burst
	reg [F_LGQUEUE-1:0]	f_rq_rd, f_rq_wr;
	reg [F_LGQUEUE:0]	f_rq_count;
	reg [7:0]		f_r_beat;	// beats of the head burst already returned
	reg [IW-1:0]		f_rd_id;	// the ID of the outstanding reads
	wire [7:0]		f_rq_head = f_rq_len[8*f_rq_rd +: 8];
	wire			r_done = r_hs && i_axi_rlast;

	initial	begin f_rq_len = 0; f_rq_rd = 0; f_rq_wr = 0; f_rq_count = 0; f_r_beat = 0; f_rd_id = 0; end
	always @(posedge i_clk)
	if (!i_axi_reset_n)
	begin
		f_rq_rd <= 0; f_rq_wr <= 0; f_rq_count <= 0; f_r_beat <= 0;
	end else begin
		if (ar_hs)
		begin
			f_rq_len[8*f_rq_wr +: 8] <= i_axi_arlen;
			f_rq_wr <= f_rq_wr + 1'b1;
			f_rd_id <= i_axi_arid;
		end
		if (r_done)
			f_rq_rd <= f_rq_rd + 1'b1;
		f_rq_count <= f_rq_count + (ar_hs ? 1'b1 : 1'b0) - (r_done ? 1'b1 : 1'b0);
		if (r_hs)
			f_r_beat <= i_axi_rlast ? 8'h0 : f_r_beat + 1'b1;
	end

	initial	begin f_axi_rd_nbursts = 0; f_axi_rd_outstanding = 0; end
	always @(posedge i_clk)
	if (!i_axi_reset_n)
	begin
		f_axi_rd_nbursts <= 0;
		f_axi_rd_outstanding <= 0;
	end else begin
		f_axi_rd_nbursts <= f_axi_rd_nbursts + (ar_hs ? 1'b1 : 1'b0) - (r_done ? 1'b1 : 1'b0);
		f_axi_rd_outstanding <= f_axi_rd_outstanding + (ar_hs ? { 1'b0, i_axi_arlen } + 1'b1 : 1'b0)
					- (r_hs ? 1'b1 : 1'b0);
	end

	// The slave: no read data without an outstanding burst, RLAST on exactly
	// the ARLEN+1-th beat, an ID of an outstanding burst, no EXOKAY for a
	// master that makes no exclusive accesses; it holds ARREADY low while
	// the checker's queue is full.
	always @(*)
	begin
		if (i_axi_rvalid)
		begin
			s_r_after_ar:   assume(f_rq_count != 0);
			s_r_last:       assume(i_axi_rlast == (f_r_beat == f_rq_head));
			s_r_id:         assume(i_axi_rid == f_rd_id);
			if (!OPT_EXCLUSIVE)
				s_r_no_exokay: assume(i_axi_rresp != RESP_EXOKAY);
		end
		if (f_rq_count == NQ)
			s_ar_queue_full: assume(!i_axi_arready);
	end

	// The master: one ID at a time (see the header)
	always @(*)
	if (i_axi_arvalid && f_rq_count != 0)
		a_ar_id_in_order: assert(i_axi_arid == f_rd_id);

	// The checker's own invariants (help induction)
	always @(*)
	if (F_OPT_INVARIANTS)
	begin
		assert(f_rq_count <= NQ);
		assert(f_rq_wr == f_rq_rd + f_rq_count[F_LGQUEUE-1:0]);
		assert(f_axi_rd_nbursts == { {(F_LGDEPTH-F_LGQUEUE-1){1'b0}}, f_rq_count });
		// (f_axi_rd_outstanding is the sum of the queued lengths: not asserted,
		// a sum over the queue makes every BMC step expensive)
		if (f_rq_count == 0)
			assert(f_r_beat == 0);
		else
			assert(f_r_beat <= f_rq_head);
	end

	////////////////////////////////////////////////////////////////////////
	// Write side: the bursts accepted on AW whose data has not all been
	// sent, in order; then the bursts waiting for their B (A3.3.1)
	////////////////////////////////////////////////////////////////////////
	localparam	QW = 8 + 10 + 3 + 2;	// len, address bits 9:0, size, burst
	reg [QW*NQ-1:0]		f_wq;
	reg [F_LGQUEUE-1:0]	f_wq_rd, f_wq_wr;
	reg [F_LGQUEUE:0]	f_wq_count;
	reg [7:0]		f_w_beat;	// beats of the current W burst already sent
	reg [F_LGQUEUE:0]	f_b_count;	// bursts whose data is complete, waiting for B
	reg [IW-1:0]		f_wr_id;
	wire [QW-1:0]		f_wq_head = f_wq[QW*f_wq_rd +: QW];
	wire			wq_empty = (f_wq_count == 0);
	// The burst the current W beat belongs to: the oldest queued one, or the
	// one offered on AW right now if none is queued.
	wire [7:0]		f_wcur_len   = wq_empty ? i_axi_awlen : f_wq_head[QW-1 -: 8];
	wire [9:0]		f_wcur_addr  = wq_empty ? i_axi_awaddr[9:0] : f_wq_head[14:5];
	wire [2:0]		f_wcur_size  = wq_empty ? i_axi_awsize : f_wq_head[4:2];
	wire [1:0]		f_wcur_burst = wq_empty ? i_axi_awburst : f_wq_head[1:0];
	wire			w_done = w_hs && i_axi_wlast;
	// a burst is queued unless its last beat went with the AW handshake
	wire			wq_push = aw_hs && !(wq_empty && w_done);
	wire			wq_pop  = w_done && !wq_empty;

	initial	begin f_wq = 0; f_wq_rd = 0; f_wq_wr = 0; f_wq_count = 0; f_w_beat = 0; f_b_count = 0; f_wr_id = 0; end
	always @(posedge i_clk)
	if (!i_axi_reset_n)
	begin
		f_wq_rd <= 0; f_wq_wr <= 0; f_wq_count <= 0; f_w_beat <= 0; f_b_count <= 0;
	end else begin
		if (wq_push)
		begin
			f_wq[QW*f_wq_wr +: QW] <= { i_axi_awlen, i_axi_awaddr[9:0], i_axi_awsize, i_axi_awburst };
			f_wq_wr <= f_wq_wr + 1'b1;
		end
		if (aw_hs)
			f_wr_id <= i_axi_awid;
		if (wq_pop)
			f_wq_rd <= f_wq_rd + 1'b1;
		f_wq_count <= f_wq_count + (wq_push ? 1'b1 : 1'b0) - (wq_pop ? 1'b1 : 1'b0);
		if (w_hs)
			f_w_beat <= i_axi_wlast ? 8'h0 : f_w_beat + 1'b1;
		f_b_count <= f_b_count + (w_done ? 1'b1 : 1'b0) - (b_hs ? 1'b1 : 1'b0);
	end

	initial	f_axi_awr_nbursts = 0;
	always @(posedge i_clk)
	if (!i_axi_reset_n)
		f_axi_awr_nbursts <= 0;
	else
		f_axi_awr_nbursts <= f_axi_awr_nbursts + (aw_hs ? 1'b1 : 1'b0) - (b_hs ? 1'b1 : 1'b0);

	always @(*)
		f_axi_wr_pending = wq_empty ? 9'h0 : { 1'b0, f_wq_head[QW-1 -: 8] } + 9'h1 - { 1'b0, f_w_beat };

	// WSTRB (A3.4.3): only the byte lanes of the beat's address window may
	// be written (for INCR and FIXED bursts).
	reg [15:0]	f_w_size_bytes, f_w_base, f_w_lo, f_w_hi, f_w_aligned;
	reg [DWB-1:0]	f_w_lanes;
	integer		k;
	always @(*)
	begin
		f_w_size_bytes = 16'h1 << f_wcur_size;
		f_w_aligned = { 6'h0, f_wcur_addr } & ~(f_w_size_bytes - 16'h1);
		f_w_base = (f_w_aligned + ((f_wcur_burst == BURST_FIXED) ? 16'h0 : ({ 8'h0, f_w_beat } << f_wcur_size)))
				& (DWB - 1);
		f_w_lo = (f_w_beat == 0 || f_wcur_burst == BURST_FIXED) ? ({ 6'h0, f_wcur_addr } & (DWB - 1)) : f_w_base;
		f_w_hi = f_w_base + f_w_size_bytes - 16'h1;
		for (k = 0; k < DWB; k = k + 1)
			f_w_lanes[k] = (k >= f_w_lo) && (k <= f_w_hi);
	end

	// The master: WVALID only for a burst whose AWVALID has been raised,
	// WLAST on exactly the AWLEN+1-th beat, strobes inside the beat's lanes,
	// one ID at a time.
	always @(*)
	if (i_axi_wvalid)
	begin
		a_w_after_aw: assert(!wq_empty || i_axi_awvalid);
		a_w_last:     assert(i_axi_wlast == (f_w_beat == f_wcur_len));
		if (f_wcur_burst != BURST_WRAP)
			a_w_strb: assert((i_axi_wstrb & ~f_w_lanes) == 0);
	end

	always @(*)
	if (i_axi_awvalid && f_axi_awr_nbursts != 0)
		a_aw_id_in_order: assert(i_axi_awid == f_wr_id);

	// The slave: a W beat is taken only after (or with) its AW; B only for a
	// burst whose address and last data beat have both been accepted; an ID
	// of an outstanding burst; the checker's queues bound what it accepts.
	always @(*)
	begin
		if (w_hs)
			s_w_after_aw: assume(!wq_empty || aw_hs);
		if (i_axi_bvalid)
		begin
			s_b_after_w:  assume(f_b_count != 0);
			s_b_id:       assume(i_axi_bid == f_wr_id);
			if (!OPT_EXCLUSIVE)
				s_b_no_exokay: assume(i_axi_bresp != RESP_EXOKAY);
		end
		if (f_wq_count == NQ || f_axi_awr_nbursts >= NQ)
			s_aw_queue_full: assume(!i_axi_awready);
	end

	// The checker's own invariants (help induction)
	always @(*)
	if (F_OPT_INVARIANTS)
	begin
		assert(f_wq_count <= NQ);
		assert(f_wq_wr == f_wq_rd + f_wq_count[F_LGQUEUE-1:0]);
		assert(f_axi_awr_nbursts == { {(F_LGDEPTH-F_LGQUEUE-1){1'b0}}, f_wq_count }
				+ { {(F_LGDEPTH-F_LGQUEUE-1){1'b0}}, f_b_count });
		if (wq_empty)
			assert(f_w_beat == 0);
		else
			assert(f_w_beat <= f_wq_head[QW-1 -: 8]);
	end

	////////////////////////////////////////////////////////////////////////
	// Optional timing limits (as in ZipCPU's set; all off by default)
	////////////////////////////////////////////////////////////////////////
	generate if (F_AXI_MAXSTALL > 0)
	begin : SLAVE_STALLS
		reg [F_LGDEPTH-1:0] f_arstall, f_awstall, f_wstall;
		initial begin f_arstall = 0; f_awstall = 0; f_wstall = 0; end
		always @(posedge i_clk)
		begin
			f_arstall <= (!i_axi_reset_n || !i_axi_arvalid || i_axi_arready || i_axi_rvalid
					|| f_rq_count == NQ) ? 0 : f_arstall + 1'b1;
			f_awstall <= (!i_axi_reset_n || !i_axi_awvalid || i_axi_awready
					|| (i_axi_bvalid && !i_axi_bready) || f_wq_count == NQ
					|| f_axi_awr_nbursts >= NQ) ? 0 : f_awstall + 1'b1;
			f_wstall  <= (!i_axi_reset_n || !i_axi_wvalid || i_axi_wready
					|| (i_axi_bvalid && !i_axi_bready) || wq_empty) ? 0 : f_wstall + 1'b1;
		end
		always @(*)
		begin
			s_ar_stall: assume(f_arstall < F_AXI_MAXSTALL);
			s_aw_stall: assume(f_awstall < F_AXI_MAXSTALL);
			s_w_stall:  assume(f_wstall < F_AXI_MAXSTALL);
		end
	end endgenerate

	generate if (F_AXI_MAXDELAY > 0)
	begin : SLAVE_DELAY
		reg [F_LGDEPTH-1:0] f_rdelay, f_bdelay;
		initial begin f_rdelay = 0; f_bdelay = 0; end
		always @(posedge i_clk)
		begin
			f_rdelay <= (!i_axi_reset_n || i_axi_rvalid || f_rq_count == 0) ? 0 : f_rdelay + 1'b1;
			f_bdelay <= (!i_axi_reset_n || i_axi_bvalid || f_b_count == 0) ? 0 : f_bdelay + 1'b1;
		end
		always @(*)
		begin
			s_r_delay: assume(f_rdelay < F_AXI_MAXDELAY);
			s_b_delay: assume(f_bdelay < F_AXI_MAXDELAY);
		end
	end endgenerate

	generate if (F_AXI_MAXRSTALL > 0)
	begin : MASTER_RSTALL
		reg [F_LGDEPTH-1:0] f_rstall;
		initial f_rstall = 0;
		always @(posedge i_clk)
			f_rstall <= (!i_axi_reset_n || !i_axi_rvalid || i_axi_rready) ? 0 : f_rstall + 1'b1;
		always @(*)
			a_r_stall: assert(f_rstall < F_AXI_MAXRSTALL);
	end endgenerate

	generate if (F_AXI_MAXBSTALL > 0)
	begin : MASTER_BSTALL
		reg [F_LGDEPTH-1:0] f_bstall;
		initial f_bstall = 0;
		always @(posedge i_clk)
			f_bstall <= (!i_axi_reset_n || !i_axi_bvalid || i_axi_bready) ? 0 : f_bstall + 1'b1;
		always @(*)
			a_b_stall: assert(f_bstall < F_AXI_MAXBSTALL);
	end endgenerate

	////////////////////////////////////////////////////////////////////////
	// Cover: a read and a write burst can complete
	////////////////////////////////////////////////////////////////////////
	always @(*)
	begin
		if (F_OPT_READ_ONLY)
			a_read_only:  assert(!i_axi_awvalid && !i_axi_wvalid);
		if (F_OPT_WRITE_ONLY)
			a_write_only: assert(!i_axi_arvalid);
	end

	always @(posedge i_clk)
	if (i_axi_reset_n)
	begin
		if (!F_OPT_WRITE_ONLY)
			c_read_burst:  cover(r_done);
		if (!F_OPT_READ_ONLY)
			c_write_burst: cover(b_hs);
	end

endmodule
`default_nettype wire
