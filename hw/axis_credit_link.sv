// A valid/ready channel between two places far apart on the die (compress_engine: a read FIFO
// by its AXI port, the join by the quantiser), where a skid buffer still leaves the consumer's
// take and the producer's pop in one cycle across the distance. Here every signal that crosses
// is a register, and neither side waits on the other within a cycle:
//   sender    holds credits for the receiver's FIFO (2^AW words) and sends a word whenever it has
//             one (s_ready = credits != 0); the word and its valid cross through a register;
//   receiver  a FIFO (first word fall-through) that the consumer pops locally; each pop goes
//             back through a register and returns its credit.
// Words in flight + words in the FIFO <= 2^AW, so the FIFO never overflows. A credit comes back
// 4 cycles after it was spent (send, link register, FIFO, pop register), so AW >= 2 sustains
// one word per cycle; the latency is 2 cycles.
module axis_credit_link #(
    parameter int W  = 32,
    parameter int AW = 3
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
    localparam logic [AW:0] DEPTH = (AW + 1)'(1 << AW);

    logic [AW:0]  credits;            // sender side
    logic         link_valid, credit_back;
    logic [W-1:0] link_data;
    logic         empty, full;

    assign s_ready = credits != '0;

    always_ff @(posedge clk) begin
        if (rst) begin
            credits <= DEPTH;
            link_valid <= 1'b0;
            credit_back <= 1'b0;
        end else begin
            credits <= credits - (AW + 1)'(s_valid && s_ready) + (AW + 1)'(credit_back);
            link_valid <= s_valid && s_ready;
            credit_back <= m_valid && m_ready;
        end
        link_data <= s_data;      // loaded every cycle: only read where link_valid says
    end

    sync_fifo #(.W(W), .AW(AW)) u_fifo (
        .clk, .rst, .clear(1'b0), .push(link_valid), .wr_data(link_data),
        .pop(m_valid && m_ready), .rd_data(m_data), .full(full), .empty(empty)
    );
    assign m_valid = !empty;

    logic unused_full;                // the credits keep it from filling past 2^AW
    assign unused_full = full;
endmodule
