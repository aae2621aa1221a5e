// Block L1 norms, docs/spec.md §2.3: norm_j = sum |a_i| over block j, exact.
//
// Input: one layer of int32 values, s_tlast on the layer's last element. A block closes after
// cfg_block_size elements or at s_tlast (so the last block may be shorter). Output, one beat per
// block: m_tdata = {block index (31..0 in bits 95..64), norm (bits 63..0)}, m_tlast on the
// layer's last block. Indices restart at 0 after each layer.
// Width bound: |a| <= 2^31 and a block holds < 2^32 elements, so norm < 2^63 fits 64 bits.
// cfg_block_size must be >= 1 and held steady during a layer (0 would mean "close at tlast only").
module block_l1 (
    input  logic        clk,
    input  logic        rst,
    input  logic [31:0] cfg_block_size,
    input  logic [31:0] s_tdata,
    input  logic        s_tvalid,
    output logic        s_tready,
    input  logic        s_tlast,
    output logic [95:0] m_tdata,
    output logic        m_tvalid,
    input  logic        m_tready,
    output logic        m_tlast
);
    // Two stages under one enable (s_tready = !m_tvalid || m_tready): 1 takes |a| and whether the
    // element closes its block (an equality against a count kept one ahead, no adder in the
    // path); 2 accumulates, 64 bits, and emits at the block's end. Latency 2.
    logic        en, v1, last1, end1;
    logic [31:0] mag1, next_offset, index;
    logic [63:0] acc, sum;

    assign en = !m_tvalid || m_tready;
    assign s_tready = en;
    assign sum = acc + {32'd0, mag1};

    always_ff @(posedge clk) begin
        if (rst) begin
            v1 <= 1'b0;
            next_offset <= 32'd1;
            acc <= 64'd0;
            index <= 32'd0;
            m_tvalid <= 1'b0;
        end else if (en) begin
            // stage 1
            v1 <= s_tvalid;
            if (s_tvalid) begin
                // two's complement negation: -2^31 gives 2^31, still exact as unsigned
                mag1 <= s_tdata[31] ? (32'd0 - s_tdata) : s_tdata;
                last1 <= s_tlast;
                end1 <= next_offset == cfg_block_size || s_tlast;
                next_offset <= (next_offset == cfg_block_size || s_tlast) ? 32'd1
                             : next_offset + 32'd1;
            end
            // stage 2
            m_tvalid <= v1 && end1;
            if (v1) begin
                if (end1) begin
                    acc <= 64'd0;
                    index <= last1 ? 32'd0 : index + 32'd1;
                end else begin
                    acc <= sum;
                end
            end
        end
        // the output register loads on every enable (its clock enable is then `en` alone, two
        // flops deep, not en && v1 && end1); m_tvalid says when it holds a norm
        if (en) begin
            m_tdata <= {index, sum};
            m_tlast <= last1;
        end
    end
endmodule
