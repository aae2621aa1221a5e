// ZRLE v1 streaming encoder (docs/spec.md §3) taking up to W payload words a cycle and putting
// out the frame as dense W-word beats (issue 31's lane convention). Out comes exactly
// codec.zrle.encode_frame's word sequence, for every W; W = 1 gives zrle_run_encoder's frames.
//
// Input beats cover exactly cfg_n payload words, each either
//   a zero run     s_tzero = 1: s_tcount >= 1 zero words (s_tdata, s_tkeep ignored), or
//   payload words  s_tzero = 0: the lanes of s_tkeep, a contiguous run of ones anywhere in the
//                  beat, in lane order (zero words may be among them).
// Output: m_tdata (lane l in bits [32l+31:32l]), m_tkeep (one bit a word), m_tlast on the beat
// holding t1; every beat but the last is full, the last keeps lanes 0 .. k-1.
//
// Structure (pipelined for timing: every decision reads registers only)
//   input       an axis_skid_buffer (s_tready from registers: no path from the fill side's
//               decisions to the source), the words still to take counted as beats enter it;
//               then the T stage (per start lane: first nonzero, first zero after a nonzero,
//               run length) and a two-beat input buffer whose entries carry each start lane's
//               complete span decision for "no token open, room LMAX".
//   fill side   decide: each cycle the head beat's words up to and including the next token
//               boundary (a zero after literals, the LMAX-th literal) or to the beat's end, by
//               one table lookup at the position (an open token, only at a beat's first lane,
//               from the beat's constants and the room left). In that span the zeros come
//               first and the literals form one contiguous lane range. So a beat costs one
//               cycle plus one per token that closes inside it before its last lane (a
//               zero-run beat: one cycle); the payload's end one more cycle (the open
//               literals, or the trailing zeros as (z, 0)).
//               commit (a cycle later): the token's (z, L), the zero run, the literals rotated
//               to the W banks of the literal ring at its write position.
//               write (a cycle later): ring banks and token queue written in the same cycle.
//               Ring and queue room are checked from registered counts of what was decided
//               (conservative by W slots and one entry).
//   drain side  decides chunks of up to W words: the header (ceil(5/W) cycles), per token z, L
//               and the first W-2 literals in one cycle (W = 1: z and L one cycle each), then W
//               literals a cycle; a token's last literal cycle, when it has at most W-2
//               literals, also carries the next queued token's z, L and first literals (a token
//               leaves the queue as it starts); then t0, and t1 once the CRC holds t0. The
//               queue's head waits in a register with min(L, 3W) beside L and what a token
//               start needs (L - (W-2), its saturated copy and - W, computed as the head
//               loads), the drain keeps min(lit_rem, 2W+1) and lit_rem - W, and each bank's
//               read row is a register.
//   plan reg    the decision is registered with the banks' words read in its cycle; the next
//               cycle rotates them into the chunk's literal lanes (chunk register).
//   chunk reg   as a chunk enters it, a copy aligned to end in lane W-1 is registered for the
//               CRC (crc32_lanes' DATA_REG = 1 scheme, inline: data term and power registered,
//               no shift before the XOR trees); t1 is the CRC register two cycles after t0 left
//               the chunk register.
//   packer      lane_packer turns the chunks into dense beats behind a skid buffer, so no path
//               runs from m_tready to s_tready or cfg_ready.
//
// Throughput (docs/hw.md, "zrle_lane_encoder"): one input beat a cycle while no token closes
// before the beat's last lane, at most one token closing a cycle (the bound when many tokens
// close in one beat: short runs, small LMAX); out, W words a cycle while long tokens follow
// each other (a short or first token's cycle carries z, L and at most W-2 literals): on a
// dense payload with LMAX = 256, 0.99-1.0 W words a cycle at W = 4 and 16. The pipeline adds
// a few cycles per frame (latency), none per token.
//
// Buffering: L precedes the literals, so a token cannot leave before it closes. The ring holds
// max(2 x 2^LMAX_LOG2_MAX, 64, 4W) literals (one token drains while the next fills; always
// LMAX + 2W or more, so the open token can never block the input for good) and the queue
// 2^TOKEN_QUEUE_AW tokens plus the head register. The input waits while fewer than 2W ring
// slots were free a cycle ago or the queue may be full.
//
// cfg_lmax_log2 outside 1..LMAX_LOG2_MAX is clamped into that range and h1 carries the clamped
// value (as zrle_run_encoder). cfg_ready is high only while the encoder is idle.
`resetall
`default_nettype none

module zrle_lane_encoder #(
    parameter int W              = 1,   // words per cycle: 1, 2, 4, 8 or 16
    parameter int LMAX_LOG2_MAX  = 8,   // largest runtime lmax_log2
    parameter int TOKEN_QUEUE_AW = 4    // 2^this closed tokens may wait for the output
) (
    input  logic            clk,
    input  logic            rst,
    // one config beat starts a frame (also for n = 0)
    input  logic            cfg_valid,
    output logic            cfg_ready,
    input  logic [31:0]     cfg_layer_id,
    input  logic [31:0]     cfg_n,
    input  logic [31:0]     cfg_range_bits,
    input  logic [4:0]      cfg_lmax_log2,
    // beats covering exactly cfg_n payload words: a zero run, or kept lanes of payload
    input  logic [32*W-1:0] s_tdata,
    input  logic [W-1:0]    s_tkeep,
    input  logic            s_tzero,
    input  logic [31:0]     s_tcount,       // zero words a zero-run beat stands for (>= 1)
    input  logic            s_tvalid,
    output logic            s_tready,
    // frame words, dense W-word beats
    output logic [32*W-1:0] m_tdata,
    output logic [W-1:0]    m_tkeep,
    output logic            m_tvalid,
    input  logic            m_tready,
    output logic            m_tlast
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    if (!(W == 1 || W == 2 || W == 4 || W == 8 || W == 16)) begin : g_bad_w
`ifdef __ICARUS__
        zrle_lane_encoder__W_must_be_1_2_4_8_or_16 u_parameter_error ();
`else
        $error("zrle_lane_encoder: W must be 1, 2, 4, 8 or 16");
`endif
    end
    if (!(LMAX_LOG2_MAX >= gradblock_pkg::ZRLE_LMAX_LOG2_MIN
          && LMAX_LOG2_MAX <= gradblock_pkg::ZRLE_LMAX_LOG2_MAX)) begin : g_bad_lmax_log2_max
`ifdef __ICARUS__
        zrle_lane_encoder__LMAX_LOG2_MAX_must_be_1_to_24 u_parameter_error ();
`else
        $error("zrle_lane_encoder: LMAX_LOG2_MAX must lie in the frame format's 1..24");
`endif
    end
    if (!(TOKEN_QUEUE_AW >= 1 && TOKEN_QUEUE_AW <= 16)) begin : g_bad_token_queue_aw
`ifdef __ICARUS__
        zrle_lane_encoder__TOKEN_QUEUE_AW_must_be_1_to_16 u_parameter_error ();
`else
        $error("zrle_lane_encoder: TOKEN_QUEUE_AW must be 1..16");
`endif
    end

    // (sizes go through 32'(...) casts, never int'(...): yosys 0.23 refuses the latter)
    localparam int PW   = $clog2(W + 1);               // lane positions 0 .. W
    localparam int LOGW = $clog2(W);
    localparam int LW   = LMAX_LOG2_MAX + 1;            // literal counts 0 .. LMAX
    localparam int RW0  = (LMAX_LOG2_MAX + 1 > 6) ? LMAX_LOG2_MAX + 1 : 6;
    localparam int RW   = (RW0 > LOGW + 2) ? RW0 : LOGW + 2;   // ring: 2^RW literals
    localparam int RING = 1 << RW;
    localparam int DW   = RW - LOGW;                    // row address bits of a bank
    localparam int SAT  = 3 * W;                        // queue entries carry min(L, SAT)
    localparam int SW   = $clog2(SAT + 1);
    localparam int TW   = 32 + LW + SW;                 // token queue entry {z, L, Ls}
    localparam int FIRST_MAX = (W > 2) ? W - 2 : 0;     // literals beside a token's z, L
    localparam int RS   = 2 * W + 1;                    // the drain keeps min(lit_rem, RS)
    localparam int CRC_LAT = 2;                         // cycles from t0 leaving the chunk
                                                        // register to the CRC register

    localparam logic [1:0] IN_IDLE = 2'd0;
    localparam logic [1:0] IN_RUN  = 2'd1;   // payload beats still to come or in the register
    localparam logic [1:0] IN_TAIL = 2'd2;   // payload consumed: the last token must queue
    localparam logic [1:0] IN_DONE = 2'd3;   // every token has been queued

    localparam logic [2:0] D_IDLE = 3'd0;
    localparam logic [2:0] D_HDR  = 3'd1;
    localparam logic [2:0] D_TOK  = 3'd2;    // next token's z, L (and first literals), or t0
    localparam logic [2:0] D_L    = 3'd3;    // W = 1 only: the token's L
    localparam logic [2:0] D_LIT  = 3'd4;
    localparam logic [2:0] D_T1   = 3'd5;

    // ---------------------------------------------------------------- configuration
    logic [31:0]   layer_id, n_words, range_bits;
    logic [4:0]    lmax_log2, cfg_lmax_clamped;
    logic [LW-1:0] lmax;
    logic          cfg_take;

    always_comb begin
        if (cfg_lmax_log2 < 5'd1)                     cfg_lmax_clamped = 5'd1;
        else if (cfg_lmax_log2 > 5'(LMAX_LOG2_MAX))  cfg_lmax_clamped = 5'(LMAX_LOG2_MAX);
        else                                          cfg_lmax_clamped = cfg_lmax_log2;
    end
    assign lmax     = LW'(1) << lmax_log2;
    assign cfg_take = cfg_valid && cfg_ready;

    // ---------------------------------------------------------------- literal ring, token queue
    // The fill side runs in three registered steps (docs/hw.md "zrle_lane_encoder"):
    //   decide  the span of the head beat taken this cycle, from per-position tables that were
    //           computed as the beat entered the input buffer: next position, token closes,
    //           first literal lane, literal count (the state in the loop: position, open
    //           token, room left in it);
    //   commit  a cycle later: the token's (z, L) (zero run and literal counts), the literals
    //           rotated to their ring banks;
    //   write   a cycle later again: the ring banks and the token queue are written together,
    //           so the drain sees a token and its literals in the same cycle.
    // The decide step's admission checks (ring room, queue room) are registered a cycle ahead
    // and count what is still in flight, so they are conservative by at most W ring slots and
    // one queue entry.
    localparam int LB = (LOGW > 0) ? LOGW : 1;          // a lane index 0 .. W-1
    localparam int QD = 1 << TOKEN_QUEUE_AW;

    logic [RW:0]     rp;                     // drain: absolute read position (frees slots)
    logic            dn2, dn3;               // IN_DONE a cycle / two cycles ago (the last
                                             // token has then reached the queue)
    logic [RW:0]     wp1;                    // decide: literals claimed so far (wire)
    logic [RW:0]     wp2;                    // commit: ring position of the next literal
    logic            ring_low;               // (registered) fewer than 2W slots were free
    logic [RW:0]     ring_used1;             // literals decided and not yet read out
    logic [W-1:0]    bank_we;                // the ring's writes, registered by the commit
    logic [DW*W-1:0] bank_wrow;              // flat: bank b's row in bits [DW*b +: DW]
    logic [32*W-1:0] bank_wdata;
    // flat vectors, bank b's row in bits [DW*b +: DW]: yosys 0.23 turns unpacked arrays into
    // registers with a warning and has no packed 2-D arrays
    logic [DW*W-1:0] bank_rrow;
    logic [32*W-1:0] rd_bank;                // each bank's word at its read row
    logic [PW-1:0]   rd_n;                   // literals read out this cycle

    logic            q_push, q_pop, q_full, q_empty;
    logic [TW-1:0]   q_wdata, q_head;       // q_head: the head register
    logic [31:0]     head_z;
    logic [LW-1:0]   head_len;
    logic [SW-1:0]   head_ls;                // min(head_len, SAT)
    logic [TOKEN_QUEUE_AW:0] tq;             // tokens decided and not yet popped by the drain
    // tq from registers only: the count two cycles ago plus last cycle's issue and pop (both
    // ends of long decisions, so neither reaches an adder in its own cycle)
    logic [TOKEN_QUEUE_AW:0] tq_d;
    logic            issue_q, pop_q;
    logic            q_low;                  // (registered) the queue may lack room for one more

    assign tq = tq_d + (TOKEN_QUEUE_AW+1)'(issue_q) - (TOKEN_QUEUE_AW+1)'(pop_q);
    assign head_z    = q_head[TW-1 -: 32];
    assign head_len  = q_head[SW +: LW];
    assign head_ls   = q_head[SW-1:0];

    // the queue's head waits in a register (hv, q_head), so the drain decides from flops;
    // beside it, what a token's start needs, computed as the head loads: the start from
    // D_TOK (its literals in the first chunk, more to come) and the literals left after a
    // first chunk of FIRST_MAX (L - FIRST_MAX, - W, saturated): a start in a last literal
    // cycle leaves these plus the lanes lrs the previous token took
    logic            hv, f_pop, f_empty;
    logic [TW-1:0]   f_head;
    logic [LW-1:0]   f_len, h_lfm, h_lfmw;   // h_lfm = L - FIRST_MAX, h_lfmw = h_lfm - W
    logic [SW-1:0]   f_ls, h_lfms;           // h_lfms = min(h_lfm, RS)
    logic [PW-1:0]   h_d0;                   // min(Ls, FIRST_MAX)
    logic            h_more0;                // Ls > FIRST_MAX
    assign f_len = f_head[SW +: LW];
    assign f_ls  = f_head[SW-1:0];
    sync_fifo #(.W(TW), .AW(TOKEN_QUEUE_AW)) u_tokens (
        .clk     (clk),
        .rst     (rst),
        .clear   (cfg_take),
        .push    (q_push),
        .wr_data (q_wdata),
        .pop     (f_pop),
        .rd_data (f_head),
        .full    (q_full),
        .empty   (f_empty)
    );
    assign f_pop   = !f_empty && (!hv || q_pop);
    assign q_empty = !hv;
    always_ff @(posedge clk) begin
        if (rst || cfg_take) hv <= 1'b0;
        else if (f_pop)      hv <= 1'b1;
        else if (q_pop)      hv <= 1'b0;
        if (f_pop) begin
            q_head  <= f_head;
            h_lfm   <= f_len - LW'(FIRST_MAX);
            h_lfmw  <= f_len - LW'(FIRST_MAX) - LW'(W);
            // (L < FIRST_MAX wraps to a large value: read only when L > FIRST_MAX - lrs)
            h_lfms  <= (f_len >= LW'(FIRST_MAX + RS)) ? SW'(RS) : SW'(f_len - LW'(FIRST_MAX));
            h_d0    <= (f_ls <= SW'(FIRST_MAX)) ? PW'(f_ls) : PW'(FIRST_MAX);
            h_more0 <= (f_ls > SW'(FIRST_MAX));
        end
    end

    // read: ring position rp + l is in bank (rp + l) mod W
    // bank b's read row is a register (the row of the first position >= rp in bank b): it
    // steps when the drain takes that bank's word, so no adder sits before the banks' reads
    logic [LB-1:0] rd_lo, rd_off;
    logic [W-1:0]  rrow_step;                // bank b's word at rp leaves this cycle
    always_comb begin
        rd_lo = LB'(32'(rp) & (W - 1));
        for (int b = 0; b < W; b++) begin
            rd_off = LB'(b) - rd_lo;                      // mod W (W = 1: 0)
            rrow_step[b] = (PW'(rd_off) < rd_n);
        end
    end

    for (genvar b = 0; b < W; b++) begin : g_bank
        (* ram_style = "distributed" *) logic [31:0] mem [1 << DW];
        always_ff @(posedge clk) begin
            if (bank_we[b]) mem[bank_wrow[DW*b +: DW]] <= bank_wdata[32*b +: 32];
        end
        assign rd_bank[32*b +: 32] = mem[bank_rrow[DW*b +: DW]];
    end

    // ---------------------------------------------------------------- fill side: input
    logic [1:0]      in_state;
    logic [31:0]     in_left;                // payload words still to accept
    logic            in_more;                // in_left != 0
    logic            accept;                 // a beat enters the skid
    logic [PW-1:0]   take_lo, take_hi;       // the arriving beat's kept lanes
    logic [31:0]     take_count;
    logic [W-1:0]    take_nz;
    localparam int   IW = 32*W + W + 1 + 32 + 2*PW + 1;
    logic [IW-1:0]   sk_out;
    logic            sk_ready, sk_valid;
    logic [32*W-1:0] sk_data;
    logic [W-1:0]    sk_nz;
    logic            sk_zero, sk_last;
    logic [31:0]     sk_count;
    logic [PW-1:0]   sk_lo, sk_hi;

    // The input passes a skid buffer, so s_tready comes from registers; the word count, the
    // last flag and the lanes' != 0 are settled as a beat enters it.
    // (in_more implies IN_RUN, asserted: the input side does not read the fill state, which
    // the decide loop updates)
    assign s_tready  = in_more && sk_ready;
    assign accept    = s_tvalid && s_tready;

    // the kept lanes of the beat being taken
    logic tk_seen;
    always_comb begin
        take_lo = '0;
        take_hi = '0;
        tk_seen = 1'b0;
        for (int l = 0; l < W; l++) begin
            if (s_tkeep[l]) begin
                if (!tk_seen) take_lo = PW'(l);
                take_hi = PW'(l + 1);
                tk_seen = 1'b1;
            end
        end
        take_count = s_tzero ? s_tcount : 32'(take_hi - take_lo);
        for (int l = 0; l < W; l++) take_nz[l] = (s_tdata[32*l +: 32] != 32'd0);
    end

    // Input buffer: two beats in flops with their span tables. It is written from the skid
    // (whose m_tready is the buffer's registered room), read by the decide step at ib_rp and,
    // a cycle later, by the commit step at the same slot (a slot freed by the decide step is
    // rewritten at the earliest at the end of the next cycle, after the commit has read it).
    // Per start position p (p below the beat's first lane acts as that lane), for a span that
    // starts with no token open and room LMAX: TB bits, flat at [TB*(W*e + p) +: TB].
    localparam int TB = LW + 1 + 4*PW + 4;   // {room after, its <= W, next, a, zb, nlit,
                                             //  done, close, zclose, litend}
    localparam int OB = 4*PW + 2;            // open token: {enext, orun, span, lo, zc, zdone}
    logic            t_valid, t_ready, t_zero, t_last;
    logic [32*W-1:0] t_data;
    logic [31:0]     t_count;
    logic [PW-1:0]   t_lo, t_hi, t_e0;
    logic [PW*W-1:0] t_a, t_e;
    logic            ib_push, ib_pop, ib_wp, ib_rp, ib_full, ib_empty;
    logic            ib_rn;                  // !ib_rp, a second flop: the table's select
    logic [1:0]      ib_n;
    logic [64*W-1:0] ib_data;
    logic [63:0]     ib_run;
    logic [1:0]      ib_zero, ib_last;
    logic [2*PW-1:0] ib_hi;
    logic [2*TB*W-1:0] ib_tab;
    logic [2*OB-1:0] ib_open;
    logic [TB*W-1:0] nt_tab;                 // tables of the beat at the skid's output
    logic [OB-1:0]   nt_open;

    assign ib_full  = ib_n[1];
    assign ib_empty = (ib_n == 2'd0);
    assign ib_push  = t_valid && !ib_full;
    assign t_ready  = !t_valid || !ib_full;

    axis_skid_buffer #(.W(IW)) u_in (
        .clk      (clk),
        .rst      (rst),
        .s_tdata  ({(take_count == in_left), take_hi, take_lo, s_tcount, s_tzero, take_nz,
                    s_tdata}),
        .s_tvalid (accept),
        .s_tready (sk_ready),
        .m_tdata  (sk_out),
        .m_tvalid (sk_valid),
        .m_tready (t_ready)
    );
    assign {sk_last, sk_hi, sk_lo, sk_count, sk_zero, sk_nz, sk_data} = sk_out;

    // Span tables, in two steps. T stage (a register between the skid and the buffer): per
    // start position p (p below the beat's first lane acts as that lane) the first nonzero
    // kept lane a[p] and the first zero after a nonzero from there, e[p]; and e0, the first
    // zero from the beat's first lane. Buffer entry: from those, the decision of a span that
    // starts at p with no token open and room LMAX (nt_tab), and the open token's constants.
    logic [PW*W-1:0] ta_a, ta_e, ta_run, t_run;
    logic [PW-1:0]   ta_e0;
    logic [W-1:0]    ta_nzk, ta_zk;
    logic            ta_seen;
    always_comb begin
        // kept lanes lo .. hi-1: compared against constants only
        for (int l = 0; l < W; l++) begin
            ta_nzk[l] = sk_nz[l] && (PW'(l) >= sk_lo) && (PW'(l) < sk_hi);
            ta_zk[l]  = !sk_nz[l] && (PW'(l) >= sk_lo) && (PW'(l) < sk_hi);
        end
        for (int p = 0; p < W; p++) begin
            ta_a[PW*p +: PW] = sk_hi;
            ta_e[PW*p +: PW] = sk_hi;
            for (int l = W - 1; l >= 0; l--) begin
                if (l >= p && ta_nzk[l]) ta_a[PW*p +: PW] = PW'(l);
            end
            for (int l = W - 1; l >= 1; l--) begin
                // lane l is a kept zero with a nonzero kept lane in [p, l) before it
                ta_seen = 1'b0;
                for (int j = 0; j < W - 1; j++) begin
                    if (j >= p && j < l && ta_nzk[j]) ta_seen = 1'b1;
                end
                if (l > p && ta_zk[l] && ta_seen) ta_e[PW*p +: PW] = PW'(l);
            end
            ta_run[PW*p +: PW] = ta_e[PW*p +: PW] - ta_a[PW*p +: PW];
        end
        ta_e0 = sk_hi;
        for (int l = W - 1; l >= 0; l--) begin
            if (ta_zk[l]) ta_e0 = PW'(l);
        end
    end

    logic [PW-1:0] tb_a, tb_e, tb_run, tb_st, tb_next, tb_nlit, tb_alm, lmax_lo;
    logic          tb_lc, tb_zc, tb_done, lmax_small;
    logic [LW-1:0] tb_room;
    assign lmax_small = (lmax_log2 <= 5'(LOGW)); // LMAX <= W: it can close a token in a beat
    assign lmax_lo    = PW'(lmax);               // LMAX when lmax_small
    always_comb begin
        nt_tab = '0;
        for (int p = 0; p < W; p++) begin
            tb_st  = (PW'(p) > t_lo) ? PW'(p) : t_lo;
            tb_a   = t_a[PW*p +: PW];
            tb_e   = t_e[PW*p +: PW];
            tb_run = t_run[PW*p +: PW];
            tb_alm = tb_a + lmax_lo;
            tb_lc  = lmax_small && (tb_run >= lmax_lo);
            tb_zc  = !tb_lc && (tb_e < t_hi);
            if (tb_lc) begin
                tb_next = tb_alm;
                tb_done = (tb_alm == t_hi);
                tb_nlit = lmax_lo;
            end else if (tb_zc) begin
                tb_next = tb_e + PW'(1);
                tb_done = (tb_e + PW'(1) == t_hi);
                tb_nlit = tb_run;
            end else begin
                tb_next = t_hi;
                tb_done = 1'b1;
                tb_nlit = tb_run;
            end
            // the room left if the literals run on (then nlit = run): LMAX - run <= W
            // only if LMAX <= W or LMAX = 2W and run = W (LMAX and W are powers of two)
            tb_room = lmax - LW'(tb_run);
            nt_tab[TB*p +: TB] = {tb_room,
                                  lmax_small || (lmax_log2 == 5'(LOGW + 1) && tb_run == PW'(W)),
                                  tb_next, tb_a,
                                  PW'(tb_a - tb_st), tb_nlit, tb_done, tb_lc || tb_zc, tb_zc,
                                  !tb_lc && !tb_zc && (tb_a != t_hi)};
        end
        // a token open: its literals continue from the beat's first lane
        nt_open = {t_e0 + PW'(1), PW'(t_e0 - t_lo), PW'(t_hi - t_lo), t_lo,
                   (t_e0 < t_hi), (t_e0 + PW'(1) == t_hi)};
    end

    // ---------------------------------------------------------------- fill side: decide
    logic [LB-1:0]   pos;                    // next lane of the head beat (0: its first)
    logic            lit_open;               // a token is open (its literals run on)
    logic [LW-1:0]   room;                   // LMAX - the open token's literals
    logic            room_small;             // room <= W
    logic [LW-1:0]   room_mo;                // room - the open case's literals
    logic [LW-1:0]   f_room;                 // no token open: the room after the span
    logic            f_rs;                   // f_room <= W
    logic            zpend;                  // zeros since the last token boundary
    logic            go, step, step_z, tail, consumed, issue;
    logic            h_zero, h_last;
    logic [PW-1:0]   h_hi;
    logic [TB-1:0]   h_t;                    // the head beat's table entry at pos
    logic [PW-1:0]   o_enext, o_run, o_span, o_lo;
    logic            o_zc, o_zdone, o_lc;
    // this cycle's span
    logic [PW-1:0]   f_next, f_a, f_zb, f_nlit;
    logic            f_done, f_close, f_zclose, f_litend;

    // The head entry's fields by explicit muxes: an index product such as TB*(W*ib_rp + pos)
    // is a multiplication that synth_ecp5 maps to a MULT18X18D, 3 ns inside the decide loop.
    // The table (TB*W bits) selects on ib_rn, an inverted copy of ib_rp (synthesis merges
    // identical flops, not complementary ones), so neither pointer drives every mux.
    logic [TB*W-1:0] h_tabs;                 // the head beat's table, every position
    assign h_zero = ib_rp ? ib_zero[1] : ib_zero[0];
    assign h_last = ib_rp ? ib_last[1] : ib_last[0];
    assign h_hi   = ib_rp ? ib_hi[PW +: PW] : ib_hi[0 +: PW];
    assign h_tabs = ib_rn ? ib_tab[0 +: TB*W] : ib_tab[TB*W +: TB*W];
    // (a function, not an always_comb: Icarus 11 cannot sense constant selects there)
    function automatic logic [TB-1:0] tab_at(input logic [TB*W-1:0] tabs, input logic [LB-1:0] at);
        tab_at = tabs[0 +: TB];
        for (int i = 1; i < W; i++) begin
            if (32'(at) == i) tab_at = tabs[TB*i +: TB];
        end
    endfunction
    assign h_t = tab_at(h_tabs, pos);
    assign {o_enext, o_run, o_span, o_lo, o_zc, o_zdone} = ib_rp ? ib_open[OB +: OB]
                                                                 : ib_open[0 +: OB];
    assign o_lc   = room_small && (PW'(room) <= o_run);
    assign room_mo = room - LW'(o_run);

    always_comb begin
        f_room = room_mo;
        f_rs   = 1'b0;
        if (lit_open) begin                      // only at a beat's first lane
            f_a      = o_lo;
            f_zb     = '0;
            f_close  = o_lc || o_zc;
            f_zclose = !o_lc && o_zc;
            f_litend = !o_lc && !o_zc;
            if (o_lc) begin
                f_next = o_lo + PW'(room);
                f_done = (PW'(room) == o_span);
                f_nlit = PW'(room);
            end else if (o_zc) begin
                f_next = o_enext;
                f_done = o_zdone;
                f_nlit = o_run;
            end else begin
                f_next = h_hi;
                f_done = 1'b1;
                f_nlit = o_run;
            end
        end else begin
            {f_room, f_rs, f_next, f_a, f_zb, f_nlit, f_done, f_close, f_zclose, f_litend} = h_t;
        end
    end

    assign go       = (in_state == IN_RUN) && !ib_empty && !ring_low && !q_low;
    assign step     = go && !h_zero;
    assign step_z   = go && h_zero;
    assign consumed = step_z || (step && f_done);
    assign ib_pop   = consumed;
    assign tail     = (in_state == IN_TAIL) && !q_low;
    assign issue    = (step && f_close) || (step_z && lit_open) || (tail && (lit_open || zpend));

    // ---------------------------------------------------------------- fill side: commit
    logic            r_span, r_zbeat, r_tail, r_open, r_zpend, r_idx;
    logic            r_close, r_zclose, r_litend;
    logic [PW-1:0]   r_a, r_zb, r_nlit;
    logic [31:0]     zrun;                   // zeros since the last token boundary
    logic [31:0]     open_z;                 // z of the open token
    logic [LW-1:0]   lit_cnt;                // literals of the open token
    logic [32*W-1:0] c_data;                 // the committed beat's words
    logic [31:0]     c_run;
    logic [31:0]     c_tok_z;
    logic [LW-1:0]   c_tok_l;
    logic            c_push;
    logic [TW-1:0]   c_wdata;
    logic [LB-1:0]   c_wlo, c_sh, c_off;
    logic [DW-1:0]   c_wrow;
    logic [64*W-1:0] c_dbl;
    logic [W-1:0]    c_we;
    logic [DW*W-1:0] c_row;
    logic [32*W-1:0] c_rot;

    assign c_data  = ib_data[32*W*r_idx +: 32*W];
    assign c_run   = ib_run[32*r_idx +: 32];
    assign c_tok_z = r_open ? open_z : zrun + 32'(r_zb);
    // wp1, the literals the decide step has claimed, is the commit's wp2 plus the span it
    // commits this cycle (the commit runs a cycle behind the decide step): from registers,
    // so no adder follows the decision
    assign wp1        = wp2 + ((r_span) ? (RW+1)'(r_nlit) : '0);
    assign ring_used1 = wp1 - rp;
    assign c_tok_l = lit_cnt + LW'(r_nlit);
    assign c_push  = (r_span && r_close) || (r_zbeat && r_open) || (r_tail && (r_open || r_zpend));
    assign c_wdata = r_span ? {c_tok_z, c_tok_l, ls_of(c_tok_l)}
                   : r_open ? {open_z, lit_cnt, ls_of(lit_cnt)} : {zrun, LW'(0), SW'(0)};

    function automatic logic [SW-1:0] ls_of(input logic [LW-1:0] v);
        ls_of = (v >= LW'(SAT)) ? SW'(SAT) : SW'(v);
    endfunction

    // literal o (o < r_nlit) of the span, input lane r_a + o, goes to ring position wp2 + o
    assign c_dbl = {c_data, c_data};
    assign c_wrow = wp2[RW-1 -: DW];
    always_comb begin
        c_wlo  = LB'(32'(wp2) & (W - 1));
        c_sh   = LB'(32'(r_a) & (W - 1)) - c_wlo;
        c_rot  = c_dbl[32*c_sh +: 32*W];         // bank b gets lane (b + c_sh) mod W
        for (int b = 0; b < W; b++) begin
            c_off = LB'(b) - c_wlo;                  // mod W (W = 1: always 0)
            c_we[b] = r_span && (PW'(c_off) < r_nlit);
            c_row[DW*b +: DW] = c_wrow + DW'((LB'(b) < c_wlo) ? 1 : 0);
        end
    end

    // ---------------------------------------------------------------- drain side
    // Its decisions come from registers and small saturated counts: the queue entry carries
    // Ls = min(L, 3W) beside L, the drain keeps lrs = min(lit_rem, 2W + 1) and lit_rem - W
    // beside lit_rem, so no comparison or subtraction of a full count sits in a decision.
    logic [2:0]      d_state;
    logic [2:0]      hdr_idx;
    logic [LW-1:0]   lit_rem, lit_rem_next;  // literals of the token being emitted, still to go
    logic [LW-1:0]   lr_mw, lr_mw_next;      // lit_rem - W
    logic [SW-1:0]   lrs, lrs_next;          // min(lit_rem, RS)
    logic [31:0]     tok_count;
    logic [32*5-1:0] hdr_w;                  // the header words, flat as above
    logic            ck_valid, ck_last, ck_t0, ck_ready, pk_ready, pk_take;
    logic [32*W-1:0] ck_data;
    logic [PW-1:0]   ck_cnt;
    // The CRC's copy of the chunk (cc_al, cc_n): loaded as the chunk enters the chunk
    // register, its words already moved up to end in lane W-1 (zeros below; cc_n = 0 when no
    // chunk entered), so the CRC's data term is XOR trees from flops with no shift before
    // them. The CRC thus absorbs a chunk the cycle after it enters the chunk register, not as
    // it leaves it: the chunks and their order are the same, and t1 still waits for t0 to
    // leave the chunk register (t0_in), by which time the CRC holds it.
    logic [32*W-1:0] cc_al, cc_al_next;
    logic [PW-1:0]   cc_n, cc_n_next;
    logic            produce, p_last, p_t0;
    logic [32*W-1:0] p_data;                 // the chunk's words that are not literals
    logic [W-1:0]    p_lit, p_sh2;           // lane l: the literal at rp + l / rp + l - 2
    // plan register: the decision's chunk, assembled a cycle later from the ring's words
    // read in the decision's cycle (rd_q), so no read sits in the same cycle as a decision
    logic            pl_valid, pl_ready, pl_last, pl_t0;
    logic [32*W-1:0] pl_data, ck_next;
    logic [W-1:0]    pl_lit;
    logic [LB*W-1:0] pl_bsel;                // lane l's literal comes from bank pl_bsel[l]
    logic [PW-1:0]   pl_cnt;
    logic [32*W-1:0] rd_q;                   // the banks' words at the decision's rows
    logic [LB*W-1:0] p_bsel;
    logic [PW-1:0]   p_cnt;
    logic [2:0]      d_next;
    logic            tok_start;              // a token's z goes out this cycle
    logic            trailer_now;
    logic [31:0]     crc;                    // the CRC of the words absorbed so far
    logic [1:0]      t0_in;                  // t0 left the chunk register 1, 2 cycles ago
    logic            crc_done;               // the CRC register holds every word up to t0
    logic [PW-1:0]   dr_d;                   // the new token's literals in this chunk
    logic [PW-1:0]   dr_n;                   // a last literal cycle's literals, both tokens
    logic [SW:0]     lr_ls;                  // Ls + lrs
    assign lr_ls  = (SW+1)'(head_ls) + (SW+1)'(lrs);
    logic            r_le_fm, r_le_w;

    assign hdr_w[0 +: 32]   = gradblock_pkg::ZRLE_MAGIC;
    assign hdr_w[32 +: 32]  = {16'd0, 3'd0, lmax_log2, gradblock_pkg::ZRLE_VERSION};
    assign hdr_w[64 +: 32]  = layer_id;
    assign hdr_w[96 +: 32]  = n_words;
    assign hdr_w[128 +: 32] = range_bits;

    assign cfg_ready   = (d_state == D_IDLE);
    assign ck_ready    = !ck_valid || pk_ready;
    assign pl_ready    = !pl_valid || ck_ready;

    always_comb begin
        for (int l = 0; l < W; l++) begin
            p_bsel[LB*l +: LB] = LB'((32'(rd_lo) + l + (p_sh2[l] ? W - 2 : 0)) & (W - 1));
            ck_next[32*l +: 32] = pl_lit[l] ? rd_q[32*pl_bsel[LB*l +: LB] +: 32]
                                            : pl_data[32*l +: 32];
        end
    end
    assign pk_take     = ck_valid && pk_ready;
    assign trailer_now = q_empty && f_empty && dn3;  // the last token has been queued
    assign r_le_fm     = (lrs <= SW'(FIRST_MAX));
    assign r_le_w      = (lrs <= SW'(W));
    assign crc_done    = t0_in[CRC_LAT - 1];

    function automatic logic [SW-1:0] sat_rs(input logic [LW-1:0] v);
        sat_rs = (v >= LW'(RS)) ? SW'(RS) : SW'(v);
    endfunction

    // The chunk's words other than literals and its literal lanes, by state alone: they are
    // read only with produce (pl_valid) and only in lanes 0 .. p_cnt-1, so the conditions
    // that decide whether a chunk goes out (pl_ready, a queued token, the trailer's turn,
    // crc_done) need not reach these 32W-bit selects. Lane layouts (docs/hw.md):
    //   D_HDR  header words hdr_idx ..;  D_TOK  z, L, the first literals (or t0 in lane 0
    //   when no token is queued);  D_L  L;  D_T1  t1;  D_LIT  W literals, or a token's last
    //   lrs literals, the next token's z, L and its first literals (lrs <= FIRST_MAX).
    logic p_start;                           // D_LIT: the next token starts in this chunk
    assign p_start = r_le_fm && !q_empty && W > 2;
    always_comb begin
        p_data = '0;
        p_lit  = '0;
        p_sh2  = '0;
        case (d_state)
            D_HDR: begin
                for (int l = 0; l < W; l++) begin
                    if (5'(hdr_idx) + 5'(l) < 5'd5)
                        p_data[32*l +: 32] = hdr_w[32*(5'(hdr_idx) + 5'(l)) +: 32];
                end
            end
            D_TOK: begin
                p_data[31:0] = q_empty ? tok_count : head_z;
                for (int l = 1; l < W; l++) begin
                    if (l == 1) p_data[32*l +: 32] = 32'(head_len);
                    else        {p_lit[l], p_sh2[l]} = 2'b11;
                end
            end
            D_L:  p_data[31:0] = 32'(head_len);
            D_T1: p_data[31:0] = crc;
            D_LIT: begin
                if (p_start) begin
                    for (int l = 0; l < W; l++) begin
                        if (SW'(l) < lrs)           p_lit[l] = 1'b1;
                        else if (SW'(l) == lrs)     p_data[32*l +: 32] = head_z;
                        else if (SW'(l) == lrs + 1) p_data[32*l +: 32] = 32'(head_len);
                        else {p_lit[l], p_sh2[l]} = 2'b11;     // l >= 2 here
                    end
                end else begin
                    p_lit = '1;
                end
            end
            default: ;
        endcase
    end

    always_comb begin
        tok_start    = 1'b0;
        produce      = 1'b0;
        p_last       = 1'b0;
        p_t0         = 1'b0;
        p_cnt        = '0;
        q_pop        = 1'b0;
        rd_n         = '0;
        d_next       = d_state;
        dr_d         = '0;
        dr_n         = '0;
        lit_rem_next = lit_rem;
        lr_mw_next   = lr_mw;
        lrs_next     = lrs;
        if (pl_ready) begin
            case (d_state)
                D_HDR: begin
                    produce = 1'b1;
                    p_cnt = (5'd5 - 5'(hdr_idx) < 5'(W)) ? PW'(5'd5 - 5'(hdr_idx)) : PW'(W);
                    if (5'(hdr_idx) + 5'(W) >= 5'd5) d_next = D_TOK;
                end
                D_TOK: begin
                    if (!q_empty) begin
                        produce = 1'b1;
                        if (W == 1) begin
                            p_cnt  = PW'(1);
                            d_next = D_L;
                        end else begin
                            // the token leaves the queue as it starts: its head is then the
                            // next token, which the last literal cycle may already start
                            dr_d = h_d0;
                            tok_start    = 1'b1;
                            q_pop        = 1'b1;
                            p_cnt        = dr_d + PW'(2);
                            rd_n         = dr_d;
                            // (read only when literals are left: L > FIRST_MAX)
                            lit_rem_next = h_lfm;
                            lr_mw_next   = h_lfmw;
                            lrs_next     = h_lfms;
                            if (h_more0) d_next = D_LIT;
                        end
                    end else if (trailer_now) begin
                        produce = 1'b1;
                        p_t0    = 1'b1;
                        p_cnt  = PW'(1);
                        d_next = D_T1;
                    end
                end
                D_L: begin                               // W = 1 only
                    produce      = 1'b1;
                    tok_start    = 1'b1;
                    q_pop        = 1'b1;
                    p_cnt        = PW'(1);
                    lit_rem_next = head_len;
                    lr_mw_next   = head_len - LW'(W);
                    lrs_next     = (head_ls >= SW'(SAT)) ? SW'(RS) : head_ls;
                    d_next       = (head_ls == '0) ? D_TOK : D_LIT;
                end
                D_LIT: begin
                    produce = 1'b1;
                    if (p_start) begin
                        // the token's last dr_r literals, then the next token's z, L and as
                        // many of its literals as fill the chunk (they follow in the ring)
                        tok_start = 1'b1;
                        q_pop     = 1'b1;
                        // this chunk's literals: lrs of the last token, then up to
                        // FIRST_MAX - lrs of the new one (lrs <= FIRST_MAX here)
                        dr_n = (lr_ls > (SW+1)'(FIRST_MAX)) ? PW'(FIRST_MAX) : PW'(lr_ls);
                        p_cnt        = dr_n + PW'(2);
                        rd_n         = dr_n;
                        // literals left: L - (FIRST_MAX - lrs) (read only when some are)
                        lit_rem_next = h_lfm + LW'(lrs);
                        lr_mw_next   = h_lfmw + LW'(lrs);
                        // min(L - FIRST_MAX + lrs, RS) (L may be below FIRST_MAX here)
                        lrs_next     = (lr_ls >= (SW+1)'(RS + FIRST_MAX)) ? SW'(RS)
                                                                         : SW'(lr_ls - (SW+1)'(FIRST_MAX));
                        d_next       = (lr_ls > (SW+1)'(FIRST_MAX)) ? D_LIT : D_TOK;
                    end else begin
                        p_cnt  = r_le_w ? PW'(lrs) : PW'(W);
                        rd_n   = p_cnt;
                        lit_rem_next = lr_mw;
                        lr_mw_next   = lr_mw - LW'(W);
                        lrs_next     = sat_rs(lr_mw);
                        if (r_le_w) d_next = D_TOK;
                    end
                end
                D_T1: begin
                    if (crc_done) begin
                        produce = 1'b1;
                        p_cnt  = PW'(1);
                        p_last = 1'b1;
                        d_next = D_IDLE;
                    end
                end
                default: ;
            endcase
        end
    end

    // CRC-32 over every frame word up to t0 (docs/spec.md §3), W words a cycle, in
    // crc32_lanes' DATA_REG = 1 form (the register holds the CRC itself, ~s; the data term
    // and the choice of M^p registered a cycle before the state), fed with the chunk already
    // aligned: term_q <= M^c·SEED ^ SEED ^ (XOR over lanes j of M^(W-j)·cc_al lane j),
    // sel_q <= one-hot of c (none on cfg_take), crc <= M^c·crc ^ term_q.
    localparam logic [31:0] CRC_POLY = 32'hEDB88320;
    localparam logic [31:0] CRC_SEED = 32'hFFFFFFFF;

    function automatic logic [1023:0] crc_pow_cols(input int p);   // columns of M^p
        logic [1023:0] m;
        logic [31:0]   c;
        m = '0;
        for (int j = 0; j < 32; j++) begin
            c = 32'd1 << j;
            for (int k = 0; k < 32 * p; k++) c = c[0] ? ((c >> 1) ^ CRC_POLY) : (c >> 1);
            m[32*j +: 32] = c;
        end
        crc_pow_cols = m;
    endfunction

    function automatic logic [31:0] crc_row(input logic [1023:0] cols, input int i);
        logic [31:0] r;
        for (int j = 0; j < 32; j++) r[j] = cols[32*j + i];
        crc_row = r;
    endfunction

    function automatic logic [31:0] crc_seed_pow(input int p);        // M^p·SEED
        logic [31:0] c;
        c = CRC_SEED;
        for (int k = 0; k < 32 * p; k++) c = c[0] ? ((c >> 1) ^ CRC_POLY) : (c >> 1);
        crc_seed_pow = c;
    endfunction

    logic [32*(W+1)-1:0] crc_m_state;        // M^p·crc, p = 0 .. W
    logic [32*(W+1)-1:0] crc_m_seed;         // M^p·SEED
    logic [32*W-1:0]     crc_lane_term;      // M^(W-j)·cc_al lane j
    logic [31:0]         crc_d_term, crc_term_d, crc_term_q, crc_s_term;
    logic [W:0]          crc_sel_d, crc_sel_q;

    for (genvar p = 0; p <= W; p++) begin : g_crc_pow
        localparam logic [1023:0] COLS = crc_pow_cols(p);
        assign crc_m_seed[32*p +: 32] = crc_seed_pow(p);
        for (genvar i = 0; i < 32; i++) begin : g_rows
            localparam logic [31:0] ROW = crc_row(COLS, i);
            assign crc_m_state[32*p + i] = ^(crc & ROW);
            if (p >= 1) begin : g_lane
                assign crc_lane_term[32*(W-p) + i] = ^(cc_al[32*(W-p) +: 32] & ROW);
            end
        end
    end

    always_comb begin
        crc_d_term = '0;
        for (int j = 0; j < W; j++) crc_d_term = crc_d_term ^ crc_lane_term[32*j +: 32];
        crc_term_d = crc_d_term;
        crc_sel_d  = '0;
        for (int p = 0; p <= W; p++) begin
            if (32'(cc_n) == p) begin
                crc_sel_d[p] = !cfg_take;
                crc_term_d   = crc_term_d ^ crc_m_seed[32*p +: 32] ^ CRC_SEED;
            end
        end
        crc_s_term = '0;
        for (int p = 0; p <= W; p++) begin
            if (crc_sel_q[p]) crc_s_term = crc_s_term ^ crc_m_state[32*p +: 32];
        end
    end

    // the chunk entering the chunk register, aligned to end in lane W-1
    always_comb begin
        cc_n_next  = (ck_ready && pl_valid && !pl_last) ? pl_cnt : '0;
        cc_al_next = '0;
        for (int c = 1; c <= W; c++) begin
            if (32'(cc_n_next) == c) begin
                for (int j = W - c; j < W; j++)
                    cc_al_next[32*j +: 32] = ck_next[32*(j - (W - c)) +: 32];
            end
        end
    end

    always_ff @(posedge clk) begin
        if (rst) begin
            crc_term_q <= '0;
            crc_sel_q  <= (W+1)'(1);             // M^0: the CRC stays
            crc        <= ~CRC_SEED;
            cc_n       <= '0;
            cc_al      <= '0;
        end else begin
            crc_term_q <= crc_term_d;
            crc_sel_q  <= crc_sel_d;
            crc        <= crc_s_term ^ crc_term_q;
            cc_n       <= cc_n_next;
            cc_al      <= cc_al_next;
        end
    end

    lane_packer #(.W(W)) u_pack (
        .clk      (clk),
        .rst      (rst),
        .s_data   (ck_data),
        .s_count  (ck_cnt),
        .s_last   (ck_last),
        .s_valid  (ck_valid),
        .s_ready  (pk_ready),
        .m_tdata  (m_tdata),
        .m_tkeep  (m_tkeep),
        .m_tlast  (m_tlast),
        .m_tvalid (m_tvalid),
        .m_tready (m_tready)
    );

    // ---------------------------------------------------------------- sequential logic
    always_ff @(posedge clk) begin
        if (rst) begin
            in_state  <= IN_IDLE;
            in_left   <= 32'd0;
            in_more   <= 1'b0;
            ib_n      <= 2'd0;
            t_valid   <= 1'b0;
            ib_wp     <= 1'b0;
            ib_rp     <= 1'b0;
            ib_rn     <= 1'b1;
            pos       <= '0;
            lit_open  <= 1'b0;
            room      <= LW'(2);
            room_small <= (W >= 2);
            zpend     <= 1'b0;
            ring_low  <= 1'b0;
            tq_d      <= '0;
            issue_q   <= 1'b0;
            pop_q     <= 1'b0;
            q_low     <= 1'b0;
            r_span    <= 1'b0;
            r_zbeat   <= 1'b0;
            r_tail    <= 1'b0;
            zrun      <= 32'd0;
            open_z    <= 32'd0;
            lit_cnt   <= '0;
            wp2       <= '0;
            q_push    <= 1'b0;
            bank_we   <= '0;
            dn2       <= 1'b0;
            dn3       <= 1'b0;
            rp        <= '0;
            d_state   <= D_IDLE;
            hdr_idx   <= 3'd0;
            lit_rem   <= '0;
            lr_mw     <= '0;
            lrs       <= '0;
            bank_rrow <= '0;
            t0_in     <= '0;
            tok_count <= 32'd0;
            ck_valid  <= 1'b0;
            ck_last   <= 1'b0;
            ck_t0     <= 1'b0;
            pl_valid  <= 1'b0;
            pl_last   <= 1'b0;
            pl_t0     <= 1'b0;
            pl_cnt    <= '0;
            ck_cnt    <= '0;
            layer_id  <= 32'd0;
            n_words   <= 32'd0;
            range_bits <= 32'd0;
            lmax_log2 <= 5'd1;
        end else begin
            // ---- words still to accept
            if (accept) begin
                in_more <= (take_count != in_left);
                in_left <= in_left - take_count;
            end

            // ---- input buffer (and the T stage before it)
            if (t_ready) t_valid <= sk_valid;
            if (ib_push) ib_wp <= !ib_wp;
            if (ib_pop)  ib_rp <= !ib_rp;
            if (ib_pop)  ib_rn <= !ib_rn;
            ib_n <= ib_n + 2'(ib_push) - 2'(ib_pop);

            // ---- decide
            if (step) pos <= f_done ? '0 : LB'(f_next);
            if (step_z) pos <= '0;
            if (step) begin
                if (f_close) begin
                    lit_open   <= 1'b0;
                    room       <= lmax;
                    room_small <= lmax_small;
                    zpend      <= f_zclose;
                end else if (f_litend) begin
                    lit_open   <= 1'b1;
                    room       <= lit_open ? room_mo : f_room;
                    room_small <= lit_open ? (room_mo <= LW'(W)) : f_rs;
                    zpend      <= 1'b0;
                end else begin
                    zpend    <= 1'b1;                // zeros only
                end
            end
            if (step_z) begin
                lit_open   <= 1'b0;
                room       <= lmax;
                room_small <= lmax_small;
                zpend      <= 1'b1;
            end
            if (consumed && h_last) in_state <= IN_TAIL;
            if (tail) begin
                lit_open   <= 1'b0;
                room       <= lmax;
                room_small <= lmax_small;
                zpend      <= 1'b0;
                in_state <= IN_DONE;
            end
            // admission for the next cycle, from this cycle's counts: at most W more literals
            // and one more token can be decided before these see them
            ring_low <= (32'(ring_used1) > RING - 2*W);
            q_low    <= (32'(tq) >= QD - 1);
            tq_d     <= tq;
            issue_q  <= issue;
            pop_q    <= q_pop;

            // ---- commit (the span decided last cycle)
            r_span   <= step;
            r_zbeat  <= step_z;
            r_tail   <= tail;
            if (r_span) begin
                wp2 <= wp2 + (RW+1)'(r_nlit);
                if (r_close) begin
                    lit_cnt <= '0;
                    zrun    <= r_zclose ? 32'd1 : 32'd0;
                end else if (r_litend) begin
                    lit_cnt <= c_tok_l;
                    open_z  <= c_tok_z;
                    zrun    <= 32'd0;
                end else begin
                    zrun    <= zrun + 32'(r_zb);
                end
            end
            if (r_zbeat) begin
                lit_cnt <= '0;
                zrun    <= r_open ? c_run : zrun + c_run;
            end
            if (r_tail) begin
                lit_cnt <= '0;
                zrun    <= 32'd0;
            end
            // ---- write: the ring and the token queue in the same cycle
            q_push  <= c_push;
            bank_we <= c_we;
            dn2     <= (in_state == IN_DONE);
            dn3     <= dn2;

            if (cfg_take) begin
                layer_id   <= cfg_layer_id;
                n_words    <= cfg_n;
                range_bits <= cfg_range_bits;
                lmax_log2  <= cfg_lmax_clamped;
                in_state   <= (cfg_n == 32'd0) ? IN_DONE : IN_RUN;
                in_left    <= cfg_n;
                in_more    <= (cfg_n != 32'd0);
                ib_n       <= 2'd0;
                ib_wp      <= 1'b0;
                ib_rp      <= 1'b0;
                ib_rn      <= 1'b1;
                pos        <= '0;
                lit_open   <= 1'b0;
                room       <= LW'(1) << cfg_lmax_clamped;
                room_small <= (cfg_lmax_clamped <= 5'(LOGW));  // LMAX <= W
                t_valid    <= 1'b0;
                zpend      <= 1'b0;
                ring_low   <= 1'b0;
                tq_d       <= '0;
                issue_q    <= 1'b0;
                pop_q      <= 1'b0;
                q_low      <= 1'b0;
                zrun       <= 32'd0;
                lit_cnt    <= '0;
                wp2        <= '0;
                dn2        <= 1'b0;
                dn3        <= 1'b0;
                tok_count  <= 32'd0;
                d_state    <= D_HDR;
                hdr_idx    <= 3'd0;
            end

            // ---- drain
            rp <= (cfg_take ? '0 : rp) + (RW+1)'(rd_n);
            for (int b = 0; b < W; b++) begin
                if (cfg_take) bank_rrow[DW*b +: DW] <= '0;
                else if (rrow_step[b]) bank_rrow[DW*b +: DW] <= bank_rrow[DW*b +: DW] + DW'(1);
            end
            if (produce) begin
                d_state <= d_next;
                lit_rem <= lit_rem_next;
                lr_mw   <= lr_mw_next;
                lrs     <= lrs_next;
                if (tok_start) tok_count <= tok_count + 32'd1;
                case (d_state)
                    D_HDR: hdr_idx <= hdr_idx + 3'(W);
                    D_T1:  in_state <= IN_IDLE;
                    default: ;
                endcase
            end
            // t0 has left the chunk register (the CRC absorbed it then or earlier)
            if (cfg_take || (produce && d_state == D_T1)) t0_in <= '0;
            else t0_in <= {t0_in[0], t0_in[0] || (pk_take && ck_t0)};

            // ---- chunk register
            if (pl_ready) begin
                pl_valid <= produce;
                pl_last  <= p_last;
                pl_t0    <= p_t0;
                pl_cnt   <= p_cnt;
            end
            if (ck_ready) begin
                ck_valid <= pl_valid;
                ck_last  <= pl_last;
                ck_t0    <= pl_t0;
                ck_cnt   <= pl_cnt;
            end
        end
        if (pl_ready) begin
            pl_data <= p_data;
            pl_lit  <= p_lit;
            pl_bsel <= p_bsel;
            rd_q    <= rd_bank;
        end
        if (ck_ready) ck_data <= ck_next;
        // data registers without reset
        if (t_ready) begin
            t_data  <= sk_data;
            t_count <= sk_count;
            t_zero  <= sk_zero;
            t_last  <= sk_last;
            t_lo    <= sk_lo;
            t_hi    <= sk_hi;
            t_a     <= ta_a;
            t_e     <= ta_e;
            t_run   <= ta_run;
            t_e0    <= ta_e0;
        end
        if (ib_push) begin
            ib_data[32*W*ib_wp +: 32*W] <= t_data;
            ib_run[32*ib_wp +: 32]      <= t_count;
            ib_zero[ib_wp]              <= t_zero;
            ib_last[ib_wp]              <= t_last;
            ib_hi[PW*ib_wp +: PW]       <= t_hi;
            ib_tab[TB*W*ib_wp +: TB*W]  <= nt_tab;
            ib_open[OB*ib_wp +: OB]     <= nt_open;
        end
        r_idx    <= ib_rp;
        r_open   <= lit_open;
        r_zpend  <= zpend;
        r_a      <= f_a;
        r_zb     <= f_zb;
        r_nlit   <= f_nlit;
        r_close  <= f_close;
        r_zclose <= f_zclose;
        r_litend <= f_litend;
        q_wdata   <= c_wdata;
        bank_wrow <= c_row;
        bank_wdata <= c_rot;
    end
`ifndef SYNTHESIS
    // ---- assertions (simulation; docs/hw.md "Verification")
    logic            chk_m_stall;
    logic [32*W+W:0] chk_m_beat;
    initial chk_m_stall = 1'b0;
    always @(posedge clk) begin
        chk_m_stall <= !rst && m_tvalid && !m_tready;
        chk_m_beat  <= {m_tlast, m_tkeep, m_tdata};
        if (!rst) begin
            // output: a beat offered stays offered, unchanged; dense beats; the last keeps a
            // run of lanes from lane 0
            if (chk_m_stall) assert (m_tvalid && {m_tlast, m_tkeep, m_tdata} == chk_m_beat);
            if (m_tvalid && !m_tlast) assert (m_tkeep == '1);
            if (m_tvalid && m_tlast) assert (m_tkeep != '0 && (m_tkeep & (m_tkeep + 1'b1)) == '0);
            // input: a payload beat keeps a contiguous nonempty run of lanes, a zero run
            // stands for at least one word, and no beat runs past cfg_n
            if (s_tvalid && s_tready && !s_tzero) begin
                assert (s_tkeep != '0);
                assert ((s_tkeep >> take_lo) == (W)'((1 << (int'(take_hi) - int'(take_lo))) - 1));
            end
            if (s_tvalid && s_tready && s_tzero) assert (s_tcount != 32'd0);
            if (accept) assert (take_count <= in_left);
            // t1 waits for the CRC register to hold t0
            if (d_state == D_T1 && produce) assert (!ck_valid || ck_t0 == 1'b0);
            // the admission checks are conservative: the ring and the queue never overflow
            assert (int'(ring_used1) <= RING);
            if (q_push) assert (!q_full);
            assert (int'(tq) <= QD);
            // an open token's literals continue at a beat's first lane
            if (lit_open) assert (pos == '0);
            if (in_state != IN_IDLE) assert (room_small == (room <= LW'(W)));
            if (step) assert (int'(f_next) > int'(pos) && int'(f_next) <= int'(h_hi));
            // words still to take only while the fill side runs; the table's select is !ib_rp
            if (in_more) assert (in_state == IN_RUN);
            assert (ib_rn == !ib_rp);
        end
    end
`endif
endmodule

`resetall
