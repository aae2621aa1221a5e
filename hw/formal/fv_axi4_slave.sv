// Formal environment of one AXI4 master port (hw/formal/compress_engine.sby,
// aggregate_engine.sby): the memory side is any AXI4 slave. Every slave-driven signal is a
// free input of the harness; this module only assumes what an AXI4 slave must do:
//   - R beats only for read bursts the master has asked for (AR taken in an earlier cycle),
//     in order, RLAST exactly on each burst's last beat; RDATA / RRESP any value;
//   - a B response only for a write burst whose AW was taken and whose last W beat was sent
//     (both in earlier cycles); BRESP any value;
//   - RVALID and BVALID, once up, stay up with their payload unchanged until taken;
//   - ARREADY, AWREADY, WREADY and the timing of R and B: anything.
// The master side (addresses, lengths, W) is what is checked, by axi4_master_checker inside
// the engine; the one master rule asserted here is that the model's queue of outstanding read
// bursts does not overflow (QD bursts in flight at most).
`default_nettype none

module fv_axi4_slave #(
    parameter int DATA_W = 32,
    parameter int QD = 8               // read bursts in flight the model can track
) (
    input wire              clk,
    input wire              rst,
    input wire        [7:0] arlen,
    input wire              arvalid,
    input wire              arready,
    input wire [DATA_W-1:0] rdata,
    input wire        [1:0] rresp,
    input wire              rlast,
    input wire              rvalid,
    input wire              rready,
    input wire              awvalid,
    input wire              awready,
    input wire              wlast,
    input wire              wvalid,
    input wire              wready,
    input wire        [1:0] bresp,
    input wire              bvalid,
    input wire              bready,
    output logic [7:0]      reads_out,    // read bursts asked for and not yet fully answered
    output logic [7:0]      writes_due    // write bursts complete (AW and last W) not answered
);
    localparam int QW = $clog2(QD);

    logic [8:0]    rq [QD];               // beats of each outstanding read burst, oldest first
    logic [QW-1:0] rq_wr, rq_rd;
    logic [8:0]    rbeat;                 // R beats already sent of the oldest burst
    logic [7:0]    aw_open, wl_open;      // AW taken / last W sent, not yet answered by B
    logic          ar_fire, r_fire, aw_fire, w_fire, b_fire;
    logic          past_live;             // the previous cycle was out of reset
    logic          r_stall, b_stall;
    logic [DATA_W+3:0] r_word;
    logic [2:0]    b_word;

    assign ar_fire = arvalid && arready;
    assign r_fire  = rvalid && rready;
    assign aw_fire = awvalid && awready;
    assign w_fire  = wvalid && wready;
    assign b_fire  = bvalid && bready;
    assign writes_due = (aw_open < wl_open) ? aw_open : wl_open;

    initial past_live = 1'b0;
    always @(posedge clk) begin
        past_live <= !rst;
        r_stall <= rvalid && !rready;
        b_stall <= bvalid && !bready;
        r_word <= {rvalid, rlast, rresp, rdata};
        b_word <= {bvalid, bresp};
        if (rst) begin
            rq_wr <= '0;
            rq_rd <= '0;
            reads_out <= 8'd0;
            rbeat <= 9'd0;
            aw_open <= 8'd0;
            wl_open <= 8'd0;
        end else begin
            if (ar_fire) begin
                rq[rq_wr] <= {1'b0, arlen} + 9'd1;
                rq_wr <= rq_wr + QW'(1);
            end
            if (r_fire) begin
                rbeat <= rlast ? 9'd0 : rbeat + 9'd1;
                if (rlast) rq_rd <= rq_rd + QW'(1);
            end
            reads_out <= reads_out + 8'(ar_fire) - 8'(r_fire && rlast);
            aw_open <= aw_open + 8'(aw_fire) - 8'(b_fire);
            wl_open <= wl_open + 8'(w_fire && wlast) - 8'(b_fire);
        end
    end

    always @(*) begin
        if (!rst) begin
            // the slave: responses only for what was asked, RLAST on the burst's last beat
            if (rvalid) begin
                assume (reads_out != 8'd0);
                assume (rlast == (rbeat + 9'd1 == rq[rq_rd]));
            end
            if (bvalid) assume (writes_due != 8'd0);
            // the master keeps at most QD read bursts in flight (the model's queue)
            assert (!(ar_fire && reads_out == 8'(QD)));
        end
        // a response offered stays offered, unchanged, until taken (AXI4 A3.2.1)
        if (past_live && !rst) begin
            if (r_stall) assume ({rvalid, rlast, rresp, rdata} == r_word);
            if (b_stall) assume ({bvalid, bresp} == b_word);
        end
    end
endmodule
