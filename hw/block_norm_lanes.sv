// Block norms over W elements a cycle (issue 31's lane parameter), docs/spec.md §2.3, exact, L1
// or L2 chosen per layer by cfg_norm (gradblock_pkg::NORM_L1 / NORM_L2), the same norms and the
// same output stream as block_l1 (the W = 1 stage, which W = 1 instantiates, cycle for cycle):
//   L1: norm_j = sum |a_i| over block j
//   L2: norm_j = sum (|a_i| >> s)^2 over block j, s = bit_length(cfg_block_size) >> 1
//
// Input: one layer of int32 values aligned to memory (the lane convention of issue 31): element
// i in beat i/W, lane i%W (bits 32(i%W)+31..32(i%W)); every beat full (s_tkeep all ones) except
// the layer's last (s_tlast), whose s_tkeep is a run of ones from lane 0. A block closes after
// cfg_block_size elements or at the layer's last element, in whatever lane that falls (the last
// block may be shorter). Output, one beat per block, exactly block_l1's: m_tdata = {block index
// (31..0 in bits 95..64), norm (bits 63..0)}, m_tlast on the layer's last block, indices
// restarting at 0 after each layer (topk_select takes it unchanged).
// Rate: a beat in which at most one block closes takes one cycle, so with cfg_block_size >= W
// one beat per cycle (the layer's last beat may close two blocks, the regular one and the short
// last one: one more cycle per layer). A beat in which m > 1 blocks close (cfg_block_size < W,
// or that last beat) is split into m sub-beats, one norm out per cycle, and holds s_tready low
// for the m - 1 extra cycles.
// Width bound (block_l1's carries over): each lane's term is block_l1's (|a| <= 2^31; L2
// (|a| >> s)^2 < 2^(62 - 2s)), and the beat is split at the block boundaries BEFORE any sum:
// every adder of the lane tree adds terms of one block only (a sub-beat's head lanes, up to the
// closing lane, belong to the closing block; its tail lanes to the next one), and the
// accumulator adds a block's earlier terms. So every partial sum is at most its block's norm,
// below 2^63 (spec §2.3: L1 B < 2^32 terms of at most 2^31; L2 with L = bit_length(B),
// B < 2^L terms below 2^(62 - 2s) and 2s >= L - 1): 64 bits are exact everywhere.
// cfg_block_size must be >= 1 (0 closes blocks only at s_tlast, as in block_l1); cfg_block_size
// and cfg_norm are held steady during a layer, from at least one cycle before its first element
// (the shift s and the block-size terms are registers computed from cfg_block_size every cycle).
`resetall
`default_nettype none

module block_norm_lanes #(
    parameter int W = 1
) (
    input  logic            clk,
    input  logic            rst,
    input  logic [31:0]     cfg_block_size,
    input  logic            cfg_norm,          // gradblock_pkg::NORM_L1 (0) or NORM_L2 (1)
    input  logic [32*W-1:0] s_tdata,
    input  logic [W-1:0]    s_tkeep,
    input  logic            s_tvalid,
    output logic            s_tready,
    input  logic            s_tlast,
    output logic [95:0]     m_tdata,
    output logic            m_tvalid,
    input  logic            m_tready,
    output logic            m_tlast
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(W == 1 || W == 2 || W == 4 || W == 8 || W == 16)) begin : g_bad_w
`ifdef __ICARUS__
        block_norm_lanes__W_must_be_1_2_4_8_or_16 u_parameter_error ();
`else
        $error("block_norm_lanes: W must be 1, 2, 4, 8 or 16");
`endif
    end

    // bit_length(B) >> 1 (the highest set bit i has bit_length i + 1: bit 2m gives m,
    // bit 2m + 1 gives m + 1)
    function automatic logic [4:0] half_bit_length(input logic [31:0] b);
        logic [4:0] half, m;
        half = 5'd0;
        m = 5'd0;
        for (int j = 0; j < 16; j++) begin
            if (b[2 * j]) half = m;
            m = m + 5'd1;
            if (b[2 * j + 1]) half = m;
        end
        half_bit_length = half;
    endfunction

    // a short block size b < W, p elements of the current block before lane 0: the lanes
    // that close a block, and p for the next beat ((p + W) mod b). Constant tables indexed
    // by (b, p): eight input bits a lane, no divider.
    function automatic logic [W-1:0] small_ends(input logic [3:0] b, input logic [3:0] p);
        logic [W-1:0] e;
        e = '0;
        // (every loop unconditional: a loop inside an `if` leaves its variable a latch to yosys)
        for (int l = 0; l < W; l++)
            for (int bb = 1; bb < W; bb++)
                for (int pp = 0; pp < bb; pp++)
                    if ((pp + l + 1) % bb == 0 && b == 4'(bb) && p == 4'(pp)) e[l] = 1'b1;
        small_ends = e;
    endfunction

    function automatic logic [3:0] small_next(input logic [3:0] b, input logic [3:0] p);
        logic [3:0] q;
        q = 4'd0;
        for (int bb = 1; bb < W; bb++)
            for (int pp = 0; pp < bb; pp++)
                if (b == 4'(bb) && p == 4'(pp)) q = 4'((pp + W) % bb);
        small_next = q;
    endfunction

    if (W == 1) begin : g_one
        // one lane: today's stage, cycle for cycle (s_tkeep is lane 0's, always kept)
        logic unused_keep;
        assign unused_keep = ^s_tkeep;
        block_l1 u_norm (
            .clk, .rst, .cfg_block_size, .cfg_norm,
            .s_tdata(s_tdata[31:0]), .s_tvalid, .s_tready, .s_tlast,
            .m_tdata, .m_tvalid, .m_tready, .m_tlast
        );
    end else begin : g_lanes
        // Stages under one enable (en = !m_tvalid || m_tready), latency 5 + log2(W):
        // 1 the beat: per lane |a| (0 outside s_tkeep) and which lanes close a block (from pos,
        //   the elements of the current block before lane 0, kept per beat: no per-lane count);
        //   while a held beat has more than one closing lane left it emits one sub-beat per
        //   cycle (lanes up to the next closing one) and holds s_tready low;
        // 2 the sub-beat's lanes masked in, |a| >> s (L2) or |a| (L1);
        // 3 each lane's three 16 x 16 partial products (block_l1's squarer, one MULT18X18D each);
        // 4 each lane's term, x^2 = h^2 2^32 + 2 h l 2^16 + l^2 (L1: |a|);
        // 5 .. 4 + log2(W) the lane tree, one level of 64-bit adds a stage, two sums: the head
        //   (lanes up to the closing lane: the closing block) and the tail (after it: the next
        //   block; with no closing lane everything is head);
        // 5 + log2(W) the 64-bit accumulator: a closing sub-beat emits acc + head and keeps the
        //   tail, any other adds its head.
        localparam int LW = $clog2(W);
        localparam logic [32:0] W33 = 33'(W);

        logic        en;
        logic  [4:0] shift;        // s = bit_length(cfg_block_size) >> 1, 0..16
        logic        short_b;        // cfg_block_size < W: more than one block may close a beat
        logic  [3:0] bsm;          // the block size when short (< W <= 16)
        logic [32:0] w_minus_b;    // W - cfg_block_size, two's complement

        always_ff @(posedge clk) begin
            shift <= half_bit_length(cfg_block_size);
            short_b <= cfg_block_size < 32'(W);
            bsm <= cfg_block_size[3:0];
            w_minus_b <= W33 - {1'b0, cfg_block_size};
        end

        assign en = !m_tvalid || m_tready;

        // ---- stage 1 input: where blocks close in the arriving beat
        logic [31:0]   pos;             // elements of the current block before the next beat
        logic [32:0]   u_in;
        logic [31:0]   pos_w;
        logic [W-1:0]  big_ends, reg_ends, ends_in, last_lane;
        logic [31:0]   pos_in;
        assign u_in  = {1'b0, pos} + w_minus_b;    // pos + W - B
        assign pos_w = pos + 32'(W);               // pos + W (< B when no block closes)
        // B >= W: pos < B, so a block closes in this beat iff pos + W - B >= 0, then at lane
        // W - 1 - (pos + W - B) = B - 1 - pos, and only there (u < W)
        for (genvar l = 0; l < W; l++) begin : g_big
            assign big_ends[l] = !u_in[32] && u_in[LW-1:0] == LW'(W - 1 - l);
        end
        assign last_lane = s_tkeep & ~(s_tkeep >> 1);   // the highest kept lane
        // Icarus 11 refuses part selects inside always_comb: continuous assignments
        assign reg_ends = short_b ? small_ends(bsm, pos[3:0]) : big_ends;
        assign ends_in = s_tlast ? ((reg_ends & s_tkeep) | last_lane) : reg_ends;
        assign pos_in = s_tlast ? 32'd0
                      : short_b ? {28'd0, small_next(bsm, pos[3:0])}
                      : u_in[32] ? pos_w : u_in[31:0];

        // ---- stage 1: the held beat and its split into sub-beats
        logic            v1, last1;
        logic [32*W-1:0] mag1;
        logic [W-1:0]    rem1;          // closing lanes not yet emitted
        logic [W-1:0]    lo1;           // lanes not yet emitted (after the last emitted close)
        logic [W-1:0]    upto1, win1, head1;
        logic            more1, hold1, end1;
        assign upto1 = rem1 ^ (rem1 - 1'b1);             // lanes up to the first close (all: none)
        assign more1 = |(rem1 & ~upto1);                 // a second close after it
        assign hold1 = v1 && more1;
        assign win1  = more1 ? (lo1 & upto1) : lo1;      // this sub-beat's lanes
        assign head1 = win1 & upto1;
        assign end1  = |rem1;
        assign s_tready = en && !hold1;

        // ---- stages 2..4
        logic            v2, last2, end2, v3, last3, end3, v4, last4, end4, l2_3;
        logic [W-1:0]    head2, head3, head4;
        logic [32*W-1:0] x2, x3, hh3, hl3, ll3;
        logic [64*W-1:0] term4;

        // ---- the lane tree: nodes of level k (1..LW) at W - (W >> (k - 1)) .. + (W >> k) - 1
        logic [64*(W-1)-1:0] hs, ts;
        logic [LW:1]         vt, endt, lastt;
        logic [63:0]         acc, sum;
        logic [31:0]         index;
        assign sum = acc + hs[64*(W-2) +: 64];

        always_ff @(posedge clk) begin
            if (rst) begin
                v1 <= 1'b0;
                v2 <= 1'b0;
                v3 <= 1'b0;
                v4 <= 1'b0;
                vt <= '0;
                pos <= 32'd0;
                acc <= 64'd0;
                index <= 32'd0;
                m_tvalid <= 1'b0;
            end else if (en) begin
                if (hold1) begin
                    // emit up to the first close, keep the rest of the beat
                    rem1 <= rem1 & ~upto1;
                    lo1 <= ~upto1;
                end else begin
                    v1 <= s_tvalid;
                    if (s_tvalid) begin
                        for (int l = 0; l < W; l++)
                            // two's complement negation: -2^31 gives 2^31, exact as unsigned
                            mag1[32*l +: 32] <= !s_tkeep[l] ? 32'd0
                                              : s_tdata[32*l+31] ? 32'd0 - s_tdata[32*l +: 32]
                                              : s_tdata[32*l +: 32];
                        rem1 <= ends_in;
                        lo1 <= '1;
                        last1 <= s_tlast;
                        pos <= pos_in;
                    end
                end
                v2 <= v1;
                v3 <= v2;
                v4 <= v3;
                vt[1] <= v4;
                for (int k = 2; k <= LW; k++) vt[k] <= vt[k-1];
                // the accumulator
                m_tvalid <= vt[LW] && endt[LW];
                if (vt[LW]) begin
                    if (endt[LW]) begin
                        acc <= ts[64*(W-2) +: 64];
                        index <= lastt[LW] ? 32'd0 : index + 32'd1;
                    end else begin
                        acc <= sum;
                    end
                end
            end
            // data registers load on every enable; the valid bits say what they hold
            if (en) begin
                // stage 2
                last2 <= last1 && !more1;      // the layer's last close is its last sub-beat's
                end2 <= end1;
                head2 <= head1;
                for (int l = 0; l < W; l++)
                    x2[32*l +: 32] <= !win1[l] ? 32'd0
                                    : (cfg_norm == gradblock_pkg::NORM_L2)
                                      ? (mag1[32*l +: 32] >> shift) : mag1[32*l +: 32];
                // stage 3
                last3 <= last2;
                end3 <= end2;
                head3 <= head2;
                l2_3 <= cfg_norm == gradblock_pkg::NORM_L2;
                x3 <= x2;
                for (int l = 0; l < W; l++) begin
                    hh3[32*l +: 32] <= {16'd0, x2[32*l+16 +: 16]} * {16'd0, x2[32*l+16 +: 16]};
                    hl3[32*l +: 32] <= {16'd0, x2[32*l+16 +: 16]} * {16'd0, x2[32*l +: 16]};
                    ll3[32*l +: 32] <= {16'd0, x2[32*l +: 16]} * {16'd0, x2[32*l +: 16]};
                end
                // stage 4
                last4 <= last3;
                end4 <= end3;
                head4 <= head3;
                for (int l = 0; l < W; l++)
                    term4[64*l +: 64] <= l2_3 ? ({hh3[32*l +: 32], ll3[32*l +: 32]}
                                                 + {15'd0, hl3[32*l +: 32], 17'd0})
                                              : {32'd0, x3[32*l +: 32]};
                // the tree's levels
                endt[1] <= end4;
                lastt[1] <= last4;
                for (int k = 2; k <= LW; k++) begin
                    endt[k] <= endt[k-1];
                    lastt[k] <= lastt[k-1];
                end
                for (int i = 0; i < W / 2; i++) begin
                    hs[64*i +: 64] <= (head4[2*i] ? term4[128*i +: 64] : 64'd0)
                                    + (head4[2*i+1] ? term4[128*i+64 +: 64] : 64'd0);
                    ts[64*i +: 64] <= (head4[2*i] ? 64'd0 : term4[128*i +: 64])
                                    + (head4[2*i+1] ? 64'd0 : term4[128*i+64 +: 64]);
                end
                for (int k = 2; k <= LW; k++)
                    for (int i = 0; i < W / 4; i++) if (i < (W >> k)) begin
                        hs[64*(W - (W >> (k-1)) + i) +: 64]
                            <= hs[64*(W - (W >> (k-2)) + 2*i) +: 64]
                             + hs[64*(W - (W >> (k-2)) + 2*i + 1) +: 64];
                        ts[64*(W - (W >> (k-1)) + i) +: 64]
                            <= ts[64*(W - (W >> (k-2)) + 2*i) +: 64]
                             + ts[64*(W - (W >> (k-2)) + 2*i + 1) +: 64];
                    end
                // the output register
                m_tdata <= {index, sum};
                m_tlast <= lastt[LW];
            end
        end

`ifndef SYNTHESIS
        // ---- assertions (simulation; docs/hw.md "Verification")
        // s_tkeep: all lanes on every beat but the layer's last, whose kept lanes are a
        // non-empty run from lane 0
        always @(posedge clk)
            if (!rst && s_tvalid && s_tready) begin
                // (begin/end: a bare `else` after an assert would be its fail action)
                if (!s_tlast) begin
                    assert (&s_tkeep);
                end else begin
                    assert (s_tkeep[0] && ((s_tkeep & (s_tkeep + 1'b1)) == '0));
                end
            end
`endif
    end

`ifndef SYNTHESIS
    // m_tvalid: a word offered stays offered, unchanged, until m_tready takes it
    logic        chk_m_stall;
    logic [96:0] chk_m_word;
    initial chk_m_stall = 1'b0;
    always @(posedge clk) begin
        chk_m_stall <= !rst && m_tvalid && !m_tready;
        chk_m_word  <= {m_tdata, m_tlast};
        if (!rst && chk_m_stall) assert (m_tvalid && {m_tdata, m_tlast} == chk_m_word);
    end
`endif
endmodule

`resetall
