// CRC-32 (zlib / IEEE 802.3: reflected polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF)
// over up to W words a cycle: crc32_word's definition (docs/spec.md §3.3), each word absorbed as
// its four little-endian bytes, the words of a cycle in lane order.
//
//   init         restart: the running state becomes 0xFFFFFFFF (the CRC of nothing).
//   en, data,    absorb lanes 0 .. count-1 of data (lane l in bits [32l+31:32l]), in lane order;
//   count        count 0 absorbs nothing, count > W is illegal. With init in the same cycle,
//                they are the first words.
//   DATA_REG = 0 (default):
//   crc          CRC-32 of every word absorbed since the last init (registered).
//   crc_next     combinational: what crc will be after this cycle.
//   DATA_REG = 1 (a pipeline stage for speed: the inputs' cone ends in a register):
//   crc_next     CRC-32 of every word offered in EARLIER cycles since the last init (offered in
//                an earlier cycle): cycle for cycle what crc is at DATA_REG = 0, from registers
//                only (no path from init, en, data, count or rst to it).
//   crc          crc_next one cycle later: a cycle's words (and its init) are in crc_next from
//                the next cycle and in crc from the one after.
//   rst          drops the words of its own cycle and of the cycle before it (still in the stage).
// W = 1, DATA_REG = 0 is crc32_word cycle for cycle (count = 1).
//
// Structure. One word is the linear map s -> M·(s ^ d) over GF(2) (crc32_word), so c words
// d_0 .. d_{c-1} give  s' = M^c·s ^ XOR_i M^(c-i)·d_i.  Right-aligning the c valid lanes into
// lanes W-c .. W-1 (zeros below: M^k·0 = 0) makes the data term XOR_j M^(W-j)·a_j for every c,
// so the matrices M^0 .. M^W (computed at elaboration on constants) serve both terms: the data
// term is one balanced XOR tree per state bit over the aligned lanes, the state term M^c·s is
// picked by count from W+1 small trees, and init picks the constant M^c·SEED instead.
// DATA_REG = 1 registers the data term (with a constant of c folded into it) and a one-hot of
// c (all zero after init: the old state drops out); the next cycle the register becomes (the
// selected M^p of it) ^ (the registered term), so its own loop is the W+1 small trees, the
// selection and one XOR. That register holds crc = ~s itself (no inverter in the loop).
`resetall
`default_nettype none

module crc32_lanes #(
    parameter int W = 1,                    // words per cycle: 1, 2, 4, 8 or 16
    parameter int DATA_REG = 0              // 1: register the data term (one cycle later)
) (
    input  logic                   clk,
    input  logic                   rst,
    input  logic                   init,
    input  logic                   en,
    input  logic [32*W-1:0]        data,
    input  logic [$clog2(W+1)-1:0] count,
    output logic [31:0]            crc,
    output logic [31:0]            crc_next
);
    if (!(W == 1 || W == 2 || W == 4 || W == 8 || W == 16)) begin : g_bad_w
`ifdef __ICARUS__
        crc32_lanes__W_must_be_1_2_4_8_or_16 u_parameter_error ();
`else
        $error("crc32_lanes: W must be 1, 2, 4, 8 or 16");
`endif
    end
    if (!(DATA_REG == 0 || DATA_REG == 1)) begin : g_bad_data_reg
`ifdef __ICARUS__
        crc32_lanes__DATA_REG_must_be_0_or_1 u_parameter_error ();
`else
        $error("crc32_lanes: DATA_REG must be 0 or 1");
`endif
    end
    localparam logic [31:0] POLY = 32'hEDB88320;
    localparam logic [31:0] SEED = 32'hFFFFFFFF;

    // columns of M^p: column j (bits [32j +: 32]) is M^p applied to bit j alone, M being 32 steps
    // of the bit-serial reflected CRC (elaboration only; self-contained because Icarus's
    // constant functions may not call other functions)
    function automatic logic [1023:0] pow_cols(input int p);
        logic [1023:0] m;
        logic [31:0]   c;
        m = '0;
        for (int j = 0; j < 32; j++) begin
            c = 32'd1 << j;
            for (int k = 0; k < 32 * p; k++) begin
                c = c[0] ? ((c >> 1) ^ POLY) : (c >> 1);
            end
            m[32*j +: 32] = c;
        end
        pow_cols = m;
    endfunction

    // row i of a matrix given by its columns: which input bits feed output bit i
    function automatic logic [31:0] row_of(input logic [1023:0] cols, input int i);
        logic [31:0] r;
        for (int j = 0; j < 32; j++) r[j] = cols[32*j + i];
        row_of = r;
    endfunction

    // M^p·SEED: the state term right after init
    function automatic logic [31:0] seed_pow(input int p);
        logic [31:0] c;
        c = SEED;
        for (int k = 0; k < 32 * p; k++) begin
            c = c[0] ? ((c >> 1) ^ POLY) : (c >> 1);
        end
        seed_pow = c;
    endfunction

    logic [31:0]     state, state_next;      // s, or ~s at DATA_REG = 1 (see the end)
    logic [32*W-1:0] aligned;                 // the valid lanes moved up to end in lane W-1
    // flat vectors, word p in bits [32p+31:32p]: yosys 0.23 turns unpacked arrays into
    // registers with a warning and has no packed 2-D arrays
    logic [32*(W+1)-1:0] m_state;             // M^p·state, p = 0 .. W (M linear: ~ commutes
                                              // up to the constant folded into the stage)
    logic [32*(W+1)-1:0] m_seed;              // M^p·SEED
    logic [32*W-1:0]     lane_term;           // M^(W-j)·aligned lane j
    logic [31:0]     d_term, s_term;

    // lane i moves to lane i + W - count; lanes at or above count fall off the top
    // (32-bit arithmetic without a cast: yosys 0.23 has no int'(...))
    assign aligned = data << (32 * (32'(W) - 32'(count)));

    for (genvar p = 0; p <= W; p++) begin : g_pow
        localparam logic [1023:0] COLS = pow_cols(p);
        assign m_seed[32*p +: 32] = seed_pow(p);
        for (genvar i = 0; i < 32; i++) begin : g_rows
            localparam logic [31:0] ROW = row_of(COLS, i);
            assign m_state[32*p + i] = ^(state & ROW);
            if (p >= 1) begin : g_lane
                // data lane W-p is p words from the end: M^p
                assign lane_term[32*(W-p) + i] = ^(aligned[32*(W-p) +: 32] & ROW);
            end
        end
    end

    always_comb begin
        d_term = '0;
        for (int j = 0; j < W; j++) d_term = d_term ^ lane_term[32*j +: 32];
    end

    if (DATA_REG == 0) begin : g_comb
        always_comb begin
            s_term = init ? SEED : state;
            for (int p = 0; p <= W; p++) begin
                if (32'(count) == p) s_term = init ? m_seed[32*p +: 32] : m_state[32*p +: 32];
            end
            if (en)        state_next = s_term ^ d_term;
            else if (init) state_next = SEED;
            else           state_next = state;
        end
    end else begin : g_reg
        // stage: the term of this cycle's words and which M^p the state takes next cycle
        // (one-hot; none after init: the old state drops out). The register holds ~s = crc, so
        // no inverter sits between the loop and crc_next: ~s' = M^c·(~s) ^ (M^c·SEED ^ SEED) ^
        // data term, and after init ~s' = (M^c·SEED ^ SEED) ^ data term, the same constant,
        // folded into the stage.
        logic [31:0] term_d, term_q;
        logic [W:0]  sel_d, sel_q;
        localparam logic [W:0] SEL_KEEP = 1;      // M^0: the state stays
        always_comb begin
            term_d = en ? d_term : '0;
            sel_d  = '0;
            for (int p = 0; p <= W; p++) begin
                if ((en ? 32'(count) : 32'd0) == p) begin
                    sel_d[p] = !init;
                    term_d   = term_d ^ m_seed[32*p +: 32] ^ SEED;
                end
            end
            s_term = '0;
            for (int p = 0; p <= W; p++) begin
                if (sel_q[p]) s_term = s_term ^ m_state[32*p +: 32];
            end
            state_next = s_term ^ term_q;
        end
        always_ff @(posedge clk) begin
            if (rst) begin
                term_q <= '0;
                sel_q  <= SEL_KEEP;
            end else begin
                term_q <= term_d;
                sel_q  <= sel_d;
            end
        end
    end

    // the register: the state s (DATA_REG = 0) or crc = ~s (DATA_REG = 1)
    localparam logic [31:0] STATE_RESET = DATA_REG == 0 ? SEED : ~SEED;
    assign crc      = DATA_REG == 0 ? ~state : state;
    assign crc_next = DATA_REG == 0 ? ~state_next : state_next;

    always_ff @(posedge clk) begin
        if (rst) state <= STATE_RESET;
        else     state <= state_next;
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation; docs/hw.md "Verification")
    logic        chk_next_valid;
    logic [31:0] chk_next;
    logic        chk_idle;
    initial chk_next_valid = 1'b0;
    always @(posedge clk) begin
        chk_next_valid <= !rst;
        chk_next <= crc_next;
        chk_idle <= rst || (!init && !en);
        if (!rst && en) assert (int'(count) <= W);
        // nothing offered (DATA_REG = 1: nothing offered in the cycle before): no change
        if (!rst && DATA_REG == 0 && !init && !en) assert (crc_next == crc);
        if (!rst && DATA_REG == 1 && chk_next_valid && chk_idle) assert (crc_next == crc);
        if (!rst && chk_next_valid) assert (crc == chk_next);
    end
`endif
endmodule

`resetall
