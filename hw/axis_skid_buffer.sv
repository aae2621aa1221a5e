// Two-entry valid/ready register slice ("skid buffer").
// s_ready is a register (high while the skid entry is empty), so nothing upstream sees a
// combinational path from m_ready, yet one word per cycle flows when m_ready stays high: when
// the output register stalls, the word that was already offered lands in the skid entry.
`resetall
`default_nettype none

module axis_skid_buffer #(
    parameter int W = 33
) (
    input  logic         clk,
    input  logic         rst,
    input  logic [W-1:0] s_data,
    input  logic         s_valid,
    output logic         s_ready,
    output logic [W-1:0] m_data,
    output logic         m_valid,
    input  logic         m_ready
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

    assign s_ready   = !skid_valid;
    assign s_fire    = s_valid && s_ready;
    assign main_free = !m_valid || m_ready;

    always_ff @(posedge clk) begin
        if (rst) begin
            m_valid    <= 1'b0;
            skid_valid <= 1'b0;
        end else if (main_free) begin
            // the output register refills from the older word first
            m_valid    <= skid_valid || s_fire;
            skid_valid <= 1'b0;
        end else if (s_fire) begin
            skid_valid <= 1'b1;
        end
        // data registers need no reset: they are only read while their valid flag is high
        if (main_free) begin
            m_data <= skid_valid ? skid_data : s_data;
        end
        if (!main_free && s_fire) begin
            skid_data <= s_data;
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    logic         chk_stall;          // last cycle m offered a word that was not taken
    logic [W-1:0] chk_data;
    initial chk_stall = 1'b0;
    always @(posedge clk) begin
        chk_stall <= !rst && m_valid && !m_ready;
        chk_data  <= m_data;
        if (!rst) begin
            // a word offered on m stays offered, unchanged, until m_ready takes it
            if (chk_stall) assert (m_valid && m_data == chk_data);
            // the skid entry only fills behind a full output register
            assert (!skid_valid || m_valid);
        end
    end
`endif
endmodule

`resetall
