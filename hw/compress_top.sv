// One layer's compress step end to end, docs/spec.md §4, as two streaming passes over an
// internal layer buffer of N_MAX words.
//
//   config   one cfg handshake per layer; checked first (err_code below), nothing runs on error
//   pass 1   s_tdata = {residual (63..32), grad_bits (31..0)}, exactly n beats:
//            quantiser -> ef_add -> accumulated a written to the buffer and fed to
//            block_l1 -> topk_select; the selected block indices set bits of a block mask
//   pass 2   the encoder gets its config beat, then the buffer is read in order: the payload
//            (a on selected blocks, else 0) goes to zrle_encoder, whose frame leaves on
//            m_frame; the new residual (0 on selected blocks, else a) leaves on m_res (tlast on
//            element n-1). The two outputs advance together: drain both concurrently.
// The layer takes 2n + k_eff + ~19 cycles from the config handshake to done.
//
// Status (valid when `done` pulses, held until the next accepted config):
//   sat_quant_count, sat_feedback_count, nan_count: the layer's saturation and NaN counts
//   err_code: gradblock_pkg::TOP_* (its own code space, not the decoder's frame errors):
//             0 TOP_OK; 1 N_OVER_N_MAX n > N_MAX; 2 BLOCK_SIZE_ZERO; 3 N_BLOCKS_MISMATCH
//             n_blocks != ceil(n / block_size); 4 K_ZERO; 5 K_OVER_K_MAX min(k, n_blocks) > K_MAX;
//             6 LMAX_RANGE lmax_log2 outside 1..min(24, LMAX_LOG2_MAX); 7 RANGE_INVALID range_bits
//             not a finite float32 > 0; 8 M_BELOW_HALF M < 2^31; codes 1..8 reject the config
//             (no data is consumed, done pulses right after the check); 9 TLAST_MISPLACED
//             s_tlast not exactly on beat n-1 (the layer still runs, counted by n)
`resetall
`default_nettype none

module compress_top #(
    parameter int N_MAX = 65536,        // layer buffer depth, elements
    parameter int K_MAX = 32,           // most blocks selected per layer
    parameter int LMAX_LOG2_MAX = 8     // largest literal run the encoder buffers (2^x words)
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
    // pass 1 input
    input  logic        [63:0] s_tdata,
    input  logic               s_tvalid,
    output logic               s_tready,
    input  logic               s_tlast,
    // pass 2 outputs
    output logic        [31:0] m_frame_tdata,
    output logic               m_frame_tvalid,
    input  logic               m_frame_tready,
    output logic               m_frame_tlast,
    output logic        [31:0] m_res_tdata,
    output logic               m_res_tvalid,
    input  logic               m_res_tready,
    output logic               m_res_tlast,
    // status
    output logic               busy,
    output logic               done,
    output logic         [3:0] err_code,
    output logic        [31:0] sat_quant_count,
    output logic        [31:0] sat_feedback_count,
    output logic        [31:0] nan_count
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(N_MAX >= 1 && N_MAX <= (1 << 30))) begin : g_bad_n_max
`ifdef __ICARUS__
        compress_top__N_MAX_must_be_1_to_2_30 u_parameter_error ();
`else
        $error("compress_top: N_MAX must be 1..2^30");
`endif
    end
    if (!(K_MAX >= 1)) begin : g_bad_k_max
`ifdef __ICARUS__
        compress_top__K_MAX_must_be_at_least_1 u_parameter_error ();
`else
        $error("compress_top: K_MAX must be >= 1");
`endif
    end
    if (!(LMAX_LOG2_MAX >= gradblock_pkg::ZRLE_LMAX_LOG2_MIN
          && LMAX_LOG2_MAX <= gradblock_pkg::ZRLE_LMAX_LOG2_MAX)) begin : g_bad_lmax_log2_max
`ifdef __ICARUS__
        compress_top__LMAX_LOG2_MAX_must_be_1_to_24 u_parameter_error ();
`else
        $error("compress_top: LMAX_LOG2_MAX must lie in the frame format's 1..24");
`endif
    end
    localparam int AW = $clog2(N_MAX + 1);           // counts 0..N_MAX
    localparam int IW = (N_MAX > 1) ? $clog2(N_MAX) : 1;   // addresses 0..N_MAX-1
    localparam logic [31:0] N_MAX_U = N_MAX;
    localparam logic [31:0] K_MAX_U = K_MAX;
    localparam logic [4:0] LMAX_LIMIT = (LMAX_LOG2_MAX < gradblock_pkg::ZRLE_LMAX_LOG2_MAX)
        ? 5'(LMAX_LOG2_MAX) : 5'(gradblock_pkg::ZRLE_LMAX_LOG2_MAX);

    typedef enum logic [2:0] {IDLE, CHECK, PASS1, ENC_CFG, PASS2} state_t;
    state_t state;

    // ---- configuration -------------------------------------------------------------------
    logic [31:0] n_r, bs_r, nb_r, k_r, m_r, ks_r, rb_r, id_r;
    logic  [4:0] lmax_r;
    logic        norm_r;                          // the layer's block norm kind (spec §2.3)
    logic [31:0] k_eff;
    logic [AW-1:0] n_a, nb_a, bs_a;
    logic [2*AW-1:0] blocks_span;
    logic  [3:0] check_code;

    assign cfg_ready = state == IDLE;
    assign busy = state != IDLE;
    assign k_eff = (k_r < nb_r) ? k_r : nb_r;
    assign n_a = n_r[AW-1:0];
    assign nb_a = nb_r[AW-1:0];
    // min(B, n): ceil(n / B) = 1 for every B >= n, and it keeps the product AW x AW bits
    assign bs_a = (bs_r < n_r) ? bs_r[AW-1:0] : n_r[AW-1:0];
    assign blocks_span = nb_a * bs_a;

    logic bad_n, bad_bs, bad_nb, bad_k, bad_k_max, bad_lmax, bad_range, bad_m;
    assign bad_n = n_r > N_MAX_U;
    assign bad_bs = bs_r == 32'd0;
    assign bad_nb = (n_r == 32'd0) ? nb_r != 32'd0
                  : (nb_r == 32'd0 || nb_r > n_r || blocks_span < {{AW{1'b0}}, n_a}
                     || blocks_span - {{AW{1'b0}}, bs_a} >= {{AW{1'b0}}, n_a});
    assign bad_k = n_r != 32'd0 && k_r == 32'd0;
    assign bad_k_max = k_eff > K_MAX_U;
    assign bad_lmax = lmax_r == 5'd0 || lmax_r > LMAX_LIMIT;
    assign bad_range = rb_r[31] || rb_r[30:23] == 8'hFF || rb_r == 32'd0;
    assign bad_m = !m_r[31];
    // first failing check wins, in the order of the TOP_ERR_* codes
    always_comb begin
        if (bad_n)          check_code = gradblock_pkg::TOP_ERR_N_OVER_N_MAX;
        else if (bad_bs)    check_code = gradblock_pkg::TOP_ERR_BLOCK_SIZE_ZERO;
        else if (bad_nb)    check_code = gradblock_pkg::TOP_ERR_N_BLOCKS_MISMATCH;
        else if (bad_k)     check_code = gradblock_pkg::TOP_ERR_K_ZERO;
        else if (bad_k_max) check_code = gradblock_pkg::TOP_ERR_K_OVER_K_MAX;
        else if (bad_lmax)  check_code = gradblock_pkg::TOP_ERR_LMAX_RANGE;
        else if (bad_range) check_code = gradblock_pkg::TOP_ERR_RANGE_INVALID;
        else if (bad_m)     check_code = gradblock_pkg::TOP_ERR_M_BELOW_HALF;
        else                check_code = gradblock_pkg::TOP_OK;
    end

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
        end
    end

    // ---- pass 1: quantise, feed back, store, norms, select --------------------------------
    logic [AW-1:0] in_count;
    logic          in_open, in_last;
    logic          q_s_valid, q_s_ready;

    assign in_open = state == PASS1 && in_count != n_a;
    assign in_last = in_count == n_a - 1'b1;
    assign s_tready = in_open && q_s_ready;
    assign q_s_valid = s_tvalid && in_open;

    logic [31:0] q_tdata, q_resid;
    logic  [1:0] q_flags;
    logic        q_tvalid, q_tready, q_tlast;

    quantiser #(.UW(32)) u_quantiser (
        .clk, .rst,
        .cfg_m(m_r), .cfg_k(ks_r), .cfg_range_bits(rb_r),
        .s_tdata(s_tdata[31:0]), .s_tuser(s_tdata[63:32]), .s_tvalid(q_s_valid),
        .s_tready(q_s_ready), .s_tlast(in_last),
        .m_tdata(q_tdata), .m_tuser({q_resid, q_flags}), .m_tvalid(q_tvalid),
        .m_tready(q_tready), .m_tlast(q_tlast)
    );

    logic [31:0] a_tdata;
    logic        a_sat, a_tvalid, a_tready, a_tlast;

    ef_add u_ef_add (
        .clk, .rst,
        .s_tdata({q_resid, q_tdata}), .s_tvalid(q_tvalid), .s_tready(q_tready), .s_tlast(q_tlast),
        .m_tdata(a_tdata), .m_tuser(a_sat), .m_tvalid(a_tvalid), .m_tready(a_tready),
        .m_tlast(a_tlast)
    );

    logic [95:0] norm_tdata;
    logic        norm_tvalid, norm_tready, norm_tlast;

    block_l1 u_block_l1 (
        .clk, .rst, .cfg_block_size(bs_r), .cfg_norm(norm_r),
        .s_tdata(a_tdata), .s_tvalid(a_tvalid), .s_tready(a_tready), .s_tlast(a_tlast),
        .m_tdata(norm_tdata), .m_tvalid(norm_tvalid), .m_tready(norm_tready),
        .m_tlast(norm_tlast)
    );

    logic [31:0] sel_tdata;
    logic        sel_tvalid, sel_tlast, topk_cfg_err;

    // selected indices are < n_blocks <= N_MAX; topk's k is always in range (checked above)
    logic unused_topk;
    assign unused_topk = ^{sel_tdata[31:IW], topk_cfg_err};

    topk_select #(.K_MAX(K_MAX)) u_topk (
        .clk, .rst, .cfg_k(k_eff), .cfg_err(topk_cfg_err),
        .s_tdata(norm_tdata), .s_tvalid(norm_tvalid), .s_tready(norm_tready),
        .s_tlast(norm_tlast),
        .m_tdata(sel_tdata), .m_tvalid(sel_tvalid), .m_tready(1'b1), .m_tlast(sel_tlast)
    );

    // ---- layer buffer and block mask -------------------------------------------------------
    logic [31:0]   layer_mem [0:N_MAX-1];
    logic          sel_mem [0:N_MAX-1];      // n_blocks <= n <= N_MAX
    logic [AW-1:0] wr_addr;
    logic          a_accept;
    logic          sel_we, sel_wdata;
    logic [IW-1:0] sel_waddr;

    assign a_accept = a_tvalid && a_tready;
    // pass 1 clears mask bit i with element i (i < n_blocks); the selected indices set theirs
    // after the last element, so the two writers never meet
    assign sel_we = sel_tvalid || (a_accept && wr_addr < nb_a);
    assign sel_wdata = sel_tvalid;
    assign sel_waddr = sel_tvalid ? sel_tdata[IW-1:0] : wr_addr[IW-1:0];

    always_ff @(posedge clk) begin
        if (a_accept) layer_mem[wr_addr[IW-1:0]] <= a_tdata;
        if (sel_we) sel_mem[sel_waddr] <= sel_wdata;
    end

    // ---- pass 2: read, split into payload and residual, encode ----------------------------
    logic [AW-1:0] rd_addr;
    logic [IW-1:0] rd_block;   // may wrap past the last block, never read there
    logic [31:0]   rd_offset;
    logic          rd_en, rd_valid, rd_selected, rd_last;
    logic [31:0]   rd_word;
    logic          fork_free, fork_load;
    logic [31:0]   fork_payload;
    logic          pay_pending, res_pending;
    logic          enc_s_tready, enc_cfg_ready;

    assign rd_en = state == PASS2 && rd_addr != n_a && (!rd_valid || fork_load);
    assign fork_free = (!pay_pending || enc_s_tready) && (!res_pending || m_res_tready);
    assign fork_load = rd_valid && fork_free;

    always_ff @(posedge clk) begin
        if (rd_en) begin
            rd_word <= layer_mem[rd_addr[IW-1:0]];
            rd_selected <= sel_mem[rd_block];
            rd_last <= rd_addr == n_a - 1'b1;
        end
        if (fork_load) fork_payload <= rd_selected ? rd_word : 32'd0;
    end
    // a block of its own: the RAM read above keeps no reset; this port shows no X after reset
    always_ff @(posedge clk) begin
        if (rst) begin
            m_res_tdata <= 32'd0;
            m_res_tlast <= 1'b0;
        end else if (fork_load) begin
            m_res_tdata <= rd_selected ? 32'd0 : rd_word;
            m_res_tlast <= rd_last;
        end
    end

    assign m_res_tvalid = res_pending;

    // (Icarus 11 miscompiles an enum comparison written directly in a port connection)
    logic enc_cfg_valid;
    assign enc_cfg_valid = state == ENC_CFG;

    zrle_encoder #(.LMAX_LOG2_MAX(LMAX_LOG2_MAX)) u_encoder (
        .clk, .rst,
        .cfg_valid(enc_cfg_valid), .cfg_ready(enc_cfg_ready),
        .cfg_layer_id(id_r), .cfg_n(n_r), .cfg_range_bits(rb_r), .cfg_lmax_log2(lmax_r),
        .s_tdata(fork_payload), .s_tvalid(pay_pending), .s_tready(enc_s_tready),
        .m_tdata(m_frame_tdata), .m_tvalid(m_frame_tvalid), .m_tready(m_frame_tready),
        .m_tlast(m_frame_tlast)
    );

    // ---- control ---------------------------------------------------------------------------
    logic frame_done, res_done, pass1_done;
    assign pass1_done = n_a == {AW{1'b0}} || (sel_tvalid && sel_tlast);

    always_ff @(posedge clk) begin
        done <= 1'b0;
        if (rst) begin
            state <= IDLE;
            err_code <= gradblock_pkg::TOP_OK;
            rd_valid <= 1'b0;
            pay_pending <= 1'b0;
            res_pending <= 1'b0;
            sat_quant_count <= 32'd0;
            sat_feedback_count <= 32'd0;
            nan_count <= 32'd0;
        end else begin
            case (state)
                IDLE: if (cfg_valid) begin
                    state <= CHECK;
                    err_code <= gradblock_pkg::TOP_OK;
                    sat_quant_count <= 32'd0;
                    sat_feedback_count <= 32'd0;
                    nan_count <= 32'd0;
                end
                CHECK: begin
                    err_code <= check_code;
                    if (check_code != gradblock_pkg::TOP_OK) begin
                        state <= IDLE;
                        done <= 1'b1;
                    end else begin
                        state <= PASS1;
                    end
                    in_count <= '0;
                    wr_addr <= '0;
                    rd_addr <= '0;
                    rd_block <= '0;
                    rd_offset <= 32'd0;
                    frame_done <= 1'b0;
                    res_done <= n_r == 32'd0;
                end
                PASS1: if (pass1_done) state <= ENC_CFG;
                ENC_CFG: if (enc_cfg_ready) state <= PASS2;
                PASS2: if (frame_done && res_done) begin
                    state <= IDLE;
                    done <= 1'b1;
                end
                default: state <= IDLE;
            endcase

            if (s_tvalid && s_tready) begin
                in_count <= in_count + 1'b1;
                if (s_tlast != in_last)
                    err_code <= gradblock_pkg::TOP_ERR_TLAST_MISPLACED;
            end
            if (q_tvalid && q_tready) begin
                sat_quant_count <= sat_quant_count + {31'd0, q_flags[0]};
                nan_count <= nan_count + {31'd0, q_flags[1]};
            end
            if (a_accept) begin
                wr_addr <= wr_addr + 1'b1;
                sat_feedback_count <= sat_feedback_count + {31'd0, a_sat};
            end
            if (rd_en) begin
                rd_addr <= rd_addr + 1'b1;
                if (rd_offset + 32'd1 == bs_r) begin
                    rd_offset <= 32'd0;
                    rd_block <= rd_block + 1'b1;
                end else begin
                    rd_offset <= rd_offset + 32'd1;
                end
            end
            if (rd_en) rd_valid <= 1'b1;
            else if (fork_load) rd_valid <= 1'b0;
            if (fork_load) begin
                pay_pending <= 1'b1;
                res_pending <= 1'b1;
            end else begin
                if (enc_s_tready) pay_pending <= 1'b0;
                if (m_res_tready) res_pending <= 1'b0;
            end
            if (m_frame_tvalid && m_frame_tready && m_frame_tlast) frame_done <= 1'b1;
            if (m_res_tvalid && m_res_tready && m_res_tlast) res_done <= 1'b1;
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // m_frame_tvalid: a word offered stays offered, unchanged, until m_frame_tready takes it
    logic                         chk_frame_stall;
    logic [32:0]              chk_frame_word;
    initial chk_frame_stall = 1'b0;
    always @(posedge clk) begin
        chk_frame_stall <= !rst && m_frame_tvalid && !m_frame_tready;
        chk_frame_word  <= {m_frame_tdata, m_frame_tlast};
        if (!rst && chk_frame_stall) assert (m_frame_tvalid && {m_frame_tdata, m_frame_tlast} == chk_frame_word);
    end
    // m_res_tvalid: a word offered stays offered, unchanged, until m_res_tready takes it
    logic                         chk_res_stall;
    logic [32:0]              chk_res_word;
    initial chk_res_stall = 1'b0;
    always @(posedge clk) begin
        chk_res_stall <= !rst && m_res_tvalid && !m_res_tready;
        chk_res_word  <= {m_res_tdata, m_res_tlast};
        if (!rst && chk_res_stall) assert (m_res_tvalid && {m_res_tdata, m_res_tlast} == chk_res_word);
    end
`endif
endmodule

`resetall
