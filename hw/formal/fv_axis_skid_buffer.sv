// Formal harness for axis_skid_buffer (hw/formal/axis_skid_buffer.sby).
// Upstream obeys the stream rule (valid held until ready); each word carries its sequence
// number, so "m_tdata is the next number whenever m_tvalid" proves nothing is dropped,
// duplicated or reordered (the buffer never looks at the data: data independence).
module fv_axis_skid_buffer (
    input logic clk,
    input logic rst,
    input logic s_tvalid,
    input logic m_tready
);
    localparam int W = 4;
    logic [W-1:0] n_in, n_out, m_tdata;
    logic         s_tready, m_tvalid, s_stall;

    axis_skid_buffer #(.W(W)) dut (
        .clk, .rst, .s_tdata(n_in), .s_tvalid, .s_tready, .m_tdata, .m_tvalid, .m_tready
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
            if (s_stall) assume (s_tvalid);            // upstream holds an offered word
            if (m_tvalid) assert (m_tdata == n_out);    // in order, none lost or doubled
            assert (W'(n_in - n_out) <= W'(2));       // at most two words inside
            assert (m_tvalid == (n_in != n_out));      // a word inside is offered
            assert (s_tready || m_tvalid);              // never full while the output is empty
            cover (s_tvalid && !s_tready && m_tvalid && m_tready);   // the skid entry drains
            cover (n_out == W'(5));
        end
    end
endmodule
