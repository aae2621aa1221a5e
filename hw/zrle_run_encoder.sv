// ZRLE v1 streaming encoder (docs/spec.md §3) that also takes zero runs as counts: a beat is
// either one literal word (s_tdata != 0) or a run of s_tcount zero words (s_tdata == 0,
// s_tcount >= 1), so a zero run costs one cycle however long (compress_engine's pass 2).
// zrle_encoder is this module with s_tcount = 1 (one word a beat). Beats cover exactly cfg_n
// words; out comes the frame word for word as codec.zrle.encode_frame builds it.
//
// Structure
//   fill side   takes payload words through a one-word input register, counts zero runs and
//               appends literals to a literal ring. A token closes when its nonzero run ends
//               (a zero arrives), reaches LMAX literals, or the payload ends; its (z, L) then
//               enters the token queue.
//   drain side  emits the header, then the queued tokens in order (z, L, literals read from the
//               ring), then the trailer once the payload has ended and the queue is empty.
//   output      an axis_skid_buffer: the drain side advances on its registered s_tready, so no
//               path runs from m_tready to s_tready or cfg_ready.
//
// Buffering: L precedes the literals, so a token cannot leave before it closes and up to LMAX
// literals wait. The ring holds max(2 x 2^LMAX_LOG2_MAX, 64) literals (double buffering: one
// full token drains while the next fills) and the queue 2^TOKEN_QUEUE_AW tokens, so short tokens
// do not hold up the input while a long one drains. The input waits only when the ring is full or a
// token must close into a full queue; at those times the output is busy with queued words.
// The ring is read synchronously (block RAM) through a small prefetch buffer (see below).
//
// cfg_lmax_log2 outside 1..LMAX_LOG2_MAX is clamped into that range and the clamped value is what
// h1 carries, so the frame always describes itself correctly. cfg_range_bits is copied to h4 as
// given (the software encoder refuses a non-finite or non-positive R before it gets here).
// cfg_ready is high only while the encoder is idle: one idle cycle separates frames.
`resetall
`default_nettype none

module zrle_run_encoder #(
    parameter int LMAX_LOG2_MAX  = 8,   // largest runtime lmax_log2
    parameter int TOKEN_QUEUE_AW = 4    // 2^this closed tokens may wait for the output
) (
    input  logic        clk,
    input  logic        rst,
    // one config beat starts a frame (also for n = 0)
    input  logic        cfg_valid,
    output logic        cfg_ready,
    input  logic [31:0] cfg_layer_id,
    input  logic [31:0] cfg_n,
    input  logic [31:0] cfg_range_bits,
    input  logic [4:0]  cfg_lmax_log2,
    // beats covering exactly cfg_n payload words: a literal, or a run of s_tcount zeros
    input  logic [31:0] s_tdata,
    input  logic [31:0] s_tcount,       // words this beat stands for when s_tdata == 0 (>= 1)
    input  logic        s_tvalid,
    output logic        s_tready,
    // frame words: header, tokens, t0, t1 (m_tlast on t1)
    output logic [31:0] m_tdata,
    output logic        m_tvalid,
    input  logic        m_tready,
    output logic        m_tlast
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(LMAX_LOG2_MAX >= gradblock_pkg::ZRLE_LMAX_LOG2_MIN
          && LMAX_LOG2_MAX <= gradblock_pkg::ZRLE_LMAX_LOG2_MAX)) begin : g_bad_lmax_log2_max
`ifdef __ICARUS__
        zrle_run_encoder__LMAX_LOG2_MAX_must_be_1_to_24 u_parameter_error ();
`else
        $error("zrle_run_encoder: LMAX_LOG2_MAX must lie in the frame format's 1..24");
`endif
    end
    if (!(TOKEN_QUEUE_AW >= 1 && TOKEN_QUEUE_AW <= 16)) begin : g_bad_token_queue_aw
`ifdef __ICARUS__
        zrle_run_encoder__TOKEN_QUEUE_AW_must_be_1_to_16 u_parameter_error ();
`else
        $error("zrle_run_encoder: TOKEN_QUEUE_AW must be 1..16");
`endif
    end
    localparam int LW   = LMAX_LOG2_MAX + 1;          // literal counts 0 .. LMAX
    // literal ring: two full tokens (double buffering), and at least 64 words so that short
    // tokens queued behind a long one do not stall the input when LMAX is small
    localparam int RW   = (LMAX_LOG2_MAX + 1 > 6) ? LMAX_LOG2_MAX + 1 : 6;
    localparam int RING = 1 << RW;
    localparam int TW   = 1 + 32 + LW;                // token queue entry {L == 0, z, L}

    // fill side states
    localparam logic [1:0] IN_IDLE = 2'd0;
    localparam logic [1:0] IN_RUN  = 2'd1;   // payload words still to come or in the input register
    localparam logic [1:0] IN_TAIL = 2'd2;   // payload ended in zeros: the (z, 0) token must queue
    localparam logic [1:0] IN_DONE = 2'd3;   // every token has been queued

    // drain side states
    localparam logic [2:0] D_IDLE = 3'd0;
    localparam logic [2:0] D_HDR  = 3'd1;
    localparam logic [2:0] D_Z    = 3'd2;    // next token's z, or t0 once the payload is done
    localparam logic [2:0] D_L    = 3'd3;
    localparam logic [2:0] D_LIT  = 3'd4;
    localparam logic [2:0] D_T1   = 3'd5;

    // ---------------------------------------------------------------- configuration
    logic [31:0]   layer_id, n_words, range_bits;
    logic [4:0]    lmax_log2;
    logic [4:0]    cfg_lmax_clamped;
    logic [LW-1:0] lmax;

    always_comb begin
        if (cfg_lmax_log2 < 5'd1)
            cfg_lmax_clamped = 5'd1;
        else if (cfg_lmax_log2 > 5'(LMAX_LOG2_MAX))
            cfg_lmax_clamped = 5'(LMAX_LOG2_MAX);
        else
            cfg_lmax_clamped = cfg_lmax_log2;
    end
    assign lmax = LW'(1) << lmax_log2;

    // ---------------------------------------------------------------- literal ring, token queue
    // The ring is read synchronously (block RAM on an FPGA, whose read data arrive late in the
    // cycle: on an ECP5 DP16KD 4.3 ns after the clock) into a plain register, then in order into
    // a small flop buffer ahead of the drain side, so the word leaving comes from flops. A slot
    // is fetched at the earliest the cycle after its write and reaches the buffer three cycles
    // after its write; the drain needs a token's first literal no sooner than that (its z and L
    // go out first) except for a one-literal token closed by the payload's end, which may wait
    // a cycle. A slot is never read in the cycle it is written (it is fetched only once
    // written), so the read needs no write-to-read bypass (no_rw_check tells yosys).
    localparam int PF_AW = 2;            // prefetch buffer: 2^PF_AW literals
    (* no_rw_check *)
    logic [31:0]   ring [RING];
    logic [RW:0]   wr_ptr, fetch_ptr;    // one extra bit tells full from empty
    logic [RW:0]   ring_used;            // literals written and not yet fetched (0 .. RING)
    logic [RW:0]   ring_used_w, ring_used_nw;   // its next value with and without a write
    logic          ring_full, ring_write;
    logic          fetch;                // read the ring at fetch_ptr this cycle
    logic          fetched;              // ring_rd holds the literal read last cycle
    logic [31:0]   ring_rd;              // the ring's registered read data
    logic          staged;               // ring_q holds a fetched literal
    logic [31:0]   ring_q;               // ring_rd, registered once more (no logic in between)
    logic [PF_AW:0] pf_credit;           // prefetch slots neither filled nor claimed by a read
    logic [32*(1<<PF_AW)-1:0] pf;        // prefetch buffer: flops, literal i at [32*i +: 32]
    logic [PF_AW:0] pf_wr, pf_rd;
    logic          lit_avail;            // the buffer holds the oldest literal not yet out
    logic          lit_pop;
    logic [31:0]   ring_head;            // oldest literal not yet out

    logic          q_push, q_pop, q_full, q_empty;
    logic [TW-1:0] q_wdata, q_head;
    logic [31:0]   head_z;
    logic [LW-1:0] head_len;
    logic          head_empty;           // head_len == 0 (the final (z, 0) token)

    assign ring_full = ring_used[RW];
    assign fetch     = (ring_used != '0) && (pf_credit != '0);
    assign ring_used_nw = ring_used - (RW+1)'(fetch);
    assign ring_used_w  = ring_used + (RW+1)'(!fetch);
    assign lit_avail = (pf_wr != pf_rd);
    assign ring_head = pf[32*pf_rd[PF_AW-1:0] +: 32];
    assign head_empty = q_head[TW-1];
    assign head_z    = q_head[TW-2:LW];
    assign head_len  = q_head[LW-1:0];

    sync_fifo #(.W(TW), .AW(TOKEN_QUEUE_AW)) u_tokens (
        .clk     (clk),
        .rst     (rst),
        .clear   (cfg_valid && cfg_ready),
        .push    (q_push),
        .wr_data (q_wdata),
        .pop     (q_pop),
        .rd_data (q_head),
        .full    (q_full),
        .empty   (q_empty)
    );

    // ---------------------------------------------------------------- fill side
    logic [1:0]    in_state;
    logic [31:0]   in_left;              // payload words still to take (n - taken, mod 2^32)
    logic          in_full, in_last;     // input register holds a word; it is the n-th
    logic [31:0]   in_word;
    logic [31:0]   in_run;               // zeros in_word stands for (read only when it is 0)
    logic [31:0]   zrun;                 // zeros since the last token boundary
    logic [31:0]   open_z;               // z of the open token
    logic [LW-1:0] lit_cnt;              // literals of the open token (0: none open)
    logic          lit_open;             // lit_cnt != 0
    logic [LW-1:0] slots_left;           // LMAX - lit_cnt
    logic          last_slot;            // slots_left == 1: the next literal fills the token
    logic          in_nz;                // in_word != 0 (decided as the word is taken)
    logic          in_more;              // in_left != 0: payload words still to take

    logic in_nonzero, closes, in_blocked, consume, take, tail_close;
    logic consume_last;                   // consume of the payload's last word (in_state moves)
    logic take_nz;                        // the beat being taken is a nonzero word
    logic [LW-1:0] lit_next;

    assign in_nonzero = in_nz;
    assign lit_next   = lit_cnt + LW'(1);
    // does consuming in_word close a token?
    assign closes     = in_nonzero ? (last_slot || in_last) : lit_open;
    assign in_blocked = (in_nonzero && ring_full) || (closes && q_full);
    assign consume    = (in_state == IN_RUN) && in_full && !in_blocked;
    // consume && in_last, written out: the last word always closes its token if it is nonzero
    // (closes = in_nonzero || lit_open), so in_state's update skips last_slot's terms (it was
    // five LUTs deep inside compress_engine)
    assign consume_last = (in_state == IN_RUN) && in_full && in_last
                          && !((in_nonzero && ring_full) || ((in_nonzero || lit_open) && q_full));
    assign s_tready   = (in_state == IN_RUN) && in_more && (!in_full || consume);
    assign take       = s_tvalid && s_tready;
    assign take_nz    = s_tdata != 32'd0;
    assign tail_close = (in_state == IN_TAIL) && !q_full;

    // the token that closes (its data does not wait for the queue's room; only q_push does)
    assign q_push  = (consume && closes) || tail_close;
    assign q_wdata = (in_state == IN_TAIL) ? {1'b1, zrun, LW'(0)}
                   : in_nonzero            ? {1'b0, lit_open ? open_z : zrun, lit_next}
                   :                         {1'b0, open_z, lit_cnt};

    // ---------------------------------------------------------------- drain side
    logic [2:0]    d_state;
    logic          crc_init, crc_en;     // the CRC unit's inputs, registered (see u_crc)
    logic [31:0]   crc_data, crc_next, crc_unused;
    logic [2:0]    hdr_idx;
    logic [LW-1:0] lit_rem;              // literals of the head token still to go out
    logic          lit_final;            // lit_rem == 1
    logic [31:0]   tok_count;

    logic          out_ready;            // the skid buffer can take a word this cycle
    logic          produce;              // a frame word goes out this cycle
    logic [31:0]   out_word;
    logic          out_last;
    logic          trailer_now;          // D_Z finds no token and the payload is done: emit t0
    logic [31:0]   hdr_word;             // the header word at hdr_idx, a flop (picked a cycle
                                         // ahead: the output mux starts from it, not from a
                                         // five-way pick by hdr_idx)
    logic [2:0]    hdr_pick;             // hdr_idx as it will be next cycle

    assign hdr_pick = (cfg_valid && cfg_ready) ? 3'd0
                    : (produce && d_state == D_HDR) ? hdr_idx + 3'd1 : hdr_idx;
    // word 0 is a constant: it is there the cycle after the configuration, whose fields
    // (words 1..4) are registered by then
    always_ff @(posedge clk) begin
        case (hdr_pick)
            3'd0:    hdr_word <= gradblock_pkg::ZRLE_MAGIC;
            3'd1:    hdr_word <= {16'd0, 3'd0, lmax_log2, gradblock_pkg::ZRLE_VERSION};
            3'd2:    hdr_word <= layer_id;
            3'd3:    hdr_word <= n_words;
            default: hdr_word <= range_bits;
        endcase
    end

    assign cfg_ready   = (d_state == D_IDLE);
    assign trailer_now = (d_state == D_Z) && q_empty && (in_state == IN_DONE);

    always_comb begin
        produce  = 1'b0;
        out_word = 32'd0;
        out_last = 1'b0;
        q_pop    = 1'b0;
        if (out_ready) begin
            case (d_state)
                D_HDR: begin
                    produce  = 1'b1;
                    out_word = hdr_word;
                end
                D_Z: begin
                    if (!q_empty) begin
                        produce  = 1'b1;
                        out_word = head_z;
                    end else if (trailer_now) begin
                        produce  = 1'b1;
                        out_word = tok_count;
                    end
                end
                D_L: begin
                    produce  = 1'b1;
                    out_word = 32'(head_len);
                    q_pop    = head_empty;
                end
                D_LIT: begin
                    if (lit_avail) begin
                        produce  = 1'b1;
                        out_word = ring_head;
                        q_pop    = lit_final;
                    end
                end
                D_T1: begin
                    produce  = 1'b1;
                    out_word = crc_next;          // t0 is in crc_data, absorbed this cycle
                    out_last = 1'b1;
                end
                default: ;
            endcase
        end
    end

    assign lit_pop    = produce && (d_state == D_LIT);
    assign ring_write = consume && in_nonzero;

    // CRC over every frame word up to and including t0. The word leaving is registered on its
    // way to the CRC unit, so the output mux and the 32 CRC steps are separate cycles; t1, the
    // cycle after t0, is the CRC with t0 (in crc_data) absorbed: crc_next, from registers.

    always_ff @(posedge clk) begin
        if (rst) begin
            crc_init <= 1'b0;
            crc_en   <= 1'b0;
        end else begin
            crc_init <= cfg_valid && cfg_ready;
            crc_en   <= produce && (d_state != D_T1);
        end
        crc_data <= out_word;
    end

    crc32_word u_crc (
        .clk      (clk),
        .rst      (rst),
        .init     (crc_init),
        .en       (crc_en),
        .data     (crc_data),
        .crc      (crc_unused),
        .crc_next (crc_next)
    );

    axis_skid_buffer #(.W(33)) u_out (
        .clk     (clk),
        .rst     (rst),
        .s_tdata  ({out_last, out_word}),
        .s_tvalid (produce),
        .s_tready (out_ready),
        .m_tdata  ({m_tlast, m_tdata}),
        .m_tvalid (m_tvalid),
        .m_tready (m_tready)
    );

    // ---------------------------------------------------------------- sequential logic
    always_ff @(posedge clk) begin
        if (rst) begin
            in_state   <= IN_IDLE;
            in_left    <= 32'd0;
            in_more    <= 1'b0;
            in_full    <= 1'b0;
            in_last    <= 1'b0;
            zrun       <= 32'd0;
            open_z     <= 32'd0;
            lit_cnt    <= '0;
            lit_open   <= 1'b0;
            slots_left <= LW'(2);
            last_slot  <= 1'b0;
            wr_ptr     <= '0;
            d_state    <= D_IDLE;
            hdr_idx    <= 3'd0;
            lit_rem    <= '0;
            lit_final  <= 1'b0;
            tok_count  <= 32'd0;
            layer_id   <= 32'd0;
            n_words    <= 32'd0;
            range_bits <= 32'd0;
            lmax_log2  <= 5'd1;
        end else begin
            // ---- frame start
            if (cfg_valid && cfg_ready) begin
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
                slots_left <= LW'(1) << cfg_lmax_clamped;
                last_slot  <= 1'b0;              // LMAX >= 2
                wr_ptr     <= '0;
                tok_count  <= 32'd0;
                d_state    <= D_HDR;
                hdr_idx    <= 3'd0;
            end

            // ---- input register
            if (take) begin
                in_word  <= s_tdata;
                in_nz    <= take_nz;
                // the beat's count, whatever the word: read only for a zero word (no
                // reset-to-1 on the word's != 0 test, which was a late path into 32 flops)
                in_run   <= s_tcount;
                // the beat is the last when its step is the words left; both outcomes of the
                // word's != 0 test are formed beside it and picked by it (no add, then compare,
                // after the 32-bit test: that chain bound compress_engine at 101.6 MHz)
                in_last  <= take_nz ? (in_left == 32'd1) : (s_tcount == in_left);
                in_more  <= take_nz ? (in_left != 32'd1) : (s_tcount != in_left);
                in_left  <= take_nz ? in_left - 32'd1 : in_left - s_tcount;
                in_full  <= 1'b1;
            end else if (consume) begin
                in_full <= 1'b0;
            end

            // ---- fill: one payload word per cycle
            if (consume) begin
                if (in_nonzero) begin
                    wr_ptr <= wr_ptr + 1'b1;
                    if (!lit_open) begin
                        open_z <= zrun;
                        zrun   <= 32'd0;
                    end
                    lit_cnt   <= closes ? '0 : lit_next;
                    lit_open   <= !closes;
                    slots_left <= closes ? lmax : slots_left - LW'(1);
                    last_slot  <= !closes && (slots_left == LW'(2));
                end else begin
                    // a zero ends an open nonzero run (closing it) and counts toward the next
                    lit_cnt   <= '0;
                    lit_open   <= 1'b0;
                    slots_left <= lmax;
                    last_slot  <= 1'b0;
                    zrun       <= lit_open ? in_run : zrun + in_run;
                end
            end
            if (consume_last) in_state <= in_nonzero ? IN_DONE : IN_TAIL;
            if (tail_close) begin
                zrun     <= 32'd0;
                in_state <= IN_DONE;
            end

            // ---- drain
            if (produce) begin
                case (d_state)
                    D_HDR: begin
                        hdr_idx <= hdr_idx + 3'd1;
                        if (hdr_idx == 3'd4) d_state <= D_Z;
                    end
                    D_Z: begin
                        if (trailer_now) begin
                            d_state <= D_T1;
                        end else begin
                            tok_count <= tok_count + 32'd1;
                            d_state   <= D_L;
                        end
                    end
                    D_L: begin
                        lit_rem   <= head_len;
                        lit_final <= (head_len == LW'(1));
                        d_state   <= q_pop ? D_Z : D_LIT;
                    end
                    D_LIT: begin
                        lit_rem   <= lit_rem - LW'(1);
                        lit_final <= (lit_rem == LW'(2));
                        if (q_pop) d_state <= D_Z;
                    end
                    D_T1: begin
                        d_state  <= D_IDLE;
                        in_state <= IN_IDLE;
                    end
                    default: ;
                endcase
            end
        end

        // ring writes need no reset: a slot is only fetched after it has been written
        if (!rst && ring_write) begin
            ring[wr_ptr[RW-1:0]] <= in_word;
        end
    end

    // ring reads (the block RAM's read port) and the prefetch buffer
    always_ff @(posedge clk) begin
        if (fetch) ring_rd <= ring[fetch_ptr[RW-1:0]];
    end

    always_ff @(posedge clk) begin
        ring_q <= ring_rd;
        if (staged) pf[32*pf_wr[PF_AW-1:0] +: 32] <= ring_q;
        // a frame start finds the ring drained: every literal of the previous frame has left
        if (rst || (cfg_valid && cfg_ready)) begin
            fetch_ptr <= '0;
            ring_used <= '0;
            fetched   <= 1'b0;
            staged    <= 1'b0;
            pf_credit <= (PF_AW+1)'(1 << PF_AW);
            pf_wr     <= '0;
            pf_rd     <= '0;
        end else begin
            fetched <= fetch;
            staged  <= fetched;
            if (fetch)   fetch_ptr <= fetch_ptr + 1'b1;
            // both sums from registers; the late ring_write only selects
            ring_used <= ring_write ? ring_used_w : ring_used_nw;
            if (staged)  pf_wr     <= pf_wr + 1'b1;
            if (lit_pop) pf_rd     <= pf_rd + 1'b1;
            pf_credit <= pf_credit - (PF_AW+1)'(fetch) + (PF_AW+1)'(lit_pop);
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
