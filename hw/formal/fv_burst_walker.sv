// Formal harness for burst_walker (hw/formal/burst_walker.sby). Any base (word aligned), any
// two ascending non-empty ranges [rs0, re0), [rs1, re1) (all values free), count 0..2; the
// parent starts only when idle and takes only an offered burst. Every burst starts where the
// previous one ended (or at its range's start), never runs past its range's end, stays below
// 4 KiB boundaries (asserted in the module), and the walk ends exactly when every range has
// been covered to its end (these under EXACT: the bmc task; the prove task proves the
// module's own assertions, 4 KiB and burst length, for every reachable state).
// W lanes (issue 31; the *_w4 tasks set W = 4): the walk is in beats of W elements, base
// aligned to a beat; a range [s, e) covers beats s/W .. (e-1)/W, so two ranges may share a
// beat and each walks it (the parent's write strobes keep their lanes apart).
module fv_burst_walker #(
    parameter int W = 1
) (
    input logic clk,
    input logic rst,
    input logic start,
    input logic req_fire
);
    localparam int MAX_BURST = 16;
    localparam int L = $clog2(W);          // lane bits of an element index
    localparam int LB = L + 2;             // byte bits of a beat
    (* anyconst *) logic [31:0] base_c, count_c, rs0, re0, rs1, re1;
    logic [31:0] range_idx, range_start, range_end, req_elems;
    logic [31:0] req_addr;
    logic [8:0]  req_len;
    logic        req_valid, done;

    assign range_start = range_idx == 32'd0 ? rs0 : rs1;
    assign range_end   = range_idx == 32'd0 ? re0 : re1;

    burst_walker #(.ADDR_W(32), .MAX_BURST(MAX_BURST), .W(W)) dut (
        .clk, .rst, .start, .base(base_c), .count(count_c), .range_idx, .range_start,
        .range_end, .req_valid, .req_fire, .req_addr, .req_len, .req_elems, .done
    );

    // the harness's own account of the walk
    logic        walking;
    logic [1:0]  r;                    // range being covered
    logic [31:0] e;                    // next beat expected
    logic [31:0] covered;              // beats requested so far
    logic [31:0] cur_end;              // one past the current range's last beat
    assign cur_end = (((r == 2'd0 ? re0 : re1) - 32'd1) >> L) + 32'd1;

    initial assume (rst);
    always @(posedge clk) begin
        if (!rst) begin
            assume (base_c[LB-1:0] == '0);
            assume (count_c <= 32'd2);
            assume (rs0 < re0 && re0 <= rs1 && rs1 < re1);
            assume (re1 < 32'h0400_0000 && base_c < 32'hF000_0000);   // no address wraps
`ifdef EXACT
            assume (re1 < 32'h0000_1000);     // bounded run: ranges in the first 4096 elements
`endif
            assume (!start || done);
            assume (!req_fire || req_valid);
        end
        if (rst) begin
            walking <= 1'b0;
        end else if (start) begin
            walking <= 1'b1;
            r <= 2'd0;
            e <= rs0 >> L;
            covered <= 32'd0;
        end else if (req_fire) begin
            covered <= covered + {23'd0, req_len};
            if (e + {23'd0, req_len} == cur_end) begin
                r <= r + 2'd1;
                e <= rs1 >> L;
            end else begin
                e <= e + {23'd0, req_len};
            end
        end else if (done) begin
            walking <= 1'b0;
        end
`ifdef EXACT
        if (!rst && walking) begin
            assert (r <= 2'd2 && {30'd0, r} <= count_c);
            if (req_valid) begin
                assert ({30'd0, r} < count_c);
                assert (req_addr == base_c + (e << LB));
                assert (e + {23'd0, req_len} <= cur_end);
                assert (req_elems == covered);
            end
            if (done) assert ({30'd0, r} == count_c);
        end
`endif
        if (!rst) begin
            cover (walking && done && count_c == 32'd2);
            // a full burst ending at a 4 KiB boundary; a short one cut by it
            cover (walking && req_valid && req_len == 9'd16
                   && 13'(req_addr[11:0]) + (13'(req_len) << LB) == 13'h1000);
            cover (walking && req_valid && req_len < 9'd16
                   && 13'(req_addr[11:0]) + (13'(req_len) << LB) == 13'h1000);
        end
    end
endmodule
