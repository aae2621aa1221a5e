// ZRLE v1 streaming decoder (docs/spec.md §3): frame words in (s_tlast on the frame's last word),
// the layer's int32 values out (exactly n on success, m_tlast on the n-th, never more than n),
// and a status report per frame.
//
// Structure
//   input slice frame words enter a two-entry register slice with flags of the word alone, so
//               every check starts from flops (one cycle of latency, no loss of rate).
//   parse side  takes one frame word per cycle and runs the checks of spec §3.5 in their order.
//               A valid token becomes queue entries: one "zero run of z" entry (if z > 0) and one
//               entry per literal.
//   emit side   pops the queue and writes one value per cycle into an axis_skid_buffer; a zero
//               run entry is expanded there, so runs cost no input words and the parse side can
//               read ahead (the next token's z, L, literals) while zeros go out.
//   s_tready is a register (the slice's), never dependent on m_tready.
// Timing (150 MHz on an ECP5, docs/hw.md): checks use values prepared a word ahead and end in
// one register (flush_q); nothing else waits for them. A word's queue entry is pushed before its
// verdict; in the cycle after a failing word the emit side pops nothing, the parse side takes
// no word, and the queue clear, err_* and the turn to drain (or idle) happen from registers.
//
// Errors and TRUNCATED. The checks and their error codes are those of codec.zrle.decode_frame,
// including what it reads before it checks: BAD_RANGE and SIZE_MISMATCH are decided at h4;
// a zero literal is reported only once the token's L literals have all arrived (a frame
// cut short inside the literals is TRUNCATED, as in software); a wrong t0 is reported when t1
// arrives. A word carrying s_tlast while the frame needs more words is TRUNCATED, and so is a t1
// without s_tlast (words follow the trailer). err_word is the index in the frame of the word
// that codec.zrle names (`FrameError.word`); for TRUNCATED it is the number of words received,
// i.e. the index of the first missing (or, after t1, first extra) word.
// On an error: err_valid pulses with err_code/err_word, values not yet handed to the output
// buffer are discarded (values already offered on m_t* are delivered, as AXI4-Stream requires),
// the rest of the frame is read and ignored up to s_tlast, and the decoder returns to idle.
// Values are therefore tentative until `done`: a consumer discards a frame whose status is an
// error. `done` pulses when the trailer has checked out and every value has entered the output
// buffer.
//
// Frame constants and err_code values are gradblock_pkg's (MAGIC, VERSION, FRAME_ERR_*).
//
// cfg_check_n / cfg_expected_n are sampled as the frame's first word (h0) is taken.
// hdr_valid pulses once the header has passed its checks (two cycles after h4 is taken; the
// hdr_* outputs are set a cycle before it and hold until the next frame starts). token_count holds the tokens whose L word was read so far
// in the frame.
//
// RUN_OUT = 1: a zero run leaves as ONE beat (m_tdata = 0, m_tcount = its length >= 1) instead
// of m_tcount beats; a literal beat has m_tcount = 1 (the encoder's s_tcount, mirrored). A
// consumer that only needs to skip zeros then spends a cycle per run, not per zero. m_tlast
// marks the beat that holds the n-th value; it travels through the queue with its entry (set
// by the parse side from registers), so no 32-bit count compare sits on the emit path.
// RUN_OUT = 0 (default): one beat per value, m_tcount = 1 always.
`resetall
`default_nettype none

module zrle_decoder #(
    parameter int QUEUE_AW = 4,         // 2^QUEUE_AW queue entries between parse and emit
    parameter bit RUN_OUT = 1'b0        // 1: a zero run is one beat carrying its length
) (
    input  logic        clk,
    input  logic        rst,
    input  logic        cfg_check_n,
    input  logic [31:0] cfg_expected_n,
    // frame words
    input  logic [31:0] s_tdata,
    input  logic        s_tvalid,
    output logic        s_tready,
    input  logic        s_tlast,
    // decoded int32 values
    output logic [31:0] m_tdata,
    output logic        m_tvalid,
    input  logic        m_tready,
    output logic        m_tlast,
    output logic [31:0] m_tcount,       // values in this beat (> 1 only for a zero run, RUN_OUT)
    // status
    output logic        hdr_valid,
    output logic [31:0] hdr_layer_id,
    output logic [31:0] hdr_n,
    output logic [31:0] hdr_range_bits,
    output logic [4:0]  hdr_lmax_log2,
    output logic        done,
    output logic        err_valid,
    output logic [3:0]  err_code,
    output logic [31:0] err_word,
    output logic [31:0] token_count
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(QUEUE_AW >= 1 && QUEUE_AW <= 16)) begin : g_bad_queue_aw
`ifdef __ICARUS__
        zrle_decoder__QUEUE_AW_must_be_1_to_16 u_parameter_error ();
`else
        $error("zrle_decoder: QUEUE_AW must be 1..16");
`endif
    end

    // p_state[4]: draining, p_state[3]: waiting (no word taken); neither: a frame word is next.
    // So "takes a word" is two bits of the state, and p_ready one LUT.
    localparam logic [4:0] P_HDR   = 5'b00000;  // header word i where hdr_oh[i] (idle = waiting for h0)
    localparam logic [4:0] P_Z     = 5'b00001;
    localparam logic [4:0] P_L     = 5'b00010;
    localparam logic [4:0] P_LIT   = 5'b00011;
    localparam logic [4:0] P_T0    = 5'b00100;
    localparam logic [4:0] P_T1    = 5'b00101;
    localparam logic [4:0] P_T1CHK = 5'b01000;  // t1 taken: its CRC compare and s_tlast, registered
    localparam logic [4:0] P_WAIT  = 5'b01001;  // trailer good: wait for the last values to go out
    localparam logic [4:0] P_DRAIN = 5'b10000;  // error: discard words up to s_tlast

    // ---------------------------------------------------------------- input slice
    // Frame words enter a register slice together with flags computed from the word alone, so
    // every check below starts from flops. `hold` closes the input after a word with s_tlast
    // until the parse side has finished that frame (as before the slice, the next frame's
    // words wait for the previous frame's status). cfg_* are sampled with the frame's first
    // word (h0) as it is taken.
    localparam int IW = 32 + 7;
    logic          in_valid, in_last, in_zero, in_magic, in_version_ok, in_lmax_ok, in_range_ok;
    logic          in_gt_lmax;      // w > LMAX (meaningful for L words: LMAX is set at h1, before
                                    // any L word can enter the two-entry slice)
    logic [31:0]   w;               // the frame word the parse side sees
    logic          slice_ready, hold, at_h0, take_in;
    logic          p_ready;         // the parse side takes the slice's word this cycle if valid
    logic          check_n_r;
    logic [31:0]   expected_n_r;
    logic [31:0]   lmax;            // 2^LMAX_LOG2 of this frame (parse state, declared before
                                    // the slice's compare reads it)

    axis_skid_buffer #(.W(IW)) u_in (
        .clk     (clk),
        .rst     (rst),
        .s_tdata  ({s_tlast,
                   s_tdata == 32'd0,
                   s_tdata == gradblock_pkg::ZRLE_MAGIC,
                   s_tdata[7:0] == gradblock_pkg::ZRLE_VERSION,
                   (s_tdata[31:16] == 16'd0)
                       && (s_tdata[15:8] >= 8'(gradblock_pkg::ZRLE_LMAX_LOG2_MIN))
                       && (s_tdata[15:8] <= 8'(gradblock_pkg::ZRLE_LMAX_LOG2_MAX)),
                   !s_tdata[31] && (s_tdata[30:23] != 8'hFF) && (s_tdata != 32'd0),
                   s_tdata > lmax,
                   s_tdata}),
        .s_tvalid (s_tvalid && !hold),
        .s_tready (slice_ready),
        .m_tdata  ({in_last, in_zero, in_magic, in_version_ok, in_lmax_ok, in_range_ok, in_gt_lmax,
                   w}),
        .m_tvalid (in_valid),
        .m_tready (p_ready)
    );

    assign s_tready = slice_ready && !hold;
    assign take_in  = s_tvalid && s_tready;

    // ---------------------------------------------------------------- parse state
    logic [4:0]  p_state;
    logic [4:0]  hdr_oh;            // one-hot: which header word comes next
    logic [31:0] widx;              // index in the frame of the word being offered
    logic        n_mismatch;        // h3 != cfg_expected_n (decided at h4 when checked)
    logic [31:0] rem;               // values the tokens read so far leave to the frame (n - produced)
    logic        rem_zero;          // rem == 0
    logic [31:0] tok_z;
    logic        tok_z_zero;
    logic [31:0] rz;                // rem - z of the current token (mod 2^32)
    logic        z_over;            // z > rem
    logic        rz_nonzero;        // z != rem (so z < rem when !z_over)
    logic [31:0] lit_left;          // literals of the current token still to read
    logic        lit_last;          // lit_left == 1
    logic        prev_full;         // previous token had L = LMAX (or this is the first token)
    logic        zero_seen;         // a zero literal was read in this token
    logic [31:0] zero_at;           // frame index of that literal
    logic        t0_bad;
    logic        t1_bad, t1_last;   // t1 != CRC; t1 carried s_tlast
    logic [31:0] crc, crc_next_unused;

    logic        fire, act, parse_idle;
    logic [3:0]  chk_code;
    logic [31:0] chk_word;
    logic        in_frame;
    logic        queue_full, queue_empty;
    localparam int QW = RUN_OUT ? 34 : 33;
    logic        push;
    logic [QW-1:0] push_data;       // {[holds the n-th value, RUN_OUT only,] is_zero_run,
                                    //  value or run length}
    logic        push_last;         // this entry ends the frame's values
    logic        flush_q;           // a cycle after a failed word: clear the queue, hold the emit
                                    // side, report the error, send the parse side to drain (or idle)

    assign in_frame   = !p_state[4] && !p_state[3];     // HDR, Z, L, LIT, T0 or T1
    // flush_q: the previous word failed; the parse side pauses a cycle while it is unwound
    assign p_ready    = ((in_frame && !queue_full) || p_state[4]) && !flush_q;
    assign fire       = in_valid && p_ready;
    assign act        = fire || (p_state == P_T1CHK && !flush_q);   // the parse side decides
    assign parse_idle = (p_state == P_HDR) && hdr_oh[0];

    // checks of the word w (or, in P_T1CHK, of the registered t1 verdict), spec §3.5; every
    // operand is a register. Each check is its own flag and `bad` is their OR, so the flush
    // decision is a shallow OR; the priority order of spec §3.5 only chooses err_code/err_word.
    logic at_h0w, at_h1w, at_h4w, at_l, at_lit, at_t1, at_t1chk;
    logic e_magic, e_version, e_lmax, e_range, e_size;
    logic e_long, e_empty, e_split, e_overrun, e_early, e_zero_lit, e_t0, e_crc, e_extra, e_trunc;
    logic bad;

    assign at_h0w   = (p_state == P_HDR) && hdr_oh[0];
    assign at_h1w   = (p_state == P_HDR) && hdr_oh[1];
    assign at_h4w   = (p_state == P_HDR) && hdr_oh[4];
    assign at_l     = (p_state == P_L);
    assign at_lit   = (p_state == P_LIT);
    assign at_t1    = (p_state == P_T1);
    assign at_t1chk = (p_state == P_T1CHK);

    assign e_magic    = at_h0w && !in_magic;
    assign e_version  = at_h1w && !in_version_ok;
    assign e_lmax     = at_h1w && !in_lmax_ok;
    assign e_range    = at_h4w && !in_range_ok;
    assign e_size     = at_h4w && check_n_r && n_mismatch;
    assign e_long     = at_l && in_gt_lmax;
    assign e_empty    = at_l && tok_z_zero && in_zero;
    assign e_split    = at_l && tok_z_zero && !prev_full;
    assign e_overrun  = at_l && (z_over || w > rz);                 // z + L > n - produced
    assign e_early    = at_l && in_zero && rz_nonzero;              // L = 0 with z < n - produced
    assign e_zero_lit = at_lit && lit_last && (zero_seen || in_zero);
    assign e_t0       = at_t1 && t0_bad;
    assign e_crc      = at_t1chk && t1_bad;
    assign e_extra    = at_t1chk && !t1_last;                       // words follow the trailer
    assign e_trunc    = in_last && in_frame && !at_t1;               // the frame ends too early
    assign bad = e_magic || e_version || e_lmax || e_range || e_size || e_long || e_empty ||
                 e_split || e_overrun || e_early || e_zero_lit || e_t0 || e_crc || e_extra ||
                 e_trunc;

    // the error reported: the first failing check in the order of spec §3.5, decided a cycle
    // after the word from the registered flags (it is only needed for err_code/err_word)
    logic q_magic, q_version, q_lmax, q_range, q_size, q_long, q_empty, q_split, q_overrun;
    logic q_early, q_zero_lit, q_t0, q_crc, q_extra;
    logic [31:0] widx_q, zero_word_q;
    logic [31:0] widx_qm1, widx_qp1;    // widx_q - 1, widx_q + 1: err_word is a mux of registers

    always_ff @(posedge clk) begin
        {q_magic, q_version, q_lmax, q_range, q_size, q_long, q_empty, q_split, q_overrun}
            <= {e_magic, e_version, e_lmax, e_range, e_size, e_long, e_empty, e_split, e_overrun};
        {q_early, q_zero_lit, q_t0, q_crc, q_extra}
            <= {e_early, e_zero_lit, e_t0, e_crc, e_extra};
        widx_q      <= widx;
        widx_qm1    <= widx - 32'd1;
        widx_qp1    <= widx + 32'd1;
        zero_word_q <= zero_seen ? zero_at : widx;
    end

    always_comb begin
        chk_code = gradblock_pkg::FRAME_ERR_TRUNCATED;
        chk_word = widx_qp1;
        if (q_magic) begin
            chk_code = gradblock_pkg::FRAME_ERR_BAD_MAGIC;
            chk_word = widx_q;
        end else if (q_version) begin
            chk_code = gradblock_pkg::FRAME_ERR_BAD_VERSION;
            chk_word = widx_q;
        end else if (q_lmax) begin
            chk_code = gradblock_pkg::FRAME_ERR_BAD_LMAX;
            chk_word = widx_q;
        end else if (q_range) begin
            chk_code = gradblock_pkg::FRAME_ERR_BAD_RANGE;
            chk_word = widx_q;
        end else if (q_size) begin
            chk_code = gradblock_pkg::FRAME_ERR_SIZE_MISMATCH;
            chk_word = 32'd3;
        end else if (q_long) begin
            chk_code = gradblock_pkg::FRAME_ERR_LITERAL_RUN_TOO_LONG;
            chk_word = widx_q;                  // errors about L itself name the L word ...
        end else if (q_empty) begin
            chk_code = gradblock_pkg::FRAME_ERR_EMPTY_TOKEN;
            chk_word = widx_qm1;          // ... other token errors the z word
        end else if (q_split) begin
            chk_code = gradblock_pkg::FRAME_ERR_SPLIT_LITERAL_RUN;
            chk_word = widx_qm1;
        end else if (q_overrun) begin
            chk_code = gradblock_pkg::FRAME_ERR_OVERRUN;
            chk_word = widx_qm1;
        end else if (q_early) begin
            chk_code = gradblock_pkg::FRAME_ERR_EARLY_ZERO_LENGTH;
            chk_word = widx_q;
        end else if (q_zero_lit) begin
            chk_code = gradblock_pkg::FRAME_ERR_ZERO_LITERAL;
            chk_word = zero_word_q;
        end else if (q_t0) begin
            chk_code = gradblock_pkg::FRAME_ERR_TOKEN_COUNT_MISMATCH;
            chk_word = widx_qm1;
        end else if (q_crc) begin             // widx_q has moved past t1
            chk_code = gradblock_pkg::FRAME_ERR_CRC_MISMATCH;
            chk_word = widx_qm1;
        end else if (q_extra) begin
            chk_word = widx_q;                  // TRUNCATED: index of the first extra word
        end
        // otherwise e_trunc: TRUNCATED, index of the first missing word
    end

    // queue entries: a token's run and each literal. They are pushed before the word's checks
    // are known (the checks end at flush_q, a register): an entry of a failing word is in the
    // queue for one cycle, in which flush_q holds the emit side, and the queue clear drops it.
    assign push      = fire && ((at_l && !tok_z_zero) || (at_lit && !in_zero && !zero_seen));
    // a run ends the values when its token has L = 0 and z = rem; a literal when it is its
    // token's last and the token leaves nothing (rem_zero was set at the L word)
    assign push_last = at_l ? (in_zero && !rz_nonzero) : (lit_last && rem_zero);
    if (RUN_OUT) begin : g_push
        assign push_data = at_l ? {push_last, 1'b1, tok_z} : {push_last, 1'b0, w};
    end else begin : g_push
        logic unused_push_last;
        assign unused_push_last = push_last;
        assign push_data = at_l ? {1'b1, tok_z} : {1'b0, w};
    end

    // ---------------------------------------------------------------- queue and emit side
    logic        flush;             // the word (or t1 verdict) fails
    logic        flush_last;        // the word (or t1) that flush judged carried s_tlast
    logic        hdr_pend;          // h4 was taken last cycle: hdr_valid unless it failed
    logic        pop;
    logic [QW-1:0] head;
    logic [31:0] run_left;          // zeros still to emit from the current run entry
    logic        run_active;        // run_left != 0
    logic [31:0] emit_left;         // values of the frame not yet emitted
    logic        emit_last;         // emit_left == 1: the next value is the n-th
    logic        out_ready, emit, emit_idle;
    logic [31:0] emit_word;

    assign flush = act && bad;

    sync_fifo #(.W(QW), .AW(QUEUE_AW)) u_queue (
        .clk     (clk),
        .rst     (rst),
        .clear   (flush_q),
        .push    (push),
        .wr_data (push_data),
        .pop     (pop),
        .rd_data (head),
        .full    (queue_full),
        .empty   (queue_empty)
    );

    if (RUN_OUT) begin : g_emit
        // one beat per queue entry: a run goes out whole (run_left/run_active stay idle)
        logic unused_emit;
        assign unused_emit = ^{emit_last, emit_left, run_left};
        assign emit      = out_ready && !queue_empty && !flush_q;
        assign pop       = emit;
        assign emit_word = head[32] ? 32'd0 : head[31:0];
        assign emit_idle = queue_empty;

        axis_skid_buffer #(.W(65)) u_out (
            .clk     (clk),
            .rst     (rst),
            .s_tdata  ({head[33], head[32] ? head[31:0] : 32'd1, emit_word}),
            .s_tvalid (emit),
            .s_tready (out_ready),
            .m_tdata  ({m_tlast, m_tcount, m_tdata}),
            .m_tvalid (m_tvalid),
            .m_tready (m_tready)
        );
    end else begin : g_emit
        assign emit      = out_ready && (run_active || !queue_empty) && !flush_q;
        assign pop       = out_ready && !run_active && !queue_empty && !flush_q;
        assign emit_word = (run_active || head[32]) ? 32'd0 : head[31:0];
        assign emit_idle = !run_active && queue_empty;
        assign m_tcount  = 32'd1;

        axis_skid_buffer #(.W(33)) u_out (
            .clk     (clk),
            .rst     (rst),
            .s_tdata  ({emit_last, emit_word}),
            .s_tvalid (emit),
            .s_tready (out_ready),
            .m_tdata  ({m_tlast, m_tdata}),
            .m_tvalid (m_tvalid),
            .m_tready (m_tready)
        );
    end

    // the CRC absorbs h0 .. t0 from the input slice (registered word)
    crc32_word u_crc (
        .clk      (clk),
        .rst      (rst),
        .init     (fire && at_h0w),
        .en       (fire && in_frame && p_state != P_T1),
        .data     (w),
        .crc      (crc),
        .crc_next (crc_next_unused)
    );

    // ---------------------------------------------------------------- sequential logic
    always_ff @(posedge clk) begin
        done      <= 1'b0;
        err_valid <= 1'b0;
        hdr_valid <= 1'b0;
        if (rst) begin
            hold           <= 1'b0;
            at_h0          <= 1'b1;
            check_n_r      <= 1'b0;
            expected_n_r   <= 32'd0;
            p_state        <= P_HDR;
            hdr_oh         <= 5'b00001;
            widx           <= 32'd0;
            lmax           <= 32'd2;
            n_mismatch     <= 1'b0;
            rem            <= 32'd0;
            rem_zero       <= 1'b1;
            tok_z          <= 32'd0;
            tok_z_zero     <= 1'b1;
            rz             <= 32'd0;
            z_over         <= 1'b0;
            rz_nonzero     <= 1'b0;
            lit_left       <= 32'd0;
            lit_last       <= 1'b0;
            prev_full      <= 1'b1;
            zero_seen      <= 1'b0;
            zero_at        <= 32'd0;
            t0_bad         <= 1'b0;
            t1_bad         <= 1'b0;
            t1_last        <= 1'b0;
            run_left       <= 32'd0;
            run_active     <= 1'b0;
            emit_left      <= 32'd0;
            emit_last      <= 1'b0;
            hdr_layer_id   <= 32'd0;
            hdr_n          <= 32'd0;
            hdr_range_bits <= 32'd0;
            hdr_lmax_log2  <= 5'd0;
            err_code       <= gradblock_pkg::FRAME_OK;
            err_word       <= 32'd0;
            token_count    <= 32'd0;
            flush_q        <= 1'b0;
            flush_last     <= 1'b0;
            hdr_pend       <= 1'b0;
        end else begin
            // ---- input side
            if (take_in) begin
                at_h0 <= s_tlast;
                if (at_h0) begin
                    check_n_r    <= cfg_check_n;
                    expected_n_r <= cfg_expected_n;
                end
            end
            if (take_in && s_tlast)            hold <= 1'b1;
            else if (parse_idle && !in_valid)  hold <= 1'b0;

            // ---- emit side
            if (flush_q) begin
                run_active <= 1'b0;
            end else if (emit) begin
                if (run_active) begin
                    run_left   <= run_left - 32'd1;
                    run_active <= (run_left != 32'd1);
                end else if (!RUN_OUT && head[32]) begin
                    run_left   <= head[31:0] - 32'd1;
                    run_active <= (head[31:0] != 32'd1);
                end
            end
            if (emit) begin
                emit_left <= emit_left - 32'd1;
                emit_last <= (emit_left == 32'd2);
            end

            // ---- parse side
            // The checks of a word end in one register, flush_q: nothing else waits for them.
            // The parse registers below follow every word taken, failing or not, and a failing
            // word's queue entry is pushed; the cycle after (flush_q) the parse side takes no
            // word, the emit side pops nothing, the queue is cleared, the run dropped, err_*
            // reported and p_state sent to drain (or idle when the frame has ended). A frame
            // that fails is parsed no further, and the next one starts over from h0.
            flush_q    <= flush;
            flush_last <= (p_state == P_T1CHK) ? t1_last : in_last;
            hdr_pend   <= fire && at_h4w;
            hdr_valid  <= hdr_pend && !flush_q;
            if (flush_q) begin
                err_valid <= 1'b1;
                err_code  <= chk_code;
                err_word  <= chk_word;
                widx      <= 32'd0;
            end else if (fire) begin
                // index of the next word; the words drained after an error do not count
                widx <= (p_state == P_DRAIN) ? 32'd0 : widx + 32'd1;
            end
            if (p_state == P_T1CHK) begin
                p_state <= P_WAIT;
            end else if (fire) begin
                case (p_state)
                    P_HDR: begin
                        hdr_oh <= {hdr_oh[3:0], 1'b0};
                        if (hdr_oh[0]) begin
                            prev_full   <= 1'b1;
                            t0_bad      <= 1'b0;
                            token_count <= 32'd0;
                            err_code    <= gradblock_pkg::FRAME_OK;
                            err_word    <= 32'd0;
                        end else if (hdr_oh[1]) begin
                            hdr_lmax_log2 <= w[12:8];
                            lmax          <= 32'd1 << w[12:8];
                        end else if (hdr_oh[2]) begin
                            hdr_layer_id <= w;
                        end else if (hdr_oh[3]) begin
                            hdr_n      <= w;
                            rem        <= w;
                            rem_zero   <= in_zero;
                            emit_left  <= w;
                            emit_last  <= (w == 32'd1);
                            n_mismatch <= (w != expected_n_r);
                        end else begin
                            hdr_range_bits <= w;
                            hdr_oh         <= 5'b00001;
                            p_state        <= rem_zero ? P_T0 : P_Z;
                        end
                    end
                    P_Z: begin
                        tok_z      <= w;
                        tok_z_zero <= in_zero;
                        {z_over, rz} <= {1'b0, rem} - {1'b0, w};
                        rz_nonzero <= (w != rem);
                        p_state    <= P_L;
                    end
                    P_L: begin
                        rem         <= rz - w;
                        rem_zero    <= (rz == w);
                        prev_full   <= (w == lmax);
                        token_count <= token_count + 32'd1;
                        lit_left    <= w;
                        lit_last    <= (w == 32'd1);
                        zero_seen   <= 1'b0;
                        // L = 0 passed EARLY_ZERO_LENGTH, so it ends the payload
                        p_state     <= in_zero ? P_T0 : P_LIT;
                    end
                    P_LIT: begin
                        lit_left <= lit_left - 32'd1;
                        lit_last <= (lit_left == 32'd2);
                        if (in_zero && !zero_seen) begin
                            zero_seen <= 1'b1;
                            zero_at   <= widx;
                        end
                        if (lit_last) p_state <= rem_zero ? P_T0 : P_Z;
                    end
                    P_T0: begin
                        t0_bad  <= (w != token_count);
                        p_state <= P_T1;
                    end
                    P_T1: begin
                        // the CRC has absorbed t0: compare now, decide next cycle
                        t1_bad  <= (w != crc);
                        t1_last <= in_last;
                        p_state <= P_T1CHK;
                    end
                    P_DRAIN: begin
                        if (in_last) p_state <= P_HDR;
                    end
                    default: ;
                endcase
            end
            if (p_state == P_WAIT && emit_idle && !flush_q) begin
                done    <= 1'b1;
                p_state <= P_HDR;
                widx    <= 32'd0;
            end
            if (flush_q) begin
                p_state <= flush_last ? P_HDR : P_DRAIN;
                hdr_oh  <= 5'b00001;
            end
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // m_tvalid: a word offered stays offered, unchanged, until m_tready takes it
    logic                         chk_m_stall;
    logic [64:0]              chk_m_word;
    initial chk_m_stall = 1'b0;
    always @(posedge clk) begin
        chk_m_stall <= !rst && m_tvalid && !m_tready;
        chk_m_word  <= {m_tdata, m_tlast, m_tcount};
        if (!rst && chk_m_stall) assert (m_tvalid && {m_tdata, m_tlast, m_tcount} == chk_m_word);
    end
    // an error is reported with a frame error code (gradblock_pkg::FRAME_ERR_*), never FRAME_OK
    always @(posedge clk) begin
        if (!rst && err_valid) assert (err_code != 4'(gradblock_pkg::FRAME_OK));
    end
`endif
endmodule

`resetall
