// Cuts a list of element ranges into AXI4 INCR bursts for compress_engine: ranges
// [range_start, range_end) for range_idx = 0 .. count-1 (ascending, non-empty), element e at
// byte address base + 4e; a beat carries W elements (32*W bits; base aligned to one beat), so a
// range covers beats floor(start / W) .. floor((end - 1) / W); a burst has at most MAX_BURST
// beats and never crosses a 4 KiB boundary (AXI4 rule). (The lanes of a range's partial first
// and last beats are the parent's business: compress_engine's write strobes.)
// Every path is register to register through at most one carry chain and a compare (150 MHz on
// ECP5): per range, SEL (range_idx settles; the parent registers the range it selects), LOAD
// (latch range_start / range_end), CALC (remaining words, start address); per burst, LEN (the
// burst's length and whether it ends the range, registered), RUN (req_valid until req_fire),
// then UPD (the counts and the address move on: req_fire, which comes from the AXI handshake,
// only changes the state, not ~100 flops of arithmetic). So a range costs 3 cycles and a burst
// 3, with bursts of up to MAX_BURST beats.
//   start      begin walking from range 0 (count is latched here; while it is 0, nothing is
//              requested and done is low for one cycle, the SEL that finds it)
//   req_valid  a burst is ready: req_addr, req_len (beats, 1..MAX_BURST), req_elems = elements
//              already covered by earlier bursts; req_fire takes it
`resetall
`default_nettype none

module burst_walker #(
    parameter int ADDR_W = 32,
    parameter int MAX_BURST = 16,      // 1..256
    parameter int W = 1                // elements (32-bit lanes) per beat: 1, 2, 4, 8 or 16
) (
    input  logic              clk,
    input  logic              rst,
    input  logic              start,
    input  logic [ADDR_W-1:0] base,
    input  logic       [31:0] count,
    output logic       [31:0] range_idx,
    input  logic       [31:0] range_start,
    input  logic       [31:0] range_end,
    output logic              req_valid,
    input  logic              req_fire,
    output logic [ADDR_W-1:0] req_addr,
    output logic        [8:0] req_len,
    output logic       [31:0] req_elems,     // beats (= elements at W = 1)
    output logic              done
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(ADDR_W >= 12 && ADDR_W <= 64)) begin : g_bad_addr_w
`ifdef __ICARUS__
        burst_walker__ADDR_W_must_be_12_to_64 u_parameter_error ();
`else
        $error("burst_walker: ADDR_W must be 12..64");
`endif
    end
    if (!(MAX_BURST >= 1 && MAX_BURST <= 256)) begin : g_bad_max_burst
`ifdef __ICARUS__
        burst_walker__MAX_BURST_must_be_1_to_256 u_parameter_error ();
`else
        $error("burst_walker: MAX_BURST must be 1..256");
`endif
    end
    if (!(W == 1 || W == 2 || W == 4 || W == 8 || W == 16)) begin : g_bad_w
`ifdef __ICARUS__
        burst_walker__W_must_be_1_2_4_8_or_16 u_parameter_error ();
`else
        $error("burst_walker: W must be 1, 2, 4, 8 or 16");
`endif
    end
    if (!(MAX_BURST * 4 * W <= 4096)) begin : g_bad_burst_bytes
`ifdef __ICARUS__
        burst_walker__MAX_BURST_beats_must_fit_4_KiB u_parameter_error ();
`else
        $error("burst_walker: MAX_BURST beats of W words must fit in 4 KiB");
`endif
    end
    localparam logic [31:0] MAX_U = MAX_BURST;
    localparam int L = $clog2(W);            // lane index bits
    localparam int LB = L + 2;               // byte offset bits of a beat
    localparam logic [10:0] PAGE_BEATS = 11'(4096 / (4 * W));

    typedef enum logic [2:0] {IDLE, SEL, LOAD, CALC, LEN, RUN, UPD} walk_t;
    walk_t       st;
    logic [31:0] start_r, end_r, remaining;
    logic [10:0] to_4k;          // beats left before the next 4 KiB boundary, 1..1024
    logic [10:0] cap;            // min(MAX_BURST, to_4k): a burst's most beats here
    logic        fits, last_burst, last_range;
    logic [31:0] next_idx;       // range_idx + 1, registered in SEL; compared with count in LOAD
    logic [31:0] count_r;        // count, latched at start: the compares start from a flop here
                                 // (count is a mux in the parent, steady during a walk)

    assign to_4k = PAGE_BEATS - 11'(req_addr[11:LB]);
    assign cap = (MAX_U[10:0] < to_4k) ? MAX_U[10:0] : to_4k;
    // the rest of the range fits one burst: compares side by side, no chain behind a mux
    assign fits = remaining <= MAX_U && remaining[31:11] == 21'd0 && remaining[10:0] <= to_4k;
    logic unused_cap;                 // cap <= MAX_BURST <= 256: 9 bits
    assign unused_cap = ^cap[10:9];
    assign req_valid = st == RUN;
    assign done = st == IDLE;

    always_ff @(posedge clk) begin
        if (rst) begin
            st <= IDLE;
            req_addr <= '0;             // the AXI address and length ports show no X while idle
            req_len <= 9'd0;
        end else if (start) begin
            st <= SEL;
            count_r <= count;
            range_idx <= 32'd0;
            req_elems <= 32'd0;
        end else begin
            case (st)
                SEL: begin
                    next_idx <= range_idx + 32'd1;
                    st <= (count_r == 32'd0) ? IDLE : LOAD;   // an empty walk ends here
                end
                LOAD: begin
                    last_range <= next_idx == count_r;
                    start_r <= range_start;
                    end_r <= range_end;
                    st <= CALC;
                end
                CALC: begin
                    // beats: floor((end - 1) / W) + 1 - floor(start / W) (end - start at W = 1)
                    if (W == 1) remaining <= end_r - start_r;
                    else remaining <= ((end_r - 32'd1) >> L) + 32'd1 - (start_r >> L);
                    req_addr <= base + ADDR_W'({start_r >> L, {LB{1'b0}}});   // its beat
                    st <= LEN;
                end
                LEN: begin
                    req_len <= fits ? remaining[8:0] : cap[8:0];
                    last_burst <= fits;
                    st <= RUN;
                end
                RUN: if (req_fire) st <= UPD;
                UPD: begin
                    remaining <= remaining - {23'd0, req_len};
                    req_addr <= req_addr + (ADDR_W'({req_len, 2'b00}) << L);
                    req_elems <= req_elems + {23'd0, req_len};
                    if (!last_burst) begin
                        st <= LEN;
                    end else begin
                        range_idx <= next_idx;
                        st <= last_range ? IDLE : SEL;
                    end
                end
                default: st <= IDLE;
            endcase
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    logic              chk_stall;     // last cycle a burst was offered and not taken
    logic [ADDR_W-1:0] chk_addr;
    logic        [8:0] chk_len;
    initial chk_stall = 1'b0;
    always @(posedge clk) begin
        chk_stall <= !rst && !start && req_valid && !req_fire;
        chk_addr  <= req_addr;
        chk_len   <= req_len;
        if (!rst && req_valid) begin
            // AXI4: 1..MAX_BURST beats, and the burst ends at or before the next 4 KiB boundary
            assert (req_len != 9'd0 && {23'd0, req_len} <= MAX_U);
            assert (11'(req_addr[11:LB]) + {2'b0, req_len} <= PAGE_BEATS);
        end
        // the parent only takes an offered burst, and gives non-empty ranges
        if (!rst) assert (!req_fire || req_valid);
        if (!rst && !start && st == LOAD) assert (range_end > range_start);
        // an offered burst stays offered, unchanged, until taken
        if (!rst && !start && chk_stall) assert (req_valid && req_addr == chk_addr && req_len == chk_len);
    end
`ifdef FORMAL
    // prover-only: invariants of the walk (they follow from reset) that k-induction needs
    always @(posedge clk) begin
        if (!rst) begin
            if (st == CALC) assert (end_r > start_r);
            if (st == LEN || st == RUN || st == UPD) assert (remaining != 32'd0);
            if (st == RUN || st == UPD) begin
                assert (req_len != 9'd0 && {23'd0, req_len} <= remaining);
                assert (last_burst == ({23'd0, req_len} == remaining));
                assert (11'(req_addr[11:LB]) + {2'b0, req_len} <= PAGE_BEATS);
            end
        end
    end
`endif
`endif
endmodule

`resetall
