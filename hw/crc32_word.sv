// CRC-32 (zlib / IEEE 802.3: reflected polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF),
// 32 bits per cycle. A word is absorbed as its four little-endian bytes, which for a reflected
// CRC is simply the word's bits from bit 0 up (docs/spec.md §3.3).
//
//   init       restart: the running state becomes 0xFFFFFFFF (the CRC of nothing).
//   en, data   absorb one word. With init in the same cycle, data is the first word.
//   crc        CRC-32 of every word absorbed since the last init (registered, valid the cycle
//              after the last en).
module crc32_word (
    input  logic        clk,
    input  logic        rst,
    input  logic        init,
    input  logic        en,
    input  logic [31:0] data,
    output logic [31:0] crc
);
    localparam logic [31:0] POLY = 32'hEDB88320;
    localparam logic [31:0] SEED = 32'hFFFFFFFF;

    // One word through the bit-serial reflected CRC, unrolled: 32 shift/XOR steps.
    function automatic logic [31:0] crc_step(input logic [31:0] state, input logic [31:0] word);
        logic [31:0] c;
        c = state ^ word;
        for (int i = 0; i < 32; i++) begin
            c = c[0] ? ((c >> 1) ^ POLY) : (c >> 1);
        end
        crc_step = c;
    endfunction

    logic [31:0] state;
    logic [31:0] base;

    assign base = init ? SEED : state;
    assign crc  = ~state;

    always_ff @(posedge clk) begin
        if (rst) begin
            state <= SEED;
        end else if (en) begin
            state <= crc_step(base, data);
        end else if (init) begin
            state <= SEED;
        end
    end
endmodule
