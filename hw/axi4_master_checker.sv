// AXI4 master-port protocol checker: the assertions of one AXI4 master port, shared by every
// engine that drives one (compress_engine's m_axi_* and m_axi_vel_*, aggregate_engine's
// m_axi_*), so the port rules are written once (docs/hw.md "Verification").
//
// It only watches: every port is an input, it has no outputs and no effect on the design. The
// engines instantiate it inside their `ifndef SYNTHESIS block, and its own body is under
// `ifndef SYNTHESIS too, so synthesis never sees it; simulation (Icarus, Verilator --assert)
// checks it every cycle.
//
// Rules checked (after reset):
//   AR, AW and W held, unchanged, until taken (valid stays high, payload stable);
//   INCR bursts of 1..MAX_BURST beats, addresses aligned to the data width, no burst across
//   a 4 KiB page;
//   W beats follow the AW bursts in order, WLAST on each burst's last beat and on no other,
//   never a W beat that no AW announced (the AW may be taken in the same cycle);
//   at most 16 outstanding bursts each way (the checker's own queues);
//   the memory side: no R beat or B response that was not asked for, RLAST on each read
//   burst's last beat.
`resetall
`default_nettype none

module axi4_master_checker #(
    parameter int ADDR_W = 32,          // address bits (>= 12: the 4 KiB page is addr[11:0])
    parameter int DATA_W = 32,          // data bits, a power of two >= 8 (WSTRB has DATA_W/8)
    parameter int MAX_BURST = 16        // most beats per burst the master may ask for, 1..256
) (
    input  logic                clk,
    input  logic                rst,
    // read address and data
    input  logic [ADDR_W-1:0]   m_axi_araddr,
    input  logic          [7:0] m_axi_arlen,
    input  logic          [1:0] m_axi_arburst,
    input  logic                m_axi_arvalid,
    input  logic                m_axi_arready,
    input  logic                m_axi_rlast,
    input  logic                m_axi_rvalid,
    input  logic                m_axi_rready,
    // write address, data and response
    input  logic [ADDR_W-1:0]   m_axi_awaddr,
    input  logic          [7:0] m_axi_awlen,
    input  logic          [1:0] m_axi_awburst,
    input  logic                m_axi_awvalid,
    input  logic                m_axi_awready,
    input  logic   [DATA_W-1:0] m_axi_wdata,
    input  logic [DATA_W/8-1:0] m_axi_wstrb,
    input  logic                m_axi_wlast,
    input  logic                m_axi_wvalid,
    input  logic                m_axi_wready,
    input  logic                m_axi_bvalid,
    input  logic                m_axi_bready
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(ADDR_W >= 12 && ADDR_W <= 64)) begin : g_bad_addr_w
`ifdef __ICARUS__
        axi4_master_checker__ADDR_W_must_be_12_to_64 u_parameter_error ();
`else
        $error("axi4_master_checker: ADDR_W must be 12..64");
`endif
    end
    if (!(DATA_W >= 8 && DATA_W <= 1024 && (DATA_W & (DATA_W - 1)) == 0)) begin : g_bad_data_w
`ifdef __ICARUS__
        axi4_master_checker__DATA_W_must_be_a_power_of_two_8_to_1024 u_parameter_error ();
`else
        $error("axi4_master_checker: DATA_W must be a power of two, 8..1024");
`endif
    end
    if (!(MAX_BURST >= 1 && MAX_BURST <= 256)) begin : g_bad_max_burst
`ifdef __ICARUS__
        axi4_master_checker__MAX_BURST_must_be_1_to_256 u_parameter_error ();
`else
        $error("axi4_master_checker: MAX_BURST must be 1..256");
`endif
    end

`ifndef SYNTHESIS
    localparam int BEAT_BYTES = DATA_W / 8;
    localparam int LSB = $clog2(BEAT_BYTES);     // address bits inside one beat
    localparam logic [11:0] BEAT_MASK = 12'(BEAT_BYTES - 1);
    localparam logic [12:0] PAGE_BEATS = 13'(4096 >> LSB);

    logic                  chk_ar_stall, chk_aw_stall, chk_w_stall;
    logic [ADDR_W+7:0]     chk_ar, chk_aw;
    logic [DATA_W+DATA_W/8:0] chk_w;
    logic [8:0]            chk_awq [16];  // beats of announced write bursts, oldest first
    logic [3:0]            chk_awq_wr, chk_awq_rd;
    logic [4:0]            chk_awq_n;
    logic [8:0]            chk_wbeat;     // W beats sent of the oldest announced burst
    logic [8:0]            chk_arq [16];  // beats of requested read bursts, oldest first
    logic [3:0]            chk_arq_wr, chk_arq_rd;
    logic [4:0]            chk_arq_n;
    logic [8:0]            chk_rbeat;
    logic [31:0]           chk_b_due;     // write bursts completed and not yet answered
    logic                  chk_ar_fire, chk_aw_fire, chk_w_fire, chk_r_fire, chk_b_fire;
    logic [8:0]            chk_wlen, chk_rlen;
    logic [12:0]           chk_ar_end, chk_aw_end; // page beat of the burst's start + its beats

    assign chk_ar_fire = m_axi_arvalid && m_axi_arready;
    assign chk_aw_fire = m_axi_awvalid && m_axi_awready;
    assign chk_w_fire  = m_axi_wvalid && m_axi_wready;
    assign chk_r_fire  = m_axi_rvalid && m_axi_rready;
    assign chk_b_fire  = m_axi_bvalid && m_axi_bready;
    assign chk_wlen = chk_awq_n != 5'd0 ? chk_awq[chk_awq_rd] : {1'b0, m_axi_awlen} + 9'd1;
    assign chk_rlen = chk_arq_n != 5'd0 ? chk_arq[chk_arq_rd] : 9'd0;
    assign chk_ar_end = 13'(m_axi_araddr[11:0] >> LSB) + 13'(m_axi_arlen) + 13'd1;
    assign chk_aw_end = 13'(m_axi_awaddr[11:0] >> LSB) + 13'(m_axi_awlen) + 13'd1;

    initial begin
        chk_ar_stall = 1'b0;
        chk_aw_stall = 1'b0;
        chk_w_stall = 1'b0;
    end
    always @(posedge clk) begin
        chk_ar_stall <= !rst && m_axi_arvalid && !m_axi_arready;
        chk_aw_stall <= !rst && m_axi_awvalid && !m_axi_awready;
        chk_w_stall  <= !rst && m_axi_wvalid && !m_axi_wready;
        chk_ar <= {m_axi_araddr, m_axi_arlen};
        chk_aw <= {m_axi_awaddr, m_axi_awlen};
        chk_w  <= {m_axi_wdata, m_axi_wstrb, m_axi_wlast};
        if (rst) begin
            chk_awq_wr <= '0;
            chk_awq_rd <= '0;
            chk_awq_n <= '0;
            chk_wbeat <= '0;
            chk_arq_wr <= '0;
            chk_arq_rd <= '0;
            chk_arq_n <= '0;
            chk_rbeat <= '0;
            chk_b_due <= '0;
        end else begin
            // valid held, payload unchanged, until ready
            if (chk_ar_stall) assert (m_axi_arvalid && {m_axi_araddr, m_axi_arlen} == chk_ar);
            if (chk_aw_stall) assert (m_axi_awvalid && {m_axi_awaddr, m_axi_awlen} == chk_aw);
            if (chk_w_stall) assert (m_axi_wvalid && {m_axi_wdata, m_axi_wstrb, m_axi_wlast} == chk_w);
            // INCR bursts of 1..MAX_BURST aligned beats inside one 4 KiB page
            if (m_axi_arvalid) begin
                assert ({1'b0, m_axi_arlen} < 9'(MAX_BURST) && m_axi_arburst == 2'b01 && (m_axi_araddr[11:0] & BEAT_MASK) == 12'd0);
                assert (chk_ar_end <= PAGE_BEATS);
            end
            if (m_axi_awvalid) begin
                assert ({1'b0, m_axi_awlen} < 9'(MAX_BURST) && m_axi_awburst == 2'b01 && (m_axi_awaddr[11:0] & BEAT_MASK) == 12'd0);
                assert (chk_aw_end <= PAGE_BEATS);
            end
            // W beats: announced by an AW, WLAST exactly on each burst's last beat
            if (chk_w_fire) begin
                assert (chk_awq_n != 5'd0 || chk_aw_fire);
                assert (m_axi_wlast == (chk_wbeat + 9'd1 == chk_wlen));
            end
            // the memory side: R beats and B responses only for what was asked
            if (chk_r_fire) begin
                assert (chk_arq_n != 5'd0);
                assert (m_axi_rlast == (chk_rbeat + 9'd1 == chk_rlen));
            end
            if (chk_b_fire) assert (chk_b_due != 32'd0 || (chk_w_fire && m_axi_wlast));
            assert (!(chk_aw_fire && chk_awq_n == 5'd16) && !(chk_ar_fire && chk_arq_n == 5'd16));
            // the checker's own queues
            if (chk_aw_fire) begin
                chk_awq[chk_awq_wr] <= {1'b0, m_axi_awlen} + 9'd1;
                chk_awq_wr <= chk_awq_wr + 4'd1;
            end
            if (chk_ar_fire) begin
                chk_arq[chk_arq_wr] <= {1'b0, m_axi_arlen} + 9'd1;
                chk_arq_wr <= chk_arq_wr + 4'd1;
            end
            chk_awq_n <= chk_awq_n + 5'(chk_aw_fire) - 5'(chk_w_fire && m_axi_wlast);
            chk_arq_n <= chk_arq_n + 5'(chk_ar_fire) - 5'(chk_r_fire && m_axi_rlast);
            if (chk_w_fire) begin
                chk_wbeat <= m_axi_wlast ? 9'd0 : chk_wbeat + 9'd1;
                if (m_axi_wlast) chk_awq_rd <= chk_awq_rd + 4'd1;
            end
            if (chk_r_fire) begin
                chk_rbeat <= m_axi_rlast ? 9'd0 : chk_rbeat + 9'd1;
                if (m_axi_rlast) chk_arq_rd <= chk_arq_rd + 4'd1;
            end
            chk_b_due <= chk_b_due + 32'(chk_w_fire && m_axi_wlast) - 32'(chk_b_fire);
        end
    end
`endif
endmodule

`resetall
