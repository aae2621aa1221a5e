// Formal harness for arrival_count (hw/formal/arrival_count.sby): a take only while nonzero
// and never more than 2^CW - 1 words held (the callers' contract, assumed); nonzero is
// exactly "arrived and not yet taken".
module fv_arrival_count (
    input logic clk,
    input logic rst,
    input logic arrived,
    input logic take
);
    localparam int CW = 3;
    logic [CW:0] held;                 // one bit wider than the block's count
    logic        nonzero;

    arrival_count #(.CW(CW)) dut (.clk, .rst, .arrived, .take, .nonzero);

    initial assume (rst);
    always @(posedge clk) begin
        if (rst) held <= '0;
        else held <= held + (CW + 1)'(arrived) - (CW + 1)'(take);
        if (!rst) begin
            assume (!take || nonzero);
            assume (!(arrived && !take && held == (CW + 1)'((1 << CW) - 1)));
            assert (nonzero == (held != '0));
            cover (held == (CW + 1)'((1 << CW) - 1));
            cover (arrived && take && held == (CW + 1)'(1));
        end
    end
endmodule
