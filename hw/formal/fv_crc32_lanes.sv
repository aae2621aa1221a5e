// Formal harness for crc32_lanes (hw/formal/crc32_lanes.sby): one cycle of the W-word unit
// against the CRC's definition (docs/spec.md §3.3), the bit-serial reflected CRC run word by
// word over lanes 0 .. count-1 (32 shift/XOR steps a word), from the unit's own state.
//
// The state is a register with no reset here and no initial value, so the solver picks it
// freely in the checked cycle: the property is the unit's next-state function for every state
// and every input (init, en, count 0..W, data; count is free while en is low), which by
// induction on the cycles makes crc the CRC of every word absorbed since init.
//
// What the solver is asked. Both sides are GF(2)-affine in (state, data) for each fixed
// (init, en, count): XOR trees over bits ANDed with constant masks, shifts by count and
// constant seeds (crc32_lanes.sv "Structure"; the reference is XOR/shift by construction).
// Two affine maps are equal iff they agree at 0 and at every unit vector, so the harness
// assumes at most one set bit among state and the absorbed lanes (-DFULL drops that
// assumption: the same property over every input, which CDCL solvers do not finish:
// equivalence of XOR networks is their known hard case). The restriction is what makes the
// proof fast; tests/test_lane_verification.py checks that the unit's next-state cone holds no
// cell outside that affine set, so the two together cover every input.
// `cover`: a full beat, a beat with init, a beat of no words.
//
// DATA_REG = 1 (the registered data term): a bmc of depth 2. Cycle 0's inputs (init, en,
// count, data, rst) are remembered here; in cycle 1 crc_next must be the definition applied
// to them from the unit's state in cycle 1 (whatever cycle 0 left there: the stage and state
// start free), and a reset in cycle 0 must have dropped them. By induction the register after
// each cycle holds the CRC of every word offered up to the cycle before. The same argument on
// the unit vectors: for fixed control, crc_next in cycle 1 is affine in (state in cycle 1,
// cycle 0's data) (the netlist check taints the state and the stage's term registers).
module fv_crc32_lanes #(
    parameter int W = 4,
    parameter int DATA_REG = 0
) (
    input logic                   clk,
    input logic                   rst,
    input logic                   init,
    input logic                   en,
    input logic [32*W-1:0]        data,
    input logic [$clog2(W+1)-1:0] count,
    input logic                   hot_none,    // the unit vector: none, or bit hot_j of
    input logic [$clog2(32*W+32)-1:0] hot_j    // {state, absorbed lanes}
);
    localparam logic [31:0] POLY = 32'hEDB88320;
    localparam logic [31:0] SEED = 32'hFFFFFFFF;

    logic [31:0] crc, crc_next;
    crc32_lanes #(.W(W), .DATA_REG(DATA_REG)) dut (.clk, .rst, .init, .en, .data, .count, .crc,
                                                   .crc_next);

    // the inputs crc_next answers for: this cycle's, or (DATA_REG = 1) the last cycle's
    logic                   past_valid = 1'b0;
    logic                   p_rst, p_init, p_en;
    logic [32*W-1:0]        p_data;
    logic [$clog2(W+1)-1:0] p_count;
    always @(posedge clk) begin
        past_valid <= 1'b1;
        {p_rst, p_init, p_en, p_data, p_count} <= {rst, init, en, data, count};
    end
    logic                   a_init, a_en, checked;
    logic [32*W-1:0]        a_data;
    logic [$clog2(W+1)-1:0] a_count;
    always @(*) begin
        if (DATA_REG == 0) begin
            {a_init, a_en, a_data, a_count} = {init, en, data, count};
            checked = 1'b1;
        end else begin
            // a reset drops what was in the stage: nothing absorbed, no restart
            {a_init, a_en, a_data, a_count} = {p_init && !p_rst, p_en && !p_rst, p_data, p_count};
            checked = past_valid;
        end
    end

    // the definition: from the current state (~crc), word by word, bit by bit
    logic [31:0]     s_ref;
    logic [32*W-1:0] absorbed;             // the lanes that count selects
    logic [32*W+31:0] unit;
    // a decoder (no carry chain), so the solver has every bit once it picks hot_j
    for (genvar i = 0; i < 32 * W + 32; i++) begin : g_unit
        assign unit[i] = !hot_none && int'(hot_j) == i;
    end
    always @(*) begin
        s_ref = a_init ? SEED : ~crc;
        absorbed = '0;
        for (int k = 0; k < W; k++) begin
            if (a_en && k < int'(a_count)) begin
                absorbed[32*k +: 32] = a_data[32*k +: 32];
                s_ref = s_ref ^ a_data[32*k +: 32];
                for (int b = 0; b < 32; b++) s_ref = s_ref[0] ? ((s_ref >> 1) ^ POLY) : (s_ref >> 1);
            end
        end
    end

    always @(*) begin
        if (en) assume (int'(count) <= W);
`ifndef FULL
        if (checked) assume ({~crc, absorbed} == unit);
`endif
        if (checked) assert (crc_next == ~s_ref);
        cover (checked && a_en && int'(a_count) == W && !a_init && crc != '0);
        cover (checked && a_en && a_init && int'(a_count) == W - 1);
        cover (checked && a_en && a_count == '0 && !a_init);
    end
endmodule
