// Momentum correction, docs/spec.md §7.2: u' = clamp(mul(m, u) + q, -QMAX, QMAX) with
// mul(m, u) = sign(u) * ((|u| * m_fix + 2^15) >> 16), one element per cycle, latency 1.
// The stage before ef_add: the velocity is a second residual stream, in and out.
//
// s_tdata = {residual r (95..64), velocity u (63..32), quantised q (31..0)}, all int32.
// m_tdata = {r (63..32), u' (31..0)}: ef_add's input as it is (r passes through unchanged).
// m_tuser = 1 where u' saturated (the element counted in sat_momentum).
// m_fix   = unsigned Q0.16 multiplier, m = m_fix / 2^16; hold it constant while a layer streams
//           (it is read combinationally on every accepted beat).
// Factor masking of u' (0 on the selected blocks) happens after selection, where the residual
// is masked; this stage only computes u'.
`resetall
`default_nettype none

module momentum (
    input  logic        clk,
    input  logic        rst,
    input  logic [15:0] m_fix,
    input  logic [95:0] s_tdata,
    input  logic        s_tvalid,
    output logic        s_tready,
    input  logic        s_tlast,
    output logic [63:0] m_tdata,
    output logic        m_tuser,
    output logic        m_tvalid,
    input  logic        m_tready,
    output logic        m_tlast
);
    logic        [31:0] u_bits, u_mag;
    logic               u_neg;
    logic        [47:0] prod;     // |u| * m_fix + 2^15 <= 2^31 * (2^16 - 1) + 2^15 < 2^47
    logic        [31:0] mul_mag;  // prod >> 16 < 2^31
    logic signed [33:0] v;        // +-mul_mag + q: |v| < 2^32
    logic               over, under;
    logic        [31:0] clamped;

    assign u_bits = s_tdata[63:32];
    assign u_neg = u_bits[31];
    assign u_mag = u_neg ? (~u_bits + 32'd1) : u_bits;   // -2^31 gives 2^31, still exact unsigned
    assign prod = {16'd0, u_mag} * {32'd0, m_fix} + 48'h0000_0000_8000;
    assign mul_mag = prod[47:16];
    assign v = (u_neg ? -$signed({2'b00, mul_mag}) : $signed({2'b00, mul_mag}))
             + $signed({{2{s_tdata[31]}}, s_tdata[31:0]});
    assign over = v > 34'sh0_7FFF_FFFF;
    assign under = v < -34'sh0_7FFF_FFFF;
    assign clamped = over ? 32'h7FFF_FFFF : under ? 32'h8000_0001 : v[31:0];

    logic unused_low;
    assign unused_low = ^prod[15:0];   // the fraction the shift drops (the rounding bias is in)

    logic [65:0] out_word;
    pipe_reg #(.W(66)) u_out (
        .clk, .rst,
        .s_tdata({over || under, s_tlast, s_tdata[95:64], clamped}), .s_tvalid(s_tvalid),
        .s_tready(s_tready),
        .m_tdata(out_word), .m_tvalid(m_tvalid), .m_tready(m_tready)
    );
    assign m_tuser = out_word[65];
    assign m_tlast = out_word[64];
    assign m_tdata = out_word[63:0];

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // m_tvalid: a word offered stays offered, unchanged, until m_tready takes it
    logic                         chk_m_stall;
    logic [65:0]              chk_m_word;
    initial chk_m_stall = 1'b0;
    always @(posedge clk) begin
        chk_m_stall <= !rst && m_tvalid && !m_tready;
        chk_m_word  <= {m_tdata, m_tuser, m_tlast};
        if (!rst && chk_m_stall) assert (m_tvalid && {m_tdata, m_tuser, m_tlast} == chk_m_word);
    end
`endif
endmodule

`resetall
