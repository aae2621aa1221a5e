// Receive side of the exchange (docs/spec.md §5): N workers' ZRLE frames of one layer arrive on
// AXI4-Stream (one frame per worker, s_tlast on each frame's last word); their payloads are
// summed exactly, as int64, into n sums in external memory behind an AXI4 master with a 64-bit
// data bus (sum i at cfg_sum_base + 8i, little endian; 64W bits at W lanes, below). The
// layer is never buffered on chip.
//
//   decode     zrle_decoder (RUN_OUT = 1) checks each frame (spec §3.5, size checked against
//              cfg_n) and gives its values in order, one beat per cycle: a literal, or a whole
//              zero run as one beat (value 0, count = its length). A literal is never 0 (spec
//              §3.2), so a nonzero value is a literal. A run advances the element index by its
//              count in one cycle, so a frame costs about its words + O(1) cycles, not n.
//   bursts     zero runs cost no memory traffic at all. Consecutive literals are gathered into
//              one INCR burst (at most MAX_BURST beats, never across 4 KiB); a burst is closed
//              by a zero, by the frame's last value, or when it is full.
//   memory     each burst: a read burst of those sums into a FIFO (issued only when the FIFO
//              has room for all of it, so rready never stalls the memory), then a write burst
//              of sum + sign-extended literal back in place.
//   ordering   a frame's reads of element i must see the previous frames' writes of i: the next
//              frame is not taken until every B response of this one is back (a barrier of a
//              few memory latencies per frame; within a frame indices only grow).
//   clear      with cfg_clear the n sums are zeroed with write bursts before the first frame.
//   timing     150 MHz on an ECP5 (docs/hw.md): a register slice between the decoder and the
//              burst gathering (a beat's `!= 0` computed on its way in), the W burst length and
//              wlast from registers, W data in three registered steps (FIFO heads, block RAM
//              output, sum), the frame-end (idle) test, the cross-worker header compares and
//              the configuration check (three cycles) registered, CLEAR / FRAMES as flags.
//
// Errors (err_code, 5 bits; gradblock_pkg): 1..14 the decoder's FRAME_ERR_* for the frame of
// worker err_worker (err_word = the word index codec.zrle names); AGG_ERR_RANGE_MISMATCH /
// AGG_ERR_LAYER_ID_MISMATCH when a worker's header differs from worker 0's (err_word 4 / 2,
// checked in that order, like refmodel.exchange); AGG_ERR_MEMORY on SLVERR/DECERR;
// AGG_ERR_CONFIG: base not 8-aligned (W > 1: not on an 8W-byte beat), the sums past the
// address space, or 0 workers (nothing is read or written, no frame is taken, done pulses).
// The first error of a layer is kept, err_valid pulses when it is found. The bad frame is read
// to s_tlast, and the remaining frames of the layer are still read (so the host's stream stays
// in step) but add nothing. Values of
// the bad frame that went to memory before the error was known stay added: after an error
// the layer's sums are invalid (the reference returns no sums at all) and the host re-runs the
// layer with cfg_clear. The engine itself is clean: the next layer is exact.
//
// Lanes (issue 31; docs/hw.md "aggregate_engine", lanes): with W = 2, 4, 8 or 16 the frames
// arrive as dense W-word beats (s_tdata[32W], word-level s_tkeep a run of ones from lane 0 on
// the frame's last beat, every other beat full) and the sums sit behind a 64·W-bit bus: sum i
// in beat i / W, lane i % W (AxSIZE = log2(8W), cfg_sum_base aligned to a beat, else
// AGG_ERR_CONFIG). zrle_lane_decoder gives a zero run or up to W literals a cycle; a chunk of
// k literals at element e lands in lanes e % W .. of at most two sum beats: `assemble` places it
// in a 2W-lane window, merges its first part into the open beat (the beat a chunk before it
// started), sends that beat on when the chunk reaches its last lane (a zero run leaving the
// beat, or the frame's end, sends it too) and keeps the second part open. So a beat of sums is
// read and written once per frame however many chunks touch it, and the bursts gather sum
// beats with consecutive addresses as they gather literals at W = 1. A W beat adds the W lanes
// in int64 and WSTRB keeps only the lanes holding literals (the clear: lanes < n). W = 1 is
// zrle_decoder RUN_OUT = 1 and the design above, cycle for cycle (W-only logic is generated
// away).
`resetall
`default_nettype none

module aggregate_engine #(
    parameter int ADDR_W = 32,          // AXI address width (bytes)
    parameter int MAX_BURST = 16,       // beats per AXI burst, 1..256
    parameter int RD_FIFO_AW = 6,       // read FIFO: 2^this sums in flight
    parameter int LIT_FIFO_AW = 6,      // literals waiting for their sums; 2^this > MAX_BURST
    parameter int DESC_AW = 3,          // bursts gathered and not yet read / written
    parameter int QUEUE_AW = 4,         // the decoder's queue
    parameter int W = 1                 // frame words a cycle and int64 sums a beat: 1, 2, 4, 8, 16
) (
    input  logic              clk,
    input  logic              rst,
    // configuration, one handshake per layer
    input  logic              cfg_valid,
    output logic              cfg_ready,
    input  logic       [31:0] cfg_n,
    input  logic       [31:0] cfg_workers,
    input  logic [ADDR_W-1:0] cfg_sum_base,
    input  logic              cfg_clear,
    // frames, one per worker: W words a beat (lane 0 the earliest), s_tkeep a bit a word
    input  logic   [32*W-1:0] s_tdata,
    input  logic      [W-1:0] s_tkeep,
    input  logic              s_tvalid,
    output logic              s_tready,
    input  logic              s_tlast,
    // AXI4 master, 64·W-bit data: the int64 sums, W a beat
    output logic              m_axi_arid,
    output logic [ADDR_W-1:0] m_axi_araddr,
    output logic        [7:0] m_axi_arlen,
    output logic        [2:0] m_axi_arsize,
    output logic        [1:0] m_axi_arburst,
    output logic              m_axi_arvalid,
    input  logic              m_axi_arready,
    input  logic              m_axi_rid,
    input  logic   [64*W-1:0] m_axi_rdata,
    input  logic        [1:0] m_axi_rresp,
    input  logic              m_axi_rlast,
    input  logic              m_axi_rvalid,
    output logic              m_axi_rready,
    output logic              m_axi_awid,
    output logic [ADDR_W-1:0] m_axi_awaddr,
    output logic        [7:0] m_axi_awlen,
    output logic        [2:0] m_axi_awsize,
    output logic        [1:0] m_axi_awburst,
    output logic              m_axi_awvalid,
    input  logic              m_axi_awready,
    output logic   [64*W-1:0] m_axi_wdata,
    output logic    [8*W-1:0] m_axi_wstrb,
    output logic              m_axi_wlast,
    output logic              m_axi_wvalid,
    input  logic              m_axi_wready,
    input  logic              m_axi_bid,
    input  logic        [1:0] m_axi_bresp,
    input  logic              m_axi_bvalid,
    output logic              m_axi_bready,
    // status (held until the next accepted configuration)
    output logic              busy,
    output logic              done,
    output logic              err_valid,
    output logic        [4:0] err_code,
    output logic       [31:0] err_word,
    output logic       [31:0] err_worker,
    output logic       [31:0] frames_done,     // frames of this layer finished
    output logic       [31:0] hdr_layer_id,    // worker 0's header
    output logic       [31:0] hdr_range_bits,
    output logic       [31:0] lit_count,       // literals added
    output logic       [31:0] rd_beats,        // R beats (one per sum beat holding a literal)
    output logic       [31:0] wr_beats         // W beats (those, and one per cleared sum beat)
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(ADDR_W >= 12 && ADDR_W <= 64)) begin : g_bad_addr_w
`ifdef __ICARUS__
        aggregate_engine__ADDR_W_must_be_12_to_64 u_parameter_error ();
`else
        $error("aggregate_engine: ADDR_W must be 12..64");
`endif
    end
    if (!(MAX_BURST >= 1 && MAX_BURST <= 256)) begin : g_bad_max_burst
`ifdef __ICARUS__
        aggregate_engine__MAX_BURST_must_be_1_to_256 u_parameter_error ();
`else
        $error("aggregate_engine: MAX_BURST must be 1..256");
`endif
    end
    if (!(RD_FIFO_AW >= 1 && RD_FIFO_AW <= 16
          && (1 << RD_FIFO_AW) >= MAX_BURST)) begin : g_bad_rd_fifo_aw
`ifdef __ICARUS__
        aggregate_engine__RD_FIFO_AW_must_hold_MAX_BURST u_parameter_error ();
`else
        $error("aggregate_engine: RD_FIFO_AW must be 1..16 with 2^RD_FIFO_AW >= MAX_BURST");
`endif
    end
    if (!(LIT_FIFO_AW >= 1 && LIT_FIFO_AW <= 16
          && (1 << LIT_FIFO_AW) > MAX_BURST)) begin : g_bad_lit_fifo_aw
`ifdef __ICARUS__
        aggregate_engine__LIT_FIFO_AW_must_exceed_MAX_BURST u_parameter_error ();
`else
        $error("aggregate_engine: LIT_FIFO_AW must be 1..16 with 2^LIT_FIFO_AW > MAX_BURST");
`endif
    end
    if (!(DESC_AW >= 1 && DESC_AW <= 16)) begin : g_bad_desc_aw
`ifdef __ICARUS__
        aggregate_engine__DESC_AW_must_be_1_to_16 u_parameter_error ();
`else
        $error("aggregate_engine: DESC_AW must be 1..16");
`endif
    end
    if (!(QUEUE_AW >= 1 && QUEUE_AW <= 16)) begin : g_bad_queue_aw
`ifdef __ICARUS__
        aggregate_engine__QUEUE_AW_must_be_1_to_16 u_parameter_error ();
`else
        $error("aggregate_engine: QUEUE_AW must be 1..16");
`endif
    end
    if (!(W == 1 || W == 2 || W == 4 || W == 8 || W == 16)) begin : g_bad_w
`ifdef __ICARUS__
        aggregate_engine__W_must_be_1_2_4_8_or_16 u_parameter_error ();
`else
        $error("aggregate_engine: W must be 1, 2, 4, 8 or 16");
`endif
    end
    if (!(MAX_BURST * 8 * W <= 4096)) begin : g_bad_burst_bytes
`ifdef __ICARUS__
        aggregate_engine__MAX_BURST_beats_must_fit_4_KiB u_parameter_error ();
`else
        $error("aggregate_engine: MAX_BURST beats of 8W bytes must fit in 4 KiB");
`endif
    end
    localparam logic [8:0] MAX_B = 9'(MAX_BURST);
    localparam int LB = $clog2(8 * W);                     // byte offset bits of a sum beat
    localparam int BEAT = 8 * W;                            // bytes a beat
    localparam int PB = 4096 / BEAT;                        // beats a 4 KiB page
    localparam int XW = (ADDR_W > 35) ? ADDR_W + 1 : 36;   // base + 8n without overflow
    localparam int DW = ADDR_W + 9;                         // burst: {addr, beats}

    typedef enum logic [2:0] {IDLE, CHECK, CHECK2, CHECK3, CLEAR, FRAMES} state_t;
    state_t state;
    logic   in_clear, in_frames;  // state == CLEAR / FRAMES, as registers of their own

    // ---- configuration ---------------------------------------------------------------------
    logic [31:0]       n_r, workers_r;
    logic [ADDR_W-1:0] base_r;
    logic              clear_r;
    logic [XW-1:0]     sums_end;      // registered in CHECK, compared in CHECK2
    logic [31:0]       n_beats;       // ceil(n / W): the sum beats of the layer (CHECK)
    logic              cfg_misaligned, cfg_no_workers, cfg_past_end;   // registered checks
    logic              bad_cfg;       // judged in CHECK3, from the registered checks

    assign cfg_ready = state == IDLE;
    assign busy = state != IDLE;
    assign bad_cfg = cfg_misaligned || cfg_past_end || cfg_no_workers;

    always_ff @(posedge clk) begin
        if (cfg_valid && cfg_ready) begin
            n_r <= cfg_n;
            workers_r <= cfg_workers;
            base_r <= cfg_sum_base;
            clear_r <= cfg_clear;
        end
    end

    // ---- frame input and decoder -----------------------------------------------------------
    logic            feed, tlast_in, dec_s_ready;
    logic [32*W-1:0] val, dec_val;    // a beat: literals (lanes 0 .. count-1) or a zero run
    logic [31:0]     val_count, dec_count;
    logic    [W-1:0] val_keep, dec_keep;
    logic            val_valid, val_ready, val_last, val_fire;
    logic            val_nz;          // the beat holds literals (at W = 1: val != 0)
    logic            dec_valid, dec_ready, dec_last;
    logic            hdr_valid;
    logic [31:0]     dec_layer_id, dec_n, dec_range_bits, dec_err_word, dec_tokens;
    logic  [4:0]     dec_lmax_log2;
    logic  [3:0]     dec_err_code;
    logic            dec_done, dec_err;
    logic            dec_nz;

    assign feed = in_frames && !tlast_in;
    assign s_tready = feed && dec_s_ready;

    if (W == 1) begin : g_dec1
        zrle_decoder #(.QUEUE_AW(QUEUE_AW), .RUN_OUT(1'b1)) u_decoder (
            .clk, .rst, .cfg_check_n(1'b1), .cfg_expected_n(n_r),
            .s_tdata, .s_tvalid(s_tvalid && feed), .s_tready(dec_s_ready), .s_tlast,
            .m_tdata(dec_val), .m_tvalid(dec_valid), .m_tready(dec_ready), .m_tlast(dec_last),
            .m_tcount(dec_count),
            .hdr_valid, .hdr_layer_id(dec_layer_id), .hdr_n(dec_n),
            .hdr_range_bits(dec_range_bits), .hdr_lmax_log2(dec_lmax_log2), .done(dec_done),
            .err_valid(dec_err), .err_code(dec_err_code), .err_word(dec_err_word),
            .token_count(dec_tokens)
        );
        // a literal is never 0 (spec §3.2): a nonzero value is a literal
        assign dec_nz = dec_val != 32'd0;
        assign dec_keep = dec_nz;
    end else begin : g_decw
        zrle_lane_decoder #(.W(W), .QUEUE_AW(QUEUE_AW)) u_decoder (
            .clk, .rst, .cfg_check_n(1'b1), .cfg_expected_n(n_r),
            .s_tdata, .s_tkeep, .s_tvalid(s_tvalid && feed), .s_tready(dec_s_ready), .s_tlast,
            .m_tdata(dec_val), .m_tkeep(dec_keep), .m_tvalid(dec_valid), .m_tready(dec_ready),
            .m_tlast(dec_last), .m_tcount(dec_count),
            .hdr_valid, .hdr_layer_id(dec_layer_id), .hdr_n(dec_n),
            .hdr_range_bits(dec_range_bits), .hdr_lmax_log2(dec_lmax_log2), .done(dec_done),
            .err_valid(dec_err), .err_code(dec_err_code), .err_word(dec_err_word),
            .token_count(dec_tokens)
        );
        assign dec_nz = dec_keep != '0;
    end

    // a register slice between the decoder and the burst gathering: the decoder's output stage
    // sees a registered ready, and the 32-bit `!= 0` of a beat is done on its way in
    axis_skid_buffer #(.W(2 + W + 32 + 32 * W)) u_val_slice (
        .clk, .rst,
        .s_tdata({dec_last, dec_nz, dec_keep, dec_count, dec_val}), .s_tvalid(dec_valid),
        .s_tready(dec_ready),
        .m_tdata({val_last, val_nz, val_keep, val_count, val}), .m_tvalid(val_valid),
        .m_tready(val_ready)
    );

    logic unused_dec;
    assign unused_dec = ^{dec_n, dec_lmax_log2, dec_tokens, m_axi_rid, m_axi_bid, m_axi_rlast,
                          m_axi_rresp[0], m_axi_bresp[0], s_tkeep[0]};

    // ---- sum beats: what each taken value adds where ---------------------------------------
    // o_*: a beat of sums to read, add to and write back (o_keep its lanes holding literals),
    // at most one a cycle. W = 1: a literal is such a beat; W > 1: `assemble` (the header).
    logic              frame_bad, layer_bad, discard, lit_in, push_ok, take_ok;
    logic              o_push, o_consec, o_gap, o_page_last, o_last;
    logic [ADDR_W-1:0] o_addr;
    logic   [32*W-1:0] o_data;
    logic      [W-1:0] o_keep;
    logic              ob_valid;      // W > 1: a beat that a following chunk may continue
    logic              dec_quiet;     // no decoder beat offered (nor, at W > 1, a cycle ago)
    logic [ADDR_W-1:0] v_addr;        // address of the next value's sum: base + 8 * index
    logic              v_page_last;   // ... and it is the last sum of a 4 KiB page (W = 1)
    logic              ending;
    logic              dec_done_seen, dec_err_seen;
    logic              lit_push, lit_pop, lit_full, lit_empty;
    logic   [32*W-1:0] lit_head;
    logic      [W-1:0] lit_head_keep;
    logic              desc_push, desc_pop, desc_full, desc_empty;
    logic     [DW-1:0] desc_head;
    logic              bf_open, bf_full, bf_want, bf_take;
    logic [ADDR_W-1:0] bf_addr, bf_next;
    logic        [8:0] bf_len, new_len;

    assign discard = frame_bad || layer_bad;
    assign push_ok = !lit_full && !desc_full;
    assign val_ready = in_frames && take_ok;
    assign val_fire = val_valid && val_ready;
    assign lit_in = val_fire && !discard && val_nz;

    if (W == 1) begin : g_beat1
        assign o_push = lit_in;
        assign o_addr = v_addr;
        assign o_data = val;
        assign o_keep = 1'b1;
        assign o_page_last = v_page_last;
        assign o_last = val_last;
        assign o_consec = 1'b1;
        // a burst is closed by a zero (or a dropped value) after it
        assign o_gap = val_fire && !lit_in;
        assign ob_valid = 1'b0;
        assign take_ok = push_ok;
        assign dec_quiet = !dec_valid;
        logic unused_beat;
        assign unused_beat = ^{val_keep, bf_next};
    end else begin : g_assemble
        localparam int OW = LB - 3;                 // lane index bits
        logic   [OW-1:0] off;                       // the chunk's first lane: index % W
        logic [32*W-1:0] val_m;                     // the chunk's kept lanes (others 0)
        logic [64*W-1:0] wide;                      // the chunk in the 2W-lane window
        logic [2*W-1:0]  wkeep;
        logic [32*W-1:0] m_data, ob_data;           // the open beat with the chunk's first part
        logic    [W-1:0] m_keep, ob_keep;
        logic [ADDR_W-1:0] cur_beat, ob_addr;
        logic     [OW:0] off_end;                   // off + the run's count, when below 2W
        logic            ob_v, leaves, flush, dec_valid_q;
        // the beat that leaves, as decided this cycle (c_*), and the register stage it waits
        // in (st_*) before the burst gathering and the literal FIFO: the lane shift and the
        // decision end at a register, not at the FIFOs' flags (ECP5, W = 4)
        logic              c_push, c_last, st_v, st_last, st_go;
        logic [ADDR_W-1:0] c_addr, st_addr;
        logic   [32*W-1:0] c_data, st_data;
        logic      [W-1:0] c_keep, st_keep;

        for (genvar l = 0; l < W; l++) begin : g_mask
            assign val_m[32 * l +: 32] = val[32 * l +: 32] & {32{val_keep[l]}};
        end
        assign off = v_addr[LB-1:3];
        assign wide = {{(32 * W){1'b0}}, val_m} << {off, 5'b00000};
        assign wkeep = {{W{1'b0}}, val_keep} << off;
        assign m_data = (ob_v ? ob_data : '0) | wide[32*W-1:0];
        assign m_keep = (ob_v ? ob_keep : '0) | wkeep[W-1:0];
        assign cur_beat = {v_addr[ADDR_W-1:LB], {LB{1'b0}}};
        assign off_end = {1'b0, off} + {1'b0, val_count[OW-1:0]};
        // a run (or a dropped chunk) that leaves the open beat's index behind: off + count
        // reaches W (the same as comparing the beat of v_addr + 8 * count, without the carry
        // chain: a configuration's sums end inside the address space, so that sum never wraps)
        assign leaves = (|val_count[31:OW]) || off_end[OW];
        // the frame's values are all in: the open beat goes
        assign flush = ob_v && in_frames && tlast_in && (dec_done_seen || dec_err_seen)
                       && dec_quiet && !val_valid && take_ok;
        assign dec_quiet = !dec_valid && !dec_valid_q;
        assign ob_valid = ob_v || st_v;

        // a beat leaves when a chunk reaches its last lane, when a value leaves it behind,
        // or at the frame's end; a chunk's beat is the open one merged with it
        assign c_push = (lit_in && wkeep[W-1]) || (val_fire && !lit_in && ob_v && leaves) || flush;
        assign c_addr = lit_in ? cur_beat : ob_addr;
        assign c_data = lit_in ? m_data : ob_data;
        assign c_keep = lit_in ? m_keep : ob_keep;
        assign c_last = flush;
        // the stage goes on when both FIFOs have room; a value is taken only when the stage
        // is free for what it may push
        assign st_go = st_v && push_ok;
        assign take_ok = !st_v || st_go;
        assign o_push = st_go;
        assign o_addr = st_addr;
        assign o_data = st_data;
        assign o_keep = st_keep;
        assign o_page_last = &st_addr[11:LB];
        assign o_last = st_last;
        assign o_consec = o_addr == bf_next;

        always_ff @(posedge clk) begin
            if (rst) begin
                st_v <= 1'b0;
            end else if (c_push) begin
                st_v <= 1'b1;
            end else if (st_go) begin
                st_v <= 1'b0;
            end
            // loaded whenever the stage is free (st_v says whether it holds a beat): the
            // enable is then the early `take_ok`, not the late decision
            if (take_ok) begin
                st_addr <= c_addr;
                st_data <= c_data;
                st_keep <= c_keep;
                st_last <= c_last;
            end
        end
        // a beat that does not follow the open burst's last one closes it
        assign o_gap = o_push && !o_consec;

        always_ff @(posedge clk) begin
            dec_valid_q <= dec_valid;
            if (rst) begin
                ob_v <= 1'b0;
            end else if (lit_in) begin
                if (wkeep[W-1]) begin           // this beat is complete: the rest opens the next
                    ob_v <= wkeep[2*W-1:W] != '0;
                    ob_data <= wide[64*W-1:32*W];
                    ob_keep <= wkeep[2*W-1:W];
                    ob_addr <= cur_beat + ADDR_W'(BEAT);
                end else begin
                    ob_v <= 1'b1;
                    ob_data <= m_data;
                    ob_keep <= m_keep;
                    ob_addr <= cur_beat;
                end
            end else if (c_push) begin
                ob_v <= 1'b0;
            end
        end
        logic unused_beat;
        assign unused_beat = ^{v_page_last, val_last};

`ifndef SYNTHESIS
        // the open beat is the one the next value's index is in; a beat carries a literal
        always @(posedge clk) begin
            if (!rst && ob_v) assert (ob_addr == cur_beat && ob_keep != '0);
            if (!rst && o_push) assert (o_keep != '0 && o_addr[LB-1:0] == '0);
            if (!rst && c_push) assert (take_ok);     // the stage never drops a beat
            // `leaves` is the beat comparison it stands for, where it is used (an open beat
            // and a value that is not a chunk of literals)
            if (!rst && val_fire && !lit_in && ob_v)
                assert (leaves == (((v_addr + ADDR_W'({val_count, 3'b000})) >> LB)
                                   != (v_addr >> LB)));
            if (!rst && val_valid && val_nz) assert (val_count != 32'd0
                                                     && val_count <= 32'(W));
        end
`endif
    end

    // ---- gathering sum beats into bursts ----------------------------------------------------

    assign lit_push = o_push;
    // a burst leaves when it can grow no more, when a beat that does not follow it (at W = 1:
    // a zero or a dropped value) comes, or when the frame has ended
    assign bf_want = bf_open && (bf_full || o_gap || ending);
    assign desc_push = bf_want && !desc_full;
    assign bf_take = bf_open && !bf_full && o_consec;
    assign new_len = bf_take ? bf_len + 9'd1 : 9'd1;

    sync_fifo #(.W(33 * W), .AW(LIT_FIFO_AW)) u_lit_fifo (
        .clk, .rst, .clear(1'b0), .push(lit_push), .wr_data({o_keep, o_data}), .pop(lit_pop),
        .rd_data({lit_head_keep, lit_head}), .full(lit_full), .empty(lit_empty)
    );

    sync_fifo #(.W(DW), .AW(DESC_AW)) u_desc_fifo (
        .clk, .rst, .clear(1'b0), .push(desc_push), .wr_data({bf_addr, bf_len}), .pop(desc_pop),
        .rd_data(desc_head), .full(desc_full), .empty(desc_empty)
    );

    always_ff @(posedge clk) begin
        if (rst) begin
            bf_open <= 1'b0;
            bf_full <= 1'b0;
        end else begin
            if (desc_push) bf_open <= 1'b0;
            if (o_push) begin
                // a new burst starts unless the open one takes this beat
                if (!bf_take) bf_addr <= o_addr;
                bf_next <= o_addr + ADDR_W'(BEAT);
                bf_open <= 1'b1;
                bf_len <= new_len;
                // beats in a row have consecutive addresses: the burst ends at the page end
                bf_full <= new_len == MAX_B || o_page_last || o_last;
            end
        end
    end

    // ---- reads: bursts -> AR, R -> FIFO (axi_read_path) -----------------------------------
    logic              ar_fire, rd_push, rd_pop, rd_valid, rd_home;
    logic   [64*W-1:0] rd_head;
    logic              awd_full, awd_empty, awd_pop;
    logic     [DW-1:0] awd_head;
    logic        [8:0] ar_len;
    logic              ar_slot_valid; // the next read burst, in registers (off the FIFO RAM)
    logic     [DW-1:0] ar_slot;

    assign ar_len = ar_slot[8:0];
    assign desc_pop = !desc_empty && (!ar_slot_valid || ar_fire);

    always_ff @(posedge clk) begin
        if (rst) begin
            ar_slot_valid <= 1'b0;
            ar_slot <= '0;              // no X on m_axi_araddr / arlen while idle
        end else if (desc_pop) begin
            ar_slot_valid <= 1'b1;
            ar_slot <= desc_head;
        end else if (ar_fire) begin
            ar_slot_valid <= 1'b0;
        end
    end

    // a burst goes out when the read FIFO has room for all of it (so rready never stalls) and
    // the write-address queue has room for it; the FIFO's head feeds the W pipeline's first
    // register directly (a credit is back the cycle after its pop)
    axi_read_path #(.ADDR_W(ADDR_W), .DATA_W(64 * W), .MAX_BURST(MAX_BURST), .FIFO_AW(RD_FIFO_AW),
                    .DISTRIBUTED(1'b0), .REGISTERED(1'b0), .OUT_SKID(1'b0)) u_rd (
        .clk, .rst,
        .req_valid(ar_slot_valid && !awd_full), .req_addr(ar_slot[DW-1:9]), .req_len(ar_len),
        .req_fire(ar_fire),
        .m_axi_arid, .m_axi_araddr, .m_axi_arlen, .m_axi_arsize, .m_axi_arburst,
        .m_axi_arvalid, .m_axi_arready, .m_axi_rdata, .m_axi_rvalid, .m_axi_rready,
        .r_fire(rd_push),
        .m_tdata(rd_head), .m_tvalid(rd_valid), .m_tready(rd_pop), .credits_home(rd_home)
    );

    // a burst that was read waits here for its write address
    sync_fifo #(.W(DW), .AW(DESC_AW)) u_awd_fifo (
        .clk, .rst, .clear(1'b0), .push(ar_fire), .wr_data(ar_slot), .pop(awd_pop),
        .rd_data(awd_head), .full(awd_full), .empty(awd_empty)
    );

    // ---- clear: write bursts of zeros over [0, n) (beats; the last one's lanes < n) --------
    // a burst length takes two registered steps (min with MAX_BURST, then with the page end)
    // and the next burst starts after the AW: 3 cycles a burst, under the W beats it carries
    logic [31:0]       clr_left;
    logic [ADDR_W-1:0] clr_addr;
    logic        [8:0] clr_len, clr_to_4k, clr_len_a;
    logic        [1:0] clr_step;      // 0: compute min(left, MAX), 1: min(page), 2: AW ready

    // ---- writes: AW (from the read bursts or the clear walker), W, B ------------------------
    logic       aw_fire, w_fire, b_fire, lenq_full, lenq_empty;
    logic [8:0] aw_len, lenq_head;
    logic       w_active;           // a burst's length is loaded from the burst queue
    logic [8:0] w_rem;              // its W beats not yet written, the next one included
    logic       w_last_r;           // w_rem == 1: the next beat is the burst's last
    logic       w_load;             // take the next burst's length
    logic [31:0] b_pending;
    logic        b_none;
    assign b_none = b_pending == 32'd0;

    // while the address queue is empty (its head unwritten RAM) AW shows the clear walker's
    // registers, reset to 0: no X on AWADDR / AWLEN; awvalid is low then outside a clear
    logic aw_from_clr;
    assign aw_from_clr = in_clear || awd_empty;
    assign aw_len = aw_from_clr ? clr_len : awd_head[8:0];
    assign m_axi_awid = 1'b0;
    assign m_axi_awaddr = aw_from_clr ? clr_addr : awd_head[DW-1:9];
    assign m_axi_awlen = 8'(aw_len - 9'd1);
    assign m_axi_awsize = 3'(LB);
    assign m_axi_awburst = 2'b01;
    assign m_axi_awvalid = !lenq_full && (in_clear ? clr_step == 2'd2
                                          : (in_frames && !awd_empty));
    assign aw_fire = m_axi_awvalid && m_axi_awready;
    assign awd_pop = aw_fire && in_frames;

    sync_fifo #(.W(9), .AW(2)) u_lenq (
        .clk, .rst, .clear(1'b0), .push(aw_fire), .wr_data(aw_len), .pop(w_load),
        .rd_data(lenq_head), .full(lenq_full), .empty(lenq_empty)
    );

    // A W beat takes three registered steps: the FIFO heads into stage A (yosys merges it into
    // the block RAM's read, whose clock-to-out is ~4.3 ns), A into plain registers (C: the
    // RAM output goes straight to their data inputs, no mux in front), then
    // sum + literal into a register slice that drives W. So the FIFOs' pops (and the read
    // FIFO's block RAM address behind them) depend on registers only, never on wready, and
    // neither the RAM read nor the 64-bit add shares a cycle with another path or a port.
    // A sum in the read FIFO always has its literal in the literal FIFO already (the literal
    // was queued before its burst was even formed), so lit_empty need not gate a beat.
    // wlast and the burst queue's pop come from registers, not from a compare with its head.
    logic        wb_take;           // a beat moves from the FIFO heads into stage A
    logic        wa_valid, wa_last, wa_zero, wc_ready, wc_valid, wc_last, wc_zero, wb_ready;
    logic [64*W-1:0] wa_sum, wc_sum, wc_new;
    logic [32*W-1:0] wa_lit, wc_lit;
    logic    [W-1:0] wa_keep, wc_keep, take_keep, w_keep;
    assign wb_take = w_active && (in_clear || rd_valid) && (!wa_valid || wc_ready);
    assign w_load = !lenq_empty && (!w_active || (wb_take && w_last_r));

    always_ff @(posedge clk) begin
        if (rst) wa_valid <= 1'b0;
        else if (wb_take) wa_valid <= 1'b1;
        else if (wc_ready) wa_valid <= 1'b0;
        if (wb_take) begin
            wa_last <= w_last_r;
            wa_zero <= in_clear;
            wa_sum <= rd_head;
            wa_lit <= lit_head;
            wa_keep <= take_keep;
        end
    end

    assign wc_ready = !wc_valid || wb_ready;
    always_ff @(posedge clk) begin
        if (rst) wc_valid <= 1'b0;
        else if (wc_ready) wc_valid <= wa_valid;
        if (rst) begin
            wc_last <= 1'b0;            // the W slice takes {0, zeros} from reset: no X on W
            wc_zero <= 1'b1;
            wc_keep <= '0;
        end else if (wc_ready && wa_valid) begin
            wc_last <= wa_last;
            wc_zero <= wa_zero;
            wc_keep <= wa_keep;
        end
        if (wc_ready && wa_valid) begin
            wc_sum <= wa_sum;
            wc_lit <= wa_lit;
        end
    end

    // each lane: its int64 sum + its sign-extended literal (0 in a lane without one)
    for (genvar l = 0; l < W; l++) begin : g_add
        assign wc_new[64 * l +: 64] = wc_sum[64 * l +: 64]
                                      + {{32{wc_lit[32 * l + 31]}}, wc_lit[32 * l +: 32]};
    end

    axis_skid_buffer #(.W(1 + W + 64 * W)) u_w_slice (
        .clk, .rst,
        .s_tdata({wc_last, wc_keep, wc_zero ? '0 : wc_new}),
        .s_tvalid(wc_valid), .s_tready(wb_ready),
        .m_tdata({m_axi_wlast, w_keep, m_axi_wdata}), .m_tvalid(m_axi_wvalid),
        .m_tready(m_axi_wready)
    );

    if (W == 1) begin : g_strb1
        assign m_axi_wstrb = 8'hFF;
        assign take_keep = 1'b1;
        logic unused_keep;
        assign unused_keep = ^{w_keep, lit_head_keep, n_beats};
    end else begin : g_strbw
        // WSTRB: the bytes of the lanes the beat updates (the clear: the lanes below n)
        for (genvar l = 0; l < W; l++) begin : g_lane
            assign m_axi_wstrb[8 * l +: 8] = {8{w_keep[l]}};
        end
        logic [31:0]  clr_wleft;        // clear beats not yet taken into stage A
        logic [W-1:0] clr_tail;         // the last clear beat's lanes: 0 .. (n - 1) % W
        assign take_keep = in_clear ? (clr_wleft == 32'd1 ? clr_tail : '1) : lit_head_keep;
        always_ff @(posedge clk) begin
            if (state == CHECK3) begin
                clr_wleft <= n_beats;
                clr_tail <= (n_r[LB-4:0] == '0) ? '1 : ~({W{1'b1}} << n_r[LB-4:0]);
            end else if (wb_take && in_clear) begin
                clr_wleft <= clr_wleft - 32'd1;
            end
        end
    end
    assign w_fire = m_axi_wvalid && m_axi_wready;
    assign rd_pop = wb_take && in_frames;
    assign lit_pop = rd_pop;
    assign m_axi_bready = 1'b1;
    assign b_fire = m_axi_bvalid;

    logic mem_idle;
    assign mem_idle = !bf_open && !ob_valid && desc_empty && !ar_slot_valid && awd_empty
                    && lenq_empty && !w_active
                    && !wa_valid && !wc_valid && !m_axi_wvalid && lit_empty && !rd_valid
                    && rd_home && b_none;

    // ---- frame end and the checks across workers --------------------------------------------
    logic [31:0] frames_left;       // frames of the layer not yet finished
    logic        frames_one;        // frames_left == 1, as a register
    logic        frame_end;         // registered `ending && mem_idle`: the frame is finished.
                                    // Nothing can start in the cycle between (no value comes,
                                    // no burst is queued), so acting a cycle later is exact and
                                    // the wide idle test ends in this one flop.
    logic range_bad, id_bad;

    // every value of the frame has been taken: it checked out (done, all values out) or it
    // failed (err, read to s_tlast, the values already offered delivered)
    assign ending = in_frames && tlast_in && (dec_done_seen || dec_err_seen) && dec_quiet
                    && !val_valid && !ob_valid;
    // compared every cycle and registered (off the error record's enables, for timing): the
    // decoders' hdr_* are set at least a cycle before their hdr_valid (zrle_decoder two,
    // zrle_lane_decoder one; asserted below), and frames_done and worker 0's fields do not
    // move while a frame's header is read
    always_ff @(posedge clk) begin
        range_bad <= frames_done != 32'd0 && dec_range_bits != hdr_range_bits;
        id_bad <= frames_done != 32'd0 && dec_layer_id != hdr_layer_id;
    end
`ifndef SYNTHESIS
    logic [31:0] dec_range_q, dec_id_q;
    logic        hdr_seen_q;
    always @(posedge clk) begin
        dec_range_q <= dec_range_bits;
        dec_id_q <= dec_layer_id;
        hdr_seen_q <= !rst;
        // what the registered comparison relies on
        if (!rst && hdr_seen_q && hdr_valid)
            assert (dec_range_bits == dec_range_q && dec_layer_id == dec_id_q);
    end
`endif

    logic       mem_err;            // SLVERR / DECERR on R or B
    assign mem_err = (rd_push && m_axi_rresp[1]) || (b_fire && m_axi_bresp[1]);

    logic       rec_err;            // record a (first) error this cycle
    logic [4:0] rec_code;
    logic [31:0] rec_word;

    always_comb begin
        rec_err = 1'b0;
        rec_code = gradblock_pkg::AGG_OK;
        rec_word = 32'd0;
        if (in_frames && dec_err && !layer_bad) begin
            rec_err = 1'b1;
            rec_code = {1'b0, dec_err_code};
            rec_word = dec_err_word;
        end else if (in_frames && hdr_valid && !layer_bad && (range_bad || id_bad)) begin
            rec_err = 1'b1;
            rec_code = range_bad ? gradblock_pkg::AGG_ERR_RANGE_MISMATCH
                                 : gradblock_pkg::AGG_ERR_LAYER_ID_MISMATCH;
            rec_word = range_bad ? 32'd4 : 32'd2;
        end else if (mem_err && !layer_bad) begin
            rec_err = 1'b1;
            rec_code = gradblock_pkg::AGG_ERR_MEMORY;
        end
    end

    // ---- control ---------------------------------------------------------------------------
    always_ff @(posedge clk) begin
        done <= 1'b0;
        err_valid <= 1'b0;
        if (rst) begin
            state <= IDLE;
            in_clear <= 1'b0;
            in_frames <= 1'b0;
            clr_addr <= '0;
            clr_len <= 9'd0;
            err_code <= gradblock_pkg::AGG_OK;
            err_word <= 32'd0;
            err_worker <= 32'd0;
            frames_done <= 32'd0;
            layer_bad <= 1'b0;
            frame_bad <= 1'b0;
            tlast_in <= 1'b0;
            dec_done_seen <= 1'b0;
            dec_err_seen <= 1'b0;
            b_pending <= 32'd0;
            frame_end <= 1'b0;
            w_active <= 1'b0;
            clr_left <= 32'd0;
            clr_step <= 2'd0;
            lit_count <= 32'd0;
            rd_beats <= 32'd0;
            wr_beats <= 32'd0;
            hdr_layer_id <= 32'd0;
            hdr_range_bits <= 32'd0;
        end else begin
            case (state)
                IDLE: if (cfg_valid) begin
                    state <= CHECK;
                    err_code <= gradblock_pkg::AGG_OK;
                    err_word <= 32'd0;
                    err_worker <= 32'd0;
                    frames_done <= 32'd0;
                    layer_bad <= 1'b0;
                    lit_count <= 32'd0;
                    rd_beats <= 32'd0;
                    wr_beats <= 32'd0;
                end
                CHECK: begin
                    sums_end <= XW'(base_r) + XW'({n_r, 3'b000});
                    n_beats <= 32'((33'(n_r) + 33'(W - 1)) >> (LB - 3));
                    cfg_misaligned <= base_r[LB-1:0] != '0;
                    cfg_no_workers <= workers_r == 32'd0;
                    state <= CHECK2;
                end
                CHECK2: begin
                    cfg_past_end <= sums_end > (XW'(1) << ADDR_W);
                    state <= CHECK3;
                end
                CHECK3: begin
                    frame_bad <= 1'b0;
                    tlast_in <= 1'b0;
                    dec_done_seen <= 1'b0;
                    dec_err_seen <= 1'b0;
                    v_addr <= base_r;
                    v_page_last <= base_r[11:3] == 9'h1FF;
                    clr_addr <= base_r;
                    clr_left <= clear_r ? n_beats : 32'd0;
                    clr_step <= 2'd0;
                    frames_left <= workers_r;
                    frames_one <= workers_r == 32'd1;
                    if (bad_cfg) begin
                        err_code <= gradblock_pkg::AGG_ERR_CONFIG;
                        err_valid <= 1'b1;
                        layer_bad <= 1'b1;
                        done <= 1'b1;
                        state <= IDLE;
                    end else begin
                        state <= clear_r ? CLEAR : FRAMES;
                        in_clear <= clear_r;
                        in_frames <= !clear_r;
                    end
                end
                CLEAR: begin
                    if (clr_left == 32'd0 && lenq_empty && !w_active && !wa_valid && !wc_valid
                        && !m_axi_wvalid && b_none) begin
                        state <= FRAMES;
                        in_clear <= 1'b0;
                        in_frames <= 1'b1;
                    end else if (clr_left != 32'd0) begin
                        if (clr_step == 2'd0) begin
                            clr_len_a <= (clr_left < 32'(MAX_BURST)) ? clr_left[8:0] : MAX_B;
                            // PB - beat in the page; at W = 1 9'(512) = 0: 0 means 512
                            clr_to_4k <= 9'(PB) - 9'(clr_addr[11:LB]);
                            clr_step <= 2'd1;
                        end else if (clr_step == 2'd1) begin
                            clr_len <= (clr_to_4k != 9'd0 && clr_to_4k < clr_len_a) ? clr_to_4k
                                     : clr_len_a;
                            clr_step <= 2'd2;
                        end else if (aw_fire) begin
                            clr_left <= clr_left - {23'd0, clr_len};
                            clr_addr <= clr_addr + ADDR_W'({clr_len, {LB{1'b0}}});
                            clr_step <= 2'd0;
                        end
                    end
                end
                FRAMES: if (frame_end) begin
                    // the barrier: every write of this frame is answered
                    frames_done <= frames_done + 32'd1;
                    frame_bad <= 1'b0;
                    tlast_in <= 1'b0;
                    dec_done_seen <= 1'b0;
                    dec_err_seen <= 1'b0;
                    v_addr <= base_r;
                    v_page_last <= base_r[11:3] == 9'h1FF;
                    frames_left <= frames_left - 32'd1;
                    frames_one <= frames_left == 32'd2;
                    if (frames_one) begin
                        state <= IDLE;
                        in_frames <= 1'b0;
                        done <= 1'b1;
                    end
                end
                default: begin
                    state <= IDLE;
                    in_clear <= 1'b0;
                    in_frames <= 1'b0;
                end
            endcase

            if (s_tvalid && s_tready && s_tlast) tlast_in <= 1'b1;
            if (in_frames && dec_done) dec_done_seen <= 1'b1;
            if (in_frames && dec_err) begin
                dec_err_seen <= 1'b1;
                frame_bad <= 1'b1;
            end
            if (in_frames && hdr_valid) begin
                if (frames_done == 32'd0) begin
                    hdr_layer_id <= dec_layer_id;
                    hdr_range_bits <= dec_range_bits;
                end else if (range_bad || id_bad) begin
                    frame_bad <= 1'b1;
                end
            end
            if (rec_err) begin
                layer_bad <= 1'b1;
                err_valid <= 1'b1;
                err_code <= rec_code;
                err_word <= rec_word;
                err_worker <= frames_done;
            end
            if (val_fire) begin
                // a literal moves one sum on, a zero run its length (no memory touched)
                v_addr <= v_addr + ADDR_W'({val_count, 3'b000});
                v_page_last <= 9'(v_addr[11:3] + val_count[8:0]) == 9'h1FF;
            end
            if (lit_in) lit_count <= lit_count + val_count;

            b_pending <= b_pending + {31'd0, aw_fire} - {31'd0, b_fire};
            frame_end <= ending && mem_idle && !frame_end;
            if (w_fire) begin
                wr_beats <= wr_beats + 32'd1;
            end
            if (rd_push) rd_beats <= rd_beats + 32'd1;
            if (w_load) begin
                w_active <= 1'b1;
                w_rem <= lenq_head;
                w_last_r <= lenq_head == 9'd1;
            end else if (wb_take) begin
                if (w_last_r) w_active <= 1'b0;
                w_rem <= w_rem - 9'd1;
                w_last_r <= w_rem == 9'd2;
            end
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // AXI4 master port rules (axi4_master_checker.sv: handshakes held until taken, INCR
    // bursts of 1..MAX_BURST beats inside one 4 KiB page, WLAST/RLAST on each burst's last
    // beat, no W beat, R beat or B response that no burst announced)
    axi4_master_checker #(.ADDR_W(ADDR_W), .DATA_W(64 * W), .MAX_BURST(MAX_BURST)) u_chk_axi (
        .clk           (clk),
        .rst           (rst),
        .m_axi_araddr  (m_axi_araddr),
        .m_axi_arlen   (m_axi_arlen),
        .m_axi_arburst (m_axi_arburst),
        .m_axi_arvalid (m_axi_arvalid),
        .m_axi_arready (m_axi_arready),
        .m_axi_rlast   (m_axi_rlast),
        .m_axi_rvalid  (m_axi_rvalid),
        .m_axi_rready  (m_axi_rready),
        .m_axi_awaddr  (m_axi_awaddr),
        .m_axi_awlen   (m_axi_awlen),
        .m_axi_awburst (m_axi_awburst),
        .m_axi_awvalid (m_axi_awvalid),
        .m_axi_awready (m_axi_awready),
        .m_axi_wdata   (m_axi_wdata),
        .m_axi_wstrb   (m_axi_wstrb),
        .m_axi_wlast   (m_axi_wlast),
        .m_axi_wvalid  (m_axi_wvalid),
        .m_axi_wready  (m_axi_wready),
        .m_axi_bvalid  (m_axi_bvalid),
        .m_axi_bready  (m_axi_bready)
    );
`endif
endmodule

`resetall
