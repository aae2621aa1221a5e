// float32 bits -> int32 code, docs/spec.md §1.2, one word per cycle, latency 8.
//
// Q = sign * min(QMAX, rhe(m * M / 2^t)), t = k - E, where |x| = m * 2^E.
// Eight register stages, each at most one carry chain or a few LUT levels deep (150 MHz on
// ECP5, docs/hw.md "ECP5 place and route"):
//   1 decode      fields, flags, the sat compare, 150 - E' (E = E' - 150)
//   2 products    m * M as four <=17x17 partial products (one MULT18X18D each); t = k + 150 - E'
//   3 middle      pp1 + pp2; t clamped to the shifter's range: s = t - 1 in 0..62
//   4 product     P = m * M exact in 56 bits (the outer products do not overlap: one add)
//   5 shift by 8  R1 = P >> 8*s[5:3], sticky1 = any bit shifted out
//   6 shift by 1  R = R1 >> s[2:0] = P >> (t - 1), sticky = any bit of P below R[0]
//   7 round       q = R >> 1, round up = R[0] & (sticky | q[0]), saturation, sign folded in
//   8 result      code = sign ? -(q + up) : q + up as one add, or +-QMAX, or 0 for NaN
// All stages advance together (one enable: s_tready = !m_tvalid || m_tready), so the ready
// path is one gate deep however long the pipeline is.
// Configuration (M, k, range_bits) must be held steady while words are in flight.
//
// m_tuser = {s_tuser, nan, sat}:
//   sat: (bits & 0x7FFFFFFF) > range_bits, i.e. |x| > R, the element counted in sat_quant
//        (±Inf included; NaN is not counted, it has its own flag)
//   nan: the input is a NaN; its code is 0 (the software reference raises instead)
// s_tuser is carried alongside untouched (the top uses it for the residual).
`resetall
`default_nettype none

module quantiser #(
    parameter int UW = 1
) (
    input  logic               clk,
    input  logic               rst,
    input  logic        [31:0] cfg_m,          // 2^31 <= M < 2^32
    input  logic signed [31:0] cfg_k,          // shift k
    input  logic        [31:0] cfg_range_bits, // R as float32 bits
    input  logic        [31:0] s_tdata,        // float32 bits
    input  logic      [UW-1:0] s_tuser,
    input  logic               s_tvalid,
    output logic               s_tready,
    input  logic               s_tlast,
    output logic        [31:0] m_tdata,        // int32 code
    output logic      [UW+1:0] m_tuser,
    output logic               m_tvalid,
    input  logic               m_tready,
    output logic               m_tlast
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(UW >= 1)) begin : g_bad_uw
`ifdef __ICARUS__
        quantiser__UW_must_be_at_least_1 u_parameter_error ();
`else
        $error("quantiser: UW must be >= 1");
`endif
    end
    localparam int L = gradblock_pkg::QUANT_LATENCY;   // the eight stages below
    localparam logic [31:0] QMAX = 32'h7FFF_FFFF;

    // ---- one enable for the whole pipeline; v[i]: stage i holds a word ----------------------
    logic [L:1] v;
    logic       en;
    assign en = !v[L] || m_tready;
    assign s_tready = en;
    assign m_tvalid = v[L];

    always_ff @(posedge clk) begin
        if (rst) v <= '0;
        else if (en) v <= {v[L-1:1], s_tvalid};
    end

    // the side band (user word, tlast, flags) rides along every stage; data need no reset
    // side band {user, last, sign, nan, inf, sat} (a flat vector: yosys 0.23 reads no structs)
    localparam int SBW = UW + 5;
    // (not NAN: Verilator's C++ of a copy it does not inline, e.g. compress_engine's 16 lanes,
    // names the parameter, and C's NAN macro breaks it)
    localparam int SAT = 0, INF = 1, NAN_BIT = 2, SIGN = 3, LAST = 4;
    logic [SBW-1:0] side1, side2, side3, side4, side5, side6, side7;

    // ---- stage 1: decode ----------------------------------------------------------------------
    logic [7:0]  exp_in;
    logic [23:0] mant1;
    logic signed [9:0] off1;     // 150 - E' with E' = max(exp, 1): t = k + off
    logic        mant_nz1;

    logic        nan_in, inf_in;
    assign exp_in = s_tdata[30:23];
    assign inf_in = exp_in == 8'hFF && s_tdata[22:0] == 23'd0;
    assign nan_in = exp_in == 8'hFF && s_tdata[22:0] != 23'd0;
    always_ff @(posedge clk) begin
        if (en) begin
            side1 <= {s_tuser, s_tlast, s_tdata[31], nan_in, inf_in,
                      !nan_in && {1'b0, s_tdata[30:0]} > cfg_range_bits};
            mant1 <= {exp_in != 8'd0, s_tdata[22:0]};
            mant_nz1 <= s_tdata[30:0] != 31'd0;
            // E = exp - 150 for normals, -149 for subnormals (exp field 0)
            off1 <= 10'sd150 - $signed({2'b00, (exp_in == 8'd0) ? 8'd1 : exp_in});
        end
    end

    // ---- stage 2: partial products, t ---------------------------------------------------------
    // m = mh * 2^17 + ml, M = Mh * 2^17 + Ml: P = pp0 + (pp1 + pp2) * 2^17 + pp3 * 2^34
    logic [33:0] pp0;            // ml * Ml
    logic [31:0] pp1;            // ml * Mh
    logic [23:0] pp2;            // mh * Ml
    logic [21:0] pp3;            // mh * Mh
    logic signed [33:0] t2;      // 34 bits: k - E cannot overflow for any 32-bit k
    logic        mant_nz2;

    always_ff @(posedge clk) begin
        if (en) begin
            side2 <= side1;
            pp0 <= {17'd0, mant1[16:0]} * {17'd0, cfg_m[16:0]};
            pp1 <= {15'd0, mant1[16:0]} * {17'd0, cfg_m[31:17]};
            pp2 <= {17'd0, mant1[23:17]} * {7'd0, cfg_m[16:0]};
            pp3 <= {15'd0, mant1[23:17]} * {7'd0, cfg_m[31:17]};
            t2 <= $signed({{2{cfg_k[31]}}, cfg_k}) + 34'(off1);
            mant_nz2 <= mant_nz1;
        end
    end

    // ---- stage 3: middle sum, shift amount ----------------------------------------------------
    logic [32:0] mid3;
    logic [55:0] outer3;         // pp3 * 2^34 + pp0: disjoint bits
    logic [5:0]  s3;             // t - 1, clamped: t <= 0 -> 0 (then m = 0 or saturated), t >= 63 -> 62
    logic        shift_sat3;     // t <= 0 with m != 0: m * M * 2^-t >= 2^31 > QMAX
    logic        t_low, t_high;

    assign t_low = t2[33] || t2 == 34'sd0;
    assign t_high = !t2[33] && (t2[32:6] != 27'd0 || t2[5:0] == 6'd63);
    always_ff @(posedge clk) begin
        if (en) begin
            side3 <= side2;
            mid3 <= {1'b0, pp1} + {9'd0, pp2};
            outer3 <= {pp3, pp0};
            s3 <= t_low ? 6'd0 : t_high ? 6'd62 : t2[5:0] - 6'd1;
            shift_sat3 <= t_low && mant_nz2;
        end
    end

    // ---- stage 4: P ---------------------------------------------------------------------------
    logic [55:0] p4;
    logic [5:0]  s4;
    logic        shift_sat4;

    always_ff @(posedge clk) begin
        if (en) begin
            side4 <= side3;
            p4 <= outer3 + {6'd0, mid3, 17'd0};
            s4 <= s3;
            shift_sat4 <= shift_sat3;
        end
    end

    // ---- stage 5: shift by a multiple of 8, sticky of the bytes shifted out --------------------
    logic [7:0]  below8;         // below8[j]: any bit of P[8j-1:0]
    logic [55:0] r5;
    logic [2:0]  s5;
    logic        sticky5, shift_sat5;

    assign below8[0] = 1'b0;
    for (genvar j = 1; j < 8; j++) begin : g_below8
        assign below8[j] = p4[8*j-1:0] != '0;
    end
    always_ff @(posedge clk) begin
        if (en) begin
            side5 <= side4;
            r5 <= p4 >> {s4[5:3], 3'b000};
            sticky5 <= below8[s4[5:3]];
            s5 <= s4[2:0];
            shift_sat5 <= shift_sat4;
        end
    end

    // ---- stage 6: shift by 0..7 ---------------------------------------------------------------
    logic [55:0] r6;             // P >> (t - 1): the round bit is r6[0]
    logic        sticky6, shift_sat6;

    always_ff @(posedge clk) begin
        if (en) begin
            side6 <= side5;
            r6 <= r5 >> s5;
            sticky6 <= sticky5 || (r5[6:0] & ((7'd1 << s5) - 7'd1)) != 7'd0;
            shift_sat6 <= shift_sat5;
        end
    end

    // ---- stage 7: round half to even, saturate, fold the sign ---------------------------------
    // -(q + up) = ~q + !up: the last stage is one add whatever the sign
    logic [54:0] q6;
    logic        up6;
    logic [31:0] qx7;
    logic        cin7, over7;

    assign q6 = r6[55:1];
    assign up6 = r6[0] && (sticky6 || q6[0]);      // rem > half, or rem == half and q odd
    always_ff @(posedge clk) begin
        if (en) begin
            side7 <= side6;
            // q + up > QMAX: q >= 2^31, or q = QMAX rounding up
            over7 <= shift_sat6 || side6[INF] || q6[54:31] != 24'd0 || (&q6[30:0] && up6);
            qx7 <= side6[SIGN] ? ~q6[31:0] : q6[31:0];
            cin7 <= side6[SIGN] ? !up6 : up6;
        end
    end

    // ---- stage 8: the code --------------------------------------------------------------------
    logic [31:0] code8;
    always_ff @(posedge clk) begin
        if (en) begin
            code8 <= side7[NAN_BIT] ? 32'd0
                   : over7 ? (side7[SIGN] ? 32'd0 - QMAX : QMAX)
                   : qx7 + {31'd0, cin7};
            m_tuser <= {side7[SBW-1:5], side7[NAN_BIT], side7[SAT]};
            m_tlast <= side7[LAST];
        end
    end
    assign m_tdata = code8;

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // m_tvalid: a word offered stays offered, unchanged, until m_tready takes it
    logic                         chk_m_stall;
    logic [UW+34:0]           chk_m_word;
    initial chk_m_stall = 1'b0;
    always @(posedge clk) begin
        chk_m_stall <= !rst && m_tvalid && !m_tready;
        chk_m_word  <= {m_tdata, m_tuser, m_tlast};
        if (!rst && chk_m_stall) assert (m_tvalid && {m_tdata, m_tuser, m_tlast} == chk_m_word);
    end
`endif
endmodule

`resetall
