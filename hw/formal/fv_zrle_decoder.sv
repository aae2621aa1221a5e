// Formal harness for zrle_decoder (hw/formal/zrle_decoder.sby). Every input is free: any word
// stream, s_tlast anywhere, s_tvalid and m_tready in any pattern, any cfg_check_n and
// cfg_expected_n (the stream is not assumed to be AXI4-Stream compliant either).
//
//   prove   the decoder's own assertions and those of its blocks (axis_skid_buffer, sync_fifo,
//           crc32_word) plus the frame bookkeeping below (one report per frame, no frame
//           started before the previous one was reported), in every reachable state
//   cover   every error code of gradblock_pkg (FRAME_ERR_*) is reported by some word stream,
//           and so is a frame that decodes (done), with and without values
//   nohang  (define NOHANG; the bmc tasks) bounded no-hang: with the output always ready,
//           every frame is reported (done or err_valid) within HANG_BOUND cycles of its
//           last word being taken. A frame may ask for up to 2^32 values, so with one beat
//           per value (RUN_OUT = 0) the bound holds for frames with n <= N_BOUND (assumed of
//           the stream's word h3); with RUN_OUT = 1 (a zero run is one beat) for every n.
module fv_zrle_decoder (
    input logic        clk,
    input logic        rst,
    input logic        cfg_check_n,
    input logic [31:0] cfg_expected_n,
    input logic [31:0] s_tdata,
    input logic        s_tvalid,
    input logic        s_tlast,
    input logic        m_tready
);
`ifdef RUNS
    localparam bit RUN_OUT = 1'b1;
`else
    localparam bit RUN_OUT = 1'b0;
`endif
    localparam int QUEUE_AW = 2;
    localparam int N_BOUND = 4;             // NOHANG, RUN_OUT = 0: frames of n <= N_BOUND
    localparam int HANG_BOUND = 12;         // cycles from the last word taken to the report

    logic        s_tready, m_tvalid, m_tlast, hdr_valid, done, err_valid;
    logic [31:0] m_tdata, m_tcount, hdr_layer_id, hdr_n, hdr_range_bits, err_word, token_count;
    logic [4:0]  hdr_lmax_log2;
    logic [3:0]  err_code;

    zrle_decoder #(.QUEUE_AW(QUEUE_AW), .RUN_OUT(RUN_OUT)) dut (
        .clk, .rst, .cfg_check_n, .cfg_expected_n,
        .s_tdata, .s_tvalid, .s_tready, .s_tlast,
        .m_tdata, .m_tvalid, .m_tready, .m_tlast, .m_tcount,
        .hdr_valid, .hdr_layer_id, .hdr_n, .hdr_range_bits, .hdr_lmax_log2,
        .done, .err_valid, .err_code, .err_word, .token_count
    );

    // the harness's account of the frames: a frame is the words up to and including the one
    // with s_tlast; it is reported by one pulse of done or err_valid
    logic       take, reported, closed;
    logic [2:0] widx_h;                     // index of the next word in its frame (saturates)
    logic [7:0] wait_n;                     // cycles since the last word, frame unreported
    assign take = s_tvalid && s_tready;

    initial assume (rst);
    always @(posedge clk) begin
        if (rst) begin
            closed   <= 1'b1;               // as if a frame had ended and been reported
            reported <= 1'b1;
            widx_h   <= 3'd0;
            wait_n   <= 8'd0;
        end else begin
            if (take) begin
                if (closed) reported <= 1'b0;
                closed <= s_tlast;
                widx_h <= s_tlast ? 3'd0 : widx_h + 3'(widx_h != 3'd7);
            end
            if (done || err_valid) reported <= 1'b1;
            wait_n <= (closed && !reported && !(done || err_valid)) ? wait_n + 8'd1 : 8'd0;
        end
        if (!rst) begin
            // one report per frame, and a frame's first word waits for the previous report
            assert (!(done && err_valid));
            if (done || err_valid) assert (!reported);
            if (take && closed) assert (reported);
`ifdef NOHANG
            assume (m_tready);
            if (!RUN_OUT && widx_h == 3'd3) assume (s_tdata <= 32'(N_BOUND));
            assert (wait_n < 8'(HANG_BOUND));
`endif
            // every error code is reachable, and so is a frame that decodes
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_BAD_MAGIC);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_BAD_VERSION);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_BAD_LMAX);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_BAD_RANGE);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_LITERAL_RUN_TOO_LONG);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_ZERO_LITERAL);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_EMPTY_TOKEN);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_EARLY_ZERO_LENGTH);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_SPLIT_LITERAL_RUN);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_OVERRUN);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_TRUNCATED);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_TOKEN_COUNT_MISMATCH);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_CRC_MISMATCH);
            cover (err_valid && err_code == gradblock_pkg::FRAME_ERR_SIZE_MISMATCH);
            cover (done && hdr_n == 32'd0);
            cover (done && hdr_n != 32'd0 && token_count != 32'd0);
        end
    end
endmodule
