// Formal harness for axis_credit_link (hw/formal/axis_credit_link.sby): sequence-numbered
// words, upstream holds an offered word; in order, none lost or doubled; credits within
// [0, 2^AW] (asserted in the module); at most 2^AW + 2 words between the two ends.
module fv_axis_credit_link (
    input logic clk,
    input logic rst,
    input logic s_valid,
    input logic m_ready
);
    localparam int W = 5, AW = 2;
    logic [W-1:0] n_in, n_out, m_data;
    logic         s_ready, m_valid, m_arrived, s_stall;

    axis_credit_link #(.W(W), .AW(AW)) dut (
        .clk, .rst, .s_data(n_in), .s_valid, .s_ready, .m_data, .m_valid, .m_ready, .m_arrived
    );

    initial assume (rst);
    initial s_stall = 1'b0;
    always @(posedge clk) begin
        if (rst) begin
            n_in <= '0;
            n_out <= '0;
        end else begin
            if (s_valid && s_ready) n_in <= n_in + 1'b1;
            if (m_valid && m_ready) n_out <= n_out + 1'b1;
        end
        s_stall <= !rst && s_valid && !s_ready;
        if (!rst) begin
            if (s_stall) assume (s_valid);
            if (m_valid) assert (m_data == n_out);
            assert (W'(n_in - n_out) <= W'(1 << AW));
            cover (!s_ready);
            cover (n_out == W'(6) && s_ready);
        end
    end
endmodule
