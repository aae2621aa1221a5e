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
// Structure
//   window   a buffer of 3W words (`bq`, `cnt` of them valid, word 0 the next one the parse
//            side reads). A beat is taken while cnt <= 2W (s_tready is a register's compare,
//            never dependent on m_tready), so with input at full rate the parse side always
//            sees >= W words. Only one frame is ever in the window: after the beat with
//            s_tlast the input stays closed until that frame's status (as zrle_decoder).
//   parse    one step a cycle: a header word (1 word), a token's z and L together (2 words),
//            the next min(W, literals left) literals of the current token (a step waits for
//            all of them, so the output beats depend on the frame alone),
//            or the trailer t0 and t1 together (2 words); t1 is compared with the CRC the cycle
//            after (TCHK). The CRC absorbs the step's words (crc32_lanes). A step's checks
//            are decided in its cycle; a step that passes pushes at most one queue entry.
//   emit     the queue (2^QUEUE_AW entries) feeds an axis_skid_buffer, one beat a cycle.
//
// Throughput (words per cycle on an unthrottled frame): a token costs 1 cycle for (z, L) plus
// ceil(L / W) for its literals, the header 5 and the trailer 2 cycles. With LMAX = 256 and
// full literal runs (L = 256) a token's 258 words take 1 + 256/W cycles: 0.94·W words per
// cycle at W = 16, 0.99·W at W = 4. What bounds it: tokens starting in one beat (a frame of
// short literal runs, e.g. (z, 1) tokens, runs at 3 words per 2 cycles whatever W), and the
// header/trailer steps of short frames. The output side gives one beat a cycle: a run or up to
// W literals.
//
// Errors: the order and words of codec.zrle (what it reads before it checks): a step that
// needs 2 words (z and L, or t0 and t1) and finds the frame ending after the first is
// TRUNCATED at the frame's length; a token's literals cut short are TRUNCATED (before any
// ZERO_LITERAL); a zero literal is reported once its token's L literals have all arrived, at
// the index of the first zero; a step whose words pass but end the frame where more is needed
// is TRUNCATED at the index after them; t1 not being the frame's last word is TRUNCATED at the
// first extra word (after the CRC check). err_valid pulses the cycle after the failing step,
// the rest of the frame is read and ignored up to s_tlast, and the decoder returns to idle.
// Beats already queued are delivered (they precede the error: a prefix of what the tokens
// describe); values are tentative until `done`, which pulses when the trailer checked out and
// every value has entered the output buffer.
//
// cfg_check_n / cfg_expected_n are sampled as the frame's first beat is taken. hdr_valid pulses
// two cycles after h4 passed its checks (hdr_* set a cycle before it, held until the next
// frame). token_count: the tokens whose L word was read so far in the frame.
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

    localparam int BW = 3 * W;                  // window words
    localparam int CW = $clog2(BW + 1);         // width of a word count in the window
    localparam int SW = (W < 2) ? 2 : W;        // most words one step takes (z and L: 2)
    localparam int KW = $clog2(SW + 1);         // width of a count of 0..SW
    localparam int QW = 1 + W + 32 + 32 * W;    // queue entry: {last, keep, count, data}

    typedef enum logic [2:0] {S_HDR, S_ZL, S_LIT, S_TR, S_TCHK, S_WAIT, S_DRAIN} state_t;
    state_t state;

    // ---------------------------------------------------------------- window
    logic [32*BW-1:0] bq;               // word i in bits [32i+31:32i]
    logic [CW-1:0]    cnt;              // valid words in bq
    logic             last_in;          // the frame's last word is in the window (bq[cnt-1])
    logic             at_h0;            // the next beat taken starts a frame
    logic             check_n_r;
    logic [31:0]      expected_n_r;
    logic             take_in;
    logic [KW-1:0]    in_words;         // words in the offered beat (ones of s_tkeep)
    logic [31:0]      w0, w1;           // the next two words

    assign s_tready = (state == S_DRAIN) || (!last_in && cnt <= CW'(2 * W));
    assign take_in  = s_tvalid && s_tready;
    assign w0 = bq[31:0];
    assign w1 = bq[63:32];

    // (no always_comb reads what it writes here: Icarus 11 would re-run it forever at time 0)
    function automatic logic [KW-1:0] ones(input logic [W-1:0] keep);
        logic [KW-1:0] c;
        c = '0;
        for (int l = 0; l < W; l++) c = c + KW'(keep[l]);
        ones = c;
    endfunction
    assign in_words = ones(s_tkeep);

    // ---------------------------------------------------------------- parse state
    logic [2:0]  hdr_i;                 // which header word is next (S_HDR)
    logic [31:0] widx;                  // index in the frame of bq word 0
    logic [31:0] lmax;
    logic        n_mismatch;            // h3 != cfg_expected_n
    logic [31:0] rem;                   // values the frame still owes after the tokens read
    logic        rem_zero;
    logic        prev_full;             // previous token had L = LMAX (or none yet)
    logic [31:0] lit_left;              // literals of the current token not yet read
    logic        zero_seen;             // a zero literal was read in this token ...
    logic [31:0] zero_at;               // ... at this frame index
    logic [31:0] t1_r;
    logic        t1_final;              // t1 was the frame's last word
    logic [31:0] crc, crc_next_unused;
    logic        queue_full, queue_empty;

    // ---- one parse step, decided from registers
    logic            step;              // the parse side acts this cycle
    logic [KW-1:0]   take;              // words consumed from the window
    logic [KW-1:0]   crc_n;             // words of them the CRC absorbs
    logic            bad;
    logic [3:0]      bad_code;
    logic [31:0]     bad_word;
    logic            push;
    logic            push_ok;           // a ZL or LIT step has a beat to queue if it passes
    logic [QW-1:0]   push_data;
    logic            short_frame;       // the frame ends before the words this step needs
    logic [31:0]     rz;                // rem - z
    logic            z_over;            // z > rem
    logic [31:0]     lit_want;          // min(lit_left, W): the literals of a full chunk
    logic [KW-1:0]   lit_k;             // literals this LIT step takes (min(lit_left, W))
    logic [W-1:0]    lane_zero;         // literal lanes (< lit_k) holding 0
    logic            any_zero;
    logic [KW-1:0]   first_zero;
    logic            completing;        // the step reads the token's last literal
    logic [W-1:0]    lit_keep;

    assign {z_over, rz} = {1'b0, rem} - {1'b0, w0};

    assign lit_want   = (lit_left < 32'(W)) ? lit_left : 32'(W);
    assign lit_k      = KW'(lit_want);
    assign completing = (32'(lit_k) == lit_left);
    for (genvar l = 0; l < W; l++) begin : g_lit_lanes
        assign lit_keep[l]  = KW'(l) < lit_k;
        assign lane_zero[l] = lit_keep[l] && (bq[32*l +: 32] == 32'd0);
    end
    assign any_zero = |lane_zero;
    always_comb begin
        first_zero = '0;
        for (int l = W - 1; l >= 0; l--) begin
            if (lane_zero[l]) first_zero = KW'(l);
        end
    end

    // header word fields (outside the always_comb: Icarus 11 cannot sense constant selects there)
    logic w0_version_ok, w0_lmax_ok, w0_range_ok;
    logic [32*W-1:0] lanes;             // a LIT step's literals, other lanes 0
    assign w0_version_ok = w0[7:0] == gradblock_pkg::ZRLE_VERSION;
    assign w0_lmax_ok    = w0[31:16] == 16'd0
                           && w0[15:8] >= 8'(gradblock_pkg::ZRLE_LMAX_LOG2_MIN)
                           && w0[15:8] <= 8'(gradblock_pkg::ZRLE_LMAX_LOG2_MAX);
    assign w0_range_ok   = !w0[31] && w0[30:23] != 8'hFF && w0 != 32'd0;
    for (genvar l = 0; l < W; l++) begin : g_lanes
        assign lanes[32*l +: 32] = lit_keep[l] ? bq[32*l +: 32] : 32'd0;
    end

    always_comb begin
        case (state)
            S_HDR:       short_frame = last_in && cnt == '0;
            S_ZL, S_TR:  short_frame = last_in && cnt < CW'(2);
            S_LIT:       short_frame = last_in && 32'(cnt) < lit_left;
            default:     short_frame = 1'b0;
        endcase
    end

    always_comb begin
        step = 1'b0;
        take = '0;
        crc_n = '0;
        bad = 1'b0;
        bad_code = gradblock_pkg::FRAME_ERR_TRUNCATED;
        bad_word = 32'd0;
        push_ok = 1'b0;
        push_data = '0;
        case (state)
            S_HDR: begin
                if (!queue_full && (cnt != '0 || short_frame)) begin
                    step = 1'b1;
                    if (short_frame) begin
                        bad = 1'b1;
                        bad_word = widx;
                    end else begin
                        take = KW'(1);
                        crc_n = KW'(1);
                        bad = 1'b1;
                        bad_word = widx;
                        if (hdr_i == 3'd0 && w0 != gradblock_pkg::ZRLE_MAGIC)
                            bad_code = gradblock_pkg::FRAME_ERR_BAD_MAGIC;
                        else if (hdr_i == 3'd1 && !w0_version_ok)
                            bad_code = gradblock_pkg::FRAME_ERR_BAD_VERSION;
                        else if (hdr_i == 3'd1 && !w0_lmax_ok)
                            bad_code = gradblock_pkg::FRAME_ERR_BAD_LMAX;
                        else if (hdr_i == 3'd4 && !w0_range_ok)
                            bad_code = gradblock_pkg::FRAME_ERR_BAD_RANGE;
                        else if (hdr_i == 3'd4 && check_n_r && n_mismatch) begin
                            bad_code = gradblock_pkg::FRAME_ERR_SIZE_MISMATCH;
                            bad_word = 32'd3;
                        end else if (last_in && cnt == CW'(1))
                            bad_word = widx + 32'd1;        // TRUNCATED: the word after
                        else
                            bad = 1'b0;
                    end
                end
            end
            S_ZL: begin
                // z = w0, L = w1: both are read before any check (codec.zrle)
                if (!queue_full && (cnt >= CW'(2) || short_frame)) begin
                    step = 1'b1;
                    bad = 1'b1;
                    if (short_frame) begin
                        bad_word = widx + 32'(cnt);
                    end else begin
                        take = KW'(2);
                        crc_n = KW'(2);
                        bad_word = widx;
                        if (w1 > lmax) begin
                            bad_code = gradblock_pkg::FRAME_ERR_LITERAL_RUN_TOO_LONG;
                            bad_word = widx + 32'd1;
                        end else if (w0 == 32'd0 && w1 == 32'd0)
                            bad_code = gradblock_pkg::FRAME_ERR_EMPTY_TOKEN;
                        else if (w0 == 32'd0 && !prev_full)
                            bad_code = gradblock_pkg::FRAME_ERR_SPLIT_LITERAL_RUN;
                        else if (z_over || w1 > rz)
                            bad_code = gradblock_pkg::FRAME_ERR_OVERRUN;
                        else if (w1 == 32'd0 && rz != 32'd0) begin
                            bad_code = gradblock_pkg::FRAME_ERR_EARLY_ZERO_LENGTH;
                            bad_word = widx + 32'd1;
                        end else if (last_in && cnt == CW'(2))
                            bad_word = widx + 32'd2;        // TRUNCATED: the word after L
                        else
                            bad = 1'b0;
                    end
                    // a token with zeros: one run beat; it holds the n-th value when L = 0
                    push_ok = w0 != 32'd0;
                    push_data = {w1 == 32'd0, {W{1'b0}}, w0, {(32 * W){1'b0}}};
                end
            end
            S_LIT: begin
                // a full chunk (W, or the token's last literals) or the frame cut short: the
                // beats are a function of the frame alone, whatever the input's gaps
                if (!queue_full && (32'(cnt) >= lit_want || short_frame)) begin
                    step = 1'b1;
                    bad = 1'b1;
                    if (short_frame) begin
                        bad_word = widx + 32'(cnt);             // literals cut short
                    end else begin
                        take = lit_k;
                        crc_n = lit_k;
                        if (completing && (zero_seen || any_zero)) begin
                            bad_code = gradblock_pkg::FRAME_ERR_ZERO_LITERAL;
                            bad_word = zero_seen ? zero_at : widx + 32'(first_zero);
                        end else if (last_in && cnt == CW'(lit_k))
                            bad_word = widx + 32'(lit_k);       // TRUNCATED: t0 (or z) missing
                        else
                            bad = 1'b0;
                    end
                    // literals up to the first zero (a zero is never a value of a valid frame)
                    push_ok = !zero_seen && !any_zero;
                    push_data = {completing && rem_zero, lit_keep, 32'(lit_k), lanes};
                end
            end
            S_TR: begin
                // t0 = w0, t1 = w1, both read before the t0 check (codec.zrle)
                if (!queue_full && (cnt >= CW'(2) || short_frame)) begin
                    step = 1'b1;
                    bad = 1'b1;
                    if (short_frame) begin
                        bad_word = widx + 32'(cnt);
                    end else begin
                        take = KW'(2);
                        crc_n = KW'(1);                         // t1 is not in the CRC
                        if (w0 != token_count) begin
                            bad_code = gradblock_pkg::FRAME_ERR_TOKEN_COUNT_MISMATCH;
                            bad_word = widx;
                        end else
                            bad = 1'b0;
                    end
                end
            end
            S_TCHK: begin
                // widx is one past t1 now
                step = 1'b1;
                bad = 1'b1;
                if (t1_r != crc) begin
                    bad_code = gradblock_pkg::FRAME_ERR_CRC_MISMATCH;
                    bad_word = widx - 32'd1;
                end else if (!t1_final)
                    bad_word = widx;                            // TRUNCATED: first extra word
                else
                    bad = 1'b0;
            end
            default: ;
        endcase
    end

    assign push = step && !bad && push_ok;

    // ---------------------------------------------------------------- window update
    // the window after this cycle: the words left after the step's, then the beat taken
    logic [32*BW-1:0] bq_next, shifted, keep_low, beat_at;
    logic [CW-1:0]    cnt_next, base;
    logic             append;           // the beat taken joins the window (not drained)
    assign shifted  = bq >> {take, 5'b00000};
    assign base     = cnt - CW'(take);
    assign append   = take_in && state != S_DRAIN;
    assign keep_low = ~({(32 * BW){1'b1}} << {base, 5'b00000});
    assign beat_at  = {{(32 * (BW - W)){1'b0}}, s_tdata} << {base, 5'b00000};
    assign bq_next  = append ? ((shifted & keep_low) | beat_at) : shifted;
    assign cnt_next = base + (append ? CW'(in_words) : CW'(0));

    // ---------------------------------------------------------------- CRC
    // SW lanes: at W = 1 a (z, L) or (t0, t1) step still takes two words in one cycle
    crc32_lanes #(.W(SW)) u_crc (
        .clk      (clk),
        .rst      (rst),
        .init     (step && state == S_HDR && hdr_i == 3'd0),
        .en       (step && !bad && crc_n != '0),
        .data     (bq[32*SW-1:0]),
        .count    (crc_n),
        .crc      (crc),
        .crc_next (crc_next_unused)
    );

    // ---------------------------------------------------------------- queue and emit
    logic          emit, out_ready;
    logic [QW-1:0] head;

    sync_fifo #(.W(QW), .AW(QUEUE_AW)) u_queue (
        .clk     (clk),
        .rst     (rst),
        .clear   (1'b0),
        .push    (push),
        .wr_data (push_data),
        .pop     (emit),
        .rd_data (head),
        .full    (queue_full),
        .empty   (queue_empty)
    );

    assign emit = out_ready && !queue_empty;

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
    assign unused = ^crc_next_unused;

    always_ff @(posedge clk) begin
        done      <= 1'b0;
        err_valid <= 1'b0;
        hdr_valid <= 1'b0;
        if (rst) begin
            state          <= S_HDR;
            hdr_i          <= 3'd0;
            bq             <= '0;
            cnt            <= '0;
            last_in        <= 1'b0;
            at_h0          <= 1'b1;
            check_n_r      <= 1'b0;
            expected_n_r   <= 32'd0;
            widx           <= 32'd0;
            lmax           <= 32'd2;
            n_mismatch     <= 1'b0;
            rem            <= 32'd0;
            rem_zero       <= 1'b1;
            prev_full      <= 1'b1;
            lit_left       <= 32'd0;
            zero_seen      <= 1'b0;
            zero_at        <= 32'd0;
            t1_r           <= 32'd0;
            t1_final       <= 1'b0;
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
            bq  <= bq_next;
            cnt <= cnt_next;
            if (take_in && s_tlast && state != S_DRAIN) last_in <= 1'b1;

            hdr_pend  <= step && !bad && state == S_HDR && hdr_i == 3'd4;
            hdr_valid <= hdr_pend;

            if (step && !bad) widx <= widx + 32'(take);

            if (step && bad) begin
                // report; the window is dropped and the rest of the frame read to s_tlast
                err_valid <= 1'b1;
                err_code  <= bad_code;
                err_word  <= bad_word;
                widx      <= 32'd0;
                hdr_i     <= 3'd0;
                cnt       <= '0;
                last_in   <= 1'b0;
                state     <= (last_in || (take_in && s_tlast)) ? S_HDR : S_DRAIN;
            end else if (step) begin
                case (state)
                    S_HDR: begin
                        hdr_i <= hdr_i + 3'd1;
                        case (hdr_i)
                            3'd0: begin
                                prev_full   <= 1'b1;
                                token_count <= 32'd0;
                                err_code    <= gradblock_pkg::FRAME_OK;
                                err_word    <= 32'd0;
                            end
                            3'd1: begin
                                hdr_lmax_log2 <= w0[12:8];
                                lmax          <= 32'd1 << w0[12:8];
                            end
                            3'd2: hdr_layer_id <= w0;
                            3'd3: begin
                                hdr_n      <= w0;
                                rem        <= w0;
                                rem_zero   <= w0 == 32'd0;
                                n_mismatch <= w0 != expected_n_r;
                            end
                            default: begin
                                hdr_range_bits <= w0;
                                hdr_i          <= 3'd0;
                                state          <= rem_zero ? S_TR : S_ZL;
                            end
                        endcase
                    end
                    S_ZL: begin
                        rem         <= rz - w1;
                        rem_zero    <= rz == w1;
                        prev_full   <= w1 == lmax;
                        token_count <= token_count + 32'd1;
                        lit_left    <= w1;
                        zero_seen   <= 1'b0;
                        // L = 0 passed EARLY_ZERO_LENGTH, so it ends the payload
                        state       <= (w1 == 32'd0) ? S_TR : S_LIT;
                    end
                    S_LIT: begin
                        lit_left <= lit_left - 32'(lit_k);
                        if (any_zero && !zero_seen) begin
                            zero_seen <= 1'b1;
                            zero_at   <= widx + 32'(first_zero);
                        end
                        if (completing) state <= rem_zero ? S_TR : S_ZL;
                    end
                    S_TR: begin
                        t1_r     <= w1;
                        t1_final <= last_in && cnt == CW'(2);
                        state    <= S_TCHK;
                    end
                    S_TCHK: state <= S_WAIT;
                    default: ;
                endcase
            end

            if (state == S_WAIT && queue_empty) begin
                done    <= 1'b1;
                state   <= S_HDR;
                widx    <= 32'd0;
                cnt     <= '0;
                last_in <= 1'b0;
            end
            if (state == S_DRAIN && take_in && s_tlast) state <= S_HDR;
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
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
        if (!rst) assert (32'(cnt) <= 32'(BW));
        if (!rst && err_valid) assert (err_code != 4'(gradblock_pkg::FRAME_OK));
    end
`endif
endmodule

`resetall
