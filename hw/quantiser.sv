// float32 bits -> int32 code, docs/spec.md §1.2, one word per cycle, latency 3.
//
// Q = sign * min(QMAX, rhe(m * M / 2^t)), t = k - E, where |x| = m * 2^E.
// Stages: decode (fields, shift, flags) -> 24x32 multiply -> round-half-even shift + clamp.
// Configuration (M, k, range_bits) must be held steady while words are in flight.
//
// m_tuser = {s_tuser, nan, sat}:
//   sat: (bits & 0x7FFFFFFF) > range_bits, i.e. |x| > R, the element counted in sat_quant
//        (±Inf included; NaN is not counted, it has its own flag)
//   nan: the input is a NaN; its code is 0 (the software reference raises instead)
// s_tuser is carried alongside untouched (the top uses it for the residual).
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
    localparam logic [31:0] QMAX = 32'h7FFF_FFFF;

    // ---- stage 1: decode -------------------------------------------------------------
    logic        sign_in, nan_in, inf_in, sat_in, shift_sat_in;
    logic [7:0]  exp_in;
    logic [23:0] mant_in;
    logic [5:0]  shift_in;
    logic signed [33:0] exp_val, shift_full;

    assign sign_in = s_tdata[31];
    assign exp_in  = s_tdata[30:23];
    assign mant_in = {exp_in != 8'd0, s_tdata[22:0]};
    assign exp_val = (exp_in == 8'd0) ? -34'sd149 : $signed({26'd0, exp_in}) - 34'sd150;
    // 34 bits: k - E cannot overflow for any 32-bit k
    assign shift_full = $signed({{2{cfg_k[31]}}, cfg_k}) - exp_val;
    assign inf_in = (exp_in == 8'hFF) && (s_tdata[22:0] == 23'd0);
    assign nan_in = (exp_in == 8'hFF) && (s_tdata[22:0] != 23'd0);
    assign sat_in = !nan_in && ({1'b0, s_tdata[30:0]} > cfg_range_bits);
    // t <= 0 with m != 0: P * 2^-t >= 2^31 > QMAX, saturate without shifting
    assign shift_sat_in = (shift_full <= 34'sd0) && (mant_in != 24'd0);
    // t <= 0 reaches stage 3 only with m = 0 or already saturated; P < 2^56 rounds to 0 for t >= 58
    assign shift_in = (shift_full <= 34'sd0) ? 6'd1
                    : (shift_full >= 34'sd63) ? 6'd63 : shift_full[5:0];

    localparam int D1W = UW + 1 + 1 + 1 + 1 + 1 + 1 + 6 + 24;
    logic [D1W-1:0] d1_in, d1_out;
    logic           d1_valid, d1_ready;
    assign d1_in = {s_tuser, s_tlast, sign_in, nan_in, inf_in, sat_in, shift_sat_in, shift_in, mant_in};

    pipe_reg #(.W(D1W)) u_decode (
        .clk, .rst,
        .in_data(d1_in), .in_valid(s_tvalid), .in_ready(s_tready),
        .out_data(d1_out), .out_valid(d1_valid), .out_ready(d1_ready)
    );

    // ---- stage 2: P = m * M, exact in 56 bits ----------------------------------------
    logic [23:0] d1_mant;
    logic [55:0] product;
    assign d1_mant = d1_out[23:0];
    assign product = {32'd0, d1_mant} * {24'd0, cfg_m};

    localparam int D2W = D1W - 24 + 56;
    logic [D2W-1:0] d2_in, d2_out;
    logic           d2_valid, d2_ready;
    assign d2_in = {d1_out[D1W-1:24], product};

    pipe_reg #(.W(D2W)) u_multiply (
        .clk, .rst,
        .in_data(d2_in), .in_valid(d1_valid), .in_ready(d1_ready),
        .out_data(d2_out), .out_valid(d2_valid), .out_ready(d2_ready)
    );

    // ---- stage 3: round half to even, clamp, sign ------------------------------------
    logic [UW-1:0] d2_user;
    logic        d2_last, d2_sign, d2_nan, d2_inf, d2_sat, d2_shift_sat;
    logic [5:0]  d2_shift;
    logic [63:0] p64, q64, below_half_mask, magnitude;
    logic        round_bit, sticky, round_up;
    logic [31:0] mag32, code;

    assign {d2_user, d2_last, d2_sign, d2_nan, d2_inf, d2_sat, d2_shift_sat, d2_shift} =
        d2_out[D2W-1:56];
    assign p64 = {8'd0, d2_out[55:0]};

    assign q64 = p64 >> d2_shift;                            // d2_shift in 1..63
    assign round_bit = p64[d2_shift - 6'd1];
    assign below_half_mask = (64'd1 << (d2_shift - 6'd1)) - 64'd1;
    assign sticky = (p64 & below_half_mask) != 64'd0;
    // rem > half, or rem == half and q odd
    assign round_up = round_bit && (sticky || q64[0]);
    assign magnitude = q64 + {63'd0, round_up};              // q64 < 2^55: no overflow
    assign mag32 = (d2_shift_sat || d2_inf || magnitude > {32'd0, QMAX}) ? QMAX : magnitude[31:0];
    assign code = d2_nan ? 32'd0 : d2_sign ? (32'd0 - mag32) : mag32;

    localparam int D3W = UW + 2 + 1 + 32;
    logic [D3W-1:0] d3_in, d3_out;
    assign d3_in = {d2_user, d2_nan, d2_sat, d2_last, code};

    pipe_reg #(.W(D3W)) u_round (
        .clk, .rst,
        .in_data(d3_in), .in_valid(d2_valid), .in_ready(d2_ready),
        .out_data(d3_out), .out_valid(m_tvalid), .out_ready(m_tready)
    );

    assign m_tuser = d3_out[D3W-1:33];
    assign m_tlast = d3_out[32];
    assign m_tdata = d3_out[31:0];
endmodule
