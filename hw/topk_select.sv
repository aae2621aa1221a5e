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

    logic [63:0]      slot_norm [0:K_MAX-1];
    logic [31:0]      slot_idx  [0:K_MAX-1];
    logic [K_MAX-1:0] slot_valid;
    logic [K_MAX-1:0] keep;        // slot i stays where it is: it beats the new pair
    logic [K_MAX-1:0] slot_used;   // slot i < k
    logic [31:0]      k_limit;
    logic [63:0]      new_norm;
    logic [31:0]      new_idx;
    logic             emitting, accept, shift_out;

    assign cfg_err = (cfg_k == 32'd0) || (cfg_k > K_MAX_U);
    assign k_limit = (cfg_k == 32'd0) ? 32'd1 : (cfg_k > K_MAX_U) ? K_MAX_U : cfg_k;
    assign new_norm = s_tdata[63:0];
    assign new_idx = s_tdata[95:64];

    assign s_tready = !emitting;
    assign accept = s_tvalid && s_tready;
    assign m_tvalid = emitting && slot_valid[0];
    assign m_tdata = slot_idx[0];
    assign shift_out = m_tvalid && m_tready;

    always_ff @(posedge clk) begin
        if (rst) emitting <= 1'b0;
        else if (accept && s_tlast) emitting <= 1'b1;
        else if (shift_out && m_tlast) emitting <= 1'b0;
    end

    for (genvar i = 0; i < K_MAX; i++) begin : g_slot
        localparam logic [31:0] I_U = i;
        logic        take_new;
        logic [63:0] above_norm, below_norm;
        logic [31:0] above_idx, below_idx;
        logic        above_valid, below_valid;

        assign keep[i] = slot_valid[i] && (slot_norm[i] > new_norm
                         || (slot_norm[i] == new_norm && slot_idx[i] <= new_idx));
        assign slot_used[i] = I_U < k_limit;

        if (i == 0) begin : g_first
            assign take_new = 1'b1;
            assign below_norm = 64'd0;
            assign below_idx = 32'd0;
            assign below_valid = 1'b0;
        end else begin : g_rest
            // sorted list: keep is a prefix, so the new pair lands right after it and the
            // slots behind it move down by one
            assign take_new = keep[i-1];
            assign below_norm = slot_norm[i-1];
            assign below_idx = slot_idx[i-1];
            assign below_valid = slot_valid[i-1];
        end

        if (i == K_MAX - 1) begin : g_last
            assign above_norm = 64'd0;
            assign above_idx = 32'd0;
            assign above_valid = 1'b0;
        end else begin : g_inner
            assign above_norm = slot_norm[i+1];
            assign above_idx = slot_idx[i+1];
            assign above_valid = slot_valid[i+1];
        end

        always_ff @(posedge clk) begin
            if (rst) begin
                slot_valid[i] <= 1'b0;
            end else if (shift_out) begin
                slot_valid[i] <= above_valid;
                slot_norm[i] <= above_norm;
                slot_idx[i] <= above_idx;
            end else if (accept && slot_used[i] && !keep[i]) begin
                if (take_new) begin
                    slot_valid[i] <= 1'b1;
                    slot_norm[i] <= new_norm;
                    slot_idx[i] <= new_idx;
                end else begin
                    slot_valid[i] <= below_valid;
                    slot_norm[i] <= below_norm;
                    slot_idx[i] <= below_idx;
                end
            end
        end
    end

    if (K_MAX == 1) begin : g_one
        assign m_tlast = 1'b1;
    end else begin : g_many
        assign m_tlast = !slot_valid[1];
    end
endmodule
