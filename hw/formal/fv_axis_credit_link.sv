// Formal harness for axis_credit_link (hw/formal/axis_credit_link.sby): sequence-numbered
// words, upstream holds an offered word; in order, none lost or doubled; credits within
// [0, 2^AW] (asserted in the module); at most 2^AW + 2 words between the two ends.
module fv_axis_credit_link (
    input logic clk,
    input logic rst,
    input logic s_tvalid,
    input logic m_tready
);
    localparam int W = 5, AW = 2;
    logic [W-1:0] n_in, n_out, m_tdata;
    logic         s_tready, m_tvalid, m_arrived, s_stall;

    axis_credit_link #(.W(W), .AW(AW)) dut (
        .clk, .rst, .s_tdata(n_in), .s_tvalid, .s_tready, .m_tdata, .m_tvalid, .m_tready, .m_arrived
    );

    initial assume (rst);
    initial s_stall = 1'b0;
    always @(posedge clk) begin
        if (rst) begin
            n_in <= '0;
            n_out <= '0;
        end else begin
            if (s_tvalid && s_tready) n_in <= n_in + 1'b1;
            if (m_tvalid && m_tready) n_out <= n_out + 1'b1;
        end
        s_stall <= !rst && s_tvalid && !s_tready;
        if (!rst) begin
            if (s_stall) assume (s_tvalid);
            if (m_tvalid) assert (m_tdata == n_out);
            assert (W'(n_in - n_out) <= W'(1 << AW));
            cover (!s_tready);
            cover (n_out == W'(6) && s_tready);
        end
    end
endmodule
