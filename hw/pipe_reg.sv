// One valid/ready pipeline register (AXI4-Stream style, any payload width).
// s_tready is high whenever the register is empty or is being emptied this cycle, so a
// chain of these moves one word per cycle and never drops or duplicates under backpressure.
`resetall
`default_nettype none

module pipe_reg #(
    parameter int W = 32
) (
    input  logic         clk,
    input  logic         rst,
    input  logic [W-1:0] s_tdata,
    input  logic         s_tvalid,
    output logic         s_tready,
    output logic [W-1:0] m_tdata,
    output logic         m_tvalid,
    input  logic         m_tready
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
    assign s_tready = !m_tvalid || m_tready;

    always_ff @(posedge clk) begin
        if (rst) begin
            m_tvalid <= 1'b0;
        end else if (s_tready) begin
            m_tvalid <= s_tvalid;
        end
        // data needs no reset: it is only looked at while m_tvalid is high
        if (s_tready && s_tvalid) begin
            m_tdata <= s_tdata;
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    logic         chk_stall;          // last cycle out offered a word that was not taken
    logic [W-1:0] chk_data;
    initial chk_stall = 1'b0;
    always @(posedge clk) begin
        chk_stall <= !rst && m_tvalid && !m_tready;
        chk_data  <= m_tdata;
        // a word offered on out stays offered, unchanged, until m_tready takes it
        if (!rst && chk_stall) assert (m_tvalid && m_tdata == chk_data);
    end
`endif
endmodule

`resetall
