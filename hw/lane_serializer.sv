// W-lane beats in, one 32-bit word a cycle out (issue 31, the lane convention): the kept lanes
// of each beat (s_tkeep, one bit per 32-bit lane, at least one set) in lane order, lane 0 first;
// m_tlast on the last kept word of an s_tlast beat. compress_engine puts its pass-1 `a` beats
// through one in front of block_l1 (an element a cycle: exact at every W).
// A beat is held in one register; the next is taken in the cycle its last word leaves, so a
// full beat streams out at one word a cycle with no gap.
`resetall
`default_nettype none

module lane_serializer #(
    parameter int W = 4                 // lanes a beat: 2..16
) (
    input  logic            clk,
    input  logic            rst,
    input  logic [32*W-1:0] s_tdata,
    input  logic    [W-1:0] s_tkeep,
    input  logic            s_tlast,
    input  logic            s_tvalid,
    output logic            s_tready,
    output logic     [31:0] m_tdata,
    output logic            m_tlast,
    output logic            m_tvalid,
    input  logic            m_tready
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(W >= 2 && W <= 16)) begin : g_bad_w
`ifdef __ICARUS__
        lane_serializer__W_must_be_2_to_16 u_parameter_error ();
`else
        $error("lane_serializer: W must be 2..16");
`endif
    end
    localparam int LW = $clog2(W);

    logic [32*W-1:0] data;
    logic    [W-1:0] left;              // the lanes not yet sent
    logic            last, full, one_left;
    logic   [LW-1:0] lane;              // the lowest lane left

    always_comb begin
        lane = '0;
        for (int l = W - 1; l >= 0; l--) if (left[l]) lane = LW'(l);
    end
    assign one_left = (left & (left - W'(1))) == '0;
    assign m_tvalid = full;
    assign m_tdata = data[32*lane +: 32];
    assign m_tlast = last && one_left;
    assign s_tready = !full || (m_tready && one_left);

    always_ff @(posedge clk) begin
        if (rst) begin
            full <= 1'b0;
            left <= '0;
        end else if (s_tvalid && s_tready) begin
            full <= 1'b1;
            left <= s_tkeep;
        end else if (m_tvalid && m_tready) begin
            full <= !one_left;
            left <= left & (left - W'(1));        // the lowest lane is sent
        end
        if (s_tvalid && s_tready) begin
            data <= s_tdata;
            last <= s_tlast;
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    always @(posedge clk) begin
        if (!rst) begin
            if (s_tvalid) assert (s_tkeep != '0);
            if (full) assert (left != '0);
        end
    end
`endif
endmodule

`resetall
