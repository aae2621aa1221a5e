// Error feedback, docs/spec.md §2.1: a = clamp(r + q, -QMAX, QMAX), one pair per cycle, latency 1.
//
// s_tdata = {residual r, quantised q} (r in bits 63..32, q in bits 31..0), both int32.
// m_tdata = a (int32); m_tuser = sat, set when |r + q| > QMAX (the element counted in sat_feedback).
module ef_add (
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
    logic signed [32:0] sum;
    logic               over, under;
    logic        [31:0] clamped;

    // 33 bits hold any sum of two int32 exactly
    assign sum = $signed({s_tdata[63], s_tdata[63:32]}) + $signed({s_tdata[31], s_tdata[31:0]});
    assign over = sum > 33'sh0_7FFF_FFFF;
    assign under = sum < -33'sh0_7FFF_FFFF;
    assign clamped = over ? 32'h7FFF_FFFF : under ? 32'h8000_0001 : sum[31:0];

    logic [33:0] out_word;
    pipe_reg #(.W(34)) u_out (
        .clk, .rst,
        .in_data({over || under, s_tlast, clamped}), .in_valid(s_tvalid), .in_ready(s_tready),
        .out_data(out_word), .out_valid(m_tvalid), .out_ready(m_tready)
    );
    assign m_tuser = out_word[33];
    assign m_tlast = out_word[32];
    assign m_tdata = out_word[31:0];
endmodule
