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
    logic [63:0] acc, sum;
    logic [31:0] offset, index, magnitude;
    logic        accept, block_end;

    // two's complement negation: -2^31 gives 2^31, still exact as unsigned
    assign magnitude = s_tdata[31] ? (32'd0 - s_tdata) : s_tdata;
    assign sum = acc + {32'd0, magnitude};
    assign s_tready = !m_tvalid || m_tready;
    assign accept = s_tvalid && s_tready;
    assign block_end = (offset + 32'd1 == cfg_block_size) || s_tlast;

    always_ff @(posedge clk) begin
        if (rst) begin
            acc <= 64'd0;
            offset <= 32'd0;
            index <= 32'd0;
            m_tvalid <= 1'b0;
        end else begin
            if (m_tready) m_tvalid <= 1'b0;
            if (accept) begin
                if (block_end) begin
                    m_tdata <= {index, sum};
                    m_tlast <= s_tlast;
                    m_tvalid <= 1'b1;
                    acc <= 64'd0;
                    offset <= 32'd0;
                    index <= s_tlast ? 32'd0 : index + 32'd1;
                end else begin
                    acc <= sum;
                    offset <= offset + 32'd1;
                end
            end
        end
    end
endmodule
