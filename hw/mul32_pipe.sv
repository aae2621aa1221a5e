// Unsigned 32 x 32 -> 64-bit product in four register stages (latency 4, a new operand pair
// every cycle), so no path holds more than one multiplier or one carry chain (150 MHz on ECP5):
// the operands are registered first, beside the multipliers (a MULT18X18D's own delay leaves
// little for routing on either side of it), then four 16 x 16 partial products (one
// MULT18X18D each), then the middle sum beside the outer products (disjoint bits: no add),
// then the product.
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
endmodule
