// Formal harness for sync_fifo (hw/formal/sync_fifo.sby): callers push only when !full and
// pop only when !empty (the module asserts it; here it is assumed of the free inputs);
// sequence-numbered words come out in order, none lost or doubled, clear empties it.
module fv_sync_fifo (
    input logic clk,
    input logic rst,
    input logic clear,
    input logic push,
    input logic pop
);
    localparam int W = 4, AW = 2;
    logic [W-1:0] n_in, n_out, rd_data;
    logic         full, empty;

    sync_fifo #(.W(W), .AW(AW)) dut (
        .clk, .rst, .clear, .push, .wr_data(n_in), .pop, .rd_data, .full, .empty
    );

    initial assume (rst);
    always @(posedge clk) begin
        if (rst || clear) begin
            n_in <= '0;
            n_out <= '0;
        end else begin
            if (push) n_in <= n_in + 1'b1;
            if (pop) n_out <= n_out + 1'b1;
        end
        if (!rst) begin
            if (!clear) assume (!(push && full) && !(pop && empty));
            if (!empty) assert (rd_data == n_out);
            assert (W'(n_in - n_out) <= W'(1 << AW));
            assert (empty == (n_in == n_out));
            assert (full == (W'(n_in - n_out) == W'(1 << AW)));
            cover (full);
            cover (full && push == 1'b0 && pop);
            cover (clear && !empty);
        end
    end
endmodule
