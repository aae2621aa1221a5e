// Formal harness for compress_engine's two AXI4 master ports (hw/formal/compress_engine.sby).
//
// The engine with small parameters (16-bit addresses: four 4 KiB pages; bursts of up to 4
// beats; 4-word read FIFOs; K_MAX 2) in an unconstrained but legal environment:
//   config     any values, momentum on or off, any bases (so refused configs too), offered
//              with the stream rule: cfg_valid held, the fields unchanged, until cfg_ready
//   gradient   any words, s_grad_tlast anywhere, any valid timing; valid and the payload held
//              until taken
//   frame out  m_frame_tready in any pattern
//   memory     each port is any AXI4 slave (fv_axi4_slave.sv): any ready timing, R beats and
//              B responses in any timing but only for what was asked, legal RLAST, any RRESP
//              / BRESP (SLVERR included)
//   reset      rst high in the first cycle, then free (a reset may come in any state; the
//              memory model resets with it, as an AXI4 system does)
// What is checked: the assertions written in the RTL (axi4_master_checker on m_axi_* and on
// m_axi_vel_*: AR / AW / W held with a stable payload until taken, INCR bursts of 1..MAX_BURST
// beats, aligned, never across 4 KiB; W beats only for announced bursts, WLAST exactly on each
// burst's last beat; the frame output held until taken; and every block's own invariants:
// FIFOs, skid buffers, credit links, walkers, sort, encoder), in the first `depth` cycles.
// Non-vacuity: the reach task (-DREACH, abc bmc3) finds one trace in which both ports carry a
// whole read burst (RLAST taken) and a write address (z3's `cover` does not reach a burst of
// this engine within minutes: it is not a task).
module fv_compress_engine #(
    parameter int W = 1                // lanes (issue 31): the bmc_w4 / reach_w4 tasks set 4
) (
    input logic        clk,
    input logic        rst,
    input logic        cfg_valid,
    input logic [31:0] cfg_n,
    input logic [31:0] cfg_block_size,
    input logic [31:0] cfg_n_blocks,
    input logic [31:0] cfg_k,
    input logic [31:0] cfg_m,
    input logic signed [31:0] cfg_k_shift,
    input logic [31:0] cfg_range_bits,
    input logic [31:0] cfg_layer_id,
    input logic  [4:0] cfg_lmax_log2,
    input logic        cfg_norm,
    input logic [15:0] cfg_res_base,
    input logic        cfg_momentum_en,
    input logic [15:0] cfg_m_fix,
    input logic        cfg_momentum_mask,
    input logic [15:0] cfg_vel_base,
    input logic [32*W-1:0] s_grad_tdata,
    input logic        s_grad_tvalid,
    input logic        s_grad_tlast,
    input logic        m_frame_tready,
    // residual memory (slave side)
    input logic        m_axi_arready,
    input logic        m_axi_rid,
    input logic [32*W-1:0] m_axi_rdata,
    input logic  [1:0] m_axi_rresp,
    input logic        m_axi_rlast,
    input logic        m_axi_rvalid,
    input logic        m_axi_awready,
    input logic        m_axi_wready,
    input logic        m_axi_bid,
    input logic  [1:0] m_axi_bresp,
    input logic        m_axi_bvalid,
    // velocity memory (slave side)
    input logic        m_axi_vel_arready,
    input logic        m_axi_vel_rid,
    input logic [32*W-1:0] m_axi_vel_rdata,
    input logic  [1:0] m_axi_vel_rresp,
    input logic        m_axi_vel_rlast,
    input logic        m_axi_vel_rvalid,
    input logic        m_axi_vel_awready,
    input logic        m_axi_vel_wready,
    input logic        m_axi_vel_bid,
    input logic  [1:0] m_axi_vel_bresp,
    input logic        m_axi_vel_bvalid
);
    localparam int ADDR_W = 16;
    localparam int MAX_BURST = 4;

    logic        cfg_ready, s_grad_tready, m_frame_tvalid, m_frame_tlast;
    logic [32*W-1:0] m_frame_tdata;
    logic    [W-1:0] m_frame_tkeep;      // W = 1: always 1
    logic        busy, done;
    logic  [3:0] err_code;
    logic [31:0] sat_quant_count, sat_feedback_count, nan_count, sat_momentum_count;
    // residual port, master side
    logic              m_axi_arid, m_axi_arvalid, m_axi_rready;
    logic [ADDR_W-1:0] m_axi_araddr, m_axi_awaddr;
    logic        [7:0] m_axi_arlen, m_axi_awlen;
    logic        [2:0] m_axi_arsize, m_axi_awsize;
    logic        [1:0] m_axi_arburst, m_axi_awburst;
    logic              m_axi_awid, m_axi_awvalid, m_axi_wlast, m_axi_wvalid, m_axi_bready;
    logic [32*W-1:0] m_axi_wdata;
    logic  [4*W-1:0] m_axi_wstrb;
    // velocity port, master side
    logic              m_axi_vel_arid, m_axi_vel_arvalid, m_axi_vel_rready;
    logic [ADDR_W-1:0] m_axi_vel_araddr, m_axi_vel_awaddr;
    logic        [7:0] m_axi_vel_arlen, m_axi_vel_awlen;
    logic        [2:0] m_axi_vel_arsize, m_axi_vel_awsize;
    logic        [1:0] m_axi_vel_arburst, m_axi_vel_awburst;
    logic              m_axi_vel_awid, m_axi_vel_awvalid, m_axi_vel_wlast, m_axi_vel_wvalid;
    logic              m_axi_vel_bready;
    logic [32*W-1:0] m_axi_vel_wdata;
    logic  [4*W-1:0] m_axi_vel_wstrb;

    compress_engine #(
        .ADDR_W(ADDR_W), .K_MAX(2), .LMAX_LOG2_MAX(2), .MAX_BURST(MAX_BURST), .RES_FIFO_AW(2),
        .W(W)
    ) dut (
        .clk, .rst,
        .cfg_valid, .cfg_ready, .cfg_n, .cfg_block_size, .cfg_n_blocks, .cfg_k, .cfg_m,
        .cfg_k_shift, .cfg_range_bits, .cfg_layer_id, .cfg_lmax_log2, .cfg_norm, .cfg_res_base,
        .cfg_momentum_en, .cfg_m_fix, .cfg_momentum_mask, .cfg_vel_base,
        .s_grad_tdata, .s_grad_tvalid, .s_grad_tready, .s_grad_tlast,
        .m_frame_tdata, .m_frame_tkeep, .m_frame_tvalid, .m_frame_tready, .m_frame_tlast,
        .m_axi_arid, .m_axi_araddr, .m_axi_arlen, .m_axi_arsize, .m_axi_arburst, .m_axi_arvalid,
        .m_axi_arready, .m_axi_rid, .m_axi_rdata, .m_axi_rresp, .m_axi_rlast, .m_axi_rvalid,
        .m_axi_rready, .m_axi_awid, .m_axi_awaddr, .m_axi_awlen, .m_axi_awsize, .m_axi_awburst,
        .m_axi_awvalid, .m_axi_awready, .m_axi_wdata, .m_axi_wstrb, .m_axi_wlast, .m_axi_wvalid,
        .m_axi_wready, .m_axi_bid, .m_axi_bresp, .m_axi_bvalid, .m_axi_bready,
        .m_axi_vel_arid, .m_axi_vel_araddr, .m_axi_vel_arlen, .m_axi_vel_arsize,
        .m_axi_vel_arburst, .m_axi_vel_arvalid, .m_axi_vel_arready, .m_axi_vel_rid,
        .m_axi_vel_rdata, .m_axi_vel_rresp, .m_axi_vel_rlast, .m_axi_vel_rvalid,
        .m_axi_vel_rready, .m_axi_vel_awid, .m_axi_vel_awaddr, .m_axi_vel_awlen,
        .m_axi_vel_awsize, .m_axi_vel_awburst, .m_axi_vel_awvalid, .m_axi_vel_awready,
        .m_axi_vel_wdata, .m_axi_vel_wstrb, .m_axi_vel_wlast, .m_axi_vel_wvalid,
        .m_axi_vel_wready, .m_axi_vel_bid, .m_axi_vel_bresp, .m_axi_vel_bvalid,
        .m_axi_vel_bready,
        .busy, .done, .err_code, .sat_quant_count, .sat_feedback_count, .nan_count,
        .sat_momentum_count
    );

    // ---- the memories: any AXI4 slave on each port (RLAST is the model's: legal)
    logic [7:0] res_reads, res_writes, vel_reads, vel_writes;
    fv_axi4_slave #(.DATA_W(32 * W)) u_res_mem (
        .clk, .rst, .arlen(m_axi_arlen), .arvalid(m_axi_arvalid), .arready(m_axi_arready),
        .rdata(m_axi_rdata), .rresp(m_axi_rresp), .rlast(m_axi_rlast), .rvalid(m_axi_rvalid),
        .rready(m_axi_rready), .awvalid(m_axi_awvalid), .awready(m_axi_awready),
        .wlast(m_axi_wlast), .wvalid(m_axi_wvalid), .wready(m_axi_wready),
        .bresp(m_axi_bresp), .bvalid(m_axi_bvalid), .bready(m_axi_bready),
        .reads_out(res_reads), .writes_due(res_writes)
    );
    fv_axi4_slave #(.DATA_W(32 * W)) u_vel_mem (
        .clk, .rst, .arlen(m_axi_vel_arlen), .arvalid(m_axi_vel_arvalid),
        .arready(m_axi_vel_arready), .rdata(m_axi_vel_rdata), .rresp(m_axi_vel_rresp),
        .rlast(m_axi_vel_rlast), .rvalid(m_axi_vel_rvalid), .rready(m_axi_vel_rready),
        .awvalid(m_axi_vel_awvalid), .awready(m_axi_vel_awready), .wlast(m_axi_vel_wlast),
        .wvalid(m_axi_vel_wvalid), .wready(m_axi_vel_wready), .bresp(m_axi_vel_bresp),
        .bvalid(m_axi_vel_bvalid), .bready(m_axi_vel_bready),
        .reads_out(vel_reads), .writes_due(vel_writes)
    );

    // ---- the stream rules for the inputs: valid held, payload unchanged, until taken
    logic         past_live, cfg_stall, grad_stall;
    logic [311:0] cfg_word, cfg_now;
    logic [32*W:0] grad_word;
    assign cfg_now = {cfg_n, cfg_block_size, cfg_n_blocks, cfg_k, cfg_m, cfg_k_shift,
                      cfg_range_bits, cfg_layer_id, cfg_lmax_log2, cfg_norm, cfg_res_base,
                      cfg_momentum_en, cfg_m_fix, cfg_momentum_mask, cfg_vel_base};

    initial assume (rst);
    initial past_live = 1'b0;
    always @(posedge clk) begin
        past_live <= !rst;
        cfg_stall <= cfg_valid && !cfg_ready;
        grad_stall <= s_grad_tvalid && !s_grad_tready;
        cfg_word <= cfg_now;
        grad_word <= {s_grad_tlast, s_grad_tdata};
    end
    always @(*) begin
        if (past_live && !rst) begin
            if (cfg_stall) assume (cfg_valid && cfg_now == cfg_word);
            if (grad_stall) assume (s_grad_tvalid && {s_grad_tlast, s_grad_tdata} == grad_word);
        end
    end

    // ---- REACH (the reach task, abc bmc3; the runner expects a trace): one assertion says the
    // two ports never both carry a whole read burst (R with RLAST) and a write address; the
    // trace that breaks it shows every one of those, in one run (faster than z3's covers)
    logic seen_res_r, seen_res_aw, seen_vel_r, seen_vel_aw;
    always @(posedge clk) begin
        if (rst) begin
            {seen_res_r, seen_res_aw, seen_vel_r, seen_vel_aw} <= 4'd0;
        end else begin
            if (m_axi_rvalid && m_axi_rready && m_axi_rlast) seen_res_r <= 1'b1;
            if (m_axi_awvalid && m_axi_awready) seen_res_aw <= 1'b1;
            if (m_axi_vel_rvalid && m_axi_vel_rready && m_axi_vel_rlast) seen_vel_r <= 1'b1;
            if (m_axi_vel_awvalid && m_axi_vel_awready) seen_vel_aw <= 1'b1;
        end
    end
`ifdef REACH
    always @(*) if (!rst) assert (!(seen_res_r && seen_res_aw && seen_vel_r && seen_vel_aw));
`endif

endmodule
