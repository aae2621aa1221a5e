// The write half of an AXI4 master port for compress_engine's residual and velocity ports:
// burst requests in (burst_walker's, held until taken), AW out, each burst's length queued for
// W, the W beats from a data stream (or zeros), B responses counted until every burst is
// answered.
//
//   AW     req_valid && the length queue has room; req_fire takes the request.
//   W      the lengths (AxLEN) go through a FIFO, then a skid buffer whose output register gives
//          wlast by one 8-bit compare with the beat count (the FIFO's pop depends on two local
//          flops). A beat goes when its burst's length is out and a data word is there
//          (s_valid, taken with s_take), or at once while `zeros` (registered here: it may only
//          change while W is idle, and the flop sits by W).
//   B      bready is always high; the bursts not yet answered are counted a cycle late, from
//          registered pulses (the queue's flags cover that cycle).
//   idle   registered: the requests are done (req_done: the walker has finished), every burst
//          has gone out and every one is answered. Nothing starts new requests after that
//          until the caller starts its walker again.
//   WSTRB  per burst, req_keep_first / req_keep_last (KEEP_W lanes of DATA_W / KEEP_W bits)
//          say which lanes of its first / last beat are written (a range that starts or ends
//          mid-beat); they ride in the length FIFO. Every other beat writes all its bytes.
// Only bvalid is taken here: the caller reads bresp (with b_fire); one ID, no bid.
`resetall
`default_nettype none

module axi_write_queue #(
    parameter int ADDR_W = 32,          // AXI address width (bytes), 12..64
    parameter int DATA_W = 32,          // AXI data width, 8..1024, a power of two
    parameter int MAX_BURST = 16,       // most beats a request asks for, 1..256
    parameter int LEN_AW = 2,           // bursts announced and not yet written: 2^this, 1..8
    parameter int KEEP_W = 1            // lanes a strobe mask names, DATA_W / KEEP_W bits each
) (
    input  logic                clk,
    input  logic                rst,
    // burst requests: req_valid held, with req_addr and req_len steady, until req_fire
    input  logic                req_valid,
    input  logic   [ADDR_W-1:0] req_addr,
    input  logic          [8:0] req_len,        // beats, 1..MAX_BURST
    input  logic   [KEEP_W-1:0] req_keep_first, // lanes written in the burst's first beat
    input  logic   [KEEP_W-1:0] req_keep_last,  // ... and in its last
    output logic                req_fire,
    input  logic                req_done,       // no request will come until the next walk
    // W data: a word per beat, or zeros
    input  logic                zeros,
    input  logic   [DATA_W-1:0] s_data,
    input  logic                s_valid,
    output logic                s_take,
    // AXI4 AW, W, B
    output logic                m_axi_awid,
    output logic   [ADDR_W-1:0] m_axi_awaddr,
    output logic          [7:0] m_axi_awlen,
    output logic          [2:0] m_axi_awsize,
    output logic          [1:0] m_axi_awburst,
    output logic                m_axi_awvalid,
    input  logic                m_axi_awready,
    output logic   [DATA_W-1:0] m_axi_wdata,
    output logic [DATA_W/8-1:0] m_axi_wstrb,
    output logic                m_axi_wlast,
    output logic                m_axi_wvalid,
    input  logic                m_axi_wready,
    input  logic                m_axi_bvalid,
    output logic                m_axi_bready,
    output logic                b_fire,         // a B response came this cycle
    output logic                idle
);
    localparam logic [2:0] SIZE = 3'($clog2(DATA_W / 8));

    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (ADDR_W < 12 || ADDR_W > 64) begin : g_bad_addr_w
`ifdef __ICARUS__
        axi_write_queue__ADDR_W_must_be_12_to_64 u_parameter_error ();
`else
        $error("axi_write_queue: ADDR_W must be 12..64");
`endif
    end
    if (DATA_W < 8 || DATA_W > 1024 || (DATA_W & (DATA_W - 1)) != 0) begin : g_bad_data_w
`ifdef __ICARUS__
        axi_write_queue__DATA_W_must_be_a_power_of_two_8_to_1024 u_parameter_error ();
`else
        $error("axi_write_queue: DATA_W must be a power of two, 8..1024");
`endif
    end
    if (MAX_BURST < 1 || MAX_BURST > 256) begin : g_bad_max_burst
`ifdef __ICARUS__
        axi_write_queue__MAX_BURST_must_be_1_to_256 u_parameter_error ();
`else
        $error("axi_write_queue: MAX_BURST must be 1..256");
`endif
    end
    if (MAX_BURST * (DATA_W / 8) > 4096) begin : g_bad_burst_bytes
`ifdef __ICARUS__
        axi_write_queue__MAX_BURST_beats_must_fit_4_KiB u_parameter_error ();
`else
        $error("axi_write_queue: MAX_BURST beats of DATA_W bits must fit in 4 KiB");
`endif
    end
    if (LEN_AW < 1 || LEN_AW > 8) begin : g_bad_len_aw
`ifdef __ICARUS__
        axi_write_queue__LEN_AW_must_be_1_to_8 u_parameter_error ();
`else
        $error("axi_write_queue: LEN_AW must be 1..8");
`endif
    end

    if (KEEP_W < 1 || (DATA_W / 8) % KEEP_W != 0) begin : g_bad_keep_w
`ifdef __ICARUS__
        axi_write_queue__KEEP_W_must_divide_the_bytes_of_a_beat u_parameter_error ();
`else
        $error("axi_write_queue: KEEP_W must divide DATA_W / 8");
`endif
    end
    localparam int LANE_BYTES = DATA_W / 8 / KEEP_W;

    logic        lenq_full, lenq_empty, lq_ready, lq_valid, w_fire, w_zeros;
    logic  [7:0] lenq_head, lq_head, w_beat;      // burst lengths minus one (AxLEN)
    logic [KEEP_W-1:0] kq_first, kq_last, lq_first, lq_last, w_keep;
    logic [31:0] b_pending;                       // bursts not yet answered
    logic        aw_fire_d, b_fire_d;

    assign m_axi_awid = 1'b0;
    assign m_axi_awaddr = req_addr;
    assign m_axi_awlen = 8'(req_len - 9'd1);
    assign m_axi_awsize = SIZE;
    assign m_axi_awburst = 2'b01;          // INCR
    assign m_axi_awvalid = req_valid && !lenq_full;
    assign req_fire = m_axi_awvalid && m_axi_awready;

    sync_fifo #(.W(8 + 2 * KEEP_W), .AW(LEN_AW)) u_lenq (
        .clk, .rst, .clear(1'b0), .push(req_fire),
        .wr_data({req_keep_last, req_keep_first, m_axi_awlen}),
        .pop(!lenq_empty && lq_ready), .rd_data({kq_last, kq_first, lenq_head}),
        .full(lenq_full), .empty(lenq_empty)
    );
    axis_skid_buffer #(.W(8 + 2 * KEEP_W)) u_lenq_skid (
        .clk, .rst, .s_tdata({kq_last, kq_first, lenq_head}), .s_tvalid(!lenq_empty),
        .s_tready(lq_ready), .m_tdata({lq_last, lq_first, lq_head}), .m_tvalid(lq_valid),
        .m_tready(w_fire && m_axi_wlast)
    );

    always_ff @(posedge clk) w_zeros <= zeros;
    assign m_axi_wvalid = lq_valid && (w_zeros || s_valid);
    // no X on W while no beat is offered (the data FIFO's and the length queue's heads are
    // unwritten RAM until their first push): zeros and no wlast then; a beat sees no change
    assign m_axi_wdata = (w_zeros || !s_valid) ? '0 : s_data;
    // (all ones while no burst is out: no X on WSTRB from the unwritten FIFO)
    assign w_keep = !lq_valid ? '1
                  : (w_beat == 8'd0 ? lq_first : '1) & (m_axi_wlast ? lq_last : '1);
    always_comb
        for (int l = 0; l < KEEP_W; l++)
            m_axi_wstrb[l * LANE_BYTES +: LANE_BYTES] = {LANE_BYTES{w_keep[l]}};
    assign m_axi_wlast = lq_valid && w_beat == lq_head;
    assign w_fire = m_axi_wvalid && m_axi_wready;
    assign s_take = w_fire && !w_zeros;
    assign m_axi_bready = 1'b1;
    assign b_fire = m_axi_bvalid;

    always_ff @(posedge clk) begin
        if (rst) begin
            b_pending <= 32'd0;
            aw_fire_d <= 1'b0;
            b_fire_d <= 1'b0;
            w_beat <= 8'd0;
        end else begin
            aw_fire_d <= req_fire;
            b_fire_d <= b_fire;
            b_pending <= b_pending + {31'd0, aw_fire_d} - {31'd0, b_fire_d};
            if (w_fire) w_beat <= m_axi_wlast ? 8'd0 : w_beat + 8'd1;
        end
    end

    always_ff @(posedge clk)
        idle <= req_done && lenq_empty && !lq_valid && b_pending == 32'd0 && !aw_fire_d;

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    always @(posedge clk) begin
        if (!rst) begin
            if (req_valid) assert (req_len >= 9'd1 && 32'(req_len) <= MAX_BURST);
            // a beat of the burst at the head never runs past its length
            if (lq_valid) assert (w_beat <= lq_head);
        end
    end
`endif
endmodule

`resetall
