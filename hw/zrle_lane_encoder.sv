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
// Structure
//   input       an axis_skid_buffer (s_tready from registers: no path from the fill side's
//               decisions to the source), the words still to take counted as beats enter it.
//   fill side   a one-beat input register. Each cycle it takes the beat's words up to and
//               including the next token boundary (a zero after literals, the LMAX-th literal)
//               or to the beat's end: in that span the zeros come first and the literals form
//               one contiguous lane range, which is rotated into a W-bank literal ring at its
//               write pointer; a token closed there enters the token queue. So a beat costs one
//               cycle plus one per token that closes inside it before its last lane (a zero-run
//               beat: one cycle). When the payload has ended, one more cycle queues the last
//               token (the open literals, or the trailing zeros as (z, 0)).
//   drain side  emits chunks of up to W words: the header (ceil(5/W) cycles), per token z, L and
//               the first W-2 literals in one cycle (W = 1: z and L one cycle each), then W
//               literals a cycle read from the ring at any alignment (the banks' rows are picked
//               per bank and the words rotated down); a token's last literal cycle, when it has
//               at most W-2 literals, also carries the next queued token's z, L and first
//               literals (a token leaves the queue as it starts, so the queue's head is the
//               next one); then t0 and t1, a cycle each.
//   chunk reg   the chunk is registered; the CRC (crc32_lanes) absorbs each chunk as it leaves
//               the register, so t1 (chunk after t0) is the CRC's crc_next in that cycle.
//   packer      lane_packer turns the chunks into dense beats behind a skid buffer, so no path
//               runs from m_tready to s_tready or cfg_ready.
//
// Throughput (docs/hw.md, "zrle_lane_encoder"): one input beat a cycle while no token closes
// before the beat's last lane, at most one token closing a cycle (the bound when many tokens
// close in one beat: short runs, small LMAX); out, W words a cycle while long tokens follow
// each other (a short or first token's cycle carries z, L and at most W-2 literals): on a
// dense payload with LMAX = 256, 0.99-1.0 W words a cycle at W = 4 and 16.
//
// Buffering: L precedes the literals, so a token cannot leave before it closes. The ring holds
// max(2 x 2^LMAX_LOG2_MAX, 64, 4W) literals (one token drains while the next fills; always
// LMAX + W or more, so the open token can never block the input for good) and the queue
// 2^TOKEN_QUEUE_AW tokens. The input waits while fewer than W ring slots are free or a token
// must close into a full queue.
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
    localparam int TW   = 32 + LW;                      // token queue entry {z, L}
    localparam int FIRST_MAX = (W > 2) ? W - 2 : 0;     // literals beside a token's z, L

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
    logic [RW:0]     wp, rp;                 // absolute write / read positions (one extra bit)
    logic [RW:0]     ring_used;
    logic            ring_low;               // fewer than W slots free: the input waits
    logic [PW-1:0]   wr_n;                   // literals written this cycle
    logic [PW-1:0]   wr_lane;                // input lane of the first of them
    logic [32*W-1:0] wr_rot;                 // input words rotated to their banks
    logic [W-1:0]    bank_we;
    // flat vectors, bank b's row in bits [DW*b +: DW]: yosys 0.23 turns unpacked arrays into
    // registers with a warning and has no packed 2-D arrays
    logic [DW*W-1:0] bank_wrow;
    logic [DW*W-1:0] bank_rrow;
    logic [32*W-1:0] rd_bank;                // each bank's word at its read row
    logic [32*W-1:0] litv;                   // the ring's words at rp, rp+1, ..., rp+W-1
    logic [PW-1:0]   rd_n;                   // literals read out this cycle
    logic            step;                   // the fill side takes a span this cycle

    logic            q_push, q_pop, q_full, q_empty;
    logic [TW-1:0]   q_wdata, q_head;
    logic [31:0]     head_z;
    logic [LW-1:0]   head_len;

    assign ring_used = wp - rp;
    assign ring_low  = 32'(ring_used) > RING - W;
    assign head_z    = q_head[TW-1:LW];
    assign head_len  = q_head[LW-1:0];

    sync_fifo #(.W(TW), .AW(TOKEN_QUEUE_AW)) u_tokens (
        .clk     (clk),
        .rst     (rst),
        .clear   (cfg_take),
        .push    (q_push),
        .wr_data (q_wdata),
        .pop     (q_pop),
        .rd_data (q_head),
        .full    (q_full),
        .empty   (q_empty)
    );

    // write: input lane wr_lane + o goes to ring position wp + o (o < wr_n)
    logic [64*W-1:0] in_dbl, rd_dbl;
    int rg_wlo, rg_wrow, rg_rlo, rg_rrow, rg_sh;
    always_comb begin
        rg_wlo  = 32'(wp) & (W - 1);
        rg_wrow = 32'(wp) >> LOGW;
        rg_rlo  = 32'(rp) & (W - 1);
        rg_rrow = 32'(rp) >> LOGW;
        rg_sh   = (32'(wr_lane) - rg_wlo) & (W - 1);
        wr_rot = in_dbl[32*rg_sh +: 32*W];       // bank b gets input lane (b + rg_sh) mod W
        for (int b = 0; b < W; b++) begin
            bank_we[b]   = step && (((b - rg_wlo) & (W - 1)) < 32'(wr_n));
            bank_wrow[DW*b +: DW] = DW'(rg_wrow + ((b < rg_wlo) ? 1 : 0));
            bank_rrow[DW*b +: DW] = DW'(rg_rrow + ((b < rg_rlo) ? 1 : 0));
        end
        litv = rd_dbl[32*rg_rlo +: 32*W];        // lane l is bank (rg_rlo + l) mod W
    end

    for (genvar b = 0; b < W; b++) begin : g_bank
        logic [31:0] mem [1 << DW];
        always_ff @(posedge clk) begin
            if (bank_we[b]) mem[bank_wrow[DW*b +: DW]] <= wr_rot[32*b +: 32];
        end
        assign rd_bank[32*b +: 32] = mem[bank_rrow[DW*b +: DW]];
    end
    assign rd_dbl = {rd_bank, rd_bank};

    // ---------------------------------------------------------------- fill side
    logic [1:0]      in_state;
    logic [31:0]     in_left;                // payload words still to take
    logic            in_more;                // in_left != 0
    logic            in_full, in_zero, in_last;
    logic [32*W-1:0] in_data;
    logic [W-1:0]    in_nz;                  // lane != 0, decided as the beat arrived
    logic [31:0]     in_run;                 // zeros a zero-run beat stands for
    logic [PW-1:0]   in_pos, in_hi;          // lanes in_pos .. in_hi-1 still to take
    logic [31:0]     zrun;                   // zeros since the last literal
    logic [31:0]     open_z;                 // z of the open token
    logic [LW-1:0]   lit_cnt;                // literals of the open token (0: none open)
    logic            lit_open;               // lit_cnt != 0

    // this cycle's span of a payload beat
    logic [PW-1:0]   f_a, f_next;            // first literal, next position
    logic [LW-1:0]   f_room;                 // LMAX - lit_cnt
    logic            f_lmax_close, f_zero_close, f_closes;
    logic [31:0]     f_tok_z;
    logic [LW-1:0]   f_tok_l;
    logic            step_z, tail, beat_done, consumed;
    logic            accept, take;           // a beat enters the skid; one leaves it
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

    assign in_dbl = {in_data, in_data};

    int fl_a, fl_e, fl_pos, fl_hi, fl_run, fl_room;
    logic fl_found;
    always_comb begin
        fl_pos = 32'(in_pos);
        fl_hi  = 32'(in_hi);
        // first nonzero kept lane at or after the position
        fl_a = fl_hi;
        fl_found = 1'b0;
        for (int l = 0; l < W; l++) begin
            if (!fl_found && l >= fl_pos && l < fl_hi && in_nz[l]) begin
                fl_a = l;
                fl_found = 1'b1;
            end
        end
        if (lit_open) fl_a = fl_pos;             // an open token takes literals from there on
        // first zero at or after fl_a
        fl_e = fl_hi;
        fl_found = 1'b0;
        for (int l = 0; l < W; l++) begin
            if (!fl_found && l >= fl_a && l < fl_hi && !in_nz[l]) begin
                fl_e = l;
                fl_found = 1'b1;
            end
        end
        fl_run  = fl_e - fl_a;
        fl_room = 32'(f_room);
        f_a = PW'(fl_a);
        f_lmax_close = (fl_run >= fl_room);
        f_zero_close = !f_lmax_close && (fl_e < fl_hi);
        if (f_lmax_close)      f_next = PW'(fl_a + fl_room);
        else if (f_zero_close) f_next = PW'(fl_e + 1);
        else                   f_next = PW'(fl_hi);
        wr_n    = f_lmax_close ? PW'(fl_room) : PW'(fl_run);
        f_tok_l = lit_cnt + LW'(f_lmax_close ? fl_room : fl_run);
        f_tok_z = lit_open ? open_z : zrun + 32'(fl_a - fl_pos);
    end
    assign f_room   = lmax - lit_cnt;
    assign f_closes = f_lmax_close || f_zero_close;
    assign wr_lane  = f_a;

    assign step      = (in_state == IN_RUN) && in_full && !in_zero
                       && !ring_low && !(f_closes && q_full);
    assign step_z    = (in_state == IN_RUN) && in_full && in_zero && !(lit_open && q_full);
    assign beat_done = (f_next == in_hi);
    assign consumed  = (step && beat_done) || step_z;
    assign tail      = (in_state == IN_TAIL) && !q_full;
    // The input passes a skid buffer, so s_tready comes from registers (the fill side's long
    // decision only pulls from the skid); the word count, the last flag and the lanes' != 0
    // are settled as a beat enters it.
    assign s_tready  = (in_state == IN_RUN) && in_more && sk_ready;
    assign accept    = s_tvalid && s_tready;
    assign take      = sk_valid && (!in_full || consumed);

    axis_skid_buffer #(.W(IW)) u_in (
        .clk      (clk),
        .rst      (rst),
        .s_tdata  ({(take_count == in_left), take_hi, take_lo, s_tcount, s_tzero, take_nz,
                    s_tdata}),
        .s_tvalid (accept),
        .s_tready (sk_ready),
        .m_tdata  (sk_out),
        .m_tvalid (sk_valid),
        .m_tready (!in_full || consumed)
    );
    assign {sk_last, sk_hi, sk_lo, sk_count, sk_zero, sk_nz, sk_data} = sk_out;

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

    assign q_push  = (step && f_closes) || (step_z && lit_open)
                     || (tail && (lit_open || zrun != 32'd0));
    assign q_wdata = step ? {f_tok_z, f_tok_l}
                   : lit_open ? {open_z, lit_cnt}
                   : {zrun, LW'(0)};

    // ---------------------------------------------------------------- drain side
    logic [2:0]      d_state;
    logic [2:0]      hdr_idx;
    logic [LW-1:0]   lit_rem;
    logic [31:0]     tok_count;
    logic [32*5-1:0] hdr_w;             // the header words, flat as above
    logic            ck_valid, ck_last, ck_ready, pk_ready, pk_take;
    logic [32*W-1:0] ck_data;
    logic [PW-1:0]   ck_cnt;
    logic            produce, p_last;
    logic [32*W-1:0] p_data;
    logic [PW-1:0]   p_cnt;
    logic [2:0]      d_next;
    logic [LW-1:0]   lit_rem_next;
    logic            tok_start;              // a token's z goes out this cycle
    logic            trailer_now;
    logic [31:0]     crc_next, crc_unused;

    assign hdr_w[0 +: 32]   = gradblock_pkg::ZRLE_MAGIC;
    assign hdr_w[32 +: 32]  = {16'd0, 3'd0, lmax_log2, gradblock_pkg::ZRLE_VERSION};
    assign hdr_w[64 +: 32]  = layer_id;
    assign hdr_w[96 +: 32]  = n_words;
    assign hdr_w[128 +: 32] = range_bits;

    assign cfg_ready   = (d_state == D_IDLE);
    assign ck_ready    = !ck_valid || pk_ready;
    assign pk_take     = ck_valid && pk_ready;
    assign trailer_now = q_empty && (in_state == IN_DONE);

    int dr_first, dr_k, dr_r;
    always_comb begin
        dr_first   = 0;
        dr_k       = 0;
        dr_r       = 0;
        lit_rem_next = lit_rem;
        tok_start  = 1'b0;
        produce = 1'b0;
        p_last  = 1'b0;
        p_data  = '0;
        p_cnt   = '0;
        q_pop   = 1'b0;
        rd_n    = '0;
        d_next  = d_state;
        if (ck_ready) begin
            case (d_state)
                D_HDR: begin
                    produce = 1'b1;
                    for (int l = 0; l < W; l++) begin
                        if (32'(hdr_idx) + l < 5)
                            p_data[32*l +: 32] = hdr_w[32*(32'(hdr_idx) + l) +: 32];
                    end
                    dr_k = 5 - 32'(hdr_idx);
                    p_cnt = PW'((dr_k < W) ? dr_k : W);
                    if (32'(hdr_idx) + W >= 5) d_next = D_TOK;
                end
                D_TOK: begin
                    if (!q_empty) begin
                        produce = 1'b1;
                        dr_first = (32'(head_len) <= FIRST_MAX) ? 32'(head_len) : FIRST_MAX;
                        for (int l = 0; l < W; l++) begin
                            if (l == 0)              p_data[32*l +: 32] = head_z;
                            else if (l == 1)         p_data[32*l +: 32] = 32'(head_len);
                            else if (l - 2 < dr_first)  p_data[32*l +: 32] = litv[32*(l-2) +: 32];
                        end
                        if (W == 1) begin
                            p_cnt  = PW'(1);
                            d_next = D_L;
                        end else begin
                            // the token leaves the queue as it starts: its head is then the
                            // next token, which the last literal cycle may already start
                            tok_start    = 1'b1;
                            q_pop        = 1'b1;
                            p_cnt        = PW'(2 + dr_first);
                            rd_n         = PW'(dr_first);
                            lit_rem_next = head_len - LW'(dr_first);
                            if (32'(head_len) > FIRST_MAX) d_next = D_LIT;
                        end
                    end else if (trailer_now) begin
                        produce = 1'b1;
                        p_data[31:0] = tok_count;
                        p_cnt  = PW'(1);
                        d_next = D_T1;
                    end
                end
                D_L: begin                               // W = 1 only
                    produce      = 1'b1;
                    tok_start    = 1'b1;
                    q_pop        = 1'b1;
                    p_data[31:0] = 32'(head_len);
                    p_cnt        = PW'(1);
                    lit_rem_next = head_len;
                    d_next       = (head_len == '0) ? D_TOK : D_LIT;
                end
                D_LIT: begin
                    produce = 1'b1;
                    dr_r    = 32'(lit_rem);
                    if (dr_r <= FIRST_MAX && !q_empty) begin
                        // the token's last dr_r literals, then the next token's z, L and
                        // as many of its literals as fill the chunk (they follow in the ring)
                        tok_start = 1'b1;
                        q_pop     = 1'b1;
                        dr_first  = (32'(head_len) <= FIRST_MAX - dr_r) ? 32'(head_len)
                                                                        : FIRST_MAX - dr_r;
                        for (int l = 0; l < W; l++) begin
                            if (l < dr_r)           p_data[32*l +: 32] = litv[32*l +: 32];
                            else if (l == dr_r)     p_data[32*l +: 32] = head_z;
                            else if (l == dr_r + 1) p_data[32*l +: 32] = 32'(head_len);
                            else if (l < dr_r + 2 + dr_first)   // l >= 2 here; the clamp
                                // keeps lanes 0, 1's never-taken select in range for yosys
                                p_data[32*l +: 32] = litv[32*((l >= 2) ? l - 2 : 0) +: 32];
                        end
                        p_cnt        = PW'(dr_r + 2 + dr_first);
                        rd_n         = PW'(dr_r + dr_first);
                        lit_rem_next = head_len - LW'(dr_first);
                        d_next       = (32'(head_len) > dr_first) ? D_LIT : D_TOK;
                    end else begin
                        p_data = litv;
                        dr_k = (dr_r < W) ? dr_r : W;
                        p_cnt = PW'(dr_k);
                        rd_n  = PW'(dr_k);
                        lit_rem_next = lit_rem - LW'(dr_k);
                        if (dr_r <= W) d_next = D_TOK;
                    end
                end
                D_T1: begin
                    produce = 1'b1;
                    p_data[31:0] = crc_next;             // t0 leaves the chunk register now
                    p_cnt  = PW'(1);
                    p_last = 1'b1;
                    d_next = D_IDLE;
                end
                default: ;
            endcase
        end
    end

    // CRC over every frame word up to t0, as the chunks leave the chunk register
    crc32_lanes #(.W(W)) u_crc (
        .clk      (clk),
        .rst      (rst),
        .init     (cfg_take),
        .en       (pk_take && !ck_last),
        .data     (ck_data),
        .count    (ck_cnt),
        .crc      (crc_unused),
        .crc_next (crc_next)
    );

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
            in_full   <= 1'b0;
            in_zero   <= 1'b0;
            in_last   <= 1'b0;
            in_pos    <= '0;
            in_hi     <= '0;
            zrun      <= 32'd0;
            open_z    <= 32'd0;
            lit_cnt   <= '0;
            lit_open  <= 1'b0;
            wp        <= '0;
            rp        <= '0;
            d_state   <= D_IDLE;
            hdr_idx   <= 3'd0;
            lit_rem   <= '0;
            tok_count <= 32'd0;
            ck_valid  <= 1'b0;
            ck_last   <= 1'b0;
            ck_cnt    <= '0;
            layer_id  <= 32'd0;
            n_words   <= 32'd0;
            range_bits <= 32'd0;
            lmax_log2 <= 5'd1;
        end else begin
            if (cfg_take) begin
                layer_id   <= cfg_layer_id;
                n_words    <= cfg_n;
                range_bits <= cfg_range_bits;
                lmax_log2  <= cfg_lmax_clamped;
                in_state   <= (cfg_n == 32'd0) ? IN_DONE : IN_RUN;
                in_left    <= cfg_n;
                in_more    <= (cfg_n != 32'd0);
                in_full    <= 1'b0;
                zrun       <= 32'd0;
                lit_cnt    <= '0;
                lit_open   <= 1'b0;
                wp         <= '0;
                rp         <= '0;
                tok_count  <= 32'd0;
                d_state    <= D_HDR;
                hdr_idx    <= 3'd0;
            end

            // ---- words still to accept, and the input register
            if (accept) begin
                in_more <= (take_count != in_left);
                in_left <= in_left - take_count;
            end
            if (take) begin
                in_data <= sk_data;
                in_nz   <= sk_nz;
                in_zero <= sk_zero;
                in_run  <= sk_count;
                in_pos  <= sk_lo;
                in_hi   <= sk_hi;
                in_last <= sk_last;
                in_full <= 1'b1;
            end else if (consumed) begin
                in_full <= 1'b0;
            end

            // ---- fill
            if (step) begin
                in_pos <= take ? sk_lo : f_next;
                wp     <= wp + (RW+1)'(wr_n);
                if (f_closes) begin
                    lit_cnt  <= '0;
                    lit_open <= 1'b0;
                    zrun     <= f_zero_close ? 32'd1 : 32'd0;
                end else if (f_a != in_hi) begin         // literals run to the beat's end
                    lit_cnt  <= f_tok_l;
                    lit_open <= 1'b1;
                    open_z   <= f_tok_z;
                    zrun     <= 32'd0;
                end else begin                           // zeros only
                    zrun <= zrun + 32'(in_hi - in_pos);
                end
            end
            if (step_z) begin
                if (lit_open) begin
                    lit_cnt  <= '0;
                    lit_open <= 1'b0;
                    zrun     <= in_run;
                end else begin
                    zrun <= zrun + in_run;
                end
            end
            if (consumed && in_last) in_state <= IN_TAIL;
            if (tail) begin
                lit_cnt  <= '0;
                lit_open <= 1'b0;
                zrun     <= 32'd0;
                in_state <= IN_DONE;
            end

            // ---- drain
            rp <= (cfg_take ? '0 : rp) + (RW+1)'(rd_n);
            if (produce) begin
                d_state <= d_next;
                lit_rem <= lit_rem_next;
                if (tok_start) tok_count <= tok_count + 32'd1;
                case (d_state)
                    D_HDR: hdr_idx <= hdr_idx + 3'(W);
                    D_T1:  in_state <= IN_IDLE;
                    default: ;
                endcase
            end

            // ---- chunk register
            if (ck_ready) begin
                ck_valid <= produce;
                ck_last  <= p_last;
                ck_cnt   <= p_cnt;
            end
        end
        if (ck_ready && produce) ck_data <= p_data;
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
            // t1 follows t0 out of the chunk register in the same cycle (crc_next has it)
            if (d_state == D_T1) assert (ck_valid && !ck_last);
            assert (int'(ring_used) <= RING);
            if (step) assert (int'(ring_used) + int'(wr_n) <= RING);
            if (in_full && !in_zero) assert (in_pos < in_hi);
        end
    end
`endif
endmodule

`resetall
