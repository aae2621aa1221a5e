// Formal harness for block_norm_lanes (hw/formal/block_norm_lanes.sby): W elements a cycle
// against block_l1 (the W = 1 stage) fed the same elements one a cycle.
//
// Inputs, all free within the interface rules: cfg_block_size 1..9 and cfg_norm (L1 or L2),
// steady from reset on; beats of W lanes (full but for the layer's last, s_tlast, whose
// s_tkeep is a run of 1..W lanes from lane 0), any gaps, held unchanged while stalled, layers
// of any length one after another; both outputs taken at will (backpressure on any cycle).
// Element values are tagged by lane: lane l carries 0 or +-4^l (zero and sign free per
// element). A block of at most 9 elements holds at most 3 of one lane, so its L1 norm is the
// count of its nonzero elements of each lane, one 2-bit field per lane: an element summed
// into the wrong block, dropped or summed twice changes the norm. In L2 the fields are
// (4^l >> s)^2, distinct too, but lane 0's element is 0 after the shift for B >= 2 (the L1
// tasks see it). With free values (even 3-bit ones, or 2^e tags by element index) abc did
// not get past step 11-12 within minutes. The magnitudes and squares themselves are
// block_l1's per lane, checked bit-exactly by the benches over full-range values.
// Every element the lanes unit takes goes, in lane order, into a queue that feeds block_l1
// one element a cycle (when the harness lets it); each block's {index, norm} and m_tlast from
// either side go into a queue of its own, and the two queues are compared head to head:
//   bmc    the lanes unit gives block_l1's outputs, in order, index, norm and m_tlast equal
//          (and its own assertions: tkeep rule, held outputs)
//   model  (-DMODEL) the same against a model of the norms instead of block_l1, deeper
//   reach  (-DCOVER, a witness) one trace in which a block closes in each lane, several in
//          one beat, the layer's last beat keeps each of 1..W lanes with B < W, and four
//          norms were compared
`resetall
`default_nettype none

module fv_block_norm_lanes #(
    parameter int W = 4,
    parameter int NORM = -1               // cfg_norm: -1 free, else that constant (a task
                                          // each: with L1 constant the squarers drop out)
) (
    input logic              clk,
    input logic              rst,
    input logic [3:0]        cfg_b,       // block size 1..9
    input logic              cfg_norm_i,
    input logic [W-1:0]      neg,         // per lane: the element is negative
    input logic [W-1:0]      zero,        // per lane: the element is 0
    input logic              s_tvalid,
    input logic              s_tlast,
    input logic [$clog2(W)-1:0] last_hi,  // the last beat's highest kept lane
    input logic              m_go,        // the lanes unit's m_tready (when its queue has room)
    input logic              r_go,        // block_l1 takes an element this cycle (if any)
    input logic              r_out_go     // block_l1's m_tready (when its queue has room)
);
    localparam int LW = $clog2(W);
    localparam int EQ = 16;               // element queue
    localparam int OQ = 8;                // output queues

    // ---- the lanes unit
    logic [31:0]     cfg_block_size;
    logic            cfg_norm;
    assign cfg_norm = NORM < 0 ? cfg_norm_i : NORM[0];
    logic [32*W-1:0] s_tdata;
    logic [W-1:0]    s_tkeep;
    logic            s_tready, m_tvalid, m_tready, m_tlast;
    logic [95:0]     m_tdata;
    assign cfg_block_size = {28'd0, cfg_b};
    for (genvar l = 0; l < W; l++) begin : g_lane
        logic [31:0] mag;
        assign mag = zero[l] ? 32'd0 : 32'd1 << (2 * l);
        assign s_tdata[32*l +: 32] = neg[l] ? 32'd0 - mag : mag;
        assign s_tkeep[l] = !s_tlast || l <= int'(last_hi);
    end

    block_norm_lanes #(.W(W)) dut (
        .clk, .rst, .cfg_block_size, .cfg_norm, .s_tdata, .s_tkeep, .s_tvalid, .s_tready,
        .s_tlast, .m_tdata, .m_tvalid, .m_tready, .m_tlast
    );

    logic [LW:0] kept;                    // lanes in the beat taken
    assign kept = s_tlast ? (LW + 1)'(int'(last_hi) + 1) : (LW + 1)'(W);

`ifndef MODEL
    // ---- the element queue and block_l1
    logic [33*EQ-1:0] eq;                 // {last, value} per slot
    logic [4:0]       e_wp, e_rp, e_cnt;
    logic             r_s_tvalid, r_s_tready, r_s_tlast, r_m_tvalid, r_m_tready, r_m_tlast;
    logic [31:0]      r_s_tdata;
    logic [95:0]      r_m_tdata;
    logic [32:0]      e_head;
    assign e_cnt = 5'(e_wp - e_rp);
    always @(*) begin
        e_head = '0;
        for (int i = 0; i < EQ; i++) if (e_rp[3:0] == 4'(i)) e_head = eq[33*i +: 33];
    end
    assign r_s_tvalid = e_cnt != '0 && r_go;
    assign r_s_tdata  = e_head[31:0];
    assign r_s_tlast  = e_head[32];

    block_l1 ref_norm (
        .clk, .rst, .cfg_block_size, .cfg_norm, .s_tdata(r_s_tdata), .s_tvalid(r_s_tvalid),
        .s_tready(r_s_tready), .s_tlast(r_s_tlast), .m_tdata(r_m_tdata), .m_tvalid(r_m_tvalid),
        .m_tready(r_m_tready), .m_tlast(r_m_tlast)
    );
`else
    // ---- the model (-DMODEL, L1): a block's norm is the OR of its tagged magnitudes (no two
    // elements of a block share a bit), up to W blocks closing in the beat taken
    logic [63:0]    mdl_acc, acc_n;
    logic [3:0]     mdl_pos, pos_n;
    logic [31:0]    mdl_idx, idx_n;
    logic [97*W-1:0] mdl_out;
    logic [LW:0]    mdl_n;
    always @(*) begin
        acc_n = mdl_acc;
        pos_n = mdl_pos;
        idx_n = mdl_idx;
        mdl_n = '0;
        mdl_out = '0;
        for (int l = 0; l < W; l++) begin
            if (l < int'(kept)) begin
                acc_n = acc_n + (zero[l] ? 64'd0 : 64'd1 << (2 * l));
                pos_n = pos_n + 4'd1;
                if (pos_n == cfg_b || (s_tlast && l == int'(last_hi))) begin
                    for (int j = 0; j < W; j++)
                        if (int'(mdl_n) == j)
                            mdl_out[97*j +: 97] = {s_tlast && l == int'(last_hi), idx_n, acc_n};
                    mdl_n = mdl_n + 1'b1;
                    idx_n = (s_tlast && l == int'(last_hi)) ? 32'd0 : idx_n + 32'd1;
                    acc_n = '0;
                    pos_n = '0;
                end
            end
        end
    end
`endif

    // ---- the output queues
    logic [97*OQ-1:0] qa, qb;             // {last, index, norm}
    logic [3:0]       a_wp, a_rp, b_wp, b_rp, a_cnt, b_cnt;
    logic [96:0]      a_head, b_head;
    logic             pop;
    assign a_cnt = 4'(a_wp - a_rp);
    assign b_cnt = 4'(b_wp - b_rp);
    assign m_tready   = m_go && int'(a_cnt) < OQ;
`ifndef MODEL
    assign r_m_tready = r_out_go && int'(b_cnt) < OQ;
`endif
    always @(*) begin
        a_head = '0;
        b_head = '0;
        for (int i = 0; i < OQ; i++) begin
            if (a_rp[2:0] == 3'(i)) a_head = qa[97*i +: 97];
            if (b_rp[2:0] == 3'(i)) b_head = qb[97*i +: 97];
        end
    end
    assign pop = a_cnt != '0 && b_cnt != '0;

    logic [7:0] compared;
    always @(posedge clk) begin
        if (rst) begin
`ifndef MODEL
            e_wp <= '0;
            e_rp <= '0;
`else
            mdl_acc <= '0;
            mdl_pos <= '0;
            mdl_idx <= '0;
`endif
            a_wp <= '0;
            a_rp <= '0;
            b_wp <= '0;
            b_rp <= '0;
            compared <= '0;
        end else begin
`ifndef MODEL
            if (s_tvalid && s_tready) begin
                for (int l = 0; l < W; l++)
                    for (int i = 0; i < EQ; i++)
                        if (l < int'(kept) && 4'(e_wp[3:0] + 4'(l)) == 4'(i))
                            eq[33*i +: 33] <= {s_tlast && l == int'(last_hi), s_tdata[32*l +: 32]};
                e_wp <= 5'(e_wp + 5'(kept));
            end
            if (r_s_tvalid && r_s_tready) e_rp <= 5'(e_rp + 5'd1);
`endif
            if (m_tvalid && m_tready) begin
                for (int i = 0; i < OQ; i++)
                    if (a_wp[2:0] == 3'(i)) qa[97*i +: 97] <= {m_tlast, m_tdata};
                a_wp <= 4'(a_wp + 4'd1);
            end
`ifndef MODEL
            if (r_m_tvalid && r_m_tready) begin
                for (int i = 0; i < OQ; i++)
                    if (b_wp[2:0] == 3'(i)) qb[97*i +: 97] <= {r_m_tlast, r_m_tdata};
                b_wp <= 4'(b_wp + 4'd1);
            end
`else
            if (s_tvalid && s_tready) begin
                for (int j = 0; j < W; j++)
                    for (int i = 0; i < OQ; i++)
                        if (j < int'(mdl_n) && 3'(b_wp[2:0] + 3'(j)) == 3'(i))
                            qb[97*i +: 97] <= mdl_out[97*j +: 97];
                b_wp <= 4'(b_wp + 4'(mdl_n));
                mdl_acc <= acc_n;
                mdl_pos <= pos_n;
                mdl_idx <= idx_n;
            end
`endif
            if (pop) begin
                a_rp <= 4'(a_rp + 4'd1);
                b_rp <= 4'(b_rp + 4'd1);
                if (compared != '1) compared <= compared + 8'd1;
            end
        end
    end

    // ---- the environment
    logic       f_past, in_stall;
    logic [3:0] b_past;
    logic       norm_past;
    initial f_past = 1'b0;
    initial assume (rst);
    always @(posedge clk) begin
        f_past <= 1'b1;
        b_past <= cfg_b;
        norm_past <= cfg_norm;
        in_stall <= !rst && s_tvalid && !s_tready;
    end
    // (the stall snapshot: what was offered, held until taken)
    logic [W-1:0]        neg_q, zero_q;
    logic                last_q;
    logic [LW-1:0]       hi_q;
    always @(posedge clk) begin
        neg_q <= neg;
        zero_q <= zero;
        last_q <= s_tlast;
        hi_q <= last_hi;
    end

    always @(*) begin
        assume (cfg_b >= 4'd1 && cfg_b <= 4'd9);
        if (f_past) assume (cfg_b == b_past && cfg_norm == norm_past);
        if (in_stall) assume (s_tvalid && neg == neg_q && zero == zero_q && s_tlast == last_q
                              && last_hi == hi_q);
`ifndef MODEL
        // room in the element queue for a whole beat
        if (s_tvalid) assume (int'(e_cnt) <= EQ - W);
`else
        // room in the model's queue for a whole beat's blocks
        if (s_tvalid) assume (int'(b_cnt) <= OQ - W);
`endif
        if (!rst) begin
`ifndef COVER
            if (pop) assert (a_head == b_head);
            assert (int'(a_cnt) <= OQ && int'(b_cnt) <= OQ);
`ifndef MODEL
            assert (int'(e_cnt) <= EQ);
`endif
`endif
        end
    end

`ifdef COVER
    // where blocks close in the beat taken (elements of the current block before it: pos)
    logic [3:0] pos, pos_next;
    logic [W-1:0] closes;
    always @(*) begin
        pos_next = pos;
        closes = '0;
        for (int l = 0; l < W; l++) begin
            if (l < int'(kept)) begin
                pos_next = pos_next + 4'd1;
                if (pos_next == cfg_b || (s_tlast && l == int'(last_hi))) begin
                    closes[l] = 1'b1;
                    pos_next = 4'd0;
                end
            end
        end
    end
    always @(posedge clk) begin
        if (rst) pos <= '0;
        else if (s_tvalid && s_tready) pos <= pos_next;
    end
    // what has happened so far (sticky), with B < W for the last-beat keeps
    logic [W-1:0] seen_close, seen_keep;
    logic         seen_several;
    always @(posedge clk) begin
        if (rst) begin
            seen_close <= '0;
            seen_keep <= '0;
            seen_several <= 1'b0;
        end else if (s_tvalid && s_tready) begin
            if (!s_tlast) seen_close <= seen_close | closes;
            if (!s_tlast && $countones(closes) >= 2) seen_several <= 1'b1;
            if (s_tlast && cfg_b < 4'(W)) seen_keep <= seen_keep | (W'(1) << last_hi);
        end
    end
    // the witness (a `reach` task: abc finds the trace, whose one assertion this is): a block
    // closes in every lane on full beats, several in one beat, the layer's last beat keeps
    // each of 1..W lanes with B < W, and four norms were compared, all in one trace
    always @(*) begin
        if (!rst) assert (!(&seen_close && seen_several && &seen_keep && compared >= 8'd4));
    end
`endif
endmodule

`resetall
