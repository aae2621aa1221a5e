// Block norms, docs/spec.md §2.3, exact, L1 or L2 chosen per layer by cfg_norm
// (gradblock_pkg::NORM_L1 / NORM_L2):
//   L1: norm_j = sum |a_i| over block j
//   L2: norm_j = sum (|a_i| >> s)^2 over block j, s = bit_length(cfg_block_size) >> 1
//
// Input: one layer of int32 values, s_tlast on the layer's last element. A block closes after
// cfg_block_size elements or at s_tlast (so the last block may be shorter). Output, one beat per
// block: m_tdata = {block index (31..0 in bits 95..64), norm (bits 63..0)}, m_tlast on the
// layer's last block. Indices restart at 0 after each layer.
// Width bound: a block holds B < 2^32 elements. L1: |a| <= 2^31, so norm < 2^63. L2: with
// L = bit_length(B), (|a| >> s)^2 < 2^(62 - 2s) and B < 2^L give norm < 2^(62 + L - 2s) <= 2^63.
// cfg_block_size must be >= 1; cfg_block_size and cfg_norm are held steady during a layer, from
// at least one cycle before its first element (the shift s is a register computed from
// cfg_block_size every cycle).
// (The module keeps its name: it is the norm stage of compress_top and compress_engine.)
`resetall
`default_nettype none

module block_l1 (
    input  logic        clk,
    input  logic        rst,
    input  logic [31:0] cfg_block_size,
    input  logic        cfg_norm,          // gradblock_pkg::NORM_L1 (0) or NORM_L2 (1)
    input  logic [31:0] s_tdata,
    input  logic        s_tvalid,
    output logic        s_tready,
    input  logic        s_tlast,
    output logic [95:0] m_tdata,
    output logic        m_tvalid,
    input  logic        m_tready,
    output logic        m_tlast
);
    // Five stages under one enable (s_tready = !m_tvalid || m_tready), latency 5 in both modes:
    // 1 takes |a| and whether the element closes its block (an equality against a count kept one
    // ahead, no adder in the path); 2 shifts |a| right by s (L2) or passes it (L1); 3 forms the
    // square's three 16 x 16 partial products from registered operands (x = h 2^16 + l, h < 2^15:
    // h^2, h l, l^2; one MULT18X18D each on ECP5); 4 adds them, x^2 = h^2 2^32 + 2 h l 2^16 + l^2
    // (L1: the term is |a| itself); 5 accumulates, 64 bits, and emits at the block's end.
    logic        en;
    logic        v1, last1, end1, v2, last2, end2, v3, last3, end3, v4, last4, end4;
    logic        l2_3;
    logic [31:0] mag1, x2, next_offset, index;
    logic [31:0] hh3, hl3, ll3, x3;
    logic [63:0] term4, acc, sum;
    logic  [4:0] shift;                    // s = bit_length(cfg_block_size) >> 1, 0..16

    assign en = !m_tvalid || m_tready;
    assign s_tready = en;
    assign sum = acc + term4;

    // bit_length(B) >> 1, registered (static for a layer)
    // (the highest set bit i has bit_length i + 1: bit 2m gives m, bit 2m + 1 gives m + 1)
    function automatic logic [4:0] half_bit_length(input logic [31:0] b);
        logic [4:0] half, m;
        half = 5'd0;
        m = 5'd0;
        for (int j = 0; j < 16; j++) begin
            if (b[2 * j]) half = m;
            m = m + 5'd1;
            if (b[2 * j + 1]) half = m;
        end
        half_bit_length = half;
    endfunction

    always_ff @(posedge clk) shift <= half_bit_length(cfg_block_size);

    always_ff @(posedge clk) begin
        if (rst) begin
            v1 <= 1'b0;
            v2 <= 1'b0;
            v3 <= 1'b0;
            v4 <= 1'b0;
            next_offset <= 32'd1;
            acc <= 64'd0;
            index <= 32'd0;
            m_tvalid <= 1'b0;
        end else if (en) begin
            // stage 1 (the valid bits of stages 1..4 move with the enable, cleared by reset)
            v1 <= s_tvalid;
            v2 <= v1;
            v3 <= v2;
            v4 <= v3;
            if (s_tvalid) begin
                // two's complement negation: -2^31 gives 2^31, still exact as unsigned
                mag1 <= s_tdata[31] ? (32'd0 - s_tdata) : s_tdata;
                last1 <= s_tlast;
                end1 <= next_offset == cfg_block_size || s_tlast;
                next_offset <= (next_offset == cfg_block_size || s_tlast) ? 32'd1
                             : next_offset + 32'd1;
            end
            // stage 5
            m_tvalid <= v4 && end4;
            if (v4) begin
                if (end4) begin
                    acc <= 64'd0;
                    index <= last4 ? 32'd0 : index + 32'd1;
                end else begin
                    acc <= sum;
                end
            end
        end
        // the data registers of stages 2..4 and the output register load on every enable (their
        // clock enable is then `en` alone, not en && valid); the valid bits say what they hold
        if (en) begin
            // stage 2
            last2 <= last1;
            end2 <= end1;
            x2 <= (cfg_norm == gradblock_pkg::NORM_L2) ? (mag1 >> shift) : mag1;
            // stage 3
            last3 <= last2;
            end3 <= end2;
            l2_3 <= cfg_norm == gradblock_pkg::NORM_L2;
            x3 <= x2;
            hh3 <= {16'd0, x2[31:16]} * {16'd0, x2[31:16]};
            hl3 <= {16'd0, x2[31:16]} * {16'd0, x2[15:0]};
            ll3 <= {16'd0, x2[15:0]} * {16'd0, x2[15:0]};
            // stage 4
            last4 <= last3;
            end4 <= end3;
            term4 <= l2_3 ? ({hh3, ll3} + {15'd0, hl3, 17'd0}) : {32'd0, x3};
            m_tdata <= {index, sum};
            m_tlast <= last4;
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // m_tvalid: a word offered stays offered, unchanged, until m_tready takes it
    logic                         chk_m_stall;
    logic [96:0]              chk_m_word;
    initial chk_m_stall = 1'b0;
    always @(posedge clk) begin
        chk_m_stall <= !rst && m_tvalid && !m_tready;
        chk_m_word  <= {m_tdata, m_tlast};
        if (!rst && chk_m_stall) assert (m_tvalid && {m_tdata, m_tlast} == chk_m_word);
    end
`endif
endmodule

`resetall
