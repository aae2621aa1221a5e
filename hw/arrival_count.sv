// Words that have arrived and are not yet taken, as a count and its "not zero" flag, both
// flops: a consumer decides its take on `nonzero` and the take only picks among values already
// formed from flops (count + 1, count - 1), so no carry chain follows it. compress_engine keeps
// one beside its join for each read link (the join's take waits on a flop of its own, by the
// join, instead of one by the far end of the link), and axis_credit_link one for its ring.
// A take when nothing is there is the caller's error (it is never asked for).
`resetall
`default_nettype none

module arrival_count #(
    parameter int CW = 4            // count bits: up to 2^CW - 1 words
) (
    input  logic clk,
    input  logic rst,
    input  logic arrived,           // one word arrived this cycle
    input  logic take,              // one word taken this cycle (only while nonzero)
    output logic nonzero
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(CW >= 1 && CW <= 32)) begin : g_bad_cw
`ifdef __ICARUS__
        arrival_count__CW_must_be_1_to_32 u_parameter_error ();
`else
        $error("arrival_count: CW must be 1..32");
`endif
    end
    logic [CW-1:0] count;

    always_ff @(posedge clk) begin
        if (rst) begin
            count <= '0;
            nonzero <= 1'b0;
        end else begin
            if (arrived && !take) count <= count + 1'b1;
            else if (take && !arrived) count <= count - 1'b1;
            nonzero <= arrived || (take ? count > CW'(1) : nonzero);
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    always @(posedge clk) begin
        if (!rst) begin
            assert (nonzero == (count != '0));            // the flag is the count's
            assert (!take || nonzero);                    // nothing is taken from nothing
            assert (!(arrived && !take && count == '1));  // the count never wraps
        end
    end
`endif
endmodule

`resetall
