// ZRLE v1 decoder taking W frame words a cycle (issue 31; docs/hw.md "zrle_lane_decoder"): a
// frame on a W-lane stream (lane l of s_tdata in bits [32l+31:32l], lane 0 the earliest word;
// every beat full but the frame's last, whose word-level s_tkeep is a run of ones from lane 0,
// s_tlast on it), the decoded values out in order, up to W a cycle, and a status report per
// frame: the same checks, error codes and err_word as hw/zrle_decoder.sv and
// codec.zrle.decode_frame (docs/spec.md §3.5).
//
// Output beats (zrle_decoder's RUN_OUT = 1 form, widened): a beat is either
//   a zero run   m_tkeep = 0, m_tdata = 0, m_tcount = its length (>= 1), or
//   literals     m_tcount = k (1..W) consecutive values in lanes 0 .. k-1, m_tkeep their lanes
//                (a run of ones from lane 0), the other lanes 0.
// The element index of a beat is the sum of the m_tcount of the frame's beats before it.
// m_tlast marks the beat holding the n-th value. A W = 1 build gives exactly zrle_decoder
// RUN_OUT = 1's beats (m_tdata, m_tcount, m_tlast; m_tkeep = 1 on a literal).
//
// Structure (150 MHz revision: every decision from registers, checks a cycle after the step)
//   window   4W words in 4 rows of W (`win`, `cnt` valid, read from `rp`): a beat is written
//            whole into a row, with per-word flags (== 0, <= W); a beat is taken while
//            cnt <= 2W (s_tready from registers, never from m_tready), so with input at full
//            rate the parse side always sees >= W words. Only one frame is ever in the window:
//            after the beat with s_tlast the input stays closed until that frame's status.
//   issue    one step a cycle: a header word (1 word), a token's z and L together (2 words),
//            the next min(W, literals left) literals of the current token (the output beats
//            depend on the frame alone), or the trailer t0 and t1 together (2 words). `go`
//            compares the word count with constants; min(L left, W) and "last chunk" are
//            registers prepared a step ahead, and whether a 2-word step is (z, L) or the
//            trailer is `rem_zero`, settled by the check stage by then. The step's words go
//            into the check registers (s2_*).
//   check    the checks of spec §3.5 on the registered step, each its own flag, their OR in
//            one register (flush_q); the state they update (rem, prev_full, token_count, ...)
//            follows every step. A step's queue entry waits a cycle (pend_*) and enters the
//            queue only if its verdict (flush_q) passed. In the flush cycle err_* are chosen
//            from registered flags and words; steps issued meanwhile are dropped.
//   CRC      crc32_lanes (DATA_REG = 1) fed from registers: at W >= 2 each window row as the
//            issue stage leaves it (count W), and the words of t0's row up to t0 one a cycle
//            (count 1) after the trailer step, so the CRC's count takes two values; at W = 1
//            each step's words (SW = 2 lanes). t1 is compared once the CRC has settled.
//   emit     the queue (2^max(QUEUE_AW, 2) entries; a step issues while 3 more fit) feeds an
//            axis_skid_buffer, one beat a cycle.
//
// Throughput (words per cycle on an unthrottled frame): a token costs 1 cycle for (z, L) plus
// ceil(L / W) for its literals, the header 5 and the trailer 2 cycles, plus about 3 + up to
// W-1 (t0's row) cycles per frame for the checks and the CRC. With LMAX = 256 and full literal
// runs (L = 256) a token's 258 words take 1 + 256/W cycles: 0.94·W words per cycle at W = 16,
// 0.98·W at W = 4. What bounds it: tokens starting in one beat (a frame of short literal runs,
// e.g. (z, 1) tokens, runs at 3 words per 2 cycles whatever W), and the header/trailer steps
// of short frames. The output side gives one beat a cycle: a run or up to W literals.
//
// Errors: the order and words of codec.zrle (what it reads before it checks): a step that
// needs 2 words (z and L, or t0 and t1) and finds the frame ending after the first is
// TRUNCATED at the frame's length; a token's literals cut short are TRUNCATED (before any
// ZERO_LITERAL); a zero literal is reported once its token's L literals have all arrived, at
// the index of the first zero; a step whose words pass but end the frame where more is needed
// is TRUNCATED at the index after them; t1 not being the frame's last word is TRUNCATED at the
// first extra word (after the CRC check). err_valid pulses three cycles after the failing step
// is issued (its check, flush_q, err_*), the rest of the frame is read and ignored up to
// s_tlast, and the decoder returns to idle. Beats of the steps before the failing one are
// delivered (a prefix of what the tokens describe); values are tentative until `done`, which
// pulses when the trailer checked out and every value has entered the output buffer.
//
// cfg_check_n / cfg_expected_n are sampled as the frame's first beat is taken. hdr_valid pulses
// three cycles after h4 is issued (checked the cycle after; hdr_* set then, held until the
// next frame). token_count: the tokens whose L word was read so far in the frame (a token
// that fails its checks included).
`resetall
`default_nettype none

module zrle_lane_decoder #(
    parameter int W = 1,                // words (lanes) per beat: 1, 2, 4, 8 or 16
    parameter int QUEUE_AW = 4          // 2^QUEUE_AW output beats between parse and emit
) (
    input  logic            clk,
    input  logic            rst,
    input  logic            cfg_check_n,
    input  logic [31:0]     cfg_expected_n,
    // frame words, W lanes
    input  logic [32*W-1:0] s_tdata,
    input  logic [W-1:0]    s_tkeep,
    input  logic            s_tvalid,
    output logic            s_tready,
    input  logic            s_tlast,
    // decoded values: a zero run, or up to W literals in lanes 0 ..
    output logic [32*W-1:0] m_tdata,
    output logic [W-1:0]    m_tkeep,
    output logic            m_tvalid,
    input  logic            m_tready,
    output logic            m_tlast,
    output logic [31:0]     m_tcount,       // values in this beat
    // status
    output logic            hdr_valid,
    output logic [31:0]     hdr_layer_id,
    output logic [31:0]     hdr_n,
    output logic [31:0]     hdr_range_bits,
    output logic [4:0]      hdr_lmax_log2,
    output logic            done,
    output logic            err_valid,
    output logic [3:0]      err_code,
    output logic [31:0]     err_word,
    output logic [31:0]     token_count
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(W == 1 || W == 2 || W == 4 || W == 8 || W == 16)) begin : g_bad_w
`ifdef __ICARUS__
        zrle_lane_decoder__W_must_be_1_2_4_8_or_16 u_parameter_error ();
`else
        $error("zrle_lane_decoder: W must be 1, 2, 4, 8 or 16");
`endif
    end
    if (!(QUEUE_AW >= 1 && QUEUE_AW <= 16)) begin : g_bad_queue_aw
`ifdef __ICARUS__
        zrle_lane_decoder__QUEUE_AW_must_be_1_to_16 u_parameter_error ();
`else
        $error("zrle_lane_decoder: QUEUE_AW must be 1..16");
`endif
    end

    localparam int NB  = 4 * W;                 // window words (a power of two, >= 3W used)
    localparam int PW  = $clog2(NB);            // a word position in the window
    localparam int RB  = PW - $clog2(W);        // a row (beat) position: 4 rows of W words
    localparam int CW  = $clog2(NB + 1);        // a count of words in the window
    localparam int SW  = (W < 2) ? 2 : W;       // most words one step takes (z and L: 2)
    localparam int KW  = $clog2(SW + 1);        // width of a count of 0..SW
    localparam int QW  = 1 + W + 32 + 32 * W;   // queue entry: {last, keep, count, data}
    // the queue holds at least 4 entries: a step is issued while 3 more fit (its own entry and
    // the two of the steps still in the check and push registers)
    localparam int QAW = (QUEUE_AW < 2) ? 2 : QUEUE_AW;
    localparam int QROOM = (1 << QAW) - 3;
    // cycles from the CRC taking words on its inputs to their effect on `crc`
    localparam int CRC_LAT = 2;
    localparam int LB  = $clog2(W);             // lane bits of a window position

    // ---------------------------------------------------------------- window
    // NB words in 4 rows of W: a beat is written whole into the row wrow (beats are dense and
    // the window restarts with each frame, so a beat always fills a row); the parse side reads
    // words rp .. rp+SW-1 (mod NB). Each word carries flags computed as it enters (== 0, <= W),
    // so the issue stage's decisions on L are a few flag bits through the read mux.
    logic [32*NB-1:0] win;
    logic [NB-1:0]    win_zero, win_lew;
    logic [PW-1:0]    rp;               // window position of the next word (= lane 0's index)
    logic [PW*SW-1:0] ixs;              // rp + j for each read lane j, kept as registers
    logic [CW-1:0]    cnt;              // valid words in the window
    logic             last_in;          // the frame's last beat is in the window
    logic             at_h0;            // the next beat taken starts a frame
    logic             check_n_r;
    logic [31:0]      expected_n_r;
    logic             take_in, append;
    logic [KW-1:0]    in_words;         // words in the offered beat (ones of s_tkeep)
    logic [W-1:0]     in_zero, in_lew;

    // issue-stage state, one-hot (declared here: s_tready reads it)
    localparam int B_HDR = 0, B_TWO = 1, B_LIT = 2, B_DRAIN = 4;     // bit 3: I_END
    localparam logic [4:0] I_HDR = 5'b00001, I_TWO = 5'b00010, I_LIT = 5'b00100,
                           I_END = 5'b01000, I_DRAIN = 5'b10000;
    logic [4:0] ist;

    // s_tready = ist[B_DRAIN] || (!last_in && cnt <= 2W), held in a register (rdy_q) computed
    // from the next cycle's state, and beside it app_q = rdy_q && !ist[B_DRAIN]: a beat is
    // written into its row (wrow_oh, one-hot) from three flops and s_tvalid, one LUT before
    // the window's clock enables (hundreds of flops) instead of the count compare and the
    // row decode
    logic             rdy_q, app_q;
    logic [3:0]       wrow_oh;          // the row the next beat fills
    assign s_tready = rdy_q;
    assign take_in  = s_tvalid && rdy_q;
    assign append   = s_tvalid && app_q;

    // (no always_comb reads what it writes here: Icarus 11 would re-run it forever at time 0)
    function automatic logic [KW-1:0] ones(input logic [W-1:0] keep);
        logic [KW-1:0] c;
        c = '0;
        for (int l = 0; l < W; l++) c = c + KW'(keep[l]);
        ones = c;
    endfunction
    assign in_words = ones(s_tkeep);
    for (genvar l = 0; l < W; l++) begin : g_in_flags
        assign in_zero[l] = s_tdata[32*l +: 32] == 32'd0;
        assign in_lew[l]  = s_tdata[32*l +: 32] <= 32'(W);
    end

    logic [32*SW-1:0] rd;               // words rp .. rp+SW-1
    logic [SW-1:0]    rd_zero, rd_lew;
    for (genvar j = 0; j < SW; j++) begin : g_read
        logic [PW-1:0] ix;
        assign ix               = ixs[PW*j +: PW];
        assign rd[32*j +: 32]   = win[32*ix +: 32];
        assign rd_zero[j]       = win_zero[ix];
        assign rd_lew[j]        = win_lew[ix];
    end

    // ---------------------------------------------------------------- issue stage
    // One step a cycle, decided from registers only: a header word (1 word), a token's z and
    // L (2 words), the token's next min(W, literals left) literals, or t0 and t1 (2 words). The
    // step's words and what the checks need go into the check registers (s2_*); the checks
    // come a cycle later and their verdict a cycle after that (flush_q). min(L left, W) and
    // "last chunk" are registers prepared a step ahead; whether a 2-word step is (z, L) or the
    // trailer is rem_zero, which the check stage has settled by then (a token's (z, L) is
    // checked the cycle after it is issued, and at least one literal step or force_tr follows).
    logic [4:0]    hdr_oh;              // one-hot: which header word is next
    logic [31:0]   widx;                // frame index of window word rp
    logic [31:0]   lit_left;            // literals of the current token not yet issued
    logic          chunk_last;          // lit_left <= W: the next literal step ends the token
    logic          lit_le2w;            // lit_left <= 2W: the step after next does
    logic          force_tr;            // a token with L = 0 was issued: the trailer is next
    logic          rem_zero;            // (check stage) the tokens checked leave no values
    logic          room;                // the queue has room for three more entries
    logic          flush_q;             // (check stage) the step checked last cycle failed

    logic [KW-1:0] need;                // words the next step takes: 1 (header), 2 (z and L,
                                        // or the trailer), min(literals left, W): a register
    logic          have, have_c, go, is_tr, tr_step, ends;
    logic [31:0]   widx_step;           // widx + need, ready before go is known
    logic [PW-1:0] rp_step;
    logic [CW-1:0] cnt_left;
    assign have     = cnt >= CW'(need);
    assign ends     = last_in && cnt == CW'(need);
    // A step goes when its words are there, or the frame has ended without them (TRUNCATED).
    // "There" is compared with constants only (a literal step waits for W words, or the
    // frame's end, even when it needs fewer: at the input's full rate the window holds them),
    // so `go` is a few LUTs from registers. The pointers advance by `need` whenever a step
    // goes: after a step cut short (have = 0) the frame is dropped anyway.
    assign have_c   = ist[B_HDR] ? cnt != '0 : ist[B_TWO] ? cnt >= CW'(2) : cnt >= CW'(W);
    assign go       = (ist[B_HDR] || ist[B_TWO] || ist[B_LIT]) && room && !flush_q
                      && (have_c || last_in);
    assign widx_step = widx + 32'(need);
    assign rp_step   = rp + PW'(need);
    assign cnt_left  = have ? cnt - CW'(need) : '0;
    logic [CW-1:0] cnt_in;
    assign cnt_in    = append ? CW'(in_words) : CW'(0);
    assign is_tr    = force_tr || rem_zero;
    assign tr_step  = ist[B_TWO] && is_tr;
    assign lit_le2w = lit_left <= 32'(2 * W);

    // check-stage registers, loaded every cycle (s2_ok_* / s2_cut say whether they hold a step)
    localparam logic [1:0] K_HDR = 2'd0, K_ZL = 2'd1, K_LIT = 2'd2, K_TR = 2'd3;
    logic             s2_ends, s2_chunk_last;
    // the step issued last cycle, by kind, with all its words; or cut short by the frame's end
    logic             s2_ok_hdr, s2_ok_zl, s2_ok_lit, s2_ok_tr, s2_cut;
    logic [1:0]       s2_kind;
    logic [W-1:0]     s2_keep;          // lanes 0 .. need-1 (a literal step's lanes)
    logic [31:0]      s2_nz, s2_nl;     // ~z, ~L: copies for the checks, so their inputs
                                        // do not share the step words' fanout
    logic [4:0]       s2_hdr;
    logic [CW-1:0]    s2_cnt;
    logic [KW-1:0]    s2_k;
    logic [31:0]      s2_widx;
    logic [32*SW-1:0] s2_words;
    logic [SW-1:0]    s2_zero;

    // ---------------------------------------------------------------- check stage
    // The checks of spec §3.5 on registered words; each is its own flag, their OR ends in one
    // register (flush_q) and the flags in q_* (err_code / err_word are chosen from those in
    // the flush cycle, in spec order). A step's queue entry waits one cycle in pend_* and enters
    // the queue unless flush_q (its verdict) is set: only entries of passing steps are queued.
    logic [31:0] lmax;
    logic        n_mismatch;            // h3 != cfg_expected_n
    logic [31:0] rem;                   // values the frame still owes after the tokens checked
    logic        prev_full;             // previous token had L = LMAX (or none yet)
    logic        zero_seen;             // a zero literal was checked in this token ...
    logic [31:0] zero_at;               // ... at this frame index
    logic [31:0] t1_r, t1_w, t1_w1;     // t1, its frame index and the one after
    logic        t1_final;              // t1 was the frame's last word
    logic        tr_pend;               // t0 passed: t1's compare once the CRC has settled
    logic        crc_quiet;             // the CRC has every word offered so far (see CRC)
    logic        wait_done;             // the trailer checked out: done once the queue drains
    logic [31:0] crc, crc_next_unused;

    logic        ok, is_hdr, is_zl, is_lit, tchk;
    logic [31:0] z, l_w;
    logic        ovf, sum_eq;
    logic [31:0] rem_new;
    logic [W-1:0] lit_keep, lane_zero;
    logic        any_zero;
    logic [KW-1:0] first_zero;
    logic [32*W-1:0] lanes;
    logic        z_version_ok, z_lmax_ok, z_range_ok;
    logic        e_short, e_magic, e_version, e_lmax, e_range, e_size, e_hends;
    logic        e_long, e_empty, e_split, e_overrun, e_early, e_zends;
    logic        e_zlit, e_lends, e_t0, e_crc, e_extra, bad;
    logic        push_ok;
    logic [QW-1:0] push_entry;

    // a step with its words, of a frame not failed
    assign ok     = !flush_q && (s2_ok_hdr || s2_ok_zl || s2_ok_lit || s2_ok_tr);
    assign is_hdr = s2_kind == K_HDR;
    assign is_zl  = s2_kind == K_ZL;
    assign is_lit = s2_kind == K_LIT;
    assign tchk   = tr_pend && crc_quiet && !flush_q;
    // the checks read z and L from the inverted copies (s2_nz, s2_nl), not from the step's
    // words: those fan out to the queue entry and the header registers, placed elsewhere
    assign z      = ~s2_nz;
    assign l_w    = ~s2_nl;

    // rem - z - L in one carry chain: rem + ~z + ~L + 2 as a carry-save sum (one LUT level)
    // plus one adder, whose carry-in (the LSB pair appended) and the free bit 0 of the carries
    // make the + 2; negative (bit 33) is an overrun: z + L > n - produced
    logic [33:0] csa_a, csa_b, csa_c, csa_s, csa_k;
    logic [34:0] csa_r;
    assign csa_a = {2'b00, rem};
    assign csa_b = {2'b11, s2_nz};
    assign csa_c = {2'b11, s2_nl};
    assign csa_s = csa_a ^ csa_b ^ csa_c;
    assign csa_k = {(csa_a[32:0] & csa_b[32:0]) | (csa_a[32:0] & csa_c[32:0])
                    | (csa_b[32:0] & csa_c[32:0]), 1'b1};
    assign csa_r = {csa_s, 1'b1} + {csa_k, 1'b1};
    assign {ovf, rem_new} = {csa_r[34], csa_r[32:1]};
    // z + L == rem without a carry chain: the carry into bit i must be the one the sum implies
    function automatic logic add_eq(input logic [31:0] a, input logic [31:0] b,
                                    input logic [31:0] c);
        logic [32:0] cy;
        logic [31:0] diff;
        cy[0] = 1'b0;
        for (int i = 0; i < 32; i++) cy[i+1] = (a[i] & b[i]) | ((a[i] ^ b[i]) & ~c[i]);
        diff = a ^ b ^ c ^ cy[31:0];
        add_eq = diff == 32'd0 && !cy[32];
    endfunction
    assign sum_eq = add_eq(~s2_nz, ~s2_nl, rem);

    for (genvar l = 0; l < W; l++) begin : g_lit_lanes
        assign lit_keep[l]       = s2_keep[l];
        assign lane_zero[l]      = lit_keep[l] && s2_zero[l];
        assign lanes[32*l +: 32] = lit_keep[l] ? s2_words[32*l +: 32] : 32'd0;
    end
    assign any_zero = |lane_zero;
    always_comb begin
        first_zero = '0;
        for (int l = W - 1; l >= 0; l--) begin
            if (lane_zero[l]) first_zero = KW'(l);
        end
    end

    // header word fields (outside the always_comb: Icarus 11 cannot sense constant selects there)
    assign z_version_ok = z[7:0] == gradblock_pkg::ZRLE_VERSION;
    assign z_lmax_ok    = z[31:16] == 16'd0
                          && z[15:8] >= 8'(gradblock_pkg::ZRLE_LMAX_LOG2_MIN)
                          && z[15:8] <= 8'(gradblock_pkg::ZRLE_LMAX_LOG2_MAX);
    assign z_range_ok   = !z[31] && z[30:23] != 8'hFF && z != 32'd0;

    // what codec.zrle reads before it checks decides which step reports: a step cut short by
    // the frame's end is TRUNCATED at the first missing word; a step whose words pass but end
    // the frame where more is needed is TRUNCATED at the word after them (but t1 may end it)
    // (the flags are not gated by flush_q: `bad` is, once, and the q_* flags are only read in
    // the flush cycle that a bad step causes)
    assign e_short   = s2_cut;
    assign e_magic   = s2_ok_hdr && s2_hdr[0] && z != gradblock_pkg::ZRLE_MAGIC;
    assign e_version = s2_ok_hdr && s2_hdr[1] && !z_version_ok;
    assign e_lmax    = s2_ok_hdr && s2_hdr[1] && !z_lmax_ok;
    assign e_range   = s2_ok_hdr && s2_hdr[4] && !z_range_ok;
    assign e_size    = s2_ok_hdr && s2_hdr[4] && check_n_r && n_mismatch;
    assign e_hends   = s2_ok_hdr && s2_ends;
    assign e_long    = s2_ok_zl && l_w > lmax;
    assign e_empty   = s2_ok_zl && s2_zero[0] && s2_zero[1];
    assign e_split   = s2_ok_zl && s2_zero[0] && !prev_full;
    assign e_overrun = s2_ok_zl && ovf;                             // z + L > n - produced
    assign e_early   = s2_ok_zl && s2_zero[1] && z != rem;          // L = 0 before the end
    assign e_zends   = s2_ok_zl && s2_ends;
    assign e_zlit    = s2_ok_lit && s2_chunk_last && (zero_seen || any_zero);
    assign e_lends   = s2_ok_lit && s2_ends;
    assign e_t0      = s2_ok_tr && z != token_count;
    assign e_crc     = tr_pend && crc_quiet && t1_r != crc;
    assign e_extra   = tr_pend && crc_quiet && !t1_final;           // words follow t1
    assign bad = !flush_q && (e_short || e_magic || e_version || e_lmax || e_range || e_size
                 || e_hends || e_long || e_empty || e_split || e_overrun || e_early || e_zends
                 || e_zlit || e_lends || e_t0 || e_crc || e_extra);

    // a token with zeros: one run beat (the n-th value's when L = 0); literals up to the first
    // zero (a zero is never a value of a valid frame)
    assign push_ok    = is_zl ? !s2_zero[0] : (is_lit && !zero_seen && !any_zero);
    assign push_entry = is_zl ? {s2_zero[1], {W{1'b0}}, s2_words[31:0], {(32 * W){1'b0}}}
                              : {s2_chunk_last && rem_zero, lit_keep, 32'(s2_k), lanes};

    // the error reported, chosen in the flush cycle from the registered flags (spec order)
    logic q_short, q_magic, q_version, q_lmax, q_range, q_size, q_hends, q_long, q_empty;
    logic q_split, q_overrun, q_early, q_zends, q_zlit, q_lends, q_t0, q_crc;
    // the candidate words are registers, computed from the check registers in parallel with
    // the checks: the widx of the step, the word after it, the first missing word of a step
    // cut short, the word after a step that ends the frame too early
    logic [31:0]   q_w0, q_w1, q_wshort, q_wend, q_zat, q_zword;
    logic          q_zseen;
    logic [KW-1:0] q_fz;
    assign q_zword = q_zseen ? q_zat : q_w0 + 32'(q_fz);   // the token's first zero literal
    logic [3:0]    chk_code;
    logic [31:0]   chk_word;
    always_comb begin
        chk_code = gradblock_pkg::FRAME_ERR_TRUNCATED;
        chk_word = q_w0;
        if (q_short) begin
            chk_word = q_wshort;
        end else if (q_magic) begin
            chk_code = gradblock_pkg::FRAME_ERR_BAD_MAGIC;
        end else if (q_version) begin
            chk_code = gradblock_pkg::FRAME_ERR_BAD_VERSION;
        end else if (q_lmax) begin
            chk_code = gradblock_pkg::FRAME_ERR_BAD_LMAX;
        end else if (q_range) begin
            chk_code = gradblock_pkg::FRAME_ERR_BAD_RANGE;
        end else if (q_size) begin
            chk_code = gradblock_pkg::FRAME_ERR_SIZE_MISMATCH;
            chk_word = 32'd3;
        end else if (q_hends) begin
            chk_word = q_wend;
        end else if (q_long) begin
            chk_code = gradblock_pkg::FRAME_ERR_LITERAL_RUN_TOO_LONG;
            chk_word = q_w1;                                        // the L word
        end else if (q_empty) begin
            chk_code = gradblock_pkg::FRAME_ERR_EMPTY_TOKEN;
        end else if (q_split) begin
            chk_code = gradblock_pkg::FRAME_ERR_SPLIT_LITERAL_RUN;
        end else if (q_overrun) begin
            chk_code = gradblock_pkg::FRAME_ERR_OVERRUN;
        end else if (q_early) begin
            chk_code = gradblock_pkg::FRAME_ERR_EARLY_ZERO_LENGTH;
            chk_word = q_w1;
        end else if (q_zends) begin
            chk_word = q_wend;
        end else if (q_zlit) begin
            chk_code = gradblock_pkg::FRAME_ERR_ZERO_LITERAL;
            chk_word = q_zword;
        end else if (q_lends) begin
            chk_word = q_wend;
        end else if (q_t0) begin
            chk_code = gradblock_pkg::FRAME_ERR_TOKEN_COUNT_MISMATCH;
        end else if (q_crc) begin
            chk_code = gradblock_pkg::FRAME_ERR_CRC_MISMATCH;
            chk_word = t1_w;
        end else begin
            chk_word = t1_w1;                                       // first word after t1
        end
    end

    // ---------------------------------------------------------------- CRC
    // fed from registers (crc_*_q), apart from the parse steps:
    //   W >= 2  a window row (one beat, W words) as the issue stage leaves it, and at the
    //           trailer the words of t0's row up to t0 one a cycle (count 1, up to W-1 cycles;
    //           none when t0 ends its row); so the CRC's count is W or 1 and its state term a
    //           choice of two. A row is never rewritten in the cycle it is left (the input
    //           writes while at most 2W words are in the window, 3 rows at most).
    //   W = 1   the step's words (1 or 2: SW lanes), t1 excluded.
    // t1 is compared once the CRC has taken every word (crc_quiet).
    logic             crc_en_q, crc_init_q;
    logic [32*SW-1:0] crc_data_q;
    logic [KW-1:0]    crc_cnt;
    logic [KW-1:0]    p_left;           // t0's row: words still to absorb one a cycle
    logic [1:0]       crc_wait;         // cycles until the words taken reach `crc`

    if (W >= 2) begin : g_crc_rows
        logic [RB-1:0]   r_now;
        logic [32*W-1:0] row_now;
        logic [32*W-1:0] p_words;               // rp's row until the trailer, then t0's row
        logic            row_event;
        if (W <= 4) begin : g_serial
            // t0's row one word a cycle: count 1 (else W) is one flop, so the CRC's count
            // takes two values only (its shortest loop: the 150 MHz build)
            logic crc_one_q;
            assign crc_cnt = crc_one_q ? KW'(1) : KW'(W);
            always_ff @(posedge clk) begin
                crc_one_q <= p_left != '0;
                p_words   <= (p_left != '0) ? p_words >> 32 : row_now;
                if (go && tr_step) p_left <= (&rp[LB-1:0]) ? '0 : KW'(rp[LB-1:0]) + KW'(1);
                else if (p_left != '0) p_left <= p_left - KW'(1);
                if (rst || flush_q || done) p_left <= '0;
            end
        end else begin : g_whole
            // W >= 8: t0's row in one cycle (count c), so a frame's tail costs no W-1 cycles
            logic [KW-1:0] crc_cnt_q;
            assign crc_cnt = crc_cnt_q;
            always_ff @(posedge clk) begin
                crc_cnt_q <= (p_left != '0) ? p_left : KW'(W);
                p_words   <= (p_left != '0) ? p_words : row_now;
                if (go && tr_step) p_left <= (&rp[LB-1:0]) ? '0 : KW'(rp[LB-1:0]) + KW'(1);
                else p_left <= '0;
                if (rst || flush_q || done) p_left <= '0;
            end
        end
        assign r_now     = rp[PW-1 -: RB];
        assign row_now   = win[32*W*r_now +: 32*W];
        // the step leaves rp's row; not at the trailer unless t0 ends the row (t1 is not in it)
        assign row_event = go && rp_step[PW-1 -: RB] != r_now && !(tr_step && !(&rp[LB-1:0]));
        always_ff @(posedge clk) begin
            crc_data_q <= (p_left != '0) ? p_words : row_now;
            crc_en_q   <= !rst && (row_event || p_left != '0);
            crc_init_q <= !rst && go && ist[B_HDR] && hdr_oh[0];
        end
    end else begin : g_crc_steps
        logic [KW-1:0] crc_cnt_q;
        assign crc_cnt = crc_cnt_q;
        always_ff @(posedge clk) begin
            crc_data_q <= rd;
            crc_cnt_q  <= tr_step ? KW'(1) : need;          // t1 is not in the CRC
            crc_en_q   <= !rst && go;
            crc_init_q <= !rst && go && ist[B_HDR] && hdr_oh[0];
        end
        assign p_left = '0;
    end

    always_ff @(posedge clk) begin
        if (rst)           crc_wait <= '0;
        else if (crc_en_q) crc_wait <= 2'(CRC_LAT - 1);
        else if (crc_wait != '0) crc_wait <= crc_wait - 2'd1;
    end
    assign crc_quiet = !crc_en_q && crc_wait == '0 && p_left == '0;

    crc32_lanes #(.W(SW), .DATA_REG(1)) u_crc (
        .clk      (clk),
        .rst      (rst),
        .init     (crc_init_q),
        .en       (crc_en_q),
        .data     (crc_data_q),
        .count    (crc_cnt),
        .crc      (crc),
        .crc_next (crc_next_unused)
    );

    // ---------------------------------------------------------------- queue and emit
    logic          pend_valid, push, emit, out_ready, queue_full, queue_empty;
    logic [QW-1:0] pend_data, head;
    logic [QAW:0]  occ, occ_next;       // entries in the queue

    assign push     = pend_valid && !flush_q;
    assign emit     = out_ready && !queue_empty;
    assign occ_next = occ + (QAW+1)'(push) - (QAW+1)'(emit);

    sync_fifo #(.W(QW), .AW(QAW)) u_queue (
        .clk     (clk),
        .rst     (rst),
        .clear   (1'b0),
        .push    (push),
        .wr_data (pend_data),
        .pop     (emit),
        .rd_data (head),
        .full    (queue_full),
        .empty   (queue_empty)
    );

    axis_skid_buffer #(.W(QW)) u_out (
        .clk      (clk),
        .rst      (rst),
        .s_tdata  (head),
        .s_tvalid (emit),
        .s_tready (out_ready),
        .m_tdata  ({m_tlast, m_tkeep, m_tcount, m_tdata}),
        .m_tvalid (m_tvalid),
        .m_tready (m_tready)
    );

    // ---------------------------------------------------------------- sequential logic
    logic hdr_pend;
    logic unused;
    assign unused = ^{crc_next_unused, queue_full, rd_lew, csa_r[33], csa_r[0]};

    // The next cycle's s_tready and ist[B_DRAIN], by the updates below. The end of a frame
    // (flush_q, or done) empties the window: ready. Otherwise the count's next value is
    // compared with 2W without its adder: a beat appended without s_tlast holds W words (the
    // lane convention), and one with s_tlast closes the input (last_next) whatever the count,
    // so next <= 2W is base <= W after such a beat and base <= 2W without one, base being the
    // count after this cycle's step (cnt - need when a step takes its words, else cnt): two
    // compares of registers each, chosen by go and append.
    logic            frame_end, drain_next, last_next, cnt_le, rdy_next;
    logic            le_w_go, le_2w_go;     // cnt - need <= W, <= 2W (or the step is cut short)
    assign frame_end  = flush_q || (wait_done && !pend_valid && queue_empty);
    assign drain_next = flush_q ? !(last_in || (take_in && s_tlast))
                                : ist[B_DRAIN] && !(take_in && s_tlast);
    assign last_next  = last_in || (append && s_tlast);
    assign le_w_go    = !have || (CW+1)'(cnt) <= (CW+1)'(W) + (CW+1)'(need);
    assign le_2w_go   = !have || (CW+1)'(cnt) <= (CW+1)'(2 * W) + (CW+1)'(need);
    assign cnt_le     = go ? (append ? le_w_go : le_2w_go)
                           : (append ? cnt <= CW'(W) : cnt <= CW'(2 * W));
    assign rdy_next = frame_end || drain_next || (!last_next && cnt_le);

    // the window: beats in, words out by the issue stage (restarted by flush_q and done)
    for (genvar r = 0; r < 4; r++) begin : g_rows
        always_ff @(posedge clk) begin
            if (append && wrow_oh[r]) win[32*W*r +: 32*W] <= s_tdata;
            if (rst) begin
                win_zero[W*r +: W] <= '0;
                win_lew[W*r +: W]  <= '0;
            end else if (append && wrow_oh[r]) begin
                win_zero[W*r +: W] <= in_zero;
                win_lew[W*r +: W]  <= in_lew;
            end
        end
    end

    // check registers: data loaded every cycle (s2_ok_* / s2_cut, below, say what they hold)
    always_ff @(posedge clk) begin
        s2_ends       <= ends;
        s2_chunk_last <= chunk_last;
        s2_hdr        <= hdr_oh;
        s2_cnt        <= cnt;
        s2_k          <= need;
        for (int l = 0; l < W; l++) s2_keep[l] <= KW'(l) < need;
        s2_widx       <= widx;
        s2_words      <= rd;
        s2_nz         <= ~rd[31:0];
        s2_nl         <= ~rd[63:32];
        s2_zero       <= rd_zero;
        s2_kind       <= ist[B_HDR] ? K_HDR : ist[B_TWO] ? (is_tr ? K_TR : K_ZL) : K_LIT;
        pend_data     <= push_entry;
        q_w0          <= s2_widx;
        q_w1          <= s2_widx + 32'd1;
        q_wshort      <= s2_widx + 32'(s2_cnt);
        // a header word, (z, L) or literals that end the frame: the word after them
        q_wend        <= s2_widx + (is_hdr ? 32'd1 : is_zl ? 32'd2 : 32'(s2_k));
        q_zseen       <= zero_seen;
        q_zat         <= zero_at;
        q_fz          <= first_zero;
        {q_short, q_magic, q_version, q_lmax, q_range, q_size, q_hends, q_long, q_empty}
            <= {e_short, e_magic, e_version, e_lmax, e_range, e_size, e_hends, e_long, e_empty};
        {q_split, q_overrun, q_early, q_zends, q_zlit, q_lends, q_t0, q_crc}
            <= {e_split, e_overrun, e_early, e_zends, e_zlit, e_lends, e_t0, e_crc};
    end

    always_ff @(posedge clk) begin
        done      <= 1'b0;
        err_valid <= 1'b0;
        hdr_valid <= 1'b0;
        if (rst) begin
            ist            <= I_HDR;
            hdr_oh         <= 5'b00001;
            rp             <= '0;
            for (int j = 0; j < SW; j++) ixs[PW*j +: PW] <= PW'(j);
            wrow_oh        <= 4'b0001;
            rdy_q          <= 1'b1;
            app_q          <= 1'b1;
            cnt            <= '0;
            last_in        <= 1'b0;
            at_h0          <= 1'b1;
            check_n_r      <= 1'b0;
            expected_n_r   <= 32'd0;
            widx           <= 32'd0;
            lit_left       <= 32'd0;
            need           <= KW'(1);
            chunk_last     <= 1'b0;
            force_tr       <= 1'b0;
            s2_ok_hdr      <= 1'b0;
            s2_ok_zl       <= 1'b0;
            s2_ok_lit      <= 1'b0;
            s2_ok_tr       <= 1'b0;
            s2_cut         <= 1'b0;
            flush_q        <= 1'b0;
            lmax           <= 32'd2;
            n_mismatch     <= 1'b0;
            rem            <= 32'd0;
            rem_zero       <= 1'b1;
            prev_full      <= 1'b1;
            zero_seen      <= 1'b0;
            zero_at        <= 32'd0;
            t1_r           <= 32'd0;
            t1_w           <= 32'd0;
            t1_w1          <= 32'd0;
            t1_final       <= 1'b0;
            tr_pend        <= 1'b0;
            wait_done      <= 1'b0;
            pend_valid     <= 1'b0;
            occ            <= '0;
            room           <= 1'b1;
            hdr_pend       <= 1'b0;
            hdr_layer_id   <= 32'd0;
            hdr_n          <= 32'd0;
            hdr_range_bits <= 32'd0;
            hdr_lmax_log2  <= 5'd0;
            err_code       <= gradblock_pkg::FRAME_OK;
            err_word       <= 32'd0;
            token_count    <= 32'd0;
        end else begin
            // ---- input side
            if (take_in) begin
                at_h0 <= s_tlast;
                if (at_h0) begin
                    check_n_r    <= cfg_check_n;
                    expected_n_r <= cfg_expected_n;
                end
            end
            if (append) wrow_oh <= {wrow_oh[2:0], wrow_oh[3]};
            if (append && s_tlast) last_in <= 1'b1;
            cnt <= go ? cnt_left + cnt_in : cnt + cnt_in;      // both sums before go
            rdy_q <= rdy_next;
            app_q <= rdy_next && !drain_next;

            // ---- issue stage
            s2_ok_hdr   <= go && have && ist[B_HDR];
            s2_ok_zl    <= go && have && ist[B_TWO] && !is_tr;
            s2_ok_lit   <= go && have && ist[B_LIT];
            s2_ok_tr    <= go && have && tr_step;
            s2_cut      <= go && !have;
            if (go) begin
                rp   <= rp_step;
                for (int j = 0; j < SW; j++) ixs[PW*j +: PW] <= ixs[PW*j +: PW] + PW'(need);
                widx <= widx_step;
                if (ist[B_HDR]) begin
                    need   <= hdr_oh[4] ? KW'(2) : KW'(1);
                    hdr_oh <= {hdr_oh[3:0], hdr_oh[4]};
                    if (hdr_oh[0]) force_tr <= 1'b0;
                    if (hdr_oh[4]) ist <= I_TWO;
                end
                if (ist[B_TWO]) begin
                    if (is_tr)           ist      <= I_END;
                    else if (rd_zero[1]) force_tr <= 1'b1;  // L = 0 ends the payload
                    else                 ist      <= I_LIT;
                end
                if (ist[B_LIT] && chunk_last) ist <= I_TWO;
                // the literal counters load on every 2-word or literal step (the values a
                // trailer, an L = 0 token or a token's last chunk leave are never used)
                if (ist[B_TWO]) begin
                    lit_left   <= rd[63:32];
                    need       <= rd_zero[1] ? KW'(2) : rd_lew[1] ? rd[32 +: KW] : KW'(W);
                    chunk_last <= rd_lew[1];
                end else if (ist[B_LIT]) begin
                    lit_left   <= lit_left - 32'(W);
                    need       <= chunk_last ? KW'(2) : lit_le2w ? KW'(lit_left - 32'(W))
                                                                 : KW'(W);
                    chunk_last <= lit_le2w;
                end
                if (!have) ist <= I_END;                    // cut short: its error follows
            end
            if (ist[B_DRAIN] && take_in && s_tlast) ist <= I_HDR;

            // ---- check stage
            flush_q    <= bad;
            pend_valid <= ok && push_ok;
            occ        <= occ_next;
            room       <= occ_next <= (QAW+1)'(QROOM);
            hdr_pend   <= ok && is_hdr && s2_hdr[4];
            hdr_valid  <= hdr_pend && !flush_q;
            if (ok) begin
                case (s2_kind)
                    K_HDR: begin
                        if (s2_hdr[0]) begin
                            prev_full   <= 1'b1;
                            token_count <= 32'd0;
                            err_code    <= gradblock_pkg::FRAME_OK;
                            err_word    <= 32'd0;
                        end
                        if (s2_hdr[1]) begin
                            hdr_lmax_log2 <= z[12:8];
                            lmax          <= 32'd1 << z[12:8];
                        end
                        if (s2_hdr[2]) hdr_layer_id <= s2_words[31:0];
                        if (s2_hdr[3]) begin
                            hdr_n      <= s2_words[31:0];
                            rem        <= z;
                            rem_zero   <= s2_zero[0];
                            n_mismatch <= z != expected_n_r;
                        end
                        if (s2_hdr[4]) hdr_range_bits <= s2_words[31:0];
                    end
                    K_ZL: begin
                        rem         <= rem_new;
                        rem_zero    <= sum_eq;
                        prev_full   <= l_w == lmax;
                        token_count <= token_count + 32'd1;
                        zero_seen   <= 1'b0;
                    end
                    K_LIT: begin
                        if (any_zero && !zero_seen) begin
                            zero_seen <= 1'b1;
                            zero_at   <= s2_widx + 32'(first_zero);
                        end
                    end
                    default: begin                          // K_TR
                        t1_r     <= s2_words[63:32];
                        t1_w     <= s2_widx + 32'd1;
                        t1_w1    <= s2_widx + 32'd2;
                        t1_final <= s2_ends;
                        tr_pend  <= z == token_count;   // else e_t0
                    end
                endcase
            end
            if (tchk) begin
                tr_pend <= 1'b0;
                if (!e_crc && !e_extra) wait_done <= 1'b1;
            end

            // ---- end of a frame: good (done) or failed (flush_q)
            if (wait_done && !pend_valid && queue_empty) begin
                done      <= 1'b1;
                wait_done <= 1'b0;
                ist       <= I_HDR;
                hdr_oh    <= 5'b00001;
                need      <= KW'(1);
                widx      <= 32'd0;
                rp        <= '0;
                for (int j = 0; j < SW; j++) ixs[PW*j +: PW] <= PW'(j);
                wrow_oh   <= 4'b0001;
                cnt       <= '0;
                last_in   <= 1'b0;
            end
            if (flush_q) begin
                // report; the window is dropped and the rest of the frame read to s_tlast
                err_valid <= 1'b1;
                err_code  <= chk_code;
                err_word  <= chk_word;
                ist       <= (last_in || (take_in && s_tlast)) ? I_HDR : I_DRAIN;
                hdr_oh    <= 5'b00001;
                need      <= KW'(1);
                widx      <= 32'd0;
                rp        <= '0;
                for (int j = 0; j < SW; j++) ixs[PW*j +: PW] <= PW'(j);
                wrow_oh   <= 4'b0001;
                cnt       <= '0;
                last_in   <= 1'b0;
                wait_done <= 1'b0;
                tr_pend   <= 1'b0;
            end
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // s_tready's register is the formula from the current state, and app_q follows it
    always @(posedge clk) begin
        if (!rst) begin
            assert (rdy_q == (ist[B_DRAIN] || (!last_in && cnt <= CW'(2 * W))));
            assert (app_q == (rdy_q && !ist[B_DRAIN]));
        end
    end
    // m_tvalid: a beat offered stays offered, unchanged, until m_tready takes it
    logic          chk_m_stall;
    logic [QW-1:0] chk_m_beat;
    initial chk_m_stall = 1'b0;
    always @(posedge clk) begin
        chk_m_stall <= !rst && m_tvalid && !m_tready;
        chk_m_beat  <= {m_tlast, m_tkeep, m_tcount, m_tdata};
        if (!rst && chk_m_stall)
            assert (m_tvalid && {m_tlast, m_tkeep, m_tcount, m_tdata} == chk_m_beat);
    end
    // the lane convention: a beat's words are a run of ones from lane 0, all W but on s_tlast
    always @(posedge clk) begin
        if (!rst && s_tvalid) begin
            assert (s_tkeep[0]);
            assert (((s_tkeep + 1'b1) & s_tkeep) == '0);
            if (!s_tlast) assert (&s_tkeep);
        end
    end
    // the window never holds more than 3W words; an error carries a frame error code
    always @(posedge clk) begin
        if (!rst) assert (32'(cnt) <= 32'(3 * W));
        if (!rst && err_valid) assert (err_code != 4'(gradblock_pkg::FRAME_OK));
    end
`endif
endmodule

`resetall
