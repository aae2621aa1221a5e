// Small synchronous first-word-fall-through FIFO of 2^AW entries.
// rd_data shows the head entry while !empty; pop removes it. push is ignored when full and pop
// when empty (callers check full/empty, which are functions of registers only). clear empties
// the FIFO (used to discard queued work after an error).
module sync_fifo #(
    parameter int W  = 33,
    parameter int AW = 2
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
    localparam int DEPTH = 1 << AW;

    logic [W-1:0] mem [DEPTH];
    logic [AW:0]  wr_ptr, rd_ptr;   // one extra bit tells full from empty

    assign empty   = (wr_ptr == rd_ptr);
    assign full    = (wr_ptr[AW-1:0] == rd_ptr[AW-1:0]) && (wr_ptr[AW] != rd_ptr[AW]);
    assign rd_data = mem[rd_ptr[AW-1:0]];

    always_ff @(posedge clk) begin
        if (rst || clear) begin
            wr_ptr <= '0;
            rd_ptr <= '0;
        end else begin
            if (push && !full) wr_ptr <= wr_ptr + 1'b1;
            if (pop && !empty) rd_ptr <= rd_ptr + 1'b1;
        end
        if (push && !full) mem[wr_ptr[AW-1:0]] <= wr_data;
    end
endmodule
