// One layer's compress step (docs/spec.md §4) for layers of any size: the residual lives in
// external memory behind an AXI4 master, the gradient arrives on AXI4-Stream, the ZRLE frame
// leaves on AXI4-Stream. Two passes, no layer buffer:
//
//   pass 1  gradient at one element per cycle; the residual r is read with INCR bursts (at most
//           MAX_BURST beats, never across 4 KiB) into a FIFO whose free space bounds the reads
//           in flight; quantiser -> ef_add gives a, written back in place with bursts (a write
//           follows the read of its element, so it never overtakes it) and fed to block_l1 ->
//           topk_select; the selected indices are sorted ascending (index_sort) and turned into
//           start elements (one multiply per block).
//   pass 2  only the selected blocks are read, with bursts; the frame comes from a run encoder
//           fed one beat per zero run between blocks (a count, no memory reads) and one beat
//           per element of a selected block; zeros are written over each selected block once
//           its elements have been read (so r' = 0 there and a elsewhere, in place).
//
// Momentum correction (docs/spec.md §7), per layer when cfg_momentum_en: the velocity u lives
// behind a second AXI4 master (m_axi_vel_*, element i at cfg_vel_base + 4i) so its traffic
// does not share the residual's beats. Pass 1 reads u with bursts into its own FIFO (credits
// as for r), claims a word per element at the join and takes it after the quantiser, computes
// u' = clamp(mul(m, u) + Q(g)) in momentum_pipe and feeds {r, u'} to ef_add; u' is written
// back in place. Pass 2, when cfg_momentum_mask and k_eff < n_blocks, writes zeros over u on the
// selected blocks (writes only, the residual's zero-write bursts). With momentum off the
// quantiser feeds ef_add directly, as before, and the velocity port stays idle.
//
// Cycles per layer, with a memory taking one beat per cycle: n + k_eff·B + O(k_eff + latency)
// (pass 1 streams n, pass 2 reads k_eff·B while writing the zeros alongside), momentum or not.
// Residual element i is the int32 word at byte address cfg_res_base + 4i (little endian);
// ADDR_W sets the address width, layers up to 2^32 - 1 elements.
//
// Lanes (W = 1, 2, 4, 8, 16; docs/hw.md "Lanes"): element i travels in beat i / W, lane i % W,
// on the gradient stream (s_grad_tdata: 32*W bits; the layer's last beat holds lanes
// 0 .. (n-1) % W, the rest ignored: the engine counts by n, so it takes no tkeep, and the
// AXI4-Lite wrapper and formal harnesses connect the W = 1 ports as before) and on both AXI4
// masters (data
// 32*W bits, AxSIZE log2(4W), bases aligned to 4W bytes, WSTRB clearing the lanes outside
// [0, n) or outside a selected block). Pass 1 takes a beat a cycle: W quantisers,
// momentum_pipes and ef_adds side by side (the lanes of the last beat past n enter as zeros,
// so they raise no flag), W-lane FIFOs and links, bursts counted in beats, the norms
// W elements a cycle (block_norm_lanes; block_l1 at W = 1). Pass 2 reads each
// selected block's beats (the first and last partial) and feeds the run encoder one word a
// cycle, lane by lane. The frame leaves one word a beat. W = 1 is the one-element design,
// cycle for cycle.
//
// Status (valid when `done` pulses, held until the next accepted config):
//   err_code: 0 ok; 1 residual does not fit the address space, or cfg_res_base not aligned to
//             a beat (4·W bytes);
//             2 block_size = 0; 3 n_blocks != ceil(n / block_size); 4 k = 0; 5 min(k, n_blocks)
//             > K_MAX; 6 lmax_log2 outside 1..min(24, LMAX_LOG2_MAX); 7 range_bits not a
//             finite float32 > 0; 8 M < 2^31 (1..8 refuse the config: nothing is read or
//             written, done pulses after the check); 9 s_grad_tlast not exactly on beat n-1
//             (the layer still runs, counted by n); 10 the memory answered SLVERR/DECERR
//             (the layer still completes; its data are not to be trusted); with momentum on:
//             11 velocity does not fit the address space, or cfg_vel_base not aligned to
//             a beat;
//             12 the velocity and residual regions overlap (11 and 12 refuse the config; 11 is
//             checked first of all, as spec §7.4 checks the velocity before the rest, 12 right
//             after 1). The names are gradblock_pkg's ENGINE_ERR_*.
`resetall
`default_nettype none

module compress_engine #(
    parameter int ADDR_W = 32,          // AXI address width (bytes)
    parameter int K_MAX = 32,           // most blocks selected per layer
    parameter int LMAX_LOG2_MAX = 8,    // largest literal run the encoder buffers (2^x words)
    parameter int MAX_BURST = 16,       // beats per AXI burst, 1..256
    parameter int RES_FIFO_AW = 6,      // each read FIFO: 2^this beats in flight (at least
                                        // one MAX_BURST burst: raised to hold one)
    parameter int W = 1                 // elements a cycle (lanes): 1, 2, 4, 8 or 16
) (
    input  logic               clk,
    input  logic               rst,
    // configuration, one handshake per layer
    input  logic               cfg_valid,
    output logic               cfg_ready,
    input  logic        [31:0] cfg_n,
    input  logic        [31:0] cfg_block_size,
    input  logic        [31:0] cfg_n_blocks,
    input  logic        [31:0] cfg_k,
    input  logic        [31:0] cfg_m,
    input  logic signed [31:0] cfg_k_shift,
    input  logic        [31:0] cfg_range_bits,
    input  logic        [31:0] cfg_layer_id,
    input  logic         [4:0] cfg_lmax_log2,
    input  logic               cfg_norm,          // block norm: gradblock_pkg::NORM_L1 / NORM_L2
    input  logic  [ADDR_W-1:0] cfg_res_base,
    input  logic               cfg_momentum_en,   // momentum correction for this layer
    input  logic        [15:0] cfg_m_fix,         // m = m_fix / 2^16 (spec §7.1)
    input  logic               cfg_momentum_mask, // factor masking (spec §7.3 step 4)
    input  logic  [ADDR_W-1:0] cfg_vel_base,      // velocity element 0 (momentum only)
    // gradient, float32 bits, ceil(n / W) beats of W lanes
    input  logic    [32*W-1:0] s_grad_tdata,      // (no tkeep: the engine counts by n)
    input  logic               s_grad_tvalid,
    output logic               s_grad_tready,
    input  logic               s_grad_tlast,
    // frame: dense W-word beats (every beat full but the last, which keeps lanes from 0)
    output logic    [32*W-1:0] m_frame_tdata,
    output logic       [W-1:0] m_frame_tkeep,
    output logic               m_frame_tvalid,
    input  logic               m_frame_tready,
    output logic               m_frame_tlast,
    // AXI4 master, 32*W-bit data: residual memory
    output logic               m_axi_arid,      // one ID: responses come back in order
    output logic  [ADDR_W-1:0] m_axi_araddr,
    output logic         [7:0] m_axi_arlen,
    output logic         [2:0] m_axi_arsize,
    output logic         [1:0] m_axi_arburst,
    output logic               m_axi_arvalid,
    input  logic               m_axi_arready,
    input  logic               m_axi_rid,
    input  logic    [32*W-1:0] m_axi_rdata,
    input  logic         [1:0] m_axi_rresp,
    input  logic               m_axi_rlast,
    input  logic               m_axi_rvalid,
    output logic               m_axi_rready,
    output logic               m_axi_awid,
    output logic  [ADDR_W-1:0] m_axi_awaddr,
    output logic         [7:0] m_axi_awlen,
    output logic         [2:0] m_axi_awsize,
    output logic         [1:0] m_axi_awburst,
    output logic               m_axi_awvalid,
    input  logic               m_axi_awready,
    output logic    [32*W-1:0] m_axi_wdata,
    output logic     [4*W-1:0] m_axi_wstrb,
    output logic               m_axi_wlast,
    output logic               m_axi_wvalid,
    input  logic               m_axi_wready,
    input  logic               m_axi_bid,
    input  logic         [1:0] m_axi_bresp,
    input  logic               m_axi_bvalid,
    output logic               m_axi_bready,
    // AXI4 master, 32*W-bit data: velocity memory (idle unless cfg_momentum_en)
    output logic               m_axi_vel_arid,
    output logic  [ADDR_W-1:0] m_axi_vel_araddr,
    output logic         [7:0] m_axi_vel_arlen,
    output logic         [2:0] m_axi_vel_arsize,
    output logic         [1:0] m_axi_vel_arburst,
    output logic               m_axi_vel_arvalid,
    input  logic               m_axi_vel_arready,
    input  logic               m_axi_vel_rid,
    input  logic    [32*W-1:0] m_axi_vel_rdata,
    input  logic         [1:0] m_axi_vel_rresp,
    input  logic               m_axi_vel_rlast,
    input  logic               m_axi_vel_rvalid,
    output logic               m_axi_vel_rready,
    output logic               m_axi_vel_awid,
    output logic  [ADDR_W-1:0] m_axi_vel_awaddr,
    output logic         [7:0] m_axi_vel_awlen,
    output logic         [2:0] m_axi_vel_awsize,
    output logic         [1:0] m_axi_vel_awburst,
    output logic               m_axi_vel_awvalid,
    input  logic               m_axi_vel_awready,
    output logic    [32*W-1:0] m_axi_vel_wdata,
    output logic     [4*W-1:0] m_axi_vel_wstrb,
    output logic               m_axi_vel_wlast,
    output logic               m_axi_vel_wvalid,
    input  logic               m_axi_vel_wready,
    input  logic               m_axi_vel_bid,
    input  logic         [1:0] m_axi_vel_bresp,
    input  logic               m_axi_vel_bvalid,
    output logic               m_axi_vel_bready,
    // status
    output logic               busy,
    output logic               done,
    output logic         [3:0] err_code,
    output logic        [31:0] sat_quant_count,
    output logic        [31:0] sat_feedback_count,
    output logic        [31:0] nan_count,
    output logic        [31:0] sat_momentum_count
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(ADDR_W >= 12 && ADDR_W <= 64)) begin : g_bad_addr_w
`ifdef __ICARUS__
        compress_engine__ADDR_W_must_be_12_to_64 u_parameter_error ();
`else
        $error("compress_engine: ADDR_W must be 12..64");
`endif
    end
    if (!(K_MAX >= 1)) begin : g_bad_k_max
`ifdef __ICARUS__
        compress_engine__K_MAX_must_be_at_least_1 u_parameter_error ();
`else
        $error("compress_engine: K_MAX must be >= 1");
`endif
    end
    if (!(LMAX_LOG2_MAX >= gradblock_pkg::ZRLE_LMAX_LOG2_MIN
          && LMAX_LOG2_MAX <= gradblock_pkg::ZRLE_LMAX_LOG2_MAX)) begin : g_bad_lmax_log2_max
`ifdef __ICARUS__
        compress_engine__LMAX_LOG2_MAX_must_be_1_to_24 u_parameter_error ();
`else
        $error("compress_engine: LMAX_LOG2_MAX must lie in the frame format's 1..24");
`endif
    end
    if (!(MAX_BURST >= 1 && MAX_BURST <= 256)) begin : g_bad_max_burst
`ifdef __ICARUS__
        compress_engine__MAX_BURST_must_be_1_to_256 u_parameter_error ();
`else
        $error("compress_engine: MAX_BURST must be 1..256");
`endif
    end
    if (!(RES_FIFO_AW >= 1 && RES_FIFO_AW <= 16)) begin : g_bad_res_fifo_aw
`ifdef __ICARUS__
        compress_engine__RES_FIFO_AW_must_be_1_to_16 u_parameter_error ();
`else
        $error("compress_engine: RES_FIFO_AW must be 1..16");
`endif
    end
    if (!(W == 1 || W == 2 || W == 4 || W == 8 || W == 16)) begin : g_bad_w
`ifdef __ICARUS__
        compress_engine__W_must_be_1_2_4_8_or_16 u_parameter_error ();
`else
        $error("compress_engine: W must be 1, 2, 4, 8 or 16");
`endif
    end
    if (!(MAX_BURST * 4 * W <= 4096)) begin : g_bad_burst_bytes
`ifdef __ICARUS__
        compress_engine__MAX_BURST_beats_must_fit_4_KiB u_parameter_error ();
`else
        $error("compress_engine: MAX_BURST beats of 4*W bytes must fit in 4 KiB");
`endif
    end
    localparam int L = $clog2(W);                 // lane index bits
    localparam int LB = L + 2;                    // byte offset bits of a beat
    localparam int LW = (W > 1) ? L : 1;          // a lane index's width
    localparam logic [31:0] W_U = W;
    localparam int CW = $clog2(W + 1);            // a count of lanes, 0..W
    localparam int SW = (K_MAX > 1) ? $clog2(K_MAX) : 1;
    localparam logic [31:0] K_MAX_U = K_MAX;
    localparam logic [4:0] LMAX_LIMIT = (LMAX_LOG2_MAX < 24) ? 5'(LMAX_LOG2_MAX) : 5'd24;
    localparam int XW = (ADDR_W > 34) ? ADDR_W + 1 : 35;   // base + 4n without overflow

    typedef enum logic [3:0] {IDLE, CHECK, MUL, CHECK_A, CHECK2, CHECK3, PASS1, PREP, ENC_CFG,
                              PASS2}
        state_t;
    state_t state;
    logic   phase2;      // pass 2's walkers and data sources are selected
    logic   in_pass1;    // state == PASS1, as a flop of its own (the join's take starts from it)
    logic   in_enc_cfg;  // state == ENC_CFG, as a flop (the encoder's configuration valid)
    logic   mem_err;     // an SLVERR/DECERR response came in a cycle ago
    logic [CW-1:0] inc_sat_q, inc_nan, inc_sat_fb, inc_sat_mo;   // flags (lanes) a cycle ago

    // ---- configuration ---------------------------------------------------------------------
    logic [31:0] n_r, bs_r, nb_r, k_r, m_r, ks_r, rb_r, id_r;
    logic  [4:0] lmax_r;
    logic        norm_r;                          // the layer's block norm kind (spec §2.3)
    logic [ADDR_W-1:0] base_r, vbase_r;
    logic        mom_r, mask_r;  // momentum on; factor masking asked for
    logic [15:0] m_fix_r;
    logic        vmask_r;        // pass 2 zeroes the velocity: mask_r and k_eff < n_blocks
    // the check runs over several cycles, each step registered (150 MHz on ECP5): CHECK
    // registers k_eff, min(B, n) and the residual's end address; MUL waits for span =
    // n_blocks * min(B, n) (mul32_pipe, 4 cycles) and registers n + min(B, n); CHECK_A
    // registers each condition; CHECK2 registers the first failing one; CHECK3 acts on it
    logic [31:0] k_eff, bs_n;            // min(k, n_blocks), min(B, n): registered in CHECK
    logic        n_nz;                   // n != 0, registered (the walkers' counts use it)
    logic [32:0] n_plus_bs;              // n + min(B, n)
    logic [63:0] span;                   // n_blocks * min(B, n)
    logic  [1:0] mul_wait;
    logic  [3:0] check_code, check_code_r;
    logic [31:0] nbeats;                 // ceil(n / W): the layer's beats, registered in CHECK
    logic [W-1:0] tail_keep;             // the lanes of the layer's last beat inside [0, n)

    assign cfg_ready = state == IDLE;
    assign busy = state != IDLE;

    mul32_pipe u_span_mul (.clk, .a(nb_r), .b(bs_n), .p(span));

    logic bad_addr, bad_bs, bad_nb, bad_k, bad_k_max, bad_lmax, bad_range, bad_m;
    logic bad_vel, bad_overlap, vel_before_res_end, res_before_vel_end;
    assign bad_overlap = mom_r && n_nz && vel_before_res_end && res_before_vel_end;
    logic [XW-1:0] res_end, vel_end;
    always_ff @(posedge clk) begin
        n_nz <= n_r != 32'd0;
        if (state == CHECK) begin
            k_eff <= (k_r < nb_r) ? k_r : nb_r;
            // min(B, n): ceil(n / B) = 1 for every B >= n
            bs_n <= (bs_r < n_r) ? bs_r : n_r;
            res_end <= XW'(base_r) + XW'({n_r, 2'b00});
            vel_end <= XW'(vbase_r) + XW'({n_r, 2'b00});
            if (W == 1) nbeats <= n_r;
            else nbeats <= 32'(({1'b0, n_r} + 33'(W - 1)) >> L);
            for (int l = 0; l < W; l++) tail_keep[l] <= 32'(l) <= (n_r - 32'd1) % W_U;
        end
        if (state == MUL) n_plus_bs <= {1'b0, n_r} + {1'b0, bs_n};
        if (state == CHECK_A) begin
            bad_addr <= base_r[LB-1:0] != '0 || res_end > (XW'(1) << ADDR_W);
            bad_bs <= bs_r == 32'd0;
            // n_blocks = ceil(n / B'), B' = min(B, n): span >= n > span - B'
            // span < n and span >= n + B' on 33 bits beside the high bits' test (two 64-bit
            // chains were the longest path here)
            bad_nb <= (n_r == 32'd0) ? nb_r != 32'd0
                    : (nb_r == 32'd0 || nb_r > n_r
                       || (span[63:32] == 32'd0 && span[31:0] < n_r)
                       || span[63:33] != 31'd0 || span[32:0] >= n_plus_bs);
            bad_k <= n_r != 32'd0 && k_r == 32'd0;
            bad_k_max <= k_eff > K_MAX_U;
            bad_lmax <= lmax_r == 5'd0 || lmax_r > LMAX_LIMIT;
            bad_range <= rb_r[31] || rb_r[30:23] == 8'hFF || rb_r == 32'd0;
            bad_m <= !m_r[31];
            bad_vel <= mom_r && (vbase_r[LB-1:0] != '0 || vel_end > (XW'(1) << ADDR_W));
            // [vbase, vel_end) and [base, res_end) share a byte (both empty when n = 0): the
            // two compares registered apart, ANDed in CHECK2 (bad_overlap)
            vel_before_res_end <= XW'(vbase_r) < res_end;
            res_before_vel_end <= XW'(base_r) < vel_end;
        end
    end
    assign check_code = bad_vel ? gradblock_pkg::ENGINE_ERR_VEL_ADDR
                      : bad_addr ? gradblock_pkg::ENGINE_ERR_RES_ADDR
                      : bad_overlap ? gradblock_pkg::ENGINE_ERR_VEL_OVERLAP
                      : bad_bs ? gradblock_pkg::ENGINE_ERR_BLOCK_SIZE_ZERO
                      : bad_nb ? gradblock_pkg::ENGINE_ERR_N_BLOCKS_MISMATCH
                      : bad_k ? gradblock_pkg::ENGINE_ERR_K_ZERO
                      : bad_k_max ? gradblock_pkg::ENGINE_ERR_K_OVER_K_MAX
                      : bad_lmax ? gradblock_pkg::ENGINE_ERR_LMAX_RANGE
                      : bad_range ? gradblock_pkg::ENGINE_ERR_RANGE_INVALID
                      : bad_m ? gradblock_pkg::ENGINE_ERR_M_BELOW_HALF
                      : gradblock_pkg::ENGINE_OK;

    always_ff @(posedge clk) begin
        if (cfg_valid && cfg_ready) begin
            n_r <= cfg_n;
            bs_r <= cfg_block_size;
            nb_r <= cfg_n_blocks;
            k_r <= cfg_k;
            m_r <= cfg_m;
            ks_r <= cfg_k_shift;
            rb_r <= cfg_range_bits;
            id_r <= cfg_layer_id;
            lmax_r <= cfg_lmax_log2;
            norm_r <= cfg_norm;
            base_r <= cfg_res_base;
            mom_r <= cfg_momentum_en;
            m_fix_r <= cfg_m_fix;
            mask_r <= cfg_momentum_mask;
            vbase_r <= cfg_vel_base;
        end
    end

    // ---- residual reads: AR walker, read path (credits, FIFO, skid: axi_read_path) --------
    logic [31:0] ar_idx, aw_idx, ar_rs, ar_re, aw_rs, aw_re, ar_elems, aw_elems, walk_count;
    logic        ar_req, ar_fire, ar_done, aw_req, aw_fire, aw_done, walk_start;
    logic  [8:0] ar_len, aw_len;
    logic [ADDR_W-1:0] ar_addr, aw_addr;
    logic  [W-1:0] aw_kf, aw_kl, vaw_kf, vaw_kl;   // write bursts' first / last beat lanes
    // each read FIFO holds a whole burst at least (a longer burst could never get its credits)
    localparam int RD_AW = (RES_FIFO_AW > $clog2(MAX_BURST)) ? RES_FIFO_AW : $clog2(MAX_BURST);
    logic        res_push;
    logic        rsk_valid, rsk_take;               // the read path's skid buffer, then a
    logic [32*W-1:0] res_head;                      // credit link to the join: the next r
    logic        rsk1_valid, rsk1_ready;            // between the two
    logic [32*W-1:0] rsk1_data;
    logic [31:0] rd_got;              // pass 2: beats received
    logic        res_home_unused;

    burst_walker #(.ADDR_W(ADDR_W), .MAX_BURST(MAX_BURST), .W(W)) u_ar_walk (
        .clk, .rst, .start(walk_start), .base(base_r), .count(walk_count),
        .range_idx(ar_idx), .range_start(ar_rs), .range_end(ar_re),
        .req_valid(ar_req), .req_fire(ar_fire), .req_addr(ar_addr), .req_len(ar_len),
        .req_elems(ar_elems), .done(ar_done)
    );

    // credits: a burst goes out only when the FIFO has room for all of it, so R never stalls
    // (registered: a burst waits one cycle more). LUT RAM up to 128 words (a block RAM's
    // clock-to-output is most of a cycle at 150 MHz). The skid buffer after the FIFO: its pop
    // depends only on the FIFO's `empty` and the skid's registered ready; then a credit link
    // (registers both ways) to the join, which takes its word locally while the FIFO sits by
    // the AXI port (with a skid buffer there instead, the take and the pop still met in one
    // cycle: 10.3 ns across the die on ECP5). The credits count a word as taken when it leaves
    // the FIFO: the words in the skid and the link are beyond the count
    axi_read_path #(.ADDR_W(ADDR_W), .DATA_W(32 * W), .MAX_BURST(MAX_BURST), .FIFO_AW(RD_AW),
                    .DISTRIBUTED(RD_AW <= 7), .REGISTERED(1'b1), .OUT_SKID(1'b1)) u_res_rd (
        .clk, .rst,
        .req_valid(ar_req), .req_addr(ar_addr), .req_len(ar_len), .req_fire(ar_fire),
        .m_axi_arid, .m_axi_araddr, .m_axi_arlen, .m_axi_arsize, .m_axi_arburst,
        .m_axi_arvalid, .m_axi_arready, .m_axi_rdata, .m_axi_rvalid, .m_axi_rready,
        .r_fire(res_push),
        .m_tdata(rsk1_data), .m_tvalid(rsk1_valid), .m_tready(rsk1_ready),
        .credits_home(res_home_unused)
    );

    logic        res_arrived_unused, rlo_valid, rlo_ready;
    logic [32*W-1:0] rlo_data;
    axis_credit_link #(.W(32 * W)) u_res_link (
        .clk, .rst, .s_tdata(rsk1_data), .s_tvalid(rsk1_valid), .s_tready(rsk1_ready),
        .m_tdata(rlo_data), .m_tvalid(rlo_valid), .m_tready(rlo_ready),
        .m_arrived(res_arrived_unused)
    );
    // a skid buffer after the link, by the join: the join's take (the encoder's in pass 2)
    // stays local, and the link sees the skid's registered ready (the take sent to the link's
    // ring pointer crossed the die: 7.0 ns on ECP5)
    axis_skid_buffer #(.W(32 * W)) u_res_out (
        .clk, .rst, .s_tdata(rlo_data), .s_tvalid(rlo_valid), .s_tready(rlo_ready),
        .m_tdata(res_head), .m_tvalid(rsk_valid), .m_tready(rsk_take)
    );

    // ---- velocity reads (momentum, pass 1 only): AR walker over [0, n), read path --------
    logic [31:0] var_idx, var_elems, var_count, vaw_idx, vaw_rs, vaw_re, vaw_elems, vaw_count;
    logic        var_req, var_fire, var_done, vaw_req, vaw_fire, vaw_done;
    logic  [8:0] var_len, vaw_len;
    logic [ADDR_W-1:0] var_addr, vaw_addr;
    logic        vel_push, vel_home_unused;
    logic [32*W-1:0] vel_head;                      // the beat of the elements leaving the
                                                    // quantiser
    logic        vsk1_valid, vsk1_ready;            // the read path's skid buffer -> the link
    logic [32*W-1:0] vsk1_data;

    assign var_count = (mom_r && !phase2 && n_nz) ? 32'd1 : 32'd0;

    burst_walker #(.ADDR_W(ADDR_W), .MAX_BURST(MAX_BURST), .W(W)) u_var_walk (
        .clk, .rst, .start(walk_start), .base(vbase_r), .count(var_count),
        .range_idx(var_idx), .range_start(32'd0), .range_end(n_r),
        .req_valid(var_req), .req_fire(var_fire), .req_addr(var_addr), .req_len(var_len),
        .req_elems(var_elems), .done(var_done)
    );

    // as the residual's
    axi_read_path #(.ADDR_W(ADDR_W), .DATA_W(32 * W), .MAX_BURST(MAX_BURST), .FIFO_AW(RD_AW),
                    .DISTRIBUTED(RD_AW <= 7), .REGISTERED(1'b1), .OUT_SKID(1'b1)) u_vel_rd (
        .clk, .rst,
        .req_valid(var_req), .req_addr(var_addr), .req_len(var_len), .req_fire(var_fire),
        .m_axi_arid(m_axi_vel_arid), .m_axi_araddr(m_axi_vel_araddr),
        .m_axi_arlen(m_axi_vel_arlen), .m_axi_arsize(m_axi_vel_arsize),
        .m_axi_arburst(m_axi_vel_arburst), .m_axi_arvalid(m_axi_vel_arvalid),
        .m_axi_arready(m_axi_vel_arready), .m_axi_rdata(m_axi_vel_rdata),
        .m_axi_rvalid(m_axi_vel_rvalid), .m_axi_rready(m_axi_vel_rready), .r_fire(vel_push),
        .m_tdata(vsk1_data), .m_tvalid(vsk1_valid), .m_tready(vsk1_ready),
        .credits_home(vel_home_unused)
    );

    // the velocity word is claimed at the join (v_have, counted from m_arrived) and taken
    // from the link's ring QUANT_L cycles later, when the claim comes out of a delay line by
    // the link, into vel_head, which meets the element as it leaves the quantiser (the join's
    // register, then QUANT_L stages). Every signal between the join, the link and
    // momentum_pipe is then a register (the join's take sent to the ring crossed the die:
    // 7.95 ns; so did the quantiser's valid: 7.2 ns). A claimed word is in the ring (claims
    // count arrivals), so the take never waits; 32 words, as a word stays in the ring over the
    // quantiser's latency.
    localparam int QUANT_L = gradblock_pkg::QUANT_LATENCY;   // (its m_tready is held high)
    logic        vel_arrived, vlo_valid, vel_take;
    logic [32*W-1:0] vlo_data;
    logic        v_claim;             // the join takes an element: it claims a velocity word
    logic [QUANT_L:1] vclaim_d;       // v_claim delayed 1 .. QUANT_L cycles
    localparam int VL_AW = 5;         // the velocity link's ring: 2^5 words
    axis_credit_link #(.W(32 * W), .AW(VL_AW)) u_vel_link (
        .clk, .rst, .s_tdata(vsk1_data), .s_tvalid(vsk1_valid), .s_tready(vsk1_ready),
        .m_tdata(vlo_data), .m_tvalid(vlo_valid), .m_tready(vel_take), .m_arrived(vel_arrived)
    );
    assign vel_take = vclaim_d[QUANT_L];
    always_ff @(posedge clk) begin
        if (rst) vclaim_d <= '0;
        else vclaim_d <= {vclaim_d[QUANT_L-1:1], v_claim};
        if (vel_take) vel_head <= vlo_data;
    end

    // bursts are counted by beats (rlast); only resp[1] (SLVERR/DECERR) matters; the AR
    // walkers' progress counts and range index bits above SW are not needed
    logic unused_axi;
    assign unused_axi = ^{m_axi_rid, m_axi_bid, m_axi_rlast, m_axi_rresp[0], m_axi_bresp[0], ar_elems, ar_done,
                          ar_idx[31:SW], aw_idx[31:SW], m_axi_vel_rid, m_axi_vel_bid,
                          m_axi_vel_rlast, m_axi_vel_rresp[0], m_axi_vel_bresp[0], var_idx,
                          var_elems, var_done, vaw_idx[31:SW], vaw_elems, res_home_unused,
                          vel_home_unused};

    // ---- pass 1: gradient + residual -> quantiser -> ef_add -> write-back, norms, select ----
    // a beat of W elements a cycle: one quantiser, momentum_pipe and ef_add per lane, side by
    // side on one valid. The lanes of the layer's last beat past n enter the quantisers as
    // zeros (g = r = 0, and u = 0 at momentum_pipe's input), so they raise no flag and give
    // a = 0; their writes are masked by WSTRB and the norms are told by tkeep.
    logic [31:0] in_left;             // gradient beats still to take
    logic        in_more, in_last;    // registered: in_left != 0, in_left == 1
    logic        in_open, p1_pop, q_s_valid, q_s_last;
    logic [32*W-1:0] q_s_grad, q_s_res;   // the join's register: g and r per lane
    logic        v_have;              // velocity words are in the link, not yet claimed

    // Pass 1 runs on credits: the join takes an element only when there is room for it at the
    // far end (the `a` FIFO after ef_add and, momentum on, the velocity write FIFO), so the
    // stages in between never stall: the quantiser, momentum_pipe and ef_add see m_tready = 1
    // and have no clock enables, and the take fans out to the link FIFOs and a few counters
    // only. (A stalling pipeline's enables and the join's register slice spanned the die:
    // 10 ns on ECP5.) An element is taken, a credit spent, and the credit comes back a cycle
    // after the element leaves that FIFO, ~22 cycles later: 32 credits keep one per cycle.
    // (Credits, FIFOs and links count beats of W elements.)
    localparam int PQ_AW = 5;         // the `a` and velocity write FIFOs: 2^5 beats each
    localparam logic [PQ_AW:0] PQ_DEPTH = (PQ_AW + 1)'(1 << PQ_AW);
    logic [PQ_AW:0] a_credits, v_credits;
    logic        a_room, v_room;      // registered: >= 3 credits a cycle ago, so >= 1 now
    logic        a_pop, a_back, v_back, a_spent, v_spent;   // v_*: credits of the velocity
                                                             // write FIFO
    logic        words_in;            // the residual word (and velocity word) of the element

    assign in_open = in_pass1 && in_more;
    assign words_in = rsk_valid && (!mom_r || v_have);
    assign s_grad_tready = in_open && words_in && a_room && (!mom_r || v_room);
    assign p1_pop = s_grad_tvalid && s_grad_tready;
    assign v_claim = p1_pop && mom_r;

    // the join's register: loaded every cycle, valid where an element was taken
    always_ff @(posedge clk) begin
        if (rst) q_s_valid <= 1'b0;
        else q_s_valid <= p1_pop;
        q_s_last <= in_last;
        for (int l = 0; l < W; l++) begin
            q_s_grad[32*l +: 32] <= (in_last && !tail_keep[l]) ? 32'd0 : s_grad_tdata[32*l +: 32];
            q_s_res[32*l +: 32] <= (in_last && !tail_keep[l]) ? 32'd0 : res_head[32*l +: 32];
        end
    end
    arrival_count #(.CW(VL_AW + 1)) u_vel_have (
        .clk, .rst, .arrived(vel_arrived), .take(v_claim), .nonzero(v_have)
    );

    logic [32*W-1:0] q_tdata, q_resid;
    logic [W-1:0]    q_sat, q_nan, q_valid_l, q_last_l, q_ready_l;
    logic            q_tvalid, q_tlast;
    assign q_tvalid = q_valid_l[0];   // the lanes move together
    assign q_tlast = q_last_l[0];

    // momentum: a register, momentum_pipe, then {r, u'} to ef_add and u' to the velocity write
    // FIFO together. Off: the quantiser feeds ef_add as it always did.
    logic [32*W-1:0] mq_q, mq_r, mq_u;
    logic        mq_valid, mq_last;
    logic [64*W-1:0] mo_tdata;        // lane l: {r, u'}
    logic [W-1:0] mo_sat, mo_valid_l, mo_last_l, ms_ready_l;
    logic        mo_tvalid, mo_tlast;
    logic        vwd_full, vwd_empty, vwd_pop;
    logic [32*W-1:0] vwd_head, vwd_in;
    logic        ef_s_valid, ef_s_last, ef_in_valid, ef_in_last;
    logic [64*W-1:0] ef_s_data, ef_in_data;   // lane l: {r, q} or {r, u'}
    logic [W-1:0] ef_s_ready_l;
    assign mo_tvalid = mo_valid_l[0];
    assign mo_tlast = mo_last_l[0];

    // the element's velocity word, claimed at the join, is in vel_head now (the lanes past n
    // of the last beat as zeros)
    always_ff @(posedge clk) begin
        if (rst) mq_valid <= 1'b0;
        else mq_valid <= q_tvalid && mom_r;
        mq_last <= q_tlast;
        mq_r <= q_resid;
        mq_q <= q_tdata;
        for (int l = 0; l < W; l++)
            mq_u[32*l +: 32] <= (q_tlast && !tail_keep[l]) ? 32'd0 : vel_head[32*l +: 32];
    end

    assign ef_in_valid = mom_r ? mo_tvalid : q_tvalid;
    assign ef_in_last = mom_r ? mo_tlast : q_tlast;

    logic [32*W-1:0] e_tdata, a_tdata, aq_tdata;
    logic [W-1:0] e_sat, a_sat, aq_sat, e_valid_l, e_last_l;
    logic        e_tvalid, e_tlast;
    logic        a_tvalid, a_tready, a_tlast, a_accept;
    logic        aq_tlast, aq_full, aq_empty, ask_ready;
    assign e_tvalid = e_valid_l[0];
    assign e_tlast = e_last_l[0];

    for (genvar l = 0; l < W; l++) begin : g_lane
        // r rides beside the gradient through the quantiser's stages
        quantiser #(.UW(32)) u_quantiser (
            .clk, .rst,
            .cfg_m(m_r), .cfg_k(ks_r), .cfg_range_bits(rb_r),
            .s_tdata(q_s_grad[32*l +: 32]), .s_tuser(q_s_res[32*l +: 32]), .s_tvalid(q_s_valid),
            .s_tready(q_ready_l[l]), .s_tlast(q_s_last),
            .m_tdata(q_tdata[32*l +: 32]),
            .m_tuser({q_resid[32*l +: 32], q_nan[l], q_sat[l]}), .m_tvalid(q_valid_l[l]),
            .m_tready(1'b1), .m_tlast(q_last_l[l])
        );

        momentum_pipe u_momentum (
            .clk, .rst, .m_fix(m_fix_r),
            .s_tdata({mq_r[32*l +: 32], mq_u[32*l +: 32], mq_q[32*l +: 32]}),
            .s_tvalid(mq_valid), .s_tready(ms_ready_l[l]), .s_tlast(mq_last),
            .m_tdata(mo_tdata[64*l +: 64]), .m_tuser(mo_sat[l]), .m_tvalid(mo_valid_l[l]),
            .m_tready(1'b1), .m_tlast(mo_last_l[l])
        );
        assign vwd_in[32*l +: 32] = mo_tdata[64*l +: 32];
        assign ef_in_data[64*l +: 64] = mom_r ? mo_tdata[64*l +: 64]
                                              : {q_resid[32*l +: 32], q_tdata[32*l +: 32]};

        ef_add #(.REG_SUM(1'b1)) u_ef_add (
            .clk, .rst,
            .s_tdata(ef_s_data[64*l +: 64]), .s_tvalid(ef_s_valid), .s_tready(ef_s_ready_l[l]),
            .s_tlast(ef_s_last),
            .m_tdata(e_tdata[32*l +: 32]), .m_tuser(e_sat[l]), .m_tvalid(e_valid_l[l]),
            .m_tready(1'b1), .m_tlast(e_last_l[l])
        );
    end

    // room is there: the credits
    sync_fifo #(.W(32 * W), .AW(PQ_AW)) u_vwd_fifo (
        .clk, .rst, .clear(1'b0), .push(mo_tvalid), .wr_data(vwd_in), .pop(vwd_pop),
        .rd_data(vwd_head), .full(vwd_full), .empty(vwd_empty)
    );

    // a register between that choice and ef_add: ef_add's 33-bit sum starts from flops
    always_ff @(posedge clk) begin
        if (rst) ef_s_valid <= 1'b0;
        else ef_s_valid <= ef_in_valid;
        {ef_s_last, ef_s_data} <= {ef_in_last, ef_in_data};
    end

    // the `a` FIFO (room is there: the credits), then a skid buffer, its ready a flop, to the
    // fork: the ready of topk_select, block_l1 and the write FIFO stops there
    sync_fifo #(.W(33 * W + 1), .AW(PQ_AW)) u_a_fifo (
        .clk, .rst, .clear(1'b0), .push(e_tvalid), .wr_data({e_sat, e_tlast, e_tdata}),
        .pop(a_pop), .rd_data({aq_sat, aq_tlast, aq_tdata}), .full(aq_full), .empty(aq_empty)
    );
    assign a_pop = !aq_empty && ask_ready;
    axis_skid_buffer #(.W(33 * W + 1)) u_a_slice (
        .clk, .rst,
        .s_tdata({aq_sat, aq_tlast, aq_tdata}), .s_tvalid(!aq_empty), .s_tready(ask_ready),
        .m_tdata({a_sat, a_tlast, a_tdata}), .m_tvalid(a_tvalid), .m_tready(a_tready)
    );

    // credits: spent at the take and back as the element leaves its FIFO, each counted a cycle
    // later through a register; so the count lags by up to two takes, and room is >= 3
    always_ff @(posedge clk) begin
        if (rst) begin
            a_credits <= PQ_DEPTH;
            v_credits <= PQ_DEPTH;
            a_room <= 1'b0;
            v_room <= 1'b0;
            a_back <= 1'b0;
            v_back <= 1'b0;
            a_spent <= 1'b0;
            v_spent <= 1'b0;
        end else begin
            a_back <= a_pop;
            v_back <= vwd_pop;
            a_spent <= p1_pop;
            v_spent <= v_claim;
            a_credits <= a_credits - (PQ_AW + 1)'(a_spent) + (PQ_AW + 1)'(a_back);
            v_credits <= v_credits - (PQ_AW + 1)'(v_spent) + (PQ_AW + 1)'(v_back);
            a_room <= a_credits >= (PQ_AW + 1)'(3);
            v_room <= v_credits >= (PQ_AW + 1)'(3);
        end
    end

    // never high: the credits keep both FIFOs from filling; the stages never stall (the lanes
    // past 0 have the same valid and last as lane 0)
    logic unused_pass1;
    assign unused_pass1 = ^{aq_full, vwd_full, q_ready_l, ms_ready_l, ef_s_ready_l, vlo_valid,
                            res_arrived_unused, q_valid_l, q_last_l, mo_valid_l, mo_last_l,
                            e_valid_l, e_last_l};

    // a goes to the norms and to the write-back FIFO together
    logic wd_full, wd_empty, wd_pop, l1_ready;
    logic [32*W-1:0] wd_head;
    assign a_tready = l1_ready && !wd_full;
    assign a_accept = a_tvalid && a_tready;

    sync_fifo #(.W(32 * W), .AW(4)) u_wd_fifo (
        .clk, .rst, .clear(1'b0), .push(a_accept), .wr_data(a_tdata), .pop(wd_pop),
        .rd_data(wd_head), .full(wd_full), .empty(wd_empty)
    );

    logic [95:0] l1_tdata, norm_tdata;
    logic        l1_tvalid, l1_tready, l1_tlast, norm_tvalid, norm_tready, norm_tlast;

    if (W == 1) begin : g_norm1
        block_l1 u_block_l1 (
            .clk, .rst, .cfg_block_size(bs_r), .cfg_norm(norm_r),
            .s_tdata(a_tdata), .s_tvalid(a_tvalid && !wd_full), .s_tready(l1_ready),
            .s_tlast(a_tlast),
            .m_tdata(l1_tdata), .m_tvalid(l1_tvalid), .m_tready(l1_tready),
            .m_tlast(l1_tlast)
        );
    end else begin : g_norm_lanes
        // the last beat's lanes past n are not elements
        logic [W-1:0] a_keep;
        assign a_keep = a_tlast ? tail_keep : '1;
        block_norm_lanes #(.W(W)) u_block_norms (
            .clk, .rst, .cfg_block_size(bs_r), .cfg_norm(norm_r),
            .s_tdata(a_tdata), .s_tkeep(a_keep), .s_tvalid(a_tvalid && !wd_full),
            .s_tready(l1_ready), .s_tlast(a_tlast),
            .m_tdata(l1_tdata), .m_tvalid(l1_tvalid), .m_tready(l1_tready),
            .m_tlast(l1_tlast)
        );
    end

    // a register slice between the norms and topk_select: block_l1's stage enable (fanout
    // ~200 flops) and the fork's a_tready start from this slice's registered ready, not from
    // topk_select's ready (a 9.5 ns path across the die on ECP5 without it)
    axis_skid_buffer #(.W(97)) u_norm_slice (
        .clk, .rst, .s_tdata({l1_tlast, l1_tdata}), .s_tvalid(l1_tvalid), .s_tready(l1_tready),
        .m_tdata({norm_tlast, norm_tdata}), .m_tvalid(norm_tvalid), .m_tready(norm_tready)
    );

    logic [31:0] sel_tdata;
    logic        sel_tvalid, sel_tready, sel_tlast, topk_cfg_err;

    topk_select #(.K_MAX(K_MAX)) u_topk (
        .clk, .rst, .cfg_k(k_eff), .cfg_err(topk_cfg_err),
        .s_tdata(norm_tdata), .s_tvalid(norm_tvalid), .s_tready(norm_tready),
        .s_tlast(norm_tlast),
        .m_tdata(sel_tdata), .m_tvalid(sel_tvalid), .m_tready(sel_tready), .m_tlast(sel_tlast)
    );

    logic unused_topk;
    assign unused_topk = topk_cfg_err;   // k_eff is checked to lie in 1..K_MAX

    // ---- selected blocks: sorted, then indices -> start and end elements -----------------
    // PREP streams the k_eff sorted indices j through a pipelined multiply (one per cycle) and
    // writes each selected block's range, start j*B and end min(j*B + B, n), into `ranges`
    logic [SW:0]         prep_rd;       // slot read this cycle
    logic                prep_rd_valid, prep_rd_last;
    logic [31:0]         prep_index;
    logic [31:0]         prep_pick;     // the sorted list's head: the slot read a cycle ago
                                        // (each read pops the head a cycle later)
    logic                prep_rd_v0, prep_rd_l0;   // {valid, last} of the slot read a cycle ago
    logic [SW-1:0]       prep_rd_s0;               // ... and its number
    logic [63:0]         prep_product;
    // delay line beside the multiply: {valid, last} of the slot read 2..8 cycles ago, the
    // slot number 2..7 cycles ago (the read takes two cycles: the head, then prep_index)
    localparam int PD = 7;
    logic [PD:1]         prep_v, prep_l;
    logic [(PD-1)*SW-1:0] prep_s;   // slot d (1..PD-1) in bits [d*SW-1 -: SW]: one vector, so
                                    // yosys sees a shift register, not a memory it must replace
    logic [31:0]         prep_start6, prep_left6;   // stage 6: start, n - start
    logic [31:0]         prep_start7, prep_sum7;    // stage 7: start, start + B and whether
    logic                prep_short7;               // the block is the last, shorter one;
    logic [SW-1:0]       prep_s7;                   // the range goes to `ranges` at this slot

    // (Icarus 11 miscompiles an enum comparison written in a port connection: named signals)
    logic sort_clear, sort_busy;      // sort_clear: a flop, high in CHECK
    // k_eff <= K_MAX < 2^(SW+1) once the check has passed: the compares take SW + 1 bits
    assign prep_rd_valid = state == PREP && prep_rd < k_eff[SW:0];
    assign prep_rd_last = prep_rd + 1'b1 == k_eff[SW:0];

    // the indices go in one every two cycles (index_sort registers its compares)
    index_sort #(.K_MAX(K_MAX)) u_sort (
        .clk, .rst, .clear(sort_clear), .s_tvalid(sel_tvalid), .s_tready(sel_tready),
        .s_tdata(sel_tdata), .busy(sort_busy), .pop(prep_rd_v0), .head(prep_pick)
    );

    // the flag counts, cleared at the layer's start (sort_clear: a flop, high in CHECK) and
    // counted from flops beside them: each flag is registered with its valid first (a stage's
    // valid as the enable of 64 flops across the die was 6.8 ns on ECP5, the state's decode
    // into the clear 7.1 ns); a count is complete a cycle after its flag, long before `done`
    // (a beat's flags are counted lane by lane: the lanes set, 0..W)
    function automatic logic [CW-1:0] lanes_set(input logic [W-1:0] f);
        lanes_set = '0;
        for (int l = 0; l < W; l++) lanes_set = lanes_set + CW'(f[l]);
    endfunction
    always_ff @(posedge clk) begin
        if (rst) begin
            {inc_sat_q, inc_nan, inc_sat_fb, inc_sat_mo} <= '0;
        end else begin
            inc_sat_q <= q_tvalid ? lanes_set(q_sat) : '0;
            inc_nan <= q_tvalid ? lanes_set(q_nan) : '0;
            inc_sat_fb <= a_accept ? lanes_set(a_sat) : '0;
            inc_sat_mo <= mo_tvalid ? lanes_set(mo_sat) : '0;
        end
        if (rst || sort_clear) begin
            sat_quant_count <= 32'd0;
            nan_count <= 32'd0;
            sat_feedback_count <= 32'd0;
            sat_momentum_count <= 32'd0;
        end else begin
            if (inc_sat_q != '0) sat_quant_count <= sat_quant_count + 32'(inc_sat_q);
            if (inc_nan != '0) nan_count <= nan_count + 32'(inc_nan);
            if (inc_sat_fb != '0) sat_feedback_count <= sat_feedback_count + 32'(inc_sat_fb);
            if (inc_sat_mo != '0) sat_momentum_count <= sat_momentum_count + 32'(inc_sat_mo);
        end
    end

    mul32_pipe u_start_mul (.clk, .a(prep_index), .b(bs_r), .p(prep_product));

    always_ff @(posedge clk) begin
        prep_rd_v0 <= prep_rd_valid;
        prep_rd_l0 <= prep_rd_last;
        prep_rd_s0 <= prep_rd[SW-1:0];
        prep_index <= prep_pick;
        prep_v <= {prep_v[PD-1:1], prep_rd_v0};
        prep_l <= {prep_l[PD-1:1], prep_rd_l0};
        prep_s <= {prep_s[(PD-2)*SW-1:0], prep_rd_s0};
        // j*B < n for a selected block: the low 32 bits are the product
        prep_start6 <= prep_product[31:0];
        prep_left6 <= n_r - prep_product[31:0];
        prep_start7 <= prep_start6;
        prep_sum7 <= prep_start6 + bs_r;
        prep_short7 <= prep_left6 <= bs_r;
        prep_s7 <= prep_s[(PD-1)*SW-1 -: SW];
    end

    logic unused_product;
    assign unused_product = ^prep_product[63:32];

    // range i of pass 2 is selected block i, ranges[i] = {end, start}. A small table in LUT
    // RAM, one copy per reader (synthesis duplicates it for each read port), each read
    // registered: the walkers latch the range a cycle after they select it. Flops and K_MAX-way
    // muxes here (eight of them, reading lists spread over the die) made the routing congested.
    // Pass 1's range is [0, n).
    (* ram_style = "distributed" *) logic [63:0] ranges [1 << SW];
    always_ff @(posedge clk)
        if (prep_v[PD]) ranges[prep_s7] <= {prep_short7 ? n_r : prep_sum7, prep_start7};

    always_ff @(posedge clk) begin
        {ar_re, ar_rs} <= phase2 ? ranges[ar_idx[SW-1:0]] : {n_r, 32'd0};
        {aw_re, aw_rs} <= phase2 ? ranges[aw_idx[SW-1:0]] : {n_r, 32'd0};
        {vaw_re, vaw_rs} <= phase2 ? ranges[vaw_idx[SW-1:0]] : {n_r, 32'd0};
    end
    assign walk_count = phase2 ? k_eff : (n_nz ? 32'd1 : 32'd0);

    // ---- write-back: AW walker, write queue (AW, burst lengths, W, B: axi_write_queue) ----
    logic b_fire, vb_fire;

    burst_walker #(.ADDR_W(ADDR_W), .MAX_BURST(MAX_BURST), .W(W)) u_aw_walk (
        .clk, .rst, .start(walk_start), .base(base_r), .count(walk_count),
        .range_idx(aw_idx), .range_start(aw_rs), .range_end(aw_re),
        .req_valid(aw_req), .req_fire(aw_fire), .req_addr(aw_addr), .req_len(aw_len),
        .req_elems(aw_elems), .done(aw_done)
    );

    // pass 2 writes zeros over words already read, never ahead of the reads; the compare is
    // registered (a burst's fields are steady while it waits, and rd_got only grows, so a
    // one-cycle-old yes still holds)
    // (the sum is registered first, so the compare takes it one cycle later: aw_waited says
    // the burst was already waiting then, so the sum is this burst's)
    logic aw_read_ok, aw_waited, aw_waited2, aw_need_ok;
    logic [31:0] aw_need;             // beats this burst and the ones before it cover
    always_ff @(posedge clk) begin
        aw_need <= aw_elems + {23'd0, aw_len};
        aw_waited <= aw_req && !aw_fire;
        // the compare is registered on its own too, and aw_waited2 says it was this burst's
        aw_need_ok <= aw_need <= rd_got;
        aw_waited2 <= aw_req && !aw_fire && aw_waited;
        aw_read_ok <= aw_req && !aw_fire && aw_waited2 && aw_need_ok;
    end

    // W writes a (pass 1) or zeros (pass 2). W's copy of phase2 is a flop in the queue, a
    // cycle late: W is idle whenever phase2 changes (pass 1's writes are all answered before
    // pass 2, pass 2's before the next layer's pass 1), and the flop sits by W (phase2's own
    // fanout spans the die: 3.1 ns of routing on ECP5). writes_idle is registered: the passes
    // end on it, and once a pass's writes are all answered nothing starts new ones before the
    // next walk_start
    logic writes_idle;
    axi_write_queue #(.ADDR_W(ADDR_W), .DATA_W(32 * W), .MAX_BURST(MAX_BURST), .KEEP_W(W))
    u_res_wq (
        .clk, .rst,
        .req_valid(aw_req && (!phase2 || aw_read_ok)), .req_addr(aw_addr), .req_len(aw_len),
        .req_keep_first(aw_kf), .req_keep_last(aw_kl),
        .req_fire(aw_fire), .req_done(aw_done),
        .zeros(phase2), .s_data(wd_head), .s_valid(!wd_empty), .s_take(wd_pop),
        .m_axi_awid, .m_axi_awaddr, .m_axi_awlen, .m_axi_awsize, .m_axi_awburst,
        .m_axi_awvalid, .m_axi_awready, .m_axi_wdata, .m_axi_wstrb, .m_axi_wlast,
        .m_axi_wvalid, .m_axi_wready, .m_axi_bvalid, .m_axi_bready,
        .b_fire, .idle(writes_idle)
    );

    // ---- velocity write-back: u' over [0, n) in pass 1; zeros over the selected blocks in pass
    // 2 when masking (no reads there, and pass 1's writes have all been answered by then) ----
    assign vaw_count = phase2 ? (vmask_r ? k_eff : 32'd0)
                     : ((mom_r && n_nz) ? 32'd1 : 32'd0);

    burst_walker #(.ADDR_W(ADDR_W), .MAX_BURST(MAX_BURST), .W(W)) u_vaw_walk (
        .clk, .rst, .start(walk_start), .base(vbase_r), .count(vaw_count),
        .range_idx(vaw_idx), .range_start(vaw_rs), .range_end(vaw_re),
        .req_valid(vaw_req), .req_fire(vaw_fire), .req_addr(vaw_addr), .req_len(vaw_len),
        .req_elems(vaw_elems), .done(vaw_done)
    );

    // the write strobes' lanes: a range that starts or ends mid-beat (pass 1's [0, n) ends
    // mid-beat when W does not divide n; a selected block may start or end anywhere) writes
    // only its own lanes of its first and last beat. A burst's first beat is the range's first
    // when its address is that beat's, its last beat the range's last when it ends at the
    // range's end beat (the range is registered at the walker's SEL, these a cycle later, and
    // the walker offers the burst two cycles after that at the earliest)
    if (W == 1) begin : g_keep1
        assign aw_kf = 1'b1;
        assign aw_kl = 1'b1;
        assign vaw_kf = 1'b1;
        assign vaw_kl = 1'b1;
    end else begin : g_keep_lanes
        logic [ADDR_W-1:0] aw_first_at, aw_end_at, vaw_first_at, vaw_end_at;  // byte addresses
        logic [W-1:0] aw_first_keep, aw_last_keep, vaw_first_keep, vaw_last_keep;
        logic [31:0] aw_last_el, vaw_last_el;
        assign aw_last_el = aw_re - 32'd1;
        assign vaw_last_el = vaw_re - 32'd1;
        always_ff @(posedge clk) begin
            // (a beat's address as {element / W, LB zeros}: yosys misreads ~ADDR_W'(...))
            aw_first_at <= base_r + ADDR_W'({aw_rs >> L, {LB{1'b0}}});
            aw_end_at <= base_r + ADDR_W'({aw_last_el >> L, {LB{1'b0}}}) + ADDR_W'(4 * W);
            vaw_first_at <= vbase_r + ADDR_W'({vaw_rs >> L, {LB{1'b0}}});
            vaw_end_at <= vbase_r + ADDR_W'({vaw_last_el >> L, {LB{1'b0}}}) + ADDR_W'(4 * W);
            // lanes start .. W-1 of the first beat, 0 .. last of the last
            aw_first_keep <= {W{1'b1}} << aw_rs[L-1:0];
            aw_last_keep <= {W{1'b1}} >> (L'(W - 1) - aw_last_el[L-1:0]);
            vaw_first_keep <= {W{1'b1}} << vaw_rs[L-1:0];
            vaw_last_keep <= {W{1'b1}} >> (L'(W - 1) - vaw_last_el[L-1:0]);
        end
        assign aw_kf = (aw_addr == aw_first_at) ? aw_first_keep : '1;
        assign aw_kl = (aw_addr + (ADDR_W'(aw_len) << LB) == aw_end_at) ? aw_last_keep : '1;
        assign vaw_kf = (vaw_addr == vaw_first_at) ? vaw_first_keep : '1;
        assign vaw_kl = (vaw_addr + (ADDR_W'(vaw_len) << LB) == vaw_end_at) ? vaw_last_keep : '1;
    end

    // as the residual's (pass 2 writes velocity zeros only when masking: and-ed before the
    // queue's flop, so synthesis keeps the two flops apart, each by its own W channel)
    logic vel_writes_idle;
    axi_write_queue #(.ADDR_W(ADDR_W), .DATA_W(32 * W), .MAX_BURST(MAX_BURST), .KEEP_W(W))
    u_vel_wq (
        .clk, .rst,
        .req_valid(vaw_req), .req_addr(vaw_addr), .req_len(vaw_len),
        .req_keep_first(vaw_kf), .req_keep_last(vaw_kl), .req_fire(vaw_fire),
        .req_done(vaw_done),
        .zeros(phase2 && vmask_r), .s_data(vwd_head), .s_valid(!vwd_empty), .s_take(vwd_pop),
        .m_axi_awid(m_axi_vel_awid), .m_axi_awaddr(m_axi_vel_awaddr),
        .m_axi_awlen(m_axi_vel_awlen), .m_axi_awsize(m_axi_vel_awsize),
        .m_axi_awburst(m_axi_vel_awburst), .m_axi_awvalid(m_axi_vel_awvalid),
        .m_axi_awready(m_axi_vel_awready), .m_axi_wdata(m_axi_vel_wdata),
        .m_axi_wstrb(m_axi_vel_wstrb), .m_axi_wlast(m_axi_vel_wlast),
        .m_axi_wvalid(m_axi_vel_wvalid), .m_axi_wready(m_axi_vel_wready),
        .m_axi_bvalid(m_axi_vel_bvalid), .m_axi_bready(m_axi_vel_bready),
        .b_fire(vb_fire), .idle(vel_writes_idle)
    );

    // ---- pass 2: zero runs from counts, literals from the read FIFO -> run encoder ---------
    // per selected block (and once more for the gap after the last): SEL sets the list index,
    // PICK registers the block's start and end (read from `ranges`), PREP the gap before
    // it and its length, GAP sends the gap (a count), LIT its words: at W lanes a beat a cycle,
    // the lanes of the block in it kept (the first and last beat partial when the block starts
    // or ends mid-beat), c_left counting beats
    typedef enum logic [2:0] {C_SEL, C_PICK, C_PREP, C_GAP, C_LIT, C_END} cons_t;
    cons_t       c_state;
    logic [31:0] c_idx, c_pos, c_start, c_end, c_gap, c_left;
    logic        c_has;          // c_idx < k_eff: a block follows the gap
    logic        c_gap_nz;       // registered c_gap != 0
    logic        c_left_one;     // registered c_left == 1
    logic [LW-1:0] c_lane;       // the block's first lane in the beat at res_head
    logic  [W-1:0] c_last_keep;  // the block's lanes in its last beat, from lane 0
    logic        c_in_gap, c_in_lit;   // c_state == C_GAP / C_LIT, as flops of their own: the
                                       // encoder's valid and the take start from them (through
                                       // the state's decode, the take ran 6.9 ns on ECP5)
    logic [31:0] c_start_pick, c_end_pick;     // ranges[c_idx], a cycle after C_SEL
    logic [31:0] c_start_beat, c_last_beat;    // the block's first and last beat (W > 1)

    always_ff @(posedge clk) {c_end_pick, c_start_pick} <= ranges[c_idx[SW-1:0]];
    assign c_start_beat = c_start >> L;
    assign c_last_beat = (c_end - 32'd1) >> L;

    logic        enc_valid, enc_ready, enc_take, enc_cfg_valid, enc_cfg_ready, frame_done;

    // (the consumer moves only in PASS2: C_GAP and C_LIT are never held outside it)
    assign enc_valid = (c_in_gap && c_gap_nz) || (c_in_lit && rsk_valid);
    assign enc_take = enc_valid && enc_ready;
    assign rsk_take = phase2 ? (c_in_lit && rsk_valid && enc_ready) : p1_pop;
    assign enc_cfg_valid = in_enc_cfg;

    // a register slice in front of the encoder: its ready is a flop (the encoder's take
    // decision does not run on into the consumer), and the encoder's per-beat arithmetic
    // (word != 0, the beat's count, in_count + count) starts from flops, not from this mux
    if (W == 1) begin : g_enc1
        logic [31:0] enc_data, enc_count;
        logic [63:0] es_data;             // {count, word}
        logic        es_valid, es_ready;
        assign enc_data = c_in_gap ? 32'd0 : res_head;
        assign enc_count = c_in_gap ? c_gap : 32'd1;
        axis_skid_buffer #(.W(64)) u_enc_slice (
            .clk, .rst, .s_tdata({enc_count, enc_data}), .s_tvalid(enc_valid),
            .s_tready(enc_ready), .m_tdata(es_data), .m_tvalid(es_valid), .m_tready(es_ready)
        );

        zrle_run_encoder #(.LMAX_LOG2_MAX(LMAX_LOG2_MAX)) u_encoder (
            .clk, .rst,
            .cfg_valid(enc_cfg_valid), .cfg_ready(enc_cfg_ready),
            .cfg_layer_id(id_r), .cfg_n(n_r), .cfg_range_bits(rb_r), .cfg_lmax_log2(lmax_r),
            .s_tdata(es_data[31:0]), .s_tcount(es_data[63:32]), .s_tvalid(es_valid),
            .s_tready(es_ready),
            .m_tdata(m_frame_tdata), .m_tvalid(m_frame_tvalid), .m_tready(m_frame_tready),
            .m_tlast(m_frame_tlast)
        );
        assign m_frame_tkeep = 1'b1;
        logic unused_lanes;
        assign unused_lanes = ^{c_lane, c_last_keep, c_start_beat, c_last_beat};
    end else begin : g_enc_lanes
        // a zero-run beat (tzero, count) or the block's lanes of the beat at res_head
        logic [W-1:0] enc_keep;
        logic [32*W+W+32:0] es_data;      // {tzero, count, keep, beat}
        logic        es_valid, es_ready;
        assign enc_keep = ({W{1'b1}} << c_lane) & (c_left_one ? c_last_keep : '1);
        axis_skid_buffer #(.W(32 * W + W + 33)) u_enc_slice (
            .clk, .rst, .s_tdata({c_in_gap, c_gap, enc_keep, res_head}), .s_tvalid(enc_valid),
            .s_tready(enc_ready), .m_tdata(es_data), .m_tvalid(es_valid), .m_tready(es_ready)
        );

        zrle_lane_encoder #(.W(W), .LMAX_LOG2_MAX(LMAX_LOG2_MAX)) u_encoder (
            .clk, .rst,
            .cfg_valid(enc_cfg_valid), .cfg_ready(enc_cfg_ready),
            .cfg_layer_id(id_r), .cfg_n(n_r), .cfg_range_bits(rb_r), .cfg_lmax_log2(lmax_r),
            .s_tdata(es_data[32*W-1:0]), .s_tkeep(es_data[32*W +: W]),
            .s_tcount(es_data[32*W+W +: 32]), .s_tzero(es_data[32*W+W+32]),
            .s_tvalid(es_valid), .s_tready(es_ready),
            .m_tdata(m_frame_tdata), .m_tkeep(m_frame_tkeep), .m_tvalid(m_frame_tvalid),
            .m_tready(m_frame_tready), .m_tlast(m_frame_tlast)
        );
    end

    // ---- control ---------------------------------------------------------------------------
    logic topk_done;    // the selected indices have all left topk_select (or there are none);
                        // pass 1 ends when index_sort has put the last one in its list too

    // walk_start: a registered pulse the cycle after a pass begins (phase2 is then settled)
    always_ff @(posedge clk) begin
        done <= 1'b0;
        walk_start <= 1'b0;
        sort_clear <= state == IDLE && cfg_valid;     // the cycle of CHECK
        if (rst) begin
            state <= IDLE;
            phase2 <= 1'b0;
            in_pass1 <= 1'b0;
            in_enc_cfg <= 1'b0;
            mem_err <= 1'b0;
            err_code <= 4'd0;
            c_state <= C_END;
            c_in_gap <= 1'b0;
            c_in_lit <= 1'b0;
        end else begin
            case (state)
                IDLE: if (cfg_valid) begin
                    state <= CHECK;
                    err_code <= 4'd0;
                end
                CHECK: begin
                    state <= MUL;
                    mul_wait <= 2'd0;
                end
                MUL: begin       // span's operands went in at the end of CHECK: 4 cycles
                    mul_wait <= mul_wait + 2'd1;
                    if (mul_wait == 2'd3) state <= CHECK_A;
                end
                CHECK_A: state <= CHECK2;
                CHECK2: begin
                    check_code_r <= check_code;
                    state <= CHECK3;
                end
                CHECK3: begin
                    err_code <= check_code_r;
                    if (check_code_r != 4'd0) begin
                        state <= IDLE;
                        done <= 1'b1;
                    end else begin
                        state <= PASS1;
                        in_pass1 <= 1'b1;
                        walk_start <= 1'b1;
                    end
                    phase2 <= 1'b0;
                    in_left <= nbeats;
                    in_more <= nbeats != 32'd0;
                    in_last <= nbeats == 32'd1;
                    topk_done <= n_r == 32'd0;
                    prep_rd <= '0;
                    frame_done <= 1'b0;
                    vmask_r <= mom_r && mask_r && k_eff < nb_r;
                end
                PASS1: if (topk_done && !sort_busy && writes_idle && vel_writes_idle) begin
                    state <= (k_eff == 32'd0) ? ENC_CFG : PREP;
                    in_enc_cfg <= k_eff == 32'd0;
                    in_pass1 <= 1'b0;
                end
                PREP: begin
                    if (prep_rd_valid) prep_rd <= prep_rd + 1'b1;
                    if (prep_v[PD] && prep_l[PD]) begin               // the last end is written
                        state <= ENC_CFG;
                        in_enc_cfg <= 1'b1;
                    end
                end
                ENC_CFG: if (enc_cfg_ready) begin
                    in_enc_cfg <= 1'b0;
                    state <= PASS2;
                    phase2 <= 1'b1;
                    walk_start <= 1'b1;
                    c_state <= C_SEL;
                    c_idx <= 32'd0;
                    c_pos <= 32'd0;
                end
                PASS2: if (frame_done && writes_idle && vel_writes_idle && c_state == C_END) begin
                    state <= IDLE;
                    done <= 1'b1;
                end
                default: state <= IDLE;
            endcase

            if (sel_tvalid && sel_tready && sel_tlast) topk_done <= 1'b1;
            if (s_grad_tvalid && s_grad_tready) begin
                in_left <= in_left - 32'd1;
                in_more <= !in_last;
                in_last <= in_left == 32'd2;
                if (s_grad_tlast != in_last) err_code <= gradblock_pkg::ENGINE_ERR_TLAST_MISPLACED;
            end

            // zero outside pass 2 (its reset is then a flop: no state decode into 32 resets)
            if (!phase2) rd_got <= 32'd0;
            else if (res_push) rd_got <= rd_got + 32'd1;
            // an error response is flagged a cycle later, through mem_err (registered: the
            // responses come in from four ports spread over the die); every response is in
            // long before `done`
            mem_err <= (res_push && m_axi_rresp[1]) || (b_fire && m_axi_bresp[1])
                       || (vel_push && m_axi_vel_rresp[1]) || (vb_fire && m_axi_vel_bresp[1]);
            if (mem_err) err_code <= gradblock_pkg::ENGINE_ERR_MEMORY;
            if (m_frame_tvalid && m_frame_tready && m_frame_tlast) frame_done <= 1'b1;

            // pass 2 consumer: a gap beat, then the block's words, block by block
            if (state == PASS2) begin
                case (c_state)
                    C_SEL: begin
                        c_has <= c_idx < k_eff;
                        c_state <= C_PICK;
                    end
                    C_PICK: begin
                        c_start <= c_start_pick;
                        c_end <= c_end_pick;
                        c_state <= C_PREP;
                    end
                    C_PREP: begin
                        c_gap <= (c_has ? c_start : n_r) - c_pos;
                        c_gap_nz <= (c_has ? c_start : n_r) != c_pos;
                        if (W == 1) begin
                            c_left <= c_end - c_start;
                            c_left_one <= c_end - c_start == 32'd1;
                        end else begin           // beats
                            c_left <= c_last_beat - c_start_beat + 32'd1;
                            c_left_one <= c_last_beat == c_start_beat;
                        end
                        c_lane <= LW'(c_start % W_U);
                        // lanes 0 .. (end - 1) % W
                        c_last_keep <= {W{1'b1}} >> (LW'(W - 1) - LW'((c_end - 32'd1) % W_U));
                        c_state <= C_GAP;
                        c_in_gap <= 1'b1;
                    end
                    C_GAP: if (!c_gap_nz || enc_take) begin
                        c_pos <= c_end;
                        c_state <= c_has ? C_LIT : C_END;
                        c_in_gap <= 1'b0;
                        c_in_lit <= c_has;
                    end
                    C_LIT: if (enc_take) begin
                        c_left <= c_left - 32'd1;
                        c_lane <= '0;     // a block's beats after its first start at lane 0
                        c_left_one <= c_left == 32'd2;
                        if (c_left_one) begin
                            c_idx <= c_idx + 32'd1;
                            c_state <= C_SEL;
                            c_in_lit <= 1'b0;
                        end
                    end
                    default: ;
                endcase
            end
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // AXI4 master port rules (axi4_master_checker.sv: handshakes held until taken, INCR
    // bursts of 1..MAX_BURST beats inside one 4 KiB page, WLAST/RLAST on each burst's last
    // beat, no W beat, R beat or B response that no burst announced)
    axi4_master_checker #(.ADDR_W(ADDR_W), .DATA_W(32 * W), .MAX_BURST(MAX_BURST)) u_chk_axi (
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
    axi4_master_checker #(.ADDR_W(ADDR_W), .DATA_W(32 * W), .MAX_BURST(MAX_BURST)) u_chk_axi_vel (
        .clk           (clk),
        .rst           (rst),
        .m_axi_araddr  (m_axi_vel_araddr),
        .m_axi_arlen   (m_axi_vel_arlen),
        .m_axi_arburst (m_axi_vel_arburst),
        .m_axi_arvalid (m_axi_vel_arvalid),
        .m_axi_arready (m_axi_vel_arready),
        .m_axi_rlast   (m_axi_vel_rlast),
        .m_axi_rvalid  (m_axi_vel_rvalid),
        .m_axi_rready  (m_axi_vel_rready),
        .m_axi_awaddr  (m_axi_vel_awaddr),
        .m_axi_awlen   (m_axi_vel_awlen),
        .m_axi_awburst (m_axi_vel_awburst),
        .m_axi_awvalid (m_axi_vel_awvalid),
        .m_axi_awready (m_axi_vel_awready),
        .m_axi_wdata   (m_axi_vel_wdata),
        .m_axi_wstrb   (m_axi_vel_wstrb),
        .m_axi_wlast   (m_axi_vel_wlast),
        .m_axi_wvalid  (m_axi_vel_wvalid),
        .m_axi_wready  (m_axi_vel_wready),
        .m_axi_bvalid  (m_axi_vel_bvalid),
        .m_axi_bready  (m_axi_vel_bready)
    );
    // m_frame: a beat offered stays offered, unchanged, until m_frame_tready takes it; only
    // the frame's last beat may be partial, its lanes a run from lane 0
    logic        chk_frame_stall;
    logic [32*W+W:0] chk_frame_word;
    initial chk_frame_stall = 1'b0;
    always @(posedge clk) begin
        chk_frame_stall <= !rst && m_frame_tvalid && !m_frame_tready;
        chk_frame_word  <= {m_frame_tdata, m_frame_tkeep, m_frame_tlast};
        if (!rst && chk_frame_stall) assert (m_frame_tvalid && {m_frame_tdata, m_frame_tkeep, m_frame_tlast} == chk_frame_word);
        if (!rst && m_frame_tvalid) begin
            assert (m_frame_tlast || m_frame_tkeep == '1);
            assert (m_frame_tkeep[0] && (m_frame_tkeep & (m_frame_tkeep + W'(1))) == '0);
        end
    end
`endif
endmodule

`resetall
