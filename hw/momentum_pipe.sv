// Momentum correction, docs/spec.md §7.2, pipelined for compress_engine (150 MHz on ECP5):
// u' = clamp(mul(m, u) + q, -QMAX, QMAX), mul(m, u) = sign(u) * ((|u| * m_fix + 2^15) >> 16).
// Same contract as hw/momentum.sv (one element per cycle, {r, u, q} in, {r, u'} out, tuser =
// saturated), but five register stages, each one multiplier or one carry chain deep:
//   1  |u| (one negate) and its sign
//   2  the two 16 x 16 partial products |u|[15:0] * m_fix and |u|[31:16] * m_fix
//   3  mag = (|u| * m_fix + 2^15) >> 16 = hi + lo[31:16] + lo[15]   (one add, carry in)
//   4  v = q ± mag = q + (mag ^ sign) + sign                         (one add, carry in)
//   5  clamp to ±QMAX, the saturation flag
// All stages advance together (one enable: s_tready = !m_tvalid || m_tready), as in the
// quantiser; the caller puts a register slice in front if the ready must not run on.
// m_fix must be held constant while a layer streams (it is read in stage 2).
`resetall
`default_nettype none

module momentum_pipe (
    input  logic        clk,
    input  logic        rst,
    input  logic [15:0] m_fix,
    input  logic [95:0] s_tdata,      // {r (95..64), u (63..32), q (31..0)}, int32 each
    input  logic        s_tvalid,
    output logic        s_tready,
    input  logic        s_tlast,
    output logic [63:0] m_tdata,      // {r (63..32), u' (31..0)}: ef_add's input
    output logic        m_tuser,      // u' saturated (counted in sat_momentum)
    output logic        m_tvalid,
    input  logic        m_tready,
    output logic        m_tlast
);
    localparam int SBW = 65;           // side band: {tlast, r, q}
    logic [5:1] v;
    logic       en;

    assign en = !v[5] || m_tready;
    assign s_tready = en;
    assign m_tvalid = v[5];

    always_ff @(posedge clk) begin
        if (rst) v <= '0;
        else if (en) v <= {v[4:1], s_tvalid};
    end

    // ---- the side band rides along; data registers need no reset ------------------------------
    logic [SBW-1:0] side1, side2, side3;
    logic    [32:0] side4;             // {tlast, r}: q is in v4
    logic           neg1, neg2, neg3;
    logic    [31:0] mag1;              // |u|; u = -2^31 gives 2^31, exact unsigned
    logic    [31:0] lo2, hi2;          // partial products, each < 2^32
    logic    [31:0] mag3;              // < 2^31: m_fix < 2^16
    logic signed [33:0] v4;            // q ± mag: |v| < 2^32
    logic           over, under;

    always_ff @(posedge clk) begin
        if (en) begin
            // 1
            side1 <= {s_tlast, s_tdata[95:64], s_tdata[31:0]};
            neg1 <= s_tdata[63];
            mag1 <= s_tdata[63] ? (~s_tdata[63:32] + 32'd1) : s_tdata[63:32];
            // 2
            side2 <= side1;
            neg2 <= neg1;
            lo2 <= {16'd0, mag1[15:0]} * {16'd0, m_fix};
            hi2 <= {16'd0, mag1[31:16]} * {16'd0, m_fix};
            // 3: (hi * 2^16 + lo + 2^15) >> 16; the low half of lo only carries through bit 15
            side3 <= side2;
            neg3 <= neg2;
            mag3 <= hi2 + {16'd0, lo2[31:16]} + {31'd0, lo2[15]};
            // 4: -mag = ~mag + 1 in 34 bits
            side4 <= side3[64:32];
            v4 <= $signed({{2{side3[31]}}, side3[31:0]})
                + $signed({2'b00, mag3} ^ {34{neg3}}) + $signed({33'd0, neg3});
            // 5
            m_tlast <= side4[32];
            m_tdata <= {side4[31:0], over ? 32'h7FFF_FFFF : under ? 32'h8000_0001 : v4[31:0]};
            m_tuser <= over || under;
        end
    end

    // v > QMAX: positive with bit 31 or 32 set; v < -QMAX, i.e. v <= -2^31: negative and
    // below -2^31 (bits 32..31 not both set) or exactly -2^31
    assign over = !v4[33] && (v4[32] || v4[31]);
    assign under = v4[33] && (v4[32:31] != 2'b11 || v4[30:0] == 31'd0);

    logic unused_lo;
    assign unused_lo = ^lo2[14:0];     // below the rounding bit: shifted out

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
