// Plain SystemVerilog testbench of hw/compress_top.sv against a golden directory: no cocotb, no
// Python at run time (docs/golden.md, "A bench without Python"). For every case of
// <dir>/cases.txt whose params.txt lists stage_top: the layer configured from params.txt (one
// cfg handshake), {residual_in, grad_bits} streamed in (an idle cycle every third cycle), the
// frame and the new residual drained together (frame tready low every fifth cycle, residual
// every seventh), each word checked against frame.hex / residual_out.hex, tlast on the last
// word of each, err_code 0 and the three counters against params.txt when done pulses. A case
// the build cannot hold (n > N_MAX, k_eff > K_MAX, lmax_log2 > LMAX_LOG2_MAX) must be refused
// with its gradblock_pkg::TOP_ERR_* code and no data taken or given.
//
//   iverilog -g2012 -Ihw/tb_plain -o tb.vvp <compress_top's files, hw/deps.py> \
//       hw/tb_plain/tb_compress_top_golden.sv && vvp tb.vvp +GOLDEN=<dir>
// Last line: "GOLDEN-BENCH PASS <cases> cases" or "GOLDEN-BENCH FAIL ..." (exit status 1).
`default_nettype none

module tb_compress_top_golden #(
    parameter int N_MAX = 65536,          // compress_top's reference build (sim/duts.py)
    parameter int K_MAX = 32,
    parameter int LMAX_LOG2_MAX = 8,
    parameter int MAX_FRAME = 3 * N_MAX + 7
);
    `include "golden_read.svh"

    logic clk;
    logic rst;
    initial begin
        clk = 1'b0;
        rst = 1'b1;
    end
    always #5 clk = ~clk;

    logic               cfg_valid, cfg_ready;
    logic        [31:0] cfg_n, cfg_block_size, cfg_n_blocks, cfg_k, cfg_m, cfg_range_bits;
    logic        [31:0] cfg_layer_id;
    logic signed [31:0] cfg_k_shift;
    logic         [4:0] cfg_lmax_log2;
    logic               cfg_norm;
    logic        [63:0] s_tdata;
    logic               s_tvalid, s_tready, s_tlast;
    logic        [31:0] m_frame_tdata, m_res_tdata;
    logic               m_frame_tvalid, m_frame_tready, m_frame_tlast;
    logic               m_res_tvalid, m_res_tready, m_res_tlast;
    logic               busy, done;
    logic         [3:0] err_code;
    logic        [31:0] sat_quant_count, sat_feedback_count, nan_count;

    compress_top #(.N_MAX(N_MAX), .K_MAX(K_MAX), .LMAX_LOG2_MAX(LMAX_LOG2_MAX)) dut (
        .clk, .rst, .cfg_valid, .cfg_ready, .cfg_n, .cfg_block_size, .cfg_n_blocks, .cfg_k,
        .cfg_m, .cfg_k_shift, .cfg_range_bits, .cfg_layer_id, .cfg_lmax_log2, .cfg_norm,
        .s_tdata, .s_tvalid, .s_tready, .s_tlast,
        .m_frame_tdata, .m_frame_tvalid, .m_frame_tready, .m_frame_tlast,
        .m_res_tdata, .m_res_tvalid, .m_res_tready, .m_res_tlast,
        .busy, .done, .err_code, .sat_quant_count, .sat_feedback_count, .nan_count
    );

    logic [31:0] grad [0:N_MAX-1];
    logic [31:0] res_in [0:N_MAX-1];
    logic [31:0] want_res [0:N_MAX-1];
    logic [31:0] want_frame [0:MAX_FRAME-1];

    int cases_checked, cases_refused, failures, case_failures;
    int n, frame_words, sent, fgot, rgot, dones, waited, limit;
    logic running, cfg_taken;
    logic [3:0] want_err;
    longint cycle;

    task automatic fail(input string what);
        failures++;
        case_failures++;
        if (case_failures <= 5) $display("GOLDEN-BENCH MISMATCH case %0s: %0s", case_name, what);
    endtask

    // stimulus from the counters
    assign cfg_valid = running && !cfg_taken;
    assign s_tvalid = running && cfg_taken && sent < n && (cycle % 3) != 2;
    assign s_tdata = {res_in[sent < n ? sent : 0], grad[sent < n ? sent : 0]};
    assign s_tlast = sent == n - 1;
    assign m_frame_tready = running && (cycle % 5) != 4;
    assign m_res_tready = running && (cycle % 7) != 6;

    // every handshake is seen at the clock edge that takes it (values from before the edge)
    always @(posedge clk) begin
        cycle <= cycle + 1;
        if (cfg_valid && cfg_ready) cfg_taken <= 1'b1;
        if (running && s_tvalid && s_tready) sent <= sent + 1;
        if (running && done) dones <= dones + 1;
        if (running && m_frame_tvalid && m_frame_tready) begin
            if (fgot >= frame_words)
                fail($sformatf("frame word %0d of a %0d-word frame", fgot, frame_words));
            else begin
                if (m_frame_tdata !== want_frame[fgot])
                    fail($sformatf("frame word %0d: expected %08h, actual %08h", fgot,
                                   want_frame[fgot], m_frame_tdata));
                if (m_frame_tlast !== (fgot == frame_words - 1))
                    fail($sformatf("frame tlast at word %0d", fgot));
            end
            fgot <= fgot + 1;
        end
        if (running && m_res_tvalid && m_res_tready) begin
            if (rgot >= n) fail($sformatf("residual word %0d of a %0d-word layer", rgot, n));
            else begin
                if (m_res_tdata !== want_res[rgot])
                    fail($sformatf("residual word %0d: expected %08h, actual %08h", rgot,
                                   want_res[rgot], m_res_tdata));
                if (m_res_tlast !== (rgot == n - 1))
                    fail($sformatf("residual tlast at word %0d", rgot));
            end
            rgot <= rgot + 1;
        end
    end

    function automatic logic [3:0] expected_error();
        // the checks a golden case can fail: the build's limits, in the RTL's order
        if (gp_n > longint'(N_MAX)) return gradblock_pkg::TOP_ERR_N_OVER_N_MAX;
        if (gp_k_eff > longint'(K_MAX)) return gradblock_pkg::TOP_ERR_K_OVER_K_MAX;
        if (gp_lmax_log2 > longint'(LMAX_LOG2_MAX)) return gradblock_pkg::TOP_ERR_LMAX_RANGE;
        return gradblock_pkg::TOP_OK;
    endfunction

    task run_case;
        n = int'(gp_n);
        frame_words = int'(gp_frame_words);
        case_failures = 0;
        want_err = expected_error();
        if (gp_words_grad_bits != gp_n || gp_words_residual_in != gp_n
            || gp_words_residual_out != gp_n || gp_words_frame != gp_frame_words)
            fail("params.txt word counts differ from n / frame_words");
        if (want_err == gradblock_pkg::TOP_OK) begin
            if (frame_words > MAX_FRAME)
                fail($sformatf("frame of %0d words > MAX_FRAME (%0d)", frame_words, MAX_FRAME));
            else if (n > 0) begin          // an empty array is an empty file: nothing to read
                $readmemh(case_file("grad_bits"), grad, 0, n - 1);
                $readmemh(case_file("residual_in"), res_in, 0, n - 1);
                $readmemh(case_file("residual_out"), want_res, 0, n - 1);
            end
            if (frame_words > 0 && frame_words <= MAX_FRAME)
                $readmemh(case_file("frame"), want_frame, 0, frame_words - 1);
        end else begin
            n = 0;                         // a refused config takes nothing: send nothing
            frame_words = 0;
        end
        cfg_n = gp_n[31:0];
        cfg_block_size = gp_block_size[31:0];
        cfg_n_blocks = gp_n_blocks[31:0];
        cfg_k = gp_k_eff[31:0];
        cfg_m = gp_m[31:0];
        cfg_k_shift = gp_k_shift[31:0];
        cfg_range_bits = gp_range_bits[31:0];
        cfg_layer_id = gp_layer_id[31:0];
        cfg_lmax_log2 = gp_lmax_log2[4:0];
        cfg_norm = gp_norm[0];
        @(negedge clk);
        sent = 0;
        fgot = 0;
        rgot = 0;
        dones = 0;
        cfg_taken = 1'b0;
        if (case_failures == 0) begin
            running = 1'b1;
            waited = 0;
            limit = 8 * n + 4 * frame_words + 2000;
            while ((dones == 0 || fgot < frame_words || rgot < n) && waited < limit) begin
                @(negedge clk);
                waited++;
            end
            repeat (20) @(negedge clk);      // nothing more may come out
            running = 1'b0;
            if (dones != 1) fail($sformatf("done pulsed %0d times", dones));
            if (busy !== 1'b0) fail("busy after done");
            if (fgot != frame_words)
                fail($sformatf("%0d frame words, expected %0d", fgot, frame_words));
            if (rgot != n) fail($sformatf("%0d residual words, expected %0d", rgot, n));
            if (err_code !== want_err)
                fail($sformatf("err_code %0d, expected %0d", err_code, want_err));
            if (want_err == gradblock_pkg::TOP_OK) begin
                if (longint'(sat_quant_count) != gp_sat_quant)
                    fail($sformatf("sat_quant_count %0d, params.txt %0d", sat_quant_count,
                                   gp_sat_quant));
                if (longint'(sat_feedback_count) != gp_sat_feedback)
                    fail($sformatf("sat_feedback_count %0d, params.txt %0d", sat_feedback_count,
                                   gp_sat_feedback));
                if (longint'(nan_count) != gp_nan_count)
                    fail($sformatf("nan_count %0d, params.txt %0d", nan_count, gp_nan_count));
            end
        end
        if (want_err == gradblock_pkg::TOP_OK) cases_checked++;
        else cases_refused++;
        $display("GOLDEN-BENCH CASE %0s n=%0d %0s", case_name, gp_n,
                 case_failures != 0 ? "FAIL"
                 : want_err != gradblock_pkg::TOP_OK ? "refused (as it must be)" : "pass");
    endtask

    initial begin
        cycle = 0;
        cases_checked = 0;
        cases_refused = 0;
        failures = 0;
        running = 1'b0;
        cfg_taken = 1'b0;
        n = 0;
        frame_words = 0;
        sent = 0;
        fgot = 0;
        rgot = 0;
        dones = 0;
        open_golden();
        repeat (4) @(negedge clk);
        rst = 1'b0;
        while (next_case() != 0) begin
            if (case_kind == "compress") begin
                read_params();
                if (gp_stage_top == 1) run_case();
            end
        end
        $fclose(case_list_fd);
        if (failures != 0 || cases_checked == 0) begin
            $display("GOLDEN-BENCH FAIL %0d mismatches in %0d cases (%0d refused)", failures,
                     cases_checked, cases_refused);
            $fatal(1, "golden mismatches");
        end
        $display("GOLDEN-BENCH PASS %0d cases (%0d refused)", cases_checked, cases_refused);
        $finish;
    end
endmodule

`resetall
