// Reading a golden directory without Python (docs/golden.md, "A bench without Python"):
// included inside a plain SystemVerilog testbench module. Needs the plusarg +GOLDEN=<dir>.
//   golden_dir                   the directory
//   open_case_list()             opens <dir>/cases.txt; next_case() then reads one line into
//                                case_name / case_kind ("compress" or "exchange"), 0 at the end
//   read_params()                <dir>/<case>/params.txt into the gp_* variables below
//   case_file(array)             "<dir>/<case>/<array>.hex", for $readmemh
// Every value of params.txt is a decimal integer (-1: does not apply). Keys this file does not
// know are skipped, so a bench keeps working when the generator adds some.
string        golden_dir;
integer       case_list_fd;
reg [8*160-1:0] case_name_r;     // $fscanf's %s target (Icarus 11 reads no string variable)
reg [8*16-1:0]  case_kind_r;
string        case_name;
string        case_kind;
// every value params.txt gives; a bench uses those it needs
/* verilator lint_off UNUSEDSIGNAL */
longint gp_n, gp_layer_id, gp_range_bits, gp_m, gp_k_shift, gp_lmax_log2, gp_block_size,
        gp_n_blocks, gp_k_eff, gp_norm, gp_sat_quant, gp_sat_feedback, gp_nan_count,
        gp_frame_words, gp_momentum, gp_stage_quantiser, gp_stage_top, gp_words_grad_bits,
        gp_words_residual_in, gp_words_quantised, gp_words_quant_sat, gp_words_quant_nan,
        gp_words_residual_out, gp_words_frame;
/* verilator lint_on UNUSEDSIGNAL */

task open_golden;
    if (!$value$plusargs("GOLDEN=%s", golden_dir)) begin
        $display("GOLDEN-BENCH ERROR: no +GOLDEN=<golden directory>");
        $fatal(1, "no +GOLDEN");
    end
    case_list_fd = $fopen($sformatf("%0s/cases.txt", golden_dir), "r");
    if (case_list_fd == 0) begin
        $display("GOLDEN-BENCH ERROR: %0s/cases.txt cannot be opened (written by gradblock golden)",
                 golden_dir);
        $fatal(1, "no cases.txt");
    end
endtask

function automatic int next_case();
    int got;
    case_name_r = '0;
    case_kind_r = '0;
    got = $fscanf(case_list_fd, "%s %s\n", case_name_r, case_kind_r);
    if (got != 2) return 0;
    case_name = $sformatf("%0s", case_name_r);      // %0s drops the leading zero bytes
    case_kind = $sformatf("%0s", case_kind_r);
    return 1;
endfunction

function automatic string case_file(input string array);
    return $sformatf("%0s/%0s/%0s.hex", golden_dir, case_name, array);
endfunction

integer params_fd;
reg [8*64-1:0] params_key;
longint params_value;
task read_params;
    params_fd = $fopen($sformatf("%0s/%0s/params.txt", golden_dir, case_name), "r");
    if (params_fd == 0) begin
        $display("GOLDEN-BENCH ERROR: %0s/%0s/params.txt cannot be opened", golden_dir,
                 case_name);
        $fatal(1, "no params.txt");
    end
    gp_n = -1; gp_stage_quantiser = 0; gp_stage_top = 0; gp_momentum = 0;
    while ($fscanf(params_fd, "%s %d\n", params_key, params_value) == 2) begin
        case (params_key)
            "n": gp_n = params_value;
            "layer_id": gp_layer_id = params_value;
            "range_bits": gp_range_bits = params_value;
            "m": gp_m = params_value;
            "k_shift": gp_k_shift = params_value;
            "lmax_log2": gp_lmax_log2 = params_value;
            "block_size": gp_block_size = params_value;
            "n_blocks": gp_n_blocks = params_value;
            "k_eff": gp_k_eff = params_value;
            "norm": gp_norm = params_value;
            "sat_quant": gp_sat_quant = params_value;
            "sat_feedback": gp_sat_feedback = params_value;
            "nan_count": gp_nan_count = params_value;
            "frame_words": gp_frame_words = params_value;
            "momentum": gp_momentum = params_value;
            "stage_quantiser": gp_stage_quantiser = params_value;
            "stage_top": gp_stage_top = params_value;
            "words_grad_bits": gp_words_grad_bits = params_value;
            "words_residual_in": gp_words_residual_in = params_value;
            "words_quantised": gp_words_quantised = params_value;
            "words_quant_sat": gp_words_quant_sat = params_value;
            "words_quant_nan": gp_words_quant_nan = params_value;
            "words_residual_out": gp_words_residual_out = params_value;
            "words_frame": gp_words_frame = params_value;
            default: ;
        endcase
    end
    $fclose(params_fd);
endtask
