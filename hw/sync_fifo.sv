// Small synchronous first-word-fall-through FIFO of 2^AW entries.
// rd_data shows the head entry while !empty; pop removes it. push is ignored when full and pop
// when empty (callers check full/empty, which are registers). clear empties the FIFO (used to
// discard queued work after an error).
// DISTRIBUTED asks synthesis for LUT RAM (ECP5: a block RAM's output comes 4.1 ns after the
// clock, most of a 150 MHz cycle, where LUT RAM reads in well under 1 ns).
//
// full and empty are kept as flags updated with each push and pop (from "one entry from full /
// empty", itself a function of the pointers) rather than compared from the pointers each
// cycle, so callers that decide push or pop from them start from a flop.
`resetall
`default_nettype none

module sync_fifo #(
    parameter int W  = 33,
    parameter int AW = 2,
    parameter bit DISTRIBUTED = 1'b0
) (
    input  logic         clk,
    input  logic         rst,
    input  logic         clear,
    input  logic         push,
    input  logic [W-1:0] wr_data,
    input  logic         pop,
    output logic [W-1:0] rd_data,
    output logic         full,
    output logic         empty
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(W >= 1)) begin : g_bad_w
`ifdef __ICARUS__
        sync_fifo__W_must_be_at_least_1 u_parameter_error ();
`else
        $error("sync_fifo: W must be >= 1");
`endif
    end
    if (!(AW >= 1 && AW <= 20)) begin : g_bad_aw
`ifdef __ICARUS__
        sync_fifo__AW_must_be_1_to_20 u_parameter_error ();
`else
        $error("sync_fifo: AW must be 1..20");
`endif
    end
    localparam int DEPTH = 1 << AW;

    logic [AW:0]  wr_ptr, rd_ptr;   // one extra bit tells full from empty
    logic [AW:0]  count;
    logic         do_push, do_pop, near_full, near_empty;

    if (DISTRIBUTED) begin : g_lutram
        (* ram_style = "distributed" *) logic [W-1:0] mem [DEPTH];
        assign rd_data = mem[rd_ptr[AW-1:0]];
        always_ff @(posedge clk) if (do_push) mem[wr_ptr[AW-1:0]] <= wr_data;
    end else begin : g_any
        logic [W-1:0] mem [DEPTH];
        assign rd_data = mem[rd_ptr[AW-1:0]];
        always_ff @(posedge clk) if (do_push) mem[wr_ptr[AW-1:0]] <= wr_data;
    end
    assign do_push    = push && !full;
    assign do_pop     = pop && !empty;
    assign count      = wr_ptr - rd_ptr;
    assign near_full  = (count == (AW+1)'(DEPTH - 1));
    assign near_empty = (count == (AW+1)'(1));

    always_ff @(posedge clk) begin
        if (rst || clear) begin
            wr_ptr <= '0;
            rd_ptr <= '0;
            full   <= 1'b0;
            empty  <= 1'b1;
        end else begin
            if (do_push) wr_ptr <= wr_ptr + 1'b1;
            if (do_pop)  rd_ptr <= rd_ptr + 1'b1;
            if (do_push && !do_pop) begin
                full  <= near_full;
                empty <= 1'b0;
            end else if (do_pop && !do_push) begin
                full  <= 1'b0;
                empty <= near_empty;
            end
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    always @(posedge clk) begin
        if (!rst) begin
            // the flags are the pointers' distance, which never exceeds the depth
            assert (count <= (AW+1)'(DEPTH));
            assert (full == (count == (AW+1)'(DEPTH)));
            assert (empty == (count == '0));
            // callers never push a full FIFO nor pop an empty one (either would be dropped)
            if (!clear) assert (!(push && full) && !(pop && empty));
        end
    end
`endif
endmodule

`resetall
