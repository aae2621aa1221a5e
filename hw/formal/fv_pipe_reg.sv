// Formal harness for pipe_reg (hw/formal/pipe_reg.sby): sequence-numbered words, upstream
// holds an offered word; in order, none lost or doubled, at most one inside.
module fv_pipe_reg (
    input logic clk,
    input logic rst,
    input logic in_valid,
    input logic out_ready
);
    localparam int W = 4;
    logic [W-1:0] n_in, n_out, out_data;
    logic         in_ready, out_valid, in_stall;

    pipe_reg #(.W(W)) dut (
        .clk, .rst, .in_data(n_in), .in_valid, .in_ready, .out_data, .out_valid, .out_ready
    );

    initial assume (rst);
    initial in_stall = 1'b0;
    always @(posedge clk) begin
        if (rst) begin
            n_in <= '0;
            n_out <= '0;
        end else begin
            if (in_valid && in_ready) n_in <= n_in + 1'b1;
            if (out_valid && out_ready) n_out <= n_out + 1'b1;
        end
        in_stall <= !rst && in_valid && !in_ready;
        if (!rst) begin
            if (in_stall) assume (in_valid);
            if (out_valid) assert (out_data == n_out);
            assert (out_valid == (n_in != n_out));
            assert (W'(n_in - n_out) <= W'(1));
            assert (!out_ready || in_ready);               // a taken word frees the slot
            cover (in_valid && in_ready && out_valid && out_ready);
            cover (n_out == W'(4));
        end
    end
endmodule
