// CRC-32 (zlib / IEEE 802.3: reflected polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF),
// 32 bits per cycle. A word is absorbed as its four little-endian bytes, which for a reflected
// CRC is simply the word's bits from bit 0 up (docs/spec.md §3.3).
//
//   init       restart: the running state becomes 0xFFFFFFFF (the CRC of nothing).
//   en, data   absorb one word. With init in the same cycle, data is the first word.
//   crc        CRC-32 of every word absorbed since the last init (registered, valid the cycle
//              after the last en).
//   crc_next   combinational: what crc will be after this cycle (this cycle's init/en/data
//              applied), for a caller that must emit the CRC in the cycle its last word is
//              absorbed.
//
// Timing. One word is 32 shift/XOR steps of the bit-serial CRC, a linear map over GF(2):
// next = M·(state ^ data) = M·state ^ M·data. Each bit of M·x is written as the XOR of the x bits
// its row of M selects (12 to 17 of them), so synthesis sees balanced XOR trees rather than a
// 32-deep chain of conditional XORs, and init/en act last (init replaces M·state by the
// constant M·SEED): the loop state -> state is about three LUT levels.
`resetall
`default_nettype none

module crc32_word (
    input  logic        clk,
    input  logic        rst,
    input  logic        init,
    input  logic        en,
    input  logic [31:0] data,
    output logic [31:0] crc,
    output logic [31:0] crc_next
);
    localparam logic [31:0] POLY = 32'hEDB88320;
    localparam logic [31:0] SEED = 32'hFFFFFFFF;

    // M·x: the bit-serial reflected CRC, 32 steps (elaboration only, on constants)
    function automatic logic [31:0] steps32(input logic [31:0] x);
        logic [31:0] c;
        c = x;
        for (int i = 0; i < 32; i++) begin
            c = c[0] ? ((c >> 1) ^ POLY) : (c >> 1);
        end
        steps32 = c;
    endfunction

    // row i of M: which bits of x feed bit i of M·x (column j is M applied to bit j alone;
    // self-contained because Icarus's constant functions may not call other functions)
    function automatic logic [31:0] row_mask(input logic [4:0] i);
        logic [31:0] m;
        logic [31:0] c;
        m = 32'd0;
        for (int j = 0; j < 32; j++) begin
            c = 32'd1 << j;
            for (int k = 0; k < 32; k++) begin
                c = c[0] ? ((c >> 1) ^ POLY) : (c >> 1);
            end
            m[j] = c[i];
        end
        row_mask = m;
    endfunction

    localparam logic [31:0] M_SEED = steps32(SEED);   // M·state right after init

    logic [31:0] state, state_next;
    logic [31:0] m_state, m_data;

    for (genvar i = 0; i < 32; i++) begin : g_rows
        localparam logic [31:0] ROW = row_mask(5'(i));
        assign m_state[i] = ^(state & ROW);
        assign m_data[i]  = ^(data & ROW);
    end

    always_comb begin
        if (en)        state_next = m_data ^ (init ? M_SEED : m_state);
        else if (init) state_next = SEED;
        else           state_next = state;
    end

    assign crc      = ~state;
    assign crc_next = ~state_next;

    always_ff @(posedge clk) begin
        if (rst) state <= SEED;
        else     state <= state_next;
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // crc_next is the next crc: unchanged without init/en, and crc takes it at the edge
    logic        chk_next_valid;
    logic [31:0] chk_next;
    initial chk_next_valid = 1'b0;
    always @(posedge clk) begin
        chk_next_valid <= !rst;
        chk_next <= crc_next;
        if (!rst && !init && !en) assert (crc_next == crc);
        if (!rst && chk_next_valid) assert (crc == chk_next);
    end
`endif
endmodule

`resetall
