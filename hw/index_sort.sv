// Ascending list of up to K_MAX distinct 32-bit values, filled by insertion, one value every
// two cycles, then read in order from its head (compress_engine sorts the selected block
// indices, which topk_select gives in rank order). Slot i sits at list[32i +: 32], slot 0 the
// smallest; a value lands in front of the first slot holding a larger one and the slots behind
// move down one, as in topk_select. `pop` takes the head away and moves every slot up one, so
// the reader sees slot 0 only: no K_MAX-way mux, whose select fanned out over the whole list
// (7 ns on ECP5). The caller inserts at most K_MAX values between clears and pops only once
// the last value is in (busy low).
//
// Two stages, each from flops (150 MHz on ECP5 inside compress_engine): the cycle after a value
// is taken it is compared with every slot (K_MAX carry chains side by side) and the result is
// registered; the cycle after that the slots take the value or their upper neighbour as the
// registered compares say. The next value is taken in that same cycle, so its compare sees
// the list with the previous value in it. s_tready is a flop; busy is high while a value is
// still on its way into the list.
`resetall
`default_nettype none

module index_sort #(
    parameter int K_MAX = 32
) (
    input  logic                  clk,
    input  logic                  rst,
    input  logic                  clear,
    input  logic                  s_tvalid,
    output logic                  s_tready,
    input  logic           [31:0] s_tdata,
    output logic                  busy,
    input  logic                  pop,
    output logic           [31:0] head      // slot 0 (the smallest value not yet popped)
);
    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (!(K_MAX >= 1)) begin : g_bad_k_max
`ifdef __ICARUS__
        index_sort__K_MAX_must_be_at_least_1 u_parameter_error ();
`else
        $error("index_sort: K_MAX must be >= 1");
`endif
    end
    logic [32*K_MAX-1:0] list;
    logic [K_MAX-1:0]    used, keep, keep_r, keep_down, used_down, used_up;
    logic [32*K_MAX-1:0] list_down, list_up;
    logic [31:0]         value;       // the value being compared (held), then inserted (ins)
    logic                held, ins;

    assign s_tready = !held;
    assign busy = held || ins;

    for (genvar i = 0; i < K_MAX; i++) begin : g_keep
        assign keep[i] = used[i] && list[32*i +: 32] < value;
    end
    assign keep_down = ~(~keep_r << 1);   // keep_down[i] = keep_r[i - 1], 1 in front of slot 0
    assign used_down = used << 1;
    assign list_down = list << 32;
    assign used_up = used >> 1;
    assign list_up = list >> 32;
    assign head = list[31:0];

    always_ff @(posedge clk) begin
        keep_r <= keep;
        if (s_tvalid && s_tready) value <= s_tdata;
        if (rst || clear) begin
            used <= '0;
            held <= 1'b0;
            ins <= 1'b0;
        end else begin
            held <= s_tvalid && s_tready;
            ins <= held;
            if (ins) begin
                for (int i = 0; i < K_MAX; i++) begin
                    if (!keep_r[i]) begin
                        used[i] <= keep_down[i] ? 1'b1 : used_down[i];
                        list[32*i +: 32] <= keep_down[i] ? value : list_down[32*i +: 32];
                    end
                end
            end else if (pop) begin
                used <= used_up;
                list <= list_up;
            end
        end
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    // the list is ascending and packed from slot 0; pops only once the last value is in
    always @(posedge clk) begin
        if (!rst && !clear) begin
            assert (!pop || !busy);
            for (int i = 0; i + 1 < K_MAX; i++) begin
                if (used[i + 1]) assert (used[i] && list[32*i +: 32] < list[32*(i + 1) +: 32]);
            end
        end
    end
`endif
endmodule

`resetall
