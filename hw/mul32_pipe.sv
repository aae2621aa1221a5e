// Unsigned 32 x 32 -> 64-bit product in four register stages (latency 4, a new operand pair
// every cycle), so no path holds more than one multiplier or one carry chain (150 MHz on ECP5):
// the operands are registered first, beside the multipliers (a MULT18X18D's own delay leaves
// little for routing on either side of it), then four 16 x 16 partial products (one
// MULT18X18D each), then the middle sum beside the outer products (disjoint bits: no add),
// then the product.
`resetall
`default_nettype none

module mul32_pipe (
    input  logic        clk,
    input  logic [31:0] a,
    input  logic [31:0] b,
    output logic [63:0] p
);
    logic [31:0] a_r, b_r;
    logic [31:0] ll, lh, hl, hh;
    logic [32:0] mid;
    logic [63:0] outer;

    always_ff @(posedge clk) begin
        a_r <= a;
        b_r <= b;
        ll <= {16'd0, a_r[15:0]} * {16'd0, b_r[15:0]};
        lh <= {16'd0, a_r[15:0]} * {16'd0, b_r[31:16]};
        hl <= {16'd0, a_r[31:16]} * {16'd0, b_r[15:0]};
        hh <= {16'd0, a_r[31:16]} * {16'd0, b_r[31:16]};
        mid <= {1'b0, lh} + {1'b0, hl};
        outer <= {hh, ll};
        p <= outer + {15'd0, mid, 16'd0};
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // p is a * b of four cycles earlier (unknown operands give an unknown product in both)
    logic [63:0] chk_p [4];
    logic [2:0]  chk_n;
    initial chk_n = 3'd0;
    always @(posedge clk) begin
        chk_p[0] <= {32'd0, a} * {32'd0, b};
        chk_p[1] <= chk_p[0];
        chk_p[2] <= chk_p[1];
        chk_p[3] <= chk_p[2];
        if (chk_n != 3'd4) chk_n <= chk_n + 3'd1;
        if (chk_n == 3'd4) assert (p === chk_p[3]);   // === : operands may be X before use
    end
`endif
endmodule

`resetall
