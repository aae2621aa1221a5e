// Formal harness for pipe_reg (hw/formal/pipe_reg.sby): sequence-numbered words, upstream
// holds an offered word; in order, none lost or doubled, at most one inside.
module fv_pipe_reg (
    input logic clk,
    input logic rst,
    input logic s_tvalid,
    input logic m_tready
);
    localparam int W = 4;
    logic [W-1:0] n_in, n_out, m_tdata;
    logic         s_tready, m_tvalid, in_stall;

    pipe_reg #(.W(W)) dut (
        .clk, .rst, .s_tdata(n_in), .s_tvalid, .s_tready, .m_tdata, .m_tvalid, .m_tready
    );

    initial assume (rst);
    initial in_stall = 1'b0;
    always @(posedge clk) begin
        if (rst) begin
            n_in <= '0;
            n_out <= '0;
        end else begin
            if (s_tvalid && s_tready) n_in <= n_in + 1'b1;
            if (m_tvalid && m_tready) n_out <= n_out + 1'b1;
        end
        in_stall <= !rst && s_tvalid && !s_tready;
        if (!rst) begin
            if (in_stall) assume (s_tvalid);
            if (m_tvalid) assert (m_tdata == n_out);
            assert (m_tvalid == (n_in != n_out));
            assert (W'(n_in - n_out) <= W'(1));
            assert (!m_tready || s_tready);               // a taken word frees the slot
            cover (s_tvalid && s_tready && m_tvalid && m_tready);
            cover (n_out == W'(4));
        end
    end
endmodule
