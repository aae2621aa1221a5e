// Two-entry valid/ready register slice ("skid buffer").
// s_tready is a register (high while the skid entry is empty), so nothing upstream sees a
// combinational path from m_tready, yet one word per cycle flows when m_tready stays high: when
// the output register stalls, the word that was already offered lands in the skid entry.
`resetall
`default_nettype none

module axis_skid_buffer #(
    parameter int W = 33
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
        axis_skid_buffer__W_must_be_at_least_1 u_parameter_error ();
`else
        $error("axis_skid_buffer: W must be >= 1");
`endif
    end
    logic [W-1:0] skid_data;
    logic         skid_valid;
    logic         s_fire, main_free;

    assign s_tready   = !skid_valid;
    assign s_fire    = s_tvalid && s_tready;
    assign main_free = !m_tvalid || m_tready;

    always_ff @(posedge clk) begin
        if (rst) begin
            m_tvalid    <= 1'b0;
            skid_valid <= 1'b0;
        end else if (main_free) begin
            // the output register refills from the older word first
            m_tvalid    <= skid_valid || s_fire;
            skid_valid <= 1'b0;
        end else if (s_fire) begin
            skid_valid <= 1'b1;
        end
        // data registers need no reset: they are only read while their valid flag is high.
        // The spare loads whenever it is free and the output stalls, offered word or not, so
        // its enable comes from registers and m_tready only, never from s_tvalid.
        if (main_free) begin
            m_tdata <= skid_valid ? skid_data : s_tdata;
        end
        if (!main_free && !skid_valid) begin
            skid_data <= s_tdata;
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    logic         chk_stall;          // last cycle m offered a word that was not taken
    logic [W-1:0] chk_data;
    initial chk_stall = 1'b0;
    always @(posedge clk) begin
        chk_stall <= !rst && m_tvalid && !m_tready;
        chk_data  <= m_tdata;
        if (!rst) begin
            // a word offered on m stays offered, unchanged, until m_tready takes it
            if (chk_stall) assert (m_tvalid && m_tdata == chk_data);
            // the skid entry only fills behind a full output register
            assert (!skid_valid || m_tvalid);
        end
    end
`endif
endmodule

`resetall
