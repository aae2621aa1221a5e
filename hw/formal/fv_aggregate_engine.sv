// Formal harness for aggregate_engine's AXI4 master port (hw/formal/aggregate_engine.sby).
//
// The engine with small parameters (16-bit addresses: sixteen 4 KiB pages; bursts of up to 4
// beats; 4-beat read FIFO, 8 literals, 2 burst descriptors, a 4-entry decoder queue) in an
// unconstrained but legal environment:
//   config     any n, any worker count, any base (so refused configs too), clear or not,
//              offered with the stream rule: cfg_valid held, the fields unchanged, until taken
//   frames     any word stream, s_tlast anywhere (well-formed frames, bad ones, truncated
//              ones), any valid timing; valid and the payload held until taken
//   memory     any AXI4 slave (fv_axi4_slave.sv): any ready timing, R beats and B responses
//              in any timing but only for what was asked, legal RLAST, any RRESP / BRESP
//   reset      rst high in the first cycle, then free
// What is checked: the assertions written in the RTL (axi4_master_checker on m_axi_*: AR / AW
// / W held with a stable payload until taken, INCR bursts of 1..MAX_BURST beats, aligned,
// never across 4 KiB; W beats only for announced bursts, WLAST exactly on each burst's last
// beat; and every block's own invariants: the decoder, FIFOs, skid buffers), in the first
// `depth` cycles. Covers: a write burst and its last W beat, a B response, a clear burst
// ending at a 4 KiB boundary (the read covers are slower in z3 than the reach task: -DREACH,
// a read burst answered with RLAST, i.e. a frame decoded into a burst of literals).
// W (issue 31): the engine's lanes; the *_w4 tasks set W = 4 (chparam): the frame words come
// as W-word beats whose s_tkeep follows the lane convention (assumed: a run of ones from lane
// 0, all ones but on s_tlast), the sums behind a 64W-bit port.
module fv_aggregate_engine #(
    parameter int W = 1
) (
    input logic        clk,
    input logic        rst,
    input logic        cfg_valid,
    input logic [31:0] cfg_n,
    input logic [31:0] cfg_workers,
    input logic [15:0] cfg_sum_base,
    input logic        cfg_clear,
    input logic [32*W-1:0] s_tdata,
    input logic    [W-1:0] s_tkeep,
    input logic        s_tvalid,
    input logic        s_tlast,
    // memory (slave side)
    input logic        m_axi_arready,
    input logic        m_axi_rid,
    input logic [64*W-1:0] m_axi_rdata,
    input logic  [1:0] m_axi_rresp,
    input logic        m_axi_rlast,
    input logic        m_axi_rvalid,
    input logic        m_axi_awready,
    input logic        m_axi_wready,
    input logic        m_axi_bid,
    input logic  [1:0] m_axi_bresp,
    input logic        m_axi_bvalid
);
    localparam int ADDR_W = 16;

    logic              cfg_ready, s_tready, busy, done, err_valid;
    logic        [4:0] err_code;
    logic       [31:0] err_word, err_worker, frames_done, hdr_layer_id, hdr_range_bits;
    logic       [31:0] lit_count, rd_beats, wr_beats;
    logic              m_axi_arid, m_axi_arvalid, m_axi_rready;
    logic [ADDR_W-1:0] m_axi_araddr, m_axi_awaddr;
    logic        [7:0] m_axi_arlen, m_axi_awlen;
    logic        [2:0] m_axi_arsize, m_axi_awsize;
    logic        [1:0] m_axi_arburst, m_axi_awburst;
    logic              m_axi_awid, m_axi_awvalid, m_axi_wlast, m_axi_wvalid, m_axi_bready;
    logic   [64*W-1:0] m_axi_wdata;
    logic    [8*W-1:0] m_axi_wstrb;

    aggregate_engine #(
        .ADDR_W(ADDR_W), .MAX_BURST(4), .RD_FIFO_AW(2), .LIT_FIFO_AW(3), .DESC_AW(1),
        .QUEUE_AW(2), .W(W)
    ) dut (
        .clk, .rst,
        .cfg_valid, .cfg_ready, .cfg_n, .cfg_workers, .cfg_sum_base, .cfg_clear,
        .s_tdata, .s_tkeep, .s_tvalid, .s_tready, .s_tlast,
        .m_axi_arid, .m_axi_araddr, .m_axi_arlen, .m_axi_arsize, .m_axi_arburst, .m_axi_arvalid,
        .m_axi_arready, .m_axi_rid, .m_axi_rdata, .m_axi_rresp, .m_axi_rlast, .m_axi_rvalid,
        .m_axi_rready, .m_axi_awid, .m_axi_awaddr, .m_axi_awlen, .m_axi_awsize, .m_axi_awburst,
        .m_axi_awvalid, .m_axi_awready, .m_axi_wdata, .m_axi_wstrb, .m_axi_wlast, .m_axi_wvalid,
        .m_axi_wready, .m_axi_bid, .m_axi_bresp, .m_axi_bvalid, .m_axi_bready,
        .busy, .done, .err_valid, .err_code, .err_word, .err_worker, .frames_done,
        .hdr_layer_id, .hdr_range_bits, .lit_count, .rd_beats, .wr_beats
    );

    // ---- the memory: any AXI4 slave (RLAST is the model's: legal)
    logic [7:0] reads_out, writes_due;
    fv_axi4_slave #(.DATA_W(64 * W)) u_mem (
        .clk, .rst, .arlen(m_axi_arlen), .arvalid(m_axi_arvalid), .arready(m_axi_arready),
        .rdata(m_axi_rdata), .rresp(m_axi_rresp), .rlast(m_axi_rlast), .rvalid(m_axi_rvalid),
        .rready(m_axi_rready), .awvalid(m_axi_awvalid), .awready(m_axi_awready),
        .wlast(m_axi_wlast), .wvalid(m_axi_wvalid), .wready(m_axi_wready),
        .bresp(m_axi_bresp), .bvalid(m_axi_bvalid), .bready(m_axi_bready),
        .reads_out, .writes_due
    );

    // ---- the stream rules for the inputs: valid held, payload unchanged, until taken
    logic        past_live, cfg_stall, s_stall;
    logic [80:0] cfg_word, cfg_now;
    logic [32*W+W:0] s_word;
    assign cfg_now = {cfg_n, cfg_workers, cfg_sum_base, cfg_clear};

    initial assume (rst);
    initial past_live = 1'b0;
    always @(posedge clk) begin
        past_live <= !rst;
        cfg_stall <= cfg_valid && !cfg_ready;
        s_stall <= s_tvalid && !s_tready;
        cfg_word <= cfg_now;
        s_word <= {s_tlast, s_tkeep, s_tdata};
    end
    always @(*) begin
        if (past_live && !rst) begin
            if (cfg_stall) assume (cfg_valid && cfg_now == cfg_word);
            if (s_stall) assume (s_tvalid && {s_tlast, s_tkeep, s_tdata} == s_word);
        end
        // the lane convention (W > 1): a beat's words are a run of ones from lane 0, all W but
        // on a frame's last beat
        if (W > 1 && s_tvalid) begin
            assume (s_tkeep[0] && ((s_tkeep + 1'b1) & s_tkeep) == '0);
            if (!s_tlast) assume (&s_tkeep);
        end
    end

    // ---- REACH (the reach task, abc bmc3; the runner expects a trace): one assertion says no
    // read burst is ever answered with RLAST; the trace that breaks it shows a frame decoded
    // far enough for its literals to be gathered into a burst, read and answered
`ifdef REACH
    always @(*) if (!rst) assert (!(m_axi_rvalid && m_axi_rready && m_axi_rlast));
`endif

    // ---- covers: the port carries write bursts (the reads: REACH above)
    always @(posedge clk) begin
        if (!rst) begin
            cover (m_axi_awvalid && m_axi_awready);
            cover (m_axi_wvalid && m_axi_wready && m_axi_wlast);
            cover (m_axi_bvalid);
            cover (m_axi_awvalid && m_axi_awready && m_axi_awlen == 8'd1
                   && m_axi_awaddr[11:0] == 12'hFF0);
        end
    end
endmodule
