// A valid/ready channel between two places far apart on the die (compress_engine: a read FIFO
// by its AXI port, the join by the quantiser), where a skid buffer, or a FIFO the consumer pops,
// still leaves the consumer's take and the producer's state in one cycle across the distance.
// Here every signal that crosses is a register, and neither side waits on the other within a
// cycle:
//   sender    holds credits for the receiver's ring (2^AW words) and sends a word whenever it
//             has one (s_tready = credits != 0); the word and its valid cross through a
//             register and are written into the ring;
//   receiver  counts the words in the ring from a registered "written" pulse
//             (arrival_count), so m_tvalid (a flop) and the take are local; a take moves the
//             ring's read pointer and goes back through a register to return its credit.
// Words in flight + words in the ring <= 2^AW, so the ring never overflows. A credit comes
// back 5 cycles after it was spent, so AW >= 3 sustains one word per cycle; latency 3 cycles.
// m_arrived pulses (a register) as each word lands in the ring: a consumer that claims words
// ahead of taking them (compress_engine's velocity) counts them from it.
`resetall
`default_nettype none

module axis_credit_link #(
    parameter int W  = 32,
    parameter int AW = 3
) (
    input  logic         clk,
    input  logic         rst,
    input  logic [W-1:0] s_tdata,
    input  logic         s_tvalid,
    output logic         s_tready,
    output logic [W-1:0] m_tdata,
    output logic         m_tvalid,
    input  logic         m_tready,
    output logic         m_arrived
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(W >= 1)) begin : g_bad_w
`ifdef __ICARUS__
        axis_credit_link__W_must_be_at_least_1 u_parameter_error ();
`else
        $error("axis_credit_link: W must be >= 1");
`endif
    end
    if (!(AW >= 1 && AW <= 16)) begin : g_bad_aw
`ifdef __ICARUS__
        axis_credit_link__AW_must_be_1_to_16 u_parameter_error ();
`else
        $error("axis_credit_link: AW must be 1..16");
`endif
    end
    localparam logic [AW:0] DEPTH = (AW + 1)'(1 << AW);

    logic [AW:0]   credits;           // sender side
    logic          link_valid, written, credit_back, take;
    logic [W-1:0]  link_data;
    logic [W-1:0]  ring [1 << AW];
    logic [AW-1:0] wr_ptr, rd_ptr;

    assign s_tready = credits != '0;
    assign m_tdata = ring[rd_ptr];
    assign take = m_tvalid && m_tready;
    assign m_arrived = written;

    always_ff @(posedge clk) begin
        if (rst) begin
            credits <= DEPTH;
            link_valid <= 1'b0;
            written <= 1'b0;
            credit_back <= 1'b0;
            wr_ptr <= '0;
            rd_ptr <= '0;
        end else begin
            credits <= credits - (AW + 1)'(s_tvalid && s_tready) + (AW + 1)'(credit_back);
            link_valid <= s_tvalid && s_tready;
            if (link_valid) wr_ptr <= wr_ptr + 1'b1;
            written <= link_valid;
            if (take) rd_ptr <= rd_ptr + 1'b1;
            credit_back <= take;
        end
        link_data <= s_tdata;          // loaded every cycle: only read where link_valid says
        if (link_valid) ring[wr_ptr] <= link_data;
    end

    // receiver side: the words in the ring it has been told of
    arrival_count #(.CW(AW + 1)) u_held (
        .clk, .rst, .arrived(written), .take, .nonzero(m_tvalid)
    );

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    logic [AW:0] chk_ring;            // words written into the ring and not yet taken
    logic        chk_stall;           // last cycle m offered a word that was not taken
    logic [W-1:0] chk_data;
    initial chk_stall = 1'b0;
    always @(posedge clk) begin
        if (rst) chk_ring <= '0;
        else chk_ring <= chk_ring + (AW + 1)'(link_valid) - (AW + 1)'(take);
        chk_stall <= !rst && m_tvalid && !m_tready;
        chk_data  <= m_tdata;
        if (!rst) begin
            // credits never exceed the ring nor go negative: spent + in flight + held = ring
            assert (credits <= DEPTH);
            assert ((AW + 1)'(credits + (AW + 1)'(link_valid) + chk_ring
                              + (AW + 1)'(credit_back)) == DEPTH);
            assert (chk_ring[AW-1:0] == wr_ptr - rd_ptr);
            // the receiver only offers words that are in the ring
            assert (!m_tvalid || chk_ring != '0);
            // a word offered on m stays offered, unchanged, until m_tready takes it
            if (chk_stall) assert (m_tvalid && m_tdata == chk_data);
        end
    end
`endif
endmodule

`resetall
