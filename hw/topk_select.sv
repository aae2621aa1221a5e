// Top-k block selection, docs/spec.md §2.5, streaming: one (index, norm) pair per cycle.
//
// Keeps the best k pairs in a sorted list (norm descending, index ascending). A new pair is
// inserted in front of the first slot it strictly beats: a larger norm, or an equal norm with a
// lower index; so ties go to the lower index whatever the arrival order. After the pair with
// s_tlast the selected indices leave in rank order on m_tdata (m_tlast on the last), min(k, pairs)
// beats, and the list is empty again for the next layer. Input is held off while emitting.
//
// Three stages, one pair per cycle, every slot's write enable and data select from a register:
//   arrival  the pair is compared with every slot and with the two pairs still in flight (the
//            ones in stages 2 and 3, not yet in the list): three carry chains per compare, whose
//            outputs are registered (stage 2);
//   stage 2  the chains' outputs give the compares, which are moved to where those two inserts
//            put the slots (first the older pair's, then the younger's): its place in the list
//            as it will be when it is inserted; each slot's write enable and select are
//            registered from that (stage 3);
//   stage 3  the slots take the pair or their upper neighbour as the registered enables say.
// cfg_k (1..K_MAX) must be held steady during a layer; outside that range cfg_err is raised and
// k is clamped into it.
`resetall
`default_nettype none

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
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(K_MAX >= 1)) begin : g_bad_k_max
`ifdef __ICARUS__
        topk_select__K_MAX_must_be_at_least_1 u_parameter_error ();
`else
        $error("topk_select: K_MAX must be >= 1");
`endif
    end
    localparam logic [31:0] K_MAX_U = K_MAX;

    // The list lives in flat vectors, slot i at [64i +: 64] / [32i +: 32] / [i] (slot 0 in the
    // low bits), so moving every slot down (insert) or up (emit) by one is a shift by one entry.
    // (Flat rather than packed 2-D: yosys 0.23 has no packed arrays.) The valid slots are
    // always a prefix of the list.
    logic [64*K_MAX-1:0] slot_norm, norm_down;
    logic [32*K_MAX-1:0] slot_idx, idx_down, idx_up;
    logic [K_MAX-1:0]    slot_valid, valid_down, valid_up;
    logic [K_MAX-1:0]    slot_used;   // slot i < k
    logic                accept;

    // stage 2: the pair, its compare halves with the slots on arrival (cmp2, 3 bits per slot,
    // giving kn2[i] = slot i beat it: larger norm, or equal norm and index <=) and with the two
    // pairs then in flight (giving b3 = the pair then in stage 3 beats it, b2 = the one in 2)
    logic                v2, last2, b2, b3;
    logic [63:0]         norm2;
    logic [31:0]         idx2;
    logic [3*K_MAX-1:0]  cmp2, cmp_now;
    logic [2:0]          cmp2_by2, cmp2_by3;
    logic [K_MAX-1:0]    kn2, used2;
    // stage 3: the pair, where it goes (keep3[i] = slot i stays in front of it; all ones for no
    // pair), each slot's write enable and select (take the pair, else the slot above it), and
    // keep4 = keep3 a cycle later: the older in-flight pair's place for stage 2's correction
    logic                v3, last3;
    logic [63:0]         norm3;
    logic [31:0]         idx3;
    logic [K_MAX-1:0]    keep3, keep4, write3, take3;
    // stage 2's combinational work: its compares corrected for the older pair's insert (kc),
    // then for the younger one's (keep)
    logic [K_MAX-1:0]    kc, keep, keep_down;
    // the indices leave (slot 0 is valid meanwhile): one copy of the flag per slot, beside the
    // 33 flops it shifts; each copy holds itself, so synthesis keeps them apart
    logic [K_MAX-1:0]    emitting;

    assign cfg_err = (cfg_k == 32'd0) || (cfg_k > K_MAX_U);

    assign norm_down = slot_norm << 64;       // entry i of *_down: the slot above slot i
    assign idx_down = slot_idx << 32;
    assign valid_down = slot_valid << 1;
    assign idx_up = slot_idx >> 32;           // entry i of *_up: the slot below slot i
    assign valid_up = slot_valid >> 1;
    // x_down[i] = x[i - 1], and 1 in front of slot 0
    assign keep_down = ~(~keep << 1);

    // (norm_a, idx_a) beats or ties (norm_b, idx_b): larger norm, or equal norm and index <=;
    // that is {norm, ~index} >= as 96-bit numbers. In halves: the upper halves compared both
    // ways and the lower halves once, three 48-bit carry chains side by side (a single 96-bit
    // chain is twice as long, equality as a LUT tree deeper), registered; then
    // beats = upper a >= b and (upper a <= b only if lower a >= b), one LUT a cycle later.
    function automatic logic [2:0] halves(input logic [63:0] norm_a, input logic [31:0] idx_a,
                                          input logic [63:0] norm_b, input logic [31:0] idx_b);
        logic [95:0] a, b;
        a = {norm_a, ~idx_a};
        b = {norm_b, ~idx_b};
        halves = {a[95:48] >= b[95:48], a[95:48] <= b[95:48], a[47:0] >= b[47:0]};
    endfunction

    function automatic logic beats(input logic [2:0] h);
        beats = h[2] && (!h[1] || h[0]);
    endfunction

    // Moving a pair's compares across one insert (docs/hw.md): slots in front of the inserted
    // pair are unchanged (own compare), the inserted pair's slot compares with it (`by`), and the
    // slots behind hold their upper neighbour (its compare). A pair with no place (ins all ones,
    // or a bubble) changes nothing. Unused slots may come out wrong, but a slot's result depends
    // only on the slots in front of it, and only used slots (a prefix) are ever written.
    for (genvar i = 0; i < K_MAX; i++) begin : g_slot
        localparam logic [31:0] I_U = i;
        // an empty slot beats nothing: its upper-half >= is cleared
        assign cmp_now[3*i +: 3] = halves(slot_norm[64*i +: 64], slot_idx[32*i +: 32],
                                          s_tdata[63:0], s_tdata[95:64]) & {slot_valid[i], 2'b11};
        assign kn2[i] = beats(cmp2[3*i +: 3]);
        // i < k clamped into 1..K_MAX (i < K_MAX always): one compare per slot, no clamp mux
        assign slot_used[i] = i == 0 || cfg_k > I_U;
        if (i == 0) begin : g_first
            assign kc[i] = keep4[i] ? kn2[i] : b3;
            assign keep[i] = keep3[i] ? kc[i] : b2;
        end else begin : g_rest
            assign kc[i] = keep4[i] ? kn2[i] : keep4[i-1] ? b3 : kn2[i-1];
            assign keep[i] = keep3[i] ? kc[i] : keep3[i-1] ? b2 : kc[i-1];
        end
    end
    assign b2 = beats(cmp2_by2);
    assign b3 = beats(cmp2_by3);

    // no new pair while the layer's last one is in flight or the indices leave. s_tready is a
    // flop (its upstream slice's 97 clock enables hang on it): high next cycle unless a last
    // pair is taken now or is in stage 2 or 3, or the emission goes on
    logic ready_r;
    assign s_tready = ready_r;
    assign accept = s_tvalid && s_tready;
    // while emitting, slot 0 is valid: the flag clears as the last index leaves
    assign m_tvalid = emitting[0];
    assign m_tdata = slot_idx[31:0];
    if (K_MAX == 1) begin : g_one
        assign m_tlast = 1'b1;
    end else begin : g_many
        assign m_tlast = !slot_valid[1];      // nothing behind slot 0 (valid slots: a prefix)
    end

    always_ff @(posedge clk) begin
        if (rst) begin
            ready_r <= 1'b1;
            v2 <= 1'b0;
            v3 <= 1'b0;
            keep3 <= '1;
            keep4 <= '1;
            write3 <= '0;
        end else begin
            ready_r <= !(accept && s_tlast) && !(v2 && last2) && !(v3 && last3)
                       && !(emitting[0] && !(m_tready && m_tlast));
            v2 <= accept;
            v3 <= v2;
            keep3 <= v2 ? keep : '1;
            keep4 <= keep3;
            write3 <= v2 ? used2 & ~keep : '0;
        end
        used2 <= slot_used;     // cfg_k is steady from the first pair on
        take3 <= keep_down;
        norm3 <= norm2;
        idx3 <= idx2;
        last3 <= last2;
        // loaded every cycle, no clock enable (`accept` would reach ~100 + 3 K_MAX of them
        // across the block): a bubble's data is never used, its keep3 is all ones
        norm2 <= s_tdata[63:0];
        idx2 <= s_tdata[95:64];
        last2 <= s_tlast;
        cmp2 <= cmp_now;
        cmp2_by2 <= halves(norm2, idx2, s_tdata[63:0], s_tdata[95:64]);
        cmp2_by3 <= halves(norm3, idx3, s_tdata[63:0], s_tdata[95:64]);
    end

    // stage 3: insert (write3, take3), or move every index up one as slot 0's leaves (pairs and
    // emission never overlap). The norms are not needed once the layer's pairs are in.
    for (genvar i = 0; i < K_MAX; i++) begin : g_store
        always_ff @(posedge clk) begin
            if (rst) emitting[i] <= 1'b0;
            else if (v3 && last3) emitting[i] <= 1'b1;
            else if (emitting[i] && m_tready && m_tlast) emitting[i] <= 1'b0;
            if (rst) begin
                slot_valid[i] <= 1'b0;
            end else if (emitting[i] && m_tready) begin
                slot_valid[i] <= valid_up[i];
                slot_idx[32*i +: 32] <= idx_up[32*i +: 32];
            end else if (write3[i]) begin
                slot_valid[i] <= take3[i] ? 1'b1 : valid_down[i];
                slot_idx[32*i +: 32] <= take3[i] ? idx3 : idx_down[32*i +: 32];
            end
            if (write3[i]) begin
                slot_norm[64*i +: 64] <= take3[i] ? norm3 : norm_down[64*i +: 64];
            end
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // m_tvalid: a word offered stays offered, unchanged, until m_tready takes it
    logic                         chk_m_stall;
    logic [32:0]              chk_m_word;
    initial chk_m_stall = 1'b0;
    always @(posedge clk) begin
        chk_m_stall <= !rst && m_tvalid && !m_tready;
        chk_m_word  <= {m_tdata, m_tlast};
        if (!rst && chk_m_stall) assert (m_tvalid && {m_tdata, m_tlast} == chk_m_word);
    end
`endif
endmodule

`resetall
