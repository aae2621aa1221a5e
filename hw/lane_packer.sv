// Packs chunks of 1..W words (lanes 0 .. s_count-1) into dense W-lane beats (the lane
// convention of issue 31): every beat full (m_tkeep all ones) except a frame's last (m_tlast),
// whose m_tkeep is a run of ones from lane 0. Words keep their order.
//
//   s_data, s_count  a chunk: lanes 0 .. s_count-1 of s_data (1 <= s_count <= W)
//   s_last           the chunk ends the frame: what is held goes out with m_tlast
//   s_valid/s_ready  handshake; s_ready is a register (the output skid buffer's), so no path
//                    runs from m_tready to s_ready
//
// Structure: up to W-1 words wait in acc (count fill). A chunk is rotated up by fill lanes;
// lanes below fill come from acc, the others from the rotated chunk, which also holds what is
// left over once a beat is full (fill + s_count - W words, already in lanes 0 ..). One beat a
// cycle at most, so a chunk a cycle in, a beat a cycle out. A last chunk that overflows the beat
// leaves its remainder for one more cycle (s_ready low then).
`resetall
`default_nettype none

module lane_packer #(
    parameter int W = 1                         // words per beat: 1, 2, 4, 8 or 16
) (
    input  logic                   clk,
    input  logic                   rst,
    input  logic [32*W-1:0]        s_data,
    input  logic [$clog2(W+1)-1:0] s_count,
    input  logic                   s_last,
    input  logic                   s_valid,
    output logic                   s_ready,
    output logic [32*W-1:0]        m_tdata,
    output logic [W-1:0]           m_tkeep,
    output logic                   m_tlast,
    output logic                   m_tvalid,
    input  logic                   m_tready
);
    if (!(W == 1 || W == 2 || W == 4 || W == 8 || W == 16)) begin : g_bad_w
`ifdef __ICARUS__
        lane_packer__W_must_be_1_2_4_8_or_16 u_parameter_error ();
`else
        $error("lane_packer: W must be 1, 2, 4, 8 or 16");
`endif
    end
    localparam int PW = $clog2(W + 1);

    logic [32*W-1:0] acc;                // lanes 0 .. fill-1 wait for the next beat
    logic [PW-1:0]   fill;               // 0 .. W-1
    logic            pend;               // acc holds a frame's last words, to go out next
    logic [64*W-1:0] dbl;
    logic [32*W-1:0] rot, merged;
    logic [PW:0]     total;
    logic            out_ready, take;
    logic            beat_valid, beat_last;
    logic [32*W-1:0] beat_data;
    logic [W-1:0]    beat_keep;

    assign take    = s_valid && s_ready;
    assign s_ready = out_ready && !pend;
    assign dbl     = {s_data, s_data};
    // lane l of rot is chunk lane (l - fill) mod W
    assign rot     = dbl[32*(W - 32'(fill)) +: 32*W];
    assign total   = (PW+1)'(fill) + (PW+1)'(s_count);

    always_comb begin
        for (int l = 0; l < W; l++) begin
            merged[32*l +: 32] = (l < 32'(fill)) ? acc[32*l +: 32] : rot[32*l +: 32];
        end
    end

    function automatic logic [W-1:0] low_run(input int k);
        logic [W-1:0] m;
        for (int l = 0; l < W; l++) m[l] = (l < k);
        low_run = m;
    endfunction

    always_comb begin
        beat_valid = 1'b0;
        beat_last  = 1'b0;
        beat_data  = merged;
        beat_keep  = '1;
        if (pend) begin
            beat_valid = 1'b1;
            beat_last  = 1'b1;
            beat_data  = acc;
            beat_keep  = low_run(32'(fill));
        end else if (take) begin
            if (32'(total) >= W) begin
                beat_valid = 1'b1;
                beat_last  = s_last && (32'(total) == W);
            end else if (s_last) begin
                beat_valid = 1'b1;
                beat_last  = 1'b1;
                beat_keep  = low_run(32'(total));
            end
        end
    end

    always_ff @(posedge clk) begin
        if (rst) begin
            fill <= '0;
            pend <= 1'b0;
        end else if (pend) begin
            if (out_ready) begin
                pend <= 1'b0;
                fill <= '0;
            end
        end else if (take) begin
            if (32'(total) >= W) begin
                fill <= PW'(32'(total) - W);
                pend <= s_last && (32'(total) > W);
            end else begin
                fill <= s_last ? '0 : PW'(total);
            end
        end
        if (!pend && take) begin
            acc <= (32'(total) >= W) ? rot : merged;
        end
    end

    // the output register slice: its spare's enable comes from registers and m_tready only,
    // not from beat_valid (the chunk's count against fill)
    axis_skid_buffer #(.W(32 * W + W + 1)) u_out (
        .clk, .rst,
        .s_tdata({beat_last, beat_keep, beat_data}), .s_tvalid(beat_valid), .s_tready(out_ready),
        .m_tdata({m_tlast, m_tkeep, m_tdata}), .m_tvalid, .m_tready
    );

`ifndef SYNTHESIS
    // ---- assertions (simulation; docs/hw.md "Verification")
    logic                chk_stall;
    logic [32*W+W:0]     chk_beat;
    initial chk_stall = 1'b0;
    always @(posedge clk) begin
        chk_stall <= !rst && m_tvalid && !m_tready;
        chk_beat  <= {m_tlast, m_tkeep, m_tdata};
        if (!rst) begin
            if (s_valid) assert (int'(s_count) >= 1 && int'(s_count) <= W);
            // a beat offered stays offered, unchanged, until taken
            if (chk_stall) assert (m_tvalid && {m_tlast, m_tkeep, m_tdata} == chk_beat);
            // dense: full beats but the last, whose keep is a run from lane 0
            if (m_tvalid && !m_tlast) assert (m_tkeep == '1);
            if (m_tvalid && m_tlast) assert (m_tkeep != '0 && (m_tkeep & (m_tkeep + 1'b1)) == '0);
            assert (int'(fill) < W);
        end
    end
`endif
endmodule

`resetall
