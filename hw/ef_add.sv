// Error feedback, docs/spec.md §2.1: a = clamp(r + q, -QMAX, QMAX), one pair per cycle, latency 1
// (2 with REG_SUM: the 33-bit sum is registered before the clamp, for compress_engine, where
// the add and the clamp in one cycle missed 150 MHz on ECP5 once placed among the rest).
//
// s_tdata = {residual r, quantised q} (r in bits 63..32, q in bits 31..0), both int32.
// m_tdata = a (int32); m_tuser = sat, set when |r + q| > QMAX (the element counted in sat_feedback).
`resetall
`default_nettype none

module ef_add #(
    parameter bit REG_SUM = 1'b0
) (
    input  logic        clk,
    input  logic        rst,
    input  logic [63:0] s_tdata,
    input  logic        s_tvalid,
    output logic        s_tready,
    input  logic        s_tlast,
    output logic [31:0] m_tdata,
    output logic        m_tuser,
    output logic        m_tvalid,
    input  logic        m_tready,
    output logic        m_tlast
);
    logic signed [32:0] sum, sum_in;
    logic               over, under, sum_valid, sum_ready, sum_last;
    logic        [31:0] clamped;

    // 33 bits hold any sum of two int32 exactly
    assign sum_in = $signed({s_tdata[63], s_tdata[63:32]}) + $signed({s_tdata[31], s_tdata[31:0]});
    if (REG_SUM) begin : g_reg_sum
        pipe_reg #(.W(34)) u_sum (
            .clk, .rst,
            .s_tdata({s_tlast, sum_in}), .s_tvalid(s_tvalid), .s_tready(s_tready),
            .m_tdata({sum_last, sum}), .m_tvalid(sum_valid), .m_tready(sum_ready)
        );
    end else begin : g_comb_sum
        assign {sum_last, sum} = {s_tlast, sum_in};
        assign sum_valid = s_tvalid;
        assign s_tready = sum_ready;
    end
    assign over = sum > 33'sh0_7FFF_FFFF;
    assign under = sum < -33'sh0_7FFF_FFFF;
    assign clamped = over ? 32'h7FFF_FFFF : under ? 32'h8000_0001 : sum[31:0];

    logic [33:0] out_word;
    pipe_reg #(.W(34)) u_out (
        .clk, .rst,
        .s_tdata({over || under, sum_last, clamped}), .s_tvalid(sum_valid), .s_tready(sum_ready),
        .m_tdata(out_word), .m_tvalid(m_tvalid), .m_tready(m_tready)
    );
    assign m_tuser = out_word[33];
    assign m_tlast = out_word[32];
    assign m_tdata = out_word[31:0];

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // m_tvalid: a word offered stays offered, unchanged, until m_tready takes it
    logic                         chk_m_stall;
    logic [33:0]              chk_m_word;
    initial chk_m_stall = 1'b0;
    always @(posedge clk) begin
        chk_m_stall <= !rst && m_tvalid && !m_tready;
        chk_m_word  <= {m_tdata, m_tuser, m_tlast};
        if (!rst && chk_m_stall) assert (m_tvalid && {m_tdata, m_tuser, m_tlast} == chk_m_word);
    end
`endif
endmodule

`resetall
