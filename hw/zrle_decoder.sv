// ZRLE v1 streaming decoder (docs/spec.md §3): frame words in (s_tlast on the frame's last word),
// the layer's int32 values out (exactly n on success, m_tlast on the n-th, never more than n),
// and a status report per frame.
//
// Structure
//   parse side  takes one frame word per cycle and runs the checks of spec §3.5 in their order.
//               A valid token becomes queue entries: one "zero run of z" entry (if z > 0) and one
//               entry per literal.
//   emit side   pops the queue and writes one value per cycle into an axis_skid_buffer; a zero
//               run entry is expanded there, so runs cost no input words and the parse side can
//               read ahead (the next token's z, L, literals) while zeros go out.
//   s_tready depends on registers only (state and queue fullness), never on m_tready.
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
// cfg_check_n / cfg_expected_n are sampled with the frame's first word (h0).
// hdr_valid pulses once the header has passed its checks; the hdr_* outputs hold the header
// fields until the next frame starts. token_count holds the tokens read so far in the frame.
module zrle_decoder #(
    parameter int QUEUE_AW = 4          // 2^QUEUE_AW queue entries between parse and emit
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

    localparam logic [2:0] P_HDR   = 3'd0;  // header word hdr_idx (idle = waiting for h0)
    localparam logic [2:0] P_Z     = 3'd1;
    localparam logic [2:0] P_L     = 3'd2;
    localparam logic [2:0] P_LIT   = 3'd3;
    localparam logic [2:0] P_T0    = 3'd4;
    localparam logic [2:0] P_T1    = 3'd5;
    localparam logic [2:0] P_WAIT  = 3'd6;  // trailer good: wait for the last values to go out
    localparam logic [2:0] P_DRAIN = 3'd7;  // error: discard words up to s_tlast

    // ---------------------------------------------------------------- parse state
    logic [2:0]  p_state;
    logic [2:0]  hdr_idx;
    logic [31:0] widx;              // index in the frame of the word being offered
    logic        check_n_r;
    logic [31:0] expected_n_r;
    logic [31:0] lmax;              // 2^LMAX_LOG2 of this frame
    logic [31:0] produced;          // values covered by the tokens accepted so far
    logic [31:0] tok_z;
    logic [31:0] lit_left;          // literals of the current token still to read
    logic        prev_full;         // previous token had L = LMAX (or this is the first token)
    logic        zero_seen;         // a zero literal was read in this token
    logic [31:0] zero_at;           // frame index of that literal
    logic        t0_bad;
    logic [31:0] crc;

    logic        fire;
    logic [31:0] w;
    logic [3:0]  chk_code;
    logic [31:0] chk_word;
    logic [31:0] remaining;
    logic [32:0] z_plus_l;
    logic        version_ok, range_ok, lmax_ok;
    logic        in_frame;
    logic        queue_full, queue_empty;
    logic        push;
    logic [32:0] push_data;         // {is_zero_run, value or run length}

    assign w         = s_tdata;
    assign in_frame  = (p_state == P_HDR) || (p_state == P_Z) || (p_state == P_L) ||
                       (p_state == P_LIT) || (p_state == P_T0) || (p_state == P_T1);
    assign s_tready  = (in_frame && !queue_full) || (p_state == P_DRAIN);
    assign fire      = s_tvalid && s_tready;
    assign remaining = hdr_n - produced;
    assign z_plus_l  = {1'b0, tok_z} + {1'b0, w};
    assign version_ok = (w[7:0] == gradblock_pkg::ZRLE_VERSION);
    assign range_ok  = !w[31] && (w[30:23] != 8'hFF) && (w != 32'd0);
    assign lmax_ok   = (w[31:16] == 16'd0) && (w[15:8] >= 8'(gradblock_pkg::ZRLE_LMAX_LOG2_MIN))
                       && (w[15:8] <= 8'(gradblock_pkg::ZRLE_LMAX_LOG2_MAX));

    // checks of the word on s_tdata, in the order of spec §3.5
    always_comb begin
        chk_code = gradblock_pkg::FRAME_OK;
        chk_word = widx;
        case (p_state)
            P_HDR: begin
                case (hdr_idx)
                    3'd0: begin
                        if (w != gradblock_pkg::ZRLE_MAGIC)
                            chk_code = gradblock_pkg::FRAME_ERR_BAD_MAGIC;
                    end
                    3'd1: begin
                        if (!version_ok)     chk_code = gradblock_pkg::FRAME_ERR_BAD_VERSION;
                        else if (!lmax_ok)   chk_code = gradblock_pkg::FRAME_ERR_BAD_LMAX;
                    end
                    3'd4: begin
                        if (!range_ok) begin
                            chk_code = gradblock_pkg::FRAME_ERR_BAD_RANGE;
                        end else if (check_n_r && (hdr_n != expected_n_r)) begin
                            chk_code = gradblock_pkg::FRAME_ERR_SIZE_MISMATCH;
                            chk_word = 32'd3;
                        end
                    end
                    default: ;
                endcase
            end
            P_L: begin
                chk_word = widx - 32'd1;      // token errors name the z word ...
                if (w > lmax) begin
                    chk_code = gradblock_pkg::FRAME_ERR_LITERAL_RUN_TOO_LONG;
                    chk_word = widx;          // ... except those about L itself
                end else if (tok_z == 32'd0 && w == 32'd0) begin
                    chk_code = gradblock_pkg::FRAME_ERR_EMPTY_TOKEN;
                end else if (tok_z == 32'd0 && !prev_full) begin
                    chk_code = gradblock_pkg::FRAME_ERR_SPLIT_LITERAL_RUN;
                end else if (z_plus_l > {1'b0, remaining}) begin
                    chk_code = gradblock_pkg::FRAME_ERR_OVERRUN;
                end else if (w == 32'd0 && tok_z < remaining) begin
                    chk_code = gradblock_pkg::FRAME_ERR_EARLY_ZERO_LENGTH;
                    chk_word = widx;
                end
            end
            P_LIT: begin
                if (lit_left == 32'd1 && (zero_seen || w == 32'd0)) begin
                    chk_code = gradblock_pkg::FRAME_ERR_ZERO_LITERAL;
                    chk_word = zero_seen ? zero_at : widx;
                end
            end
            P_T1: begin
                if (t0_bad) begin
                    chk_code = gradblock_pkg::FRAME_ERR_TOKEN_COUNT_MISMATCH;
                    chk_word = widx - 32'd1;
                end else if (w != crc) begin
                    chk_code = gradblock_pkg::FRAME_ERR_CRC_MISMATCH;
                end else if (!s_tlast) begin
                    chk_code = gradblock_pkg::FRAME_ERR_TRUNCATED;   // words follow the trailer
                    chk_word = widx + 32'd1;
                end
            end
            default: ;
        endcase
        // the frame ends here but needs more words
        if (chk_code == gradblock_pkg::FRAME_OK && s_tlast && in_frame
            && p_state != P_T1) begin
            chk_code = gradblock_pkg::FRAME_ERR_TRUNCATED;
            chk_word = widx + 32'd1;
        end
    end

    // queue entries for a token that passed its checks, and for each literal
    always_comb begin
        push      = 1'b0;
        push_data = 33'd0;
        if (fire && chk_code == gradblock_pkg::FRAME_OK) begin
            if (p_state == P_L && tok_z != 32'd0) begin
                push      = 1'b1;
                push_data = {1'b1, tok_z};
            end else if (p_state == P_LIT && w != 32'd0 && !zero_seen) begin
                push      = 1'b1;
                push_data = {1'b0, w};
            end
        end
    end

    // ---------------------------------------------------------------- queue and emit side
    logic        flush;
    logic        pop;
    logic [32:0] head;
    logic [31:0] run_left;          // zeros still to emit from the current run entry
    logic [31:0] emitted;
    logic        out_ready, emit, emit_idle;
    logic [31:0] emit_word;

    assign flush = fire && (chk_code != gradblock_pkg::FRAME_OK);

    sync_fifo #(.W(33), .AW(QUEUE_AW)) u_queue (
        .clk     (clk),
        .rst     (rst),
        .clear   (flush),
        .push    (push),
        .wr_data (push_data),
        .pop     (pop),
        .rd_data (head),
        .full    (queue_full),
        .empty   (queue_empty)
    );

    assign emit      = out_ready && (run_left != 32'd0 || !queue_empty);
    assign pop       = out_ready && (run_left == 32'd0) && !queue_empty;
    assign emit_word = (run_left != 32'd0 || head[32]) ? 32'd0 : head[31:0];
    assign emit_idle = (run_left == 32'd0) && queue_empty;

    axis_skid_buffer #(.W(33)) u_out (
        .clk     (clk),
        .rst     (rst),
        .s_data  ({emitted + 32'd1 == hdr_n, emit_word}),
        .s_valid (emit),
        .s_ready (out_ready),
        .m_data  ({m_tlast, m_tdata}),
        .m_valid (m_tvalid),
        .m_ready (m_tready)
    );

    crc32_word u_crc (
        .clk  (clk),
        .rst  (rst),
        .init (fire && p_state == P_HDR && hdr_idx == 3'd0),
        .en   (fire && in_frame && p_state != P_T1),
        .data (w),
        .crc  (crc)
    );

    // ---------------------------------------------------------------- sequential logic
    always_ff @(posedge clk) begin
        done      <= 1'b0;
        err_valid <= 1'b0;
        hdr_valid <= 1'b0;
        if (rst) begin
            p_state        <= P_HDR;
            hdr_idx        <= 3'd0;
            widx           <= 32'd0;
            check_n_r      <= 1'b0;
            expected_n_r   <= 32'd0;
            lmax           <= 32'd2;
            produced       <= 32'd0;
            tok_z          <= 32'd0;
            lit_left       <= 32'd0;
            prev_full      <= 1'b1;
            zero_seen      <= 1'b0;
            zero_at        <= 32'd0;
            t0_bad         <= 1'b0;
            run_left       <= 32'd0;
            emitted        <= 32'd0;
            hdr_layer_id   <= 32'd0;
            hdr_n          <= 32'd0;
            hdr_range_bits <= 32'd0;
            hdr_lmax_log2  <= 5'd0;
            err_code       <= gradblock_pkg::FRAME_OK;
            err_word       <= 32'd0;
            token_count    <= 32'd0;
        end else begin
            // ---- emit side
            if (flush) begin
                run_left <= 32'd0;
            end else if (emit) begin
                if (run_left != 32'd0) run_left <= run_left - 32'd1;
                else if (head[32])     run_left <= head[31:0] - 32'd1;
            end
            if (emit) emitted <= emitted + 32'd1;

            // ---- parse side
            if (fire) begin
                // index of the next word; the words drained after an error do not count
                widx <= (p_state == P_DRAIN) ? 32'd0 : widx + 32'd1;
                if (flush) begin
                    err_valid <= 1'b1;
                    err_code  <= chk_code;
                    err_word  <= chk_word;
                    p_state   <= s_tlast ? P_HDR : P_DRAIN;
                    hdr_idx   <= 3'd0;
                    widx      <= 32'd0;
                end else begin
                    case (p_state)
                        P_HDR: begin
                            hdr_idx <= hdr_idx + 3'd1;
                            case (hdr_idx)
                                3'd0: begin
                                    check_n_r    <= cfg_check_n;
                                    expected_n_r <= cfg_expected_n;
                                    produced     <= 32'd0;
                                    prev_full    <= 1'b1;
                                    t0_bad       <= 1'b0;
                                    token_count  <= 32'd0;
                                    emitted      <= 32'd0;
                                    err_code     <= gradblock_pkg::FRAME_OK;
                                    err_word     <= 32'd0;
                                end
                                3'd1: begin
                                    hdr_lmax_log2 <= w[12:8];
                                    lmax          <= 32'd1 << w[12:8];
                                end
                                3'd2: hdr_layer_id <= w;
                                3'd3: hdr_n        <= w;
                                default: begin
                                    hdr_range_bits <= w;
                                    hdr_valid      <= 1'b1;
                                    hdr_idx        <= 3'd0;
                                    p_state        <= (hdr_n == 32'd0) ? P_T0 : P_Z;
                                end
                            endcase
                        end
                        P_Z: begin
                            tok_z   <= w;
                            p_state <= P_L;
                        end
                        P_L: begin
                            produced    <= produced + z_plus_l[31:0];
                            prev_full   <= (w == lmax);
                            token_count <= token_count + 32'd1;
                            lit_left    <= w;
                            zero_seen   <= 1'b0;
                            // L = 0 passed EARLY_ZERO_LENGTH, so it ends the payload
                            p_state     <= (w == 32'd0) ? P_T0 : P_LIT;
                        end
                        P_LIT: begin
                            lit_left <= lit_left - 32'd1;
                            if (w == 32'd0 && !zero_seen) begin
                                zero_seen <= 1'b1;
                                zero_at   <= widx;
                            end
                            if (lit_left == 32'd1) p_state <= (produced == hdr_n) ? P_T0 : P_Z;
                        end
                        P_T0: begin
                            t0_bad  <= (w != token_count);
                            p_state <= P_T1;
                        end
                        P_T1: begin
                            p_state <= P_WAIT;
                        end
                        P_DRAIN: begin
                            if (s_tlast) p_state <= P_HDR;
                        end
                        default: ;
                    endcase
                end
            end

            if (p_state == P_WAIT && emit_idle) begin
                done    <= 1'b1;
                p_state <= P_HDR;
                widx    <= 32'd0;
            end
        end
    end
endmodule
