// One valid/ready pipeline register (AXI4-Stream style, any payload width).
// in_ready is high whenever the register is empty or is being emptied this cycle, so a
// chain of these moves one word per cycle and never drops or duplicates under backpressure.
`resetall
`default_nettype none

module pipe_reg #(
    parameter int W = 32
) (
    input  logic         clk,
    input  logic         rst,
    input  logic [W-1:0] in_data,
    input  logic         in_valid,
    output logic         in_ready,
    output logic [W-1:0] out_data,
    output logic         out_valid,
    input  logic         out_ready
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(W >= 1)) begin : g_bad_w
`ifdef __ICARUS__
        pipe_reg__W_must_be_at_least_1 u_parameter_error ();
`else
        $error("pipe_reg: W must be >= 1");
`endif
    end
    assign in_ready = !out_valid || out_ready;

    always_ff @(posedge clk) begin
        if (rst) begin
            out_valid <= 1'b0;
        end else if (in_ready) begin
            out_valid <= in_valid;
        end
        // data needs no reset: it is only looked at while out_valid is high
        if (in_ready && in_valid) begin
            out_data <= in_data;
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    logic         chk_stall;          // last cycle out offered a word that was not taken
    logic [W-1:0] chk_data;
    initial chk_stall = 1'b0;
    always @(posedge clk) begin
        chk_stall <= !rst && out_valid && !out_ready;
        chk_data  <= out_data;
        // a word offered on out stays offered, unchanged, until out_ready takes it
        if (!rst && chk_stall) assert (out_valid && out_data == chk_data);
    end
`endif
endmodule

`resetall
