// Top-k block selection, docs/spec.md §2.5, streaming: one (index, norm) pair per cycle.
//
// Keeps the best k pairs in a sorted list (norm descending, index ascending). A new pair is
// inserted in front of the first slot it strictly beats: a larger norm, or an equal norm with a
// lower index; so ties go to the lower index whatever the arrival order. After the pair with
// s_tlast the selected indices leave in rank order on m_tdata (m_tlast on the last), min(k, pairs)
// beats, and the list is empty again for the next layer. Input is held off while emitting.
// cfg_k (1..K_MAX) must be held steady during a layer; outside that range cfg_err is raised and
// k is clamped into it.
module topk_select #(
    parameter int K_MAX = 16
) (
    input  logic        clk,
    input  logic        rst,
    input  logic [31:0] cfg_k,
    output logic        cfg_err,
    input  logic [95:0] s_tdata,   // {index (bits 95..64), norm (bits 63..0)}
    input  logic        s_tvalid,
    output logic        s_tready,
    input  logic        s_tlast,
    output logic [31:0] m_tdata,   // selected block index
    output logic        m_tvalid,
    input  logic        m_tready,
    output logic        m_tlast
);
    localparam logic [31:0] K_MAX_U = K_MAX;

    // The list lives in flat vectors, slot i at [64i +: 64] / [32i +: 32] / [i] (slot 0 in the
    // low bits), so moving every slot up or down by one is a shift by one entry, with an empty
    // entry shifted in at the end. (Flat rather than packed 2-D: yosys 0.23 has no packed arrays.)
    logic [64*K_MAX-1:0] slot_norm, norm_down;
    logic [32*K_MAX-1:0] slot_idx, idx_down;
    logic [K_MAX-1:0]    slot_valid, valid_down, keep_down;
    logic [K_MAX-1:0]       keep;        // slot i stays where it is: it beats the new pair
    logic [K_MAX-1:0]       slot_used;   // slot i < k
    logic [31:0]            k_limit;
    logic [63:0]            new_norm;
    logic [31:0]            new_idx;
    logic                   emitting, accept, shift_out;

    assign cfg_err = (cfg_k == 32'd0) || (cfg_k > K_MAX_U);
    assign k_limit = (cfg_k == 32'd0) ? 32'd1 : (cfg_k > K_MAX_U) ? K_MAX_U : cfg_k;
    assign new_norm = s_tdata[63:0];
    assign new_idx = s_tdata[95:64];

    assign norm_down = slot_norm << 64;       // entry i of *_down: the slot below slot i
    assign idx_down = slot_idx << 32;
    assign valid_down = slot_valid << 1;
    // sorted list: keep is a prefix, so the new pair lands in the first slot not kept, right
    // after the last kept one (keep_down[i] = keep[i - 1], and 1 in front of slot 0)
    assign keep_down = ~(~keep << 1);

    for (genvar i = 0; i < K_MAX; i++) begin : g_slot
        localparam logic [31:0] I_U = i;
        assign keep[i] = slot_valid[i] && (slot_norm[64*i +: 64] > new_norm
                         || (slot_norm[64*i +: 64] == new_norm && slot_idx[32*i +: 32] <= new_idx));
        assign slot_used[i] = I_U < k_limit;
    end

    assign s_tready = !emitting;
    assign accept = s_tvalid && s_tready;
    assign m_tvalid = emitting && slot_valid[0];
    assign m_tdata = slot_idx[31:0];
    assign m_tlast = (slot_valid >> 1) == '0;   // nothing behind slot 0
    assign shift_out = m_tvalid && m_tready;

    always_ff @(posedge clk) begin
        if (rst) emitting <= 1'b0;
        else if (accept && s_tlast) emitting <= 1'b1;
        else if (shift_out && m_tlast) emitting <= 1'b0;
    end

    always_ff @(posedge clk) begin
        if (rst) begin
            slot_valid <= '0;
        end else if (shift_out) begin
            slot_valid <= slot_valid >> 1;
            slot_norm <= slot_norm >> 64;
            slot_idx <= slot_idx >> 32;
        end else if (accept) begin
            for (int i = 0; i < K_MAX; i++) begin
                if (slot_used[i] && !keep[i]) begin
                    slot_valid[i] <= keep_down[i] ? 1'b1 : valid_down[i];
                    slot_norm[64*i +: 64] <= keep_down[i] ? new_norm : norm_down[64*i +: 64];
                    slot_idx[32*i +: 32] <= keep_down[i] ? new_idx : idx_down[32*i +: 32];
                end
            end
        end
    end
endmodule
