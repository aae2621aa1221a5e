// Ascending list of up to K_MAX distinct 32-bit values, filled by insertion one value per cycle
// (compress_engine sorts the selected block indices, which topk_select gives in rank order).
// Slot i sits at list[32i +: 32], slot 0 the smallest; a value lands in front of the first slot
// holding a larger one and the slots behind move down one, as in topk_select. The caller
// inserts at most K_MAX values between clears.
module index_sort #(
    parameter int K_MAX = 32
) (
    input  logic                  clk,
    input  logic                  rst,
    input  logic                  clear,
    input  logic                  in_valid,
    input  logic           [31:0] in_value,
    output logic [32*K_MAX-1:0]   list
);
    logic [K_MAX-1:0]    used, keep, keep_down, used_down;
    logic [32*K_MAX-1:0] list_down;

    for (genvar i = 0; i < K_MAX; i++) begin : g_keep
        assign keep[i] = used[i] && list[32*i +: 32] < in_value;
    end
    assign keep_down = ~(~keep << 1);     // keep_down[i] = keep[i - 1], 1 in front of slot 0
    assign used_down = used << 1;
    assign list_down = list << 32;

    always_ff @(posedge clk) begin
        if (rst || clear) begin
            used <= '0;
        end else if (in_valid) begin
            for (int i = 0; i < K_MAX; i++) begin
                if (!keep[i]) begin
                    used[i] <= keep_down[i] ? 1'b1 : used_down[i];
                    list[32*i +: 32] <= keep_down[i] ? in_value : list_down[32*i +: 32];
                end
            end
        end
    end
endmodule
