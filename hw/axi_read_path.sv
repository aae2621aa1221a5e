// The read half of an AXI4 master port, shared by compress_engine (residual and velocity ports)
// and aggregate_engine (the sums): burst requests in (held until taken: burst_walker's, or a
// register of gathered bursts), AR out, R into a FIFO, the beats out in order on a valid/ready
// stream.
//
// Credits: a burst goes out only when the FIFO has room for all of it (`room`: FIFO places not
// promised to a burst, back when a beat leaves the FIFO), so rready never stalls the memory and
// R never waits on the consumer. REGISTERED (compress_engine, 150 MHz on ECP5 beside a busy
// datapath) registers both ends of that bookkeeping: the room compare (while a burst waits its
// length is steady and the room only grows, so a one-cycle-old yes still holds; a burst waits
// one cycle more) and the credit a pop gives back (a cycle late: safe, the room only lags).
// Without it (aggregate_engine) arvalid comes from the compare directly and a pop's credit is
// back the next cycle.
//
// OUT_SKID puts a skid buffer after the FIFO: the pop then depends only on the FIFO's `empty`
// and the skid's registered ready (two flops side by side), and the consumer may sit across the
// die. Without it the FIFO's head is the output (a consumer that registers it at once).
// The words in the skid buffer are beyond the credit count (it counts the FIFO only).
//
// Only rdata is taken here: the caller reads rresp (an SLVERR/DECERR is its business, with
// r_fire) and counts bursts by beats (rid, rlast unused: one ID, responses in order).
`resetall
`default_nettype none

module axi_read_path #(
    parameter int ADDR_W = 32,          // AXI address width (bytes), 12..64
    parameter int DATA_W = 32,          // AXI data width, 8..1024, a power of two
    parameter int MAX_BURST = 16,       // most beats a request asks for, 1..256
    parameter int FIFO_AW = 6,          // R FIFO: 2^this beats, at least MAX_BURST
    parameter bit DISTRIBUTED = 1'b0,   // the FIFO in LUT RAM (sync_fifo)
    parameter bit REGISTERED = 1'b1,    // registered credit compare and return (see above)
    parameter bit OUT_SKID = 1'b1       // a skid buffer between the FIFO and m_*
) (
    input  logic              clk,
    input  logic              rst,
    // burst requests: req_valid held, with req_addr and req_len steady, until req_fire
    input  logic              req_valid,
    input  logic [ADDR_W-1:0] req_addr,
    input  logic        [8:0] req_len,        // beats, 1..MAX_BURST
    output logic              req_fire,
    // AXI4 AR and R
    output logic              m_axi_arid,     // one ID: responses come back in order
    output logic [ADDR_W-1:0] m_axi_araddr,
    output logic        [7:0] m_axi_arlen,
    output logic        [2:0] m_axi_arsize,
    output logic        [1:0] m_axi_arburst,
    output logic              m_axi_arvalid,
    input  logic              m_axi_arready,
    input  logic [DATA_W-1:0] m_axi_rdata,
    input  logic              m_axi_rvalid,
    output logic              m_axi_rready,
    output logic              r_fire,         // an R beat was taken this cycle
    // the beats, in order
    output logic [DATA_W-1:0] m_tdata,
    output logic              m_tvalid,
    input  logic              m_tready,
    output logic              credits_home    // no beat requested and not yet out of the FIFO
);
    localparam int DEPTH = 1 << FIFO_AW;
    localparam logic [2:0] SIZE = 3'($clog2(DATA_W / 8));

    // ---- parameter checks: an illegal combination stops elaboration (docs/hw.md) ------------
    // (Icarus 11 has no elaboration tasks: there a module named after the rule is missing)
    if (ADDR_W < 12 || ADDR_W > 64) begin : g_bad_addr_w
`ifdef __ICARUS__
        axi_read_path__ADDR_W_must_be_12_to_64 u_parameter_error ();
`else
        $error("axi_read_path: ADDR_W must be 12..64");
`endif
    end
    if (DATA_W < 8 || DATA_W > 1024 || (DATA_W & (DATA_W - 1)) != 0) begin : g_bad_data_w
`ifdef __ICARUS__
        axi_read_path__DATA_W_must_be_a_power_of_two_8_to_1024 u_parameter_error ();
`else
        $error("axi_read_path: DATA_W must be a power of two, 8..1024");
`endif
    end
    if (MAX_BURST < 1 || MAX_BURST > 256) begin : g_bad_max_burst
`ifdef __ICARUS__
        axi_read_path__MAX_BURST_must_be_1_to_256 u_parameter_error ();
`else
        $error("axi_read_path: MAX_BURST must be 1..256");
`endif
    end
    if (MAX_BURST * (DATA_W / 8) > 4096) begin : g_bad_burst_bytes
`ifdef __ICARUS__
        axi_read_path__MAX_BURST_beats_must_fit_4_KiB u_parameter_error ();
`else
        $error("axi_read_path: MAX_BURST beats of DATA_W bits must fit in 4 KiB");
`endif
    end
    if (FIFO_AW < 1 || FIFO_AW > 16 || (1 << FIFO_AW) < MAX_BURST) begin : g_bad_fifo_aw
`ifdef __ICARUS__
        axi_read_path__FIFO_AW_must_be_1_to_16_and_hold_MAX_BURST u_parameter_error ();
`else
        $error("axi_read_path: FIFO_AW must be 1..16 with 2^FIFO_AW >= MAX_BURST");
`endif
    end

    logic               push, pop, full, empty;
    logic  [DATA_W-1:0] fifo_head;
    logic   [FIFO_AW:0] room;             // FIFO places not promised to a burst
    logic               credit_back;      // a beat's place comes back now

    assign m_axi_arid = 1'b0;
    assign m_axi_araddr = req_addr;
    assign m_axi_arlen = 8'(req_len - 9'd1);
    assign m_axi_arsize = SIZE;
    assign m_axi_arburst = 2'b01;          // INCR
    assign req_fire = m_axi_arvalid && m_axi_arready;

    if (REGISTERED) begin : g_reg_credit
        logic room_ok, pop_d;
        always_ff @(posedge clk) begin
            room_ok <= req_valid && !req_fire && 32'(room) >= 32'(req_len);
            if (rst) pop_d <= 1'b0;
            else pop_d <= pop;
        end
        assign m_axi_arvalid = req_valid && room_ok;
        assign credit_back = pop_d;
    end else begin : g_comb_credit
        assign m_axi_arvalid = req_valid && 32'(room) >= 32'(req_len);
        assign credit_back = pop;
    end

    always_ff @(posedge clk) begin
        if (rst) room <= (FIFO_AW + 1)'(DEPTH);
        else room <= room - (req_fire ? (FIFO_AW + 1)'(req_len) : '0)
                     + (FIFO_AW + 1)'(credit_back);
    end
    assign credits_home = room == (FIFO_AW + 1)'(DEPTH);

    assign m_axi_rready = !full;
    assign push = m_axi_rvalid && m_axi_rready;
    assign r_fire = push;

    sync_fifo #(.W(DATA_W), .AW(FIFO_AW), .DISTRIBUTED(DISTRIBUTED)) u_fifo (
        .clk, .rst, .clear(1'b0), .push, .wr_data(m_axi_rdata), .pop, .rd_data(fifo_head),
        .full, .empty
    );

    if (OUT_SKID) begin : g_skid
        logic skid_ready;
        assign pop = !empty && skid_ready;
        axis_skid_buffer #(.W(DATA_W)) u_skid (
            .clk, .rst, .s_tdata(fifo_head), .s_tvalid(!empty), .s_tready(skid_ready),
            .m_tdata, .m_tvalid, .m_tready
        );
    end else begin : g_head
        assign m_tdata = fifo_head;
        assign m_tvalid = !empty;
        assign pop = m_tvalid && m_tready;
    end

`ifndef SYNTHESIS
    // ---- assertions (simulation and hw/formal/; docs/hw.md "Verification")
    always @(posedge clk) begin
        if (!rst) begin
            // credits: the FIFO never overflows (rready would stall the memory), no request
            // asks for more beats than a burst may carry
            assert (room <= (FIFO_AW + 1)'(DEPTH));
            if (req_valid) assert (req_len >= 9'd1 && 32'(req_len) <= MAX_BURST);
        end
    end
`endif
endmodule

`resetall
