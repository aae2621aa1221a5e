// Formal harness: zrle_encoder feeding zrle_decoder (hw/formal/zrle_roundtrip.sby), the
// encoder-to-decoder round trip of docs/spec.md §3 for small n.
//
// One frame per run: the encoder takes one config beat (any layer id, any n <= N_MAX, any
// range_bits the format accepts (float32 finite > 0), any lmax_log2 1..LMAX_LOG2), then n
// payload words of any value (zeros, literals, runs of each, at any valid timing, held until
// taken). Its frame goes word by word into the decoder (which checks n
// against the config) through a link that stalls at will; the decoder's output is taken at
// will (one beat per value: RUN_OUT = 0).
//   bmc     the decoder gives back exactly the encoder's inputs, in order, with m_tlast on
//           the n-th and no beat beyond it; it reports no error; its header is the config
//           (layer id, n, range bits, lmax_log2); `done` comes only after the frame's last
//           word (t1, s_tlast) went in, and only once (values may still be waiting). With
//           CUT_CRC (the .sby cuts both CRC units) a CRC mismatch at the frame's end is the one
//           report allowed besides done
//   reach   (define REACH; a witness, abc bmc3) the bmc's model reaches `done`
//   cover   (z3, CRCs kept) frames decode: n = 0, one literal, two literals, a zero then a
//           literal (z3 does not get past step 14 within minutes: not a task)
// The encoder is built with LMAX_LOG2_MAX = LMAX_LOG2 = 5 (its literal ring stays at 64 words;
// with LMAX_LOG2_MAX = 24 the 2^25-word ring is past yosys's width limit). For n <= N_MAX = 4
// every lmax_log2 >= 2 gives the same tokens (no nonzero run is longer than LMAX = 4), so
// 1..5 covers every token structure the format's 1..24 can give such a frame; lmax_log2 only
// differs in h1, whose range check is the decoder's own (zrle_decoder.sby covers BAD_LMAX).
module fv_zrle_roundtrip (
    input logic        clk,
    input logic        rst,
    input logic        cfg_valid,
    input logic [31:0] cfg_layer_id,
    input logic [31:0] cfg_n,
    input logic [31:0] cfg_range_bits,
    input logic  [4:0] cfg_lmax_log2,
    input logic [31:0] s_tdata,
    input logic        s_tvalid,
    input logic        link_go,        // the link between the two passes a word this cycle
    input logic        m_tready
);
    localparam int N_MAX = 4;
    localparam int LMAX_LOG2 = 5;      // the encoder's LMAX_LOG2_MAX

    logic        cfg_ready, s_tready, e_tvalid, e_tready, e_tlast;
    logic [31:0] e_tdata;
    logic        d_tready, m_tvalid, m_tlast, hdr_valid, done, err_valid;
    logic [31:0] m_tdata, m_tcount, hdr_layer_id, hdr_n, hdr_range_bits, err_word, token_count;
    logic  [4:0] hdr_lmax_log2;
    logic  [3:0] err_code;

    zrle_encoder #(.LMAX_LOG2_MAX(LMAX_LOG2), .TOKEN_QUEUE_AW(2)) u_enc (
        .clk, .rst, .cfg_valid, .cfg_ready, .cfg_layer_id, .cfg_n, .cfg_range_bits,
        .cfg_lmax_log2, .s_tdata, .s_tvalid, .s_tready,
        .m_tdata(e_tdata), .m_tvalid(e_tvalid), .m_tready(e_tready), .m_tlast(e_tlast)
    );
    assign e_tready = d_tready && link_go;

    // the harness's record of the frame
    logic        cfg_taken;
    logic [31:0] n_r, id_r, rb_r;
    logic  [4:0] lmax_r;
    logic [31:0] vals [N_MAX];
    logic  [2:0] in_cnt, out_cnt;
    logic        frame_in;             // the frame's last word (t1) went into the decoder
    logic        done_seen;           // the frame was reported (done, or under CUT_CRC a
                                       // CRC mismatch)

    zrle_decoder #(.QUEUE_AW(2), .RUN_OUT(1'b0)) u_dec (
        .clk, .rst, .cfg_check_n(1'b1), .cfg_expected_n(n_r),
        .s_tdata(e_tdata), .s_tvalid(e_tvalid && link_go), .s_tready(d_tready), .s_tlast(e_tlast),
        .m_tdata, .m_tvalid, .m_tready, .m_tlast, .m_tcount,
        .hdr_valid, .hdr_layer_id, .hdr_n, .hdr_range_bits, .hdr_lmax_log2,
        .done, .err_valid, .err_code, .err_word, .token_count
    );

    // ---- the environment
    logic        past_live, s_stall, c_stall;
    logic [32:0] s_word;
    logic [100:0] c_word, c_now;
    assign c_now = {cfg_layer_id, cfg_n, cfg_range_bits, cfg_lmax_log2};
    initial assume (rst);
    initial past_live = 1'b0;
    always @(posedge clk) begin
        past_live <= !rst;
        s_stall <= s_tvalid && !s_tready;
        c_stall <= cfg_valid && !cfg_ready;
        s_word <= {s_tvalid, s_tdata};
        c_word <= c_now;
    end
    always @(*) begin
        if (!rst) begin
            // one frame: one config, then exactly n words
            assume (!(cfg_valid && cfg_taken));
            assume (!s_tvalid || (cfg_taken && {29'd0, in_cnt} < n_r));
            if (cfg_valid) begin
                assume (cfg_n <= 32'(N_MAX));
                assume (cfg_lmax_log2 >= 5'(gradblock_pkg::ZRLE_LMAX_LOG2_MIN)
                        && cfg_lmax_log2 <= 5'(LMAX_LOG2));
                assume (!cfg_range_bits[31] && cfg_range_bits[30:23] != 8'hFF
                        && cfg_range_bits != 32'd0);
            end
        end
        if (past_live && !rst) begin
            if (s_stall) assume ({s_tvalid, s_tdata} == s_word);
            if (c_stall) assume (cfg_valid && c_now == c_word);
        end
    end

    always @(posedge clk) begin
        if (rst) begin
            cfg_taken <= 1'b0;
            n_r <= 32'd0;
            in_cnt <= 3'd0;
            out_cnt <= 3'd0;
            frame_in <= 1'b0;
            done_seen <= 1'b0;
        end else begin
            if (cfg_valid && cfg_ready) begin
                cfg_taken <= 1'b1;
                n_r <= cfg_n;
                id_r <= cfg_layer_id;
                rb_r <= cfg_range_bits;
                lmax_r <= cfg_lmax_log2;
            end
            if (s_tvalid && s_tready) begin
                vals[in_cnt[1:0]] <= s_tdata;
                in_cnt <= in_cnt + 3'd1;
            end
            if (m_tvalid && m_tready) out_cnt <= out_cnt + 3'd1;
            if (e_tvalid && e_tready && e_tlast) frame_in <= 1'b1;
            if (done || err_valid) done_seen <= 1'b1;
        end
    end

    // ---- the round trip
    always @(posedge clk) begin
        if (!rst) begin
`ifdef CUT_CRC
            // the CRCs are free values (the .sby cuts both units): any report but a CRC
            // mismatch is an error, and a mismatch only once the frame's last word went in
            // (it may come while decoded values still wait for m_tready)
            if (err_valid) begin
                assert (err_code == gradblock_pkg::FRAME_ERR_CRC_MISMATCH);
                assert (frame_in && {29'd0, out_cnt} <= n_r);
            end
`else
            assert (!err_valid);
`endif
            if (m_tvalid) begin
                assert (cfg_taken && out_cnt < in_cnt && {29'd0, out_cnt} < n_r);
                assert (m_tdata == vals[out_cnt[1:0]]);
                assert (m_tlast == ({29'd0, out_cnt} + 32'd1 == n_r));
            end
            if (hdr_valid) begin
                assert (hdr_layer_id == id_r && hdr_n == n_r && hdr_range_bits == rb_r
                        && hdr_lmax_log2 == lmax_r);
            end
            // done (like a CRC mismatch) may come while the last values still wait for
            // m_tready (a bmc at depth 18 found it): they stay checked above, up to the n-th
            if (done) begin
                assert (!done_seen && frame_in && {29'd0, out_cnt} <= n_r);
                assert (hdr_n == n_r);
            end
`ifdef REACH
            // the reach task: a frame is reported (done) in the bmc's own model (CRC cut)
            assert (!done);
`endif
            cover (done && n_r == 32'd0);
            cover (done && n_r == 32'd1 && vals[0] != 32'd0);
            cover (done && n_r == 32'd2 && lmax_r == 5'd1 && vals[0] != 32'd0
                   && vals[1] != 32'd0);
            cover (done && n_r == 32'd2 && vals[0] == 32'd0 && vals[1] != 32'd0);
        end
    end
endmodule
