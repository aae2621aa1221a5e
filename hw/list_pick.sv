// One entry of a K-entry list of W-bit words, picked by index through a register in the middle
// (compress_engine's selected-block lists, 150 MHz on ECP5): the first stage picks, in every
// group of 2^LO entries, the one at idx's low bits and registers the groups' picks (and idx's
// high bits); the second stage, combinational, picks the group. So
//   pick = list[idx] as idx and list were one cycle ago (dflt instead where use_list was low),
// and the path from the list's flops, spread over the die, ends in a register after a mux of
// 2^LO words instead of running through a K-way mux into the caller's logic.
module list_pick #(
    parameter int K = 32,
    parameter int W = 32
) (
    input  logic           clk,
    input  logic [W*K-1:0] list,
    input  logic [((K > 1) ? $clog2(K) : 1)-1:0] idx,   // SW bits
    input  logic           use_list,   // low: the pick is dflt (no list entry)
    input  logic [W-1:0]   dflt,
    output logic [W-1:0]   pick
);
    localparam int SW = (K > 1) ? $clog2(K) : 1;   // index bits
    localparam int LO = (SW + 1) / 2;               // index bits of the first stage
    localparam int G = 1 << (SW - LO);              // groups (second stage's ways)

    logic [W-1:0] grp [G];

    always_ff @(posedge clk) begin
        for (int g = 0; g < G; g++) begin
            grp[g] <= dflt;
            if (use_list) begin
                // entries past K (K not a power of two) are never indexed: leave dflt there
                for (int j = 0; j < (1 << LO); j++)
                    if (g * (1 << LO) + j < K && idx[LO-1:0] == LO'(j))
                        grp[g] <= list[W*(g*(1 << LO) + j) +: W];
            end
        end
    end

    generate
        if (G > 1) begin : g_two
            logic [SW-LO-1:0] hi_r;    // the group, as idx was with the first stage
            always_ff @(posedge clk) hi_r <= idx[SW-1:LO];
            assign pick = grp[hi_r];
        end else begin : g_one
            assign pick = grp[0];
        end
    endgenerate
endmodule
