// Plain SystemVerilog testbench of hw/quantiser.sv against a golden directory: no cocotb, no
// Python at run time (docs/golden.md, "A bench without Python"). For every case of
// <dir>/cases.txt whose params.txt lists stage_quantiser: its configuration from params.txt,
// grad_bits streamed in (an idle cycle every third cycle), the output drained (tready low
// every fifth cycle), each output word checked against quantised.hex, its sat / nan flags
// against quant_sat.hex / quant_nan.hex, tlast on the last word, and the flag totals against
// params.txt's sat_quant / nan_count.
//
//   iverilog -g2012 -Ihw/tb_plain -o tb.vvp hw/gradblock_pkg.sv hw/quantiser.sv \
//       hw/tb_plain/tb_quantiser_golden.sv
//   vvp tb.vvp +GOLDEN=<dir>          (or verilator --binary ... ; ./obj_dir/Vtb... +GOLDEN=<dir>)
// Last line: "GOLDEN-BENCH PASS <cases> cases" or "GOLDEN-BENCH FAIL ..." (exit status 1).
`default_nettype none

module tb_quantiser_golden #(
    parameter int MAX_WORDS = 1 << 16       // the largest case it holds (golden: up to 36864)
);
    `include "golden_read.svh"

    logic clk;
    logic rst;
    initial begin
        clk = 1'b0;
        rst = 1'b1;
    end
    always #5 clk = ~clk;

    logic        [31:0] cfg_m;
    logic signed [31:0] cfg_k;
    logic        [31:0] cfg_range_bits;
    logic        [31:0] s_tdata;
    logic         [0:0] s_tuser;
    logic               s_tvalid, s_tready, s_tlast;
    logic        [31:0] m_tdata;
    logic         [2:0] m_tuser;
    logic               m_tvalid, m_tready, m_tlast;

    quantiser #(.UW(1)) dut (
        .clk, .rst, .cfg_m, .cfg_k, .cfg_range_bits,
        .s_tdata, .s_tuser, .s_tvalid, .s_tready, .s_tlast,
        .m_tdata, .m_tuser, .m_tvalid, .m_tready, .m_tlast
    );

    logic [31:0] grad [0:MAX_WORDS-1];
    logic [31:0] want_q [0:MAX_WORDS-1];
    logic [31:0] want_sat [0:MAX_WORDS-1];
    logic [31:0] want_nan [0:MAX_WORDS-1];

    int cases_checked, failures, case_failures, sent, got, sat_seen, nan_seen, n, waited;
    logic running;
    longint cycle;

    task automatic fail(input string what);
        failures++;
        case_failures++;
        if (case_failures <= 5) $display("GOLDEN-BENCH MISMATCH case %0s: %0s", case_name, what);
    endtask

    // stimulus from the counters: an idle input cycle every third cycle, tready low every fifth
    assign s_tvalid = running && sent < n && (cycle % 3) != 2;
    assign s_tdata = grad[sent < n ? sent : 0];
    assign s_tuser = 1'b0;
    assign s_tlast = sent == n - 1;
    assign m_tready = running && (cycle % 5) != 4;

    // every handshake is seen at the clock edge that takes it (values from before the edge)
    always @(posedge clk) begin
        cycle <= cycle + 1;
        if (running && s_tvalid && s_tready) sent <= sent + 1;
        if (running && m_tvalid && m_tready) begin
            if (got >= n) fail($sformatf("word %0d out of a %0d-word case", got, n));
            else begin
                if (m_tdata !== want_q[got])
                    fail($sformatf("quantised word %0d: expected %08h, actual %08h", got,
                                   want_q[got], m_tdata));
                if ({31'd0, m_tuser[0]} !== want_sat[got])
                    fail($sformatf("sat flag word %0d: expected %0d, actual %0d", got,
                                   want_sat[got], m_tuser[0]));
                if ({31'd0, m_tuser[1]} !== want_nan[got])
                    fail($sformatf("nan flag word %0d: expected %0d, actual %0d", got,
                                   want_nan[got], m_tuser[1]));
                if (m_tlast !== (got == n - 1)) fail($sformatf("tlast at word %0d", got));
                if (m_tuser[2] !== 1'b0) fail($sformatf("s_tuser not carried at word %0d", got));
            end
            sat_seen <= sat_seen + int'(m_tuser[0]);
            nan_seen <= nan_seen + int'(m_tuser[1]);
            got <= got + 1;
        end
    end

    task run_case;
        n = int'(gp_n);
        case_failures = 0;
        if (gp_words_grad_bits != gp_n || gp_words_quantised != gp_n
            || gp_words_quant_sat != gp_n || gp_words_quant_nan != gp_n)
            fail("params.txt word counts differ from n");
        if (gp_n > longint'(MAX_WORDS)) fail($sformatf("n = %0d > MAX_WORDS (%0d)", gp_n, MAX_WORDS));
        else if (n > 0) begin          // an empty array is an empty file: nothing to read
            $readmemh(case_file("grad_bits"), grad, 0, n - 1);
            $readmemh(case_file("quantised"), want_q, 0, n - 1);
            $readmemh(case_file("quant_sat"), want_sat, 0, n - 1);
            $readmemh(case_file("quant_nan"), want_nan, 0, n - 1);
        end
        cfg_m = gp_m[31:0];
        cfg_k = gp_k_shift[31:0];
        cfg_range_bits = gp_range_bits[31:0];
        @(negedge clk);
        sent = 0;
        got = 0;
        sat_seen = 0;
        nan_seen = 0;
        if (case_failures == 0) begin
            running = 1'b1;
            waited = 0;
            while (got < n && waited < 20 * n + 100) begin
                @(negedge clk);
                waited++;
            end
            running = 1'b0;
            if (got < n) fail($sformatf("timeout: %0d of %0d words in, %0d out", sent, n, got));
            repeat (12) @(negedge clk);       // nothing more may come out
            if (got != n) fail($sformatf("%0d words out of a %0d-word case", got, n));
        end
        if (longint'(sat_seen) != gp_sat_quant)
            fail($sformatf("sat flags %0d, params.txt sat_quant %0d", sat_seen, gp_sat_quant));
        if (longint'(nan_seen) != gp_nan_count)
            fail($sformatf("nan flags %0d, params.txt nan_count %0d", nan_seen, gp_nan_count));
        cases_checked++;
        $display("GOLDEN-BENCH CASE %0s n=%0d %0s", case_name, gp_n,
                 case_failures != 0 ? "FAIL" : "pass");
    endtask

    initial begin
        cycle = 0;
        cases_checked = 0;
        failures = 0;
        running = 1'b0;
        n = 0;
        sent = 0;
        got = 0;
        cfg_m = '0;
        cfg_k = '0;
        cfg_range_bits = '0;
        open_golden();
        repeat (4) @(negedge clk);
        rst = 1'b0;
        while (next_case() != 0) begin
            if (case_kind == "compress") begin
                read_params();
                if (gp_stage_quantiser == 1) run_case();
            end
        end
        $fclose(case_list_fd);
        if (failures != 0 || cases_checked == 0) begin
            $display("GOLDEN-BENCH FAIL %0d mismatches in %0d cases", failures, cases_checked);
            $fatal(1, "golden mismatches");
        end
        $display("GOLDEN-BENCH PASS %0d cases", cases_checked);
        $finish;
    end
endmodule

`resetall
