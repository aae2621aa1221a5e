// Constants the RTL shares with the software (docs/spec.md §3, docs/hw.md "Shared package").
// tests/test_rtl_constants.py reads this file and checks every value against gradblock.codec
// (zrle.MAGIC, zrle.VERSION, the lmax_log2 limits, errors.ALL_ERRORS), so the two cannot drift.
//
// Modules refer to the names with the package scope (gradblock_pkg::ZRLE_MAGIC) rather than
// `import gradblock_pkg::*`: yosys 0.23 reads neither import form inside a module, and an
// import at file scope pollutes the compilation unit. hw/deps.py sees the `gradblock_pkg::`
// references and puts this file ahead of the modules that use it.
`resetall
`default_nettype none

package gradblock_pkg;
    // a shared-constants package: no single user needs every name
    /* verilator lint_off UNUSEDPARAM */

    // ---- ZRLE v1 frame (spec §3.1) ---------------------------------------------------------
    localparam logic [31:0] ZRLE_MAGIC = 32'h5A524C45;       // h0, 'ZRLE'
    localparam logic  [7:0] ZRLE_VERSION = 8'd1;             // h1 bits 7..0
    localparam int          ZRLE_LMAX_LOG2_MIN = 1;          // h1 bits 15..8, inclusive range
    localparam int          ZRLE_LMAX_LOG2_MAX = 24;
    localparam int          ZRLE_HEADER_WORDS = 5;
    localparam int          ZRLE_TRAILER_WORDS = 2;

    // ---- RTL-only: quantiser.sv's register stages (its valid chain; compress_engine takes a
    // velocity word this many cycles after the join claims it, to meet the quantiser's output)
    localparam int          QUANT_LATENCY = 8;

    // ---- block norm kind (spec §2.3): the cfg_norm bit of block_l1, compress_top and
    // compress_engine; the values are the indices of refmodel.validation.NORMS ("l1", "l2")
    localparam logic        NORM_L1 = 1'b0;                  // sum |a|
    localparam logic        NORM_L2 = 1'b1;                  // sum (|a| >> s)^2
    localparam int          NORM_L2_SHIFT_MAX = 16;          // s for B = 2^32 - 1

    // ---- frame errors: zrle_decoder err_code (spec §3.5, gradblock.codec.errors) -----------
    // FRAME_ERR_<NAME> has the code of the codec error whose `name` is <NAME>.
    localparam logic [3:0] FRAME_OK                       = 4'd0;
    localparam logic [3:0] FRAME_ERR_BAD_MAGIC            = 4'd1;
    localparam logic [3:0] FRAME_ERR_BAD_VERSION          = 4'd2;
    localparam logic [3:0] FRAME_ERR_BAD_LMAX             = 4'd3;
    localparam logic [3:0] FRAME_ERR_BAD_RANGE            = 4'd4;
    localparam logic [3:0] FRAME_ERR_LITERAL_RUN_TOO_LONG = 4'd5;
    localparam logic [3:0] FRAME_ERR_ZERO_LITERAL         = 4'd6;
    localparam logic [3:0] FRAME_ERR_EMPTY_TOKEN          = 4'd7;
    localparam logic [3:0] FRAME_ERR_EARLY_ZERO_LENGTH    = 4'd8;
    localparam logic [3:0] FRAME_ERR_SPLIT_LITERAL_RUN    = 4'd9;
    localparam logic [3:0] FRAME_ERR_OVERRUN              = 4'd10;
    localparam logic [3:0] FRAME_ERR_TRUNCATED            = 4'd11;
    localparam logic [3:0] FRAME_ERR_TOKEN_COUNT_MISMATCH = 4'd12;
    localparam logic [3:0] FRAME_ERR_CRC_MISMATCH         = 4'd13;
    localparam logic [3:0] FRAME_ERR_SIZE_MISMATCH        = 4'd14;

    // ---- compress_top err_code: its OWN code space, not frame errors -------------------------
    // The same 4-bit numbers as some frame errors, different meanings: always read a top's
    // err_code through these names. 1..8 refuse the configuration (no data is consumed);
    // TOP_ERR_TLAST_MISPLACED is reported after a layer that still ran (counted by n).
    localparam logic [3:0] TOP_OK                    = 4'd0;
    localparam logic [3:0] TOP_ERR_N_OVER_N_MAX      = 4'd1;  // n > N_MAX
    localparam logic [3:0] TOP_ERR_BLOCK_SIZE_ZERO   = 4'd2;  // block_size = 0
    localparam logic [3:0] TOP_ERR_N_BLOCKS_MISMATCH = 4'd3;  // n_blocks != ceil(n / block_size)
    localparam logic [3:0] TOP_ERR_K_ZERO            = 4'd4;  // k = 0 with n > 0
    localparam logic [3:0] TOP_ERR_K_OVER_K_MAX      = 4'd5;  // min(k, n_blocks) > K_MAX
    localparam logic [3:0] TOP_ERR_LMAX_RANGE        = 4'd6;  // outside 1..min(24, LMAX_LOG2_MAX)
    localparam logic [3:0] TOP_ERR_RANGE_INVALID     = 4'd7;  // range_bits not finite float32 > 0
    localparam logic [3:0] TOP_ERR_M_BELOW_HALF      = 4'd8;  // M < 2^31
    localparam logic [3:0] TOP_ERR_TLAST_MISPLACED   = 4'd9;  // s_tlast not exactly on beat n-1

    // ---- aggregate_engine err_code (5 bits): 1..14 are the frame errors above (FRAME_ERR_*,
    // the decoder's code for the bad worker's frame); these are the engine's own codes
    localparam logic [4:0] AGG_OK                     = 5'd0;
    localparam logic [4:0] AGG_ERR_RANGE_MISMATCH     = 5'd16; // range_bits != worker 0's
    localparam logic [4:0] AGG_ERR_LAYER_ID_MISMATCH  = 5'd17; // layer_id != worker 0's
    localparam logic [4:0] AGG_ERR_MEMORY             = 5'd18; // SLVERR/DECERR from memory
    localparam logic [4:0] AGG_ERR_CONFIG             = 5'd19; // base/n/workers refused

    // ---- compress_engine err_code (4 bits), its own code space like compress_top's: 1..8, 11
    // and 12 refuse the configuration (nothing read or written); 9 and 10 follow a layer that ran
    localparam logic [3:0] ENGINE_OK                    = 4'd0;
    localparam logic [3:0] ENGINE_ERR_RES_ADDR          = 4'd1;  // residual unaligned / past ADDR_W
    localparam logic [3:0] ENGINE_ERR_BLOCK_SIZE_ZERO   = 4'd2;
    localparam logic [3:0] ENGINE_ERR_N_BLOCKS_MISMATCH = 4'd3;
    localparam logic [3:0] ENGINE_ERR_K_ZERO            = 4'd4;
    localparam logic [3:0] ENGINE_ERR_K_OVER_K_MAX      = 4'd5;
    localparam logic [3:0] ENGINE_ERR_LMAX_RANGE        = 4'd6;
    localparam logic [3:0] ENGINE_ERR_RANGE_INVALID     = 4'd7;
    localparam logic [3:0] ENGINE_ERR_M_BELOW_HALF      = 4'd8;
    localparam logic [3:0] ENGINE_ERR_TLAST_MISPLACED   = 4'd9;
    localparam logic [3:0] ENGINE_ERR_MEMORY            = 4'd10; // SLVERR/DECERR on either port
    localparam logic [3:0] ENGINE_ERR_VEL_ADDR          = 4'd11; // velocity unaligned / past ADDR_W
    localparam logic [3:0] ENGINE_ERR_VEL_OVERLAP       = 4'd12; // velocity overlaps the residual

    /* verilator lint_on UNUSEDPARAM */
endpackage

`resetall
