// Top-k block selection, docs/spec.md §2.5, streaming: one (index, norm) pair per cycle.
//
// Keeps the best k pairs in a sorted list (norm descending, index ascending). A new pair is
// inserted in front of the first slot it strictly beats: a larger norm, or an equal norm with a
// lower index; so ties go to the lower index whatever the arrival order. After the pair with
// s_tlast the selected indices leave in rank order on m_tdata (m_tlast on the last), min(k, pairs)
// beats, and the list is empty again for the next layer. Input is held off while emitting.
//
// Two stages, one pair per cycle: a pair is compared with every slot as it arrives (stage 1,
// the results registered) and inserted a cycle later (stage 2). The pair inserted meanwhile is
// accounted for by comparing the arriving pair with it too: the slots it displaced moved down
// one, so the arriving pair's comparisons move with them (resolved at insertion, from
// registers only).
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
    logic [K_MAX-1:0]    slot_valid, valid_down;
    logic [K_MAX-1:0]    slot_used;   // slot i < k
    logic [K_MAX-1:0]    used2;       // slot_used a cycle later: what stage 2 inserts under
    logic                emitting, accept, shift_out;

    // stage 1: the pair waiting to be inserted, with its compares registered on arrival:
    // kn1[i] = slot i beat it then (larger norm, or equal norm and index <=), ib1 = the pair
    // inserted meanwhile (if pv1) beats it. keep1[i] = slot i beats it now, a prefix of the
    // used slots, resolved from those and where the pair inserted meanwhile went (kprev)
    logic                v1, last1, pv1, ib1;
    logic [63:0]         norm1;
    logic [31:0]         idx1;
    logic [K_MAX-1:0]    keep1, keep1_down, keep_now, kn1, kprev, kprev_down;
    logic                in_beaten;     // the pair in stage 1 beats the arriving pair

    assign cfg_err = (cfg_k == 32'd0) || (cfg_k > K_MAX_U);

    assign norm_down = slot_norm << 64;       // entry i of *_down: the slot below slot i
    assign idx_down = slot_idx << 32;
    assign valid_down = slot_valid << 1;
    // the pair lands in the first slot not kept, right after the last kept one
    // (keep1_down[i] = keep1[i - 1], and 1 in front of slot 0)
    assign keep1_down = ~(~keep1 << 1);
    assign kprev_down = ~(~kprev << 1);

    // (norm_a, idx_a) beats or ties (norm_b, idx_b): larger norm, or equal norm and index <=;
    // that is {norm, ~index} >= as 96-bit numbers, done as four 24-bit compares side by side
    // (short carry chains) and their combination, not one 96-bit chain
    function automatic logic beats(input logic [63:0] norm_a, input logic [31:0] idx_a,
                                   input logic [63:0] norm_b, input logic [31:0] idx_b);
        logic [95:0] a, b;
        logic [3:0]  gt, eq;
        a = {norm_a, ~idx_a};
        b = {norm_b, ~idx_b};
        for (int c = 0; c < 4; c++) begin
            gt[c] = a[24*c +: 24] > b[24*c +: 24];
            eq[c] = a[24*c +: 24] == b[24*c +: 24];
        end
        beats = gt[3] || (eq[3] && (gt[2] || (eq[2] && (gt[1] || (eq[1] && (gt[0] || eq[0]))))));
    endfunction

    for (genvar i = 0; i < K_MAX; i++) begin : g_slot
        localparam logic [31:0] I_U = i;
        assign keep_now[i] = slot_valid[i]
                           && beats(slot_norm[64*i +: 64], slot_idx[32*i +: 32],
                                    s_tdata[63:0], s_tdata[95:64]);
        // i < k clamped into 1..K_MAX (i < K_MAX always): one compare per slot, no clamp mux
        assign slot_used[i] = i == 0 || cfg_k > I_U;
        // after the pair inserted meanwhile went in: slots it stayed behind are unchanged, it
        // took slot j = the first not kept, and the slots behind j hold their upper neighbour.
        // (Only used slots are ever written, and a slot's keep matters only while it is used,
        // so the unused ones need no case of their own: k stays off this path.)
        if (i == 0) begin : g_first
            assign keep1[i] = (!pv1 || kprev[i]) ? kn1[i] : kprev_down[i] && ib1;  // down = 1
        end else begin : g_rest
            assign keep1[i] = (!pv1 || kprev[i]) ? kn1[i] : kprev_down[i] ? ib1 : kn1[i-1];
        end
    end
    assign in_beaten = beats(norm1, idx1, s_tdata[63:0], s_tdata[95:64]);

    // no new pair while the layer's last one waits in stage 1 or the indices leave
    assign s_tready = !emitting && !(v1 && last1);
    assign accept = s_tvalid && s_tready;
    assign m_tvalid = emitting && slot_valid[0];
    assign m_tdata = slot_idx[31:0];
    assign m_tlast = (slot_valid >> 1) == '0;   // nothing behind slot 0
    assign shift_out = m_tvalid && m_tready;

    always_ff @(posedge clk) begin
        if (rst) begin
            emitting <= 1'b0;
            v1 <= 1'b0;
        end else begin
            v1 <= accept;
            used2 <= slot_used;     // cfg_k is steady from the first pair on
            kprev <= keep1;         // where this cycle's pair goes: the next one's correction
            if (v1 && last1) emitting <= 1'b1;
            else if (shift_out && m_tlast) emitting <= 1'b0;
        end
        if (accept) begin
            norm1 <= s_tdata[63:0];
            idx1 <= s_tdata[95:64];
            last1 <= s_tlast;
            kn1 <= keep_now;
            ib1 <= in_beaten;
            pv1 <= v1;              // a pair is inserted as this one arrives
        end
    end

    // stage 2: insert stage 1's pair (pairs and emission never overlap)
    always_ff @(posedge clk) begin
        if (rst) begin
            slot_valid <= '0;
        end else if (shift_out) begin
            slot_valid <= slot_valid >> 1;
            slot_norm <= slot_norm >> 64;
            slot_idx <= slot_idx >> 32;
        end else if (v1) begin
            for (int i = 0; i < K_MAX; i++) begin
                if (used2[i] && !keep1[i]) begin
                    slot_valid[i] <= keep1_down[i] ? 1'b1 : valid_down[i];
                    slot_norm[64*i +: 64] <= keep1_down[i] ? norm1 : norm_down[64*i +: 64];
                    slot_idx[32*i +: 32] <= keep1_down[i] ? idx1 : idx_down[32*i +: 32];
                end
            end
        end
    end
endmodule
