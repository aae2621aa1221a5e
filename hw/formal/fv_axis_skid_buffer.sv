// Formal harness for axis_skid_buffer (hw/formal/axis_skid_buffer.sby).
// Upstream obeys the stream rule (valid held until ready); each word carries its sequence
// number, so "m_data is the next number whenever m_valid" proves nothing is dropped,
// duplicated or reordered (the buffer never looks at the data: data independence).
module fv_axis_skid_buffer (
    input logic clk,
    input logic rst,
    input logic s_valid,
    input logic m_ready
);
    localparam int W = 4;
    logic [W-1:0] n_in, n_out, m_data;
    logic         s_ready, m_valid, s_stall;

    axis_skid_buffer #(.W(W)) dut (
        .clk, .rst, .s_data(n_in), .s_valid, .s_ready, .m_data, .m_valid, .m_ready
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
            if (s_stall) assume (s_valid);            // upstream holds an offered word
            if (m_valid) assert (m_data == n_out);    // in order, none lost or doubled
            assert (W'(n_in - n_out) <= W'(2));       // at most two words inside
            assert (m_valid == (n_in != n_out));      // a word inside is offered
            assert (s_ready || m_valid);              // never full while the output is empty
            cover (s_valid && !s_ready && m_valid && m_ready);   // the skid entry drains
            cover (n_out == W'(5));
        end
    end
endmodule
