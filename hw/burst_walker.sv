// Cuts a list of element ranges into AXI4 INCR bursts of 32-bit words for compress_engine:
// ranges [range_start, range_end) for range_idx = 0 .. count-1 (ascending, non-empty), element e
// at byte address base + 4e; a burst has at most MAX_BURST beats and never crosses a 4 KiB
// boundary (AXI4 rule). The parent shows the current range on range_start/range_end (a mux
// on range_idx); one cycle per range loads its start and end into registers (so the parent's
// mux ends there, off the burst arithmetic), then one burst per cycle at most.
//   start      begin walking from range 0 (ignored while count is 0: done stays high)
//   req_valid  a burst is ready: req_addr, req_len (beats, 1..MAX_BURST), req_elems = elements
//              already covered by earlier bursts; req_fire takes it
module burst_walker #(
    parameter int ADDR_W = 32,
    parameter int MAX_BURST = 16       // 1..256
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
    output logic       [31:0] req_elems,
    output logic              done
);
    localparam logic [31:0] MAX_U = MAX_BURST;

    logic        active, loaded;
    logic [31:0] pos, end_r, remaining;
    logic [10:0] to_4k;          // beats left before the next 4 KiB boundary, 1..1024
    logic [31:0] len32;

    assign remaining = end_r - pos;
    assign to_4k = 11'd1024 - {1'b0, req_addr[11:2]};
    assign len32 = (remaining < MAX_U) ? remaining : MAX_U;
    assign req_len = (len32 < {21'd0, to_4k}) ? len32[8:0] : to_4k[8:0];
    assign req_valid = active && loaded;
    assign done = !active;

    always_ff @(posedge clk) begin
        if (rst) begin
            active <= 1'b0;
            loaded <= 1'b0;
        end else if (start) begin
            active <= count != 32'd0;
            loaded <= 1'b0;
            range_idx <= 32'd0;
            req_elems <= 32'd0;
        end else if (active && !loaded) begin
            pos <= range_start;
            end_r <= range_end;
            req_addr <= base + ADDR_W'({range_start, 2'b00});
            loaded <= 1'b1;
        end else if (req_fire) begin
            pos <= pos + {23'd0, req_len};
            req_addr <= req_addr + ADDR_W'({req_len, 2'b00});
            req_elems <= req_elems + {23'd0, req_len};
            if (pos + {23'd0, req_len} == end_r) begin
                loaded <= 1'b0;
                range_idx <= range_idx + 32'd1;
                if (range_idx + 32'd1 == count) active <= 1'b0;
            end
        end
    end
endmodule
