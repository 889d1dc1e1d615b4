# Tests of the `polymoe` tool: every Hugging Face fixture through `polymoe run`, quantize
# then run, make-checkpoint then inspect then run, malformed files, selection errors, MPI, and a
# libFuzzer run of the safetensors reader. All names start with "tool.".
if(NOT TARGET polymoe_cli)
  return()
endif()

set(tool $<TARGET_FILE:polymoe_cli>)
set(hf ${POLYMOE_FIXTURES_DIR}/hf)
set(work ${CMAKE_CURRENT_BINARY_DIR}/tool_work)
file(MAKE_DIRECTORY ${work})

# tool_test(NAME [SETUP fx] [REQUIRES fx...] COMMAND ...)
function(tool_test name)
  cmake_parse_arguments(T "" "SETUP" "REQUIRES;COMMAND" ${ARGN})
  add_test(NAME tool.${name} COMMAND ${T_COMMAND})
  set_tests_properties(tool.${name} PROPERTIES LABELS tool TIMEOUT 300)
  if(T_SETUP)
    set_tests_properties(tool.${name} PROPERTIES FIXTURES_SETUP ${T_SETUP})
  endif()
  if(T_REQUIRES)
    set_tests_properties(tool.${name} PROPERTIES FIXTURES_REQUIRED "${T_REQUIRES}")
  endif()
endfunction()

# tool_expect_error(NAME REGEX cmd...): fails unless the tool exits non-zero with a polymoe: error.
function(tool_expect_error name regex)
  cmake_parse_arguments(T "" "" "REQUIRES" ${ARGN})
  string(REPLACE ";" "|" cmd "${T_UNPARSED_ARGUMENTS}")
  add_test(NAME tool.${name} COMMAND ${CMAKE_COMMAND} "-DCMD=${cmd}" "-DREGEX=${regex}"
                                     -P ${CMAKE_CURRENT_SOURCE_DIR}/tools/expect_error.cmake)
  set_tests_properties(tool.${name} PROPERTIES LABELS tool TIMEOUT 120)
  if(T_REQUIRES)
    set_tests_properties(tool.${name} PROPERTIES FIXTURES_REQUIRED "${T_REQUIRES}")
  endif()
endfunction()

# split_case_regex("CASE:REGEX" case_var regex_var): the case before the first colon, the regex after.
function(split_case_regex spec case_var regex_var)
  string(FIND "${spec}" ":" colon)
  string(SUBSTRING "${spec}" 0 ${colon} c)
  math(EXPR colon "${colon} + 1")
  string(SUBSTRING "${spec}" ${colon} -1 r)
  set(${case_var} "${c}" PARENT_SCOPE)
  set(${regex_var} "${r}" PARENT_SCOPE)
endfunction()

# run_case_at(DIR ID CHECKPOINT TOL [run options...]): run layer 0 of DIR/CHECKPOINT on its
# io.safetensors and compare `output` with the transformers result; run_case: DIR = the shared fixtures.
function(run_case_at dir id case tol)
  tool_test(fixture.${id}.run SETUP tool_${id} COMMAND ${tool} run --checkpoint ${dir}/${case} --layer 0
            --input ${dir}/${case}/io.safetensors --output ${work}/${id}.safetensors ${ARGN})
  tool_test(fixture.${id}.compare REQUIRES tool_${id} COMMAND ${tool} compare ${work}/${id}.safetensors
            ${dir}/${case}/io.safetensors --tensor output --tol ${tol})
endfunction()
function(run_case id case tol)
  run_case_at(${hf} ${id} ${case} ${tol} ${ARGN})
endfunction()

# --- help, list, selection errors
# each subcommand's help is generated from its options (CLI11): every option named, the choices of
# --a2a/--quant/--kernel listed from the table, the explanatory text kept
foreach(spec "run:--checkpoint DIR REQUIRED.*--layer.*--input.*--output.*--a2a NAME:[{]local[^}]*[}].*--quant NAME:[{][^}]*fp32[^}]*[}].*--kernel NAME:[{][^}]*reference[^}]*auto[}].*--threads.*--repeat.*--capacity.*--tuning.*--ignore-input-logits.*--quiet.*--progress.*The --tuning keys"
             "quantize:--checkpoint.*--layer N[|]all.*--scheme NAME:[{][^}]*int8[^}]*[}].*--out.*--shard-mb.*--force.*Stored weights are dequantized"
             "list:Usage: .*list.*Prints every valid"
             "make-checkpoint:--preset NAME:[{]tiny,[^}]*[}].*--out.*--layers.*--seed.*--tokens.*--shard-mb.*Presets:"
             "inspect:DIR.*--layer.*--tensors.*Prints the checkpoint's family"
             "compare:GOT.*REFERENCE.*--tensor.*--tol.*--exact.*Prints max")
  split_case_regex("${spec}" cmd regex)
  tool_test(cli.help.${cmd} COMMAND ${tool} ${cmd} --help)
  set_tests_properties(tool.cli.help.${cmd} PROPERTIES PASS_REGULAR_EXPRESSION "${regex}")
endforeach()
tool_test(cli.list COMMAND ${tool} list)
# --version: the commit this build was configured from, the ISA paths compiled in
tool_test(cli.version COMMAND ${tool} --version)
set_tests_properties(tool.cli.version PROPERTIES PASS_REGULAR_EXPRESSION
                     "polymoe ${PROJECT_VERSION} \\(commit ${POLYMOE_GIT_COMMIT}\\)\n  tiled kernels: .*--kernel auto runs tiled")
# no command: the usage on stderr, and a failure
tool_expect_error(cli.no_command "Usage: .*polymoe.*SUBCOMMAND.*run" ${tool})
tool_expect_error(cli.unknown_command "unknown command 'frobnicate'" ${tool} frobnicate)
set_tests_properties(tool.cli.list PROPERTIES PASS_REGULAR_EXPRESSION "local +fp32 +reference")
tool_expect_error(cli.unknown_quant "^polymoe: run: --quant: unknown 'nope'; valid: .*fp32" ${tool} run --checkpoint ${hf}/mixtral --layer 0
                  --input ${hf}/mixtral/io.safetensors --output ${work}/never.safetensors --quant nope)
tool_expect_error(cli.unknown_kernel "^polymoe: run: --kernel: unknown 'fast'; valid: .*reference" ${tool} run --checkpoint ${hf}/mixtral
                  --layer 0 --input ${hf}/mixtral/io.safetensors --output ${work}/never.safetensors --kernel fast)
string(REPLACE ";" ", " kernels_of_fp32 "${POLYMOE_TABLE_KERNELS_OF_fp32}")
tool_expect_error(cli.invalid_triple "not a valid triple.*valid --kernel for the other two: ${kernels_of_fp32}"
                  ${tool} run --checkpoint ${hf}/mixtral --layer 0 --input ${hf}/mixtral/io.safetensors
                  --output ${work}/never.safetensors --quant fp32 --kernel tiled_amx)
# an invalid choice names every valid one, from the table (one test per name)
foreach(kernel ${POLYMOE_TABLE_KERNELS})
  tool_expect_error(cli.choices.kernel_${kernel} "^polymoe: run: --kernel: unknown 'nope'; valid: .*${kernel}"
                    ${tool} run --checkpoint ${hf}/mixtral --layer 0 --input ${hf}/mixtral/io.safetensors
                    --output ${work}/never.safetensors --kernel nope)
endforeach()
foreach(quant ${POLYMOE_TABLE_QUANTS})
  tool_expect_error(cli.choices.quant_${quant} "^polymoe: run: --quant: unknown 'nope'; valid: .*${quant}"
                    ${tool} run --checkpoint ${hf}/mixtral --layer 0 --input ${hf}/mixtral/io.safetensors
                    --output ${work}/never.safetensors --quant=nope)
endforeach()
# `--key=value` is `--key value`: the same layer (the summary says which) and the same bytes as
# mixtral_reference, which spells every option `--key value`; "-" for "_" in a policy name too
tool_test(cli.equals_form.run SETUP tool_equals COMMAND ${tool} run --checkpoint=${hf}/mixtral --layer=0
          --input=${hf}/mixtral/io.safetensors --output=${work}/equals_form.safetensors --kernel=reference
          --a2a=local --quant=fp32)
set_tests_properties(tool.cli.equals_form.run PROPERTIES PASS_REGULAR_EXPRESSION "MoeLayer<local, fp32, reference>")
tool_test(cli.equals_form.same REQUIRES "tool_equals;tool_mixtral_reference" COMMAND ${tool} compare
          ${work}/equals_form.safetensors ${work}/mixtral_reference.safetensors --exact)
tool_test(cli.dash_spelling COMMAND ${tool} run --checkpoint ${hf}/deepseek_v3_fp8 --layer 0
          --input ${hf}/deepseek_v3_fp8/io.safetensors --output ${work}/dash_spelling.safetensors
          --quant fp8-block-weight-only --kernel reference)
set_tests_properties(tool.cli.dash_spelling PROPERTIES PASS_REGULAR_EXPRESSION
                     "MoeLayer<local, fp8_block_weight_only, reference>")
tool_expect_error(cli.missing_option "^polymoe: run: --layer is required \\(see polymoe run --help\\)" ${tool} run --checkpoint ${hf}/mixtral
                  --input ${hf}/mixtral/io.safetensors --output ${work}/never.safetensors)
tool_expect_error(cli.layer_out_of_range "layer 5 is out of range" ${tool} run --checkpoint ${hf}/mixtral --layer 5
                  --input ${hf}/mixtral/io.safetensors --output ${work}/never.safetensors)
tool_expect_error(cli.repeat_out_of_range "--repeat: Value 4294967297 not in range 1 to 2147483647" ${tool} run
                  --checkpoint ${hf}/mixtral --layer 0 --input ${hf}/mixtral/io.safetensors
                  --output ${work}/never.safetensors --repeat 4294967297)
# The input is a run's output file (no hidden_states): were the check missing, the run would stop
# on reading it, before writing anything.
tool_expect_error(cli.output_is_input
                  "run: the output '.*mixtral.safetensors' is the file '.*mixtral.safetensors' \\(the same file, links followed\\), which is read"
                  ${tool} run --checkpoint ${hf}/mixtral --layer 0 --input ${work}/mixtral.safetensors
                  --output ${work}/../tool_work/mixtral.safetensors REQUIRES tool_mixtral)
tool_expect_error(cli.inspect_negative_layer "inspect: --layer -5 is out of range" ${tool} inspect ${hf}/mixtral
                  --layer -5)
tool_expect_error(cli.negative_shard "--shard-mb: Value -1 not in range 1 to 1073741824" ${tool} quantize
                  --checkpoint ${hf}/mixtral --layer 0 --scheme fp8_block --out ${work}/never_q --shard-mb -1)
# `compare` itself can fail: every fixture test above rests on it.
tool_expect_error(compare.above_tolerance "relative error .* exceeds the tolerance 0.0001" ${tool} compare
                  ${work}/mixtral_bf16.safetensors ${hf}/mixtral/io.safetensors --tensor output --tol 1e-4
                  REQUIRES tool_mixtral_bf16)
tool_expect_error(compare.exact_differs "compare: tensor 'output' differs" ${tool} compare ${work}/mixtral_bf16.safetensors
                  ${work}/mixtral.safetensors --exact REQUIRES "tool_mixtral_bf16;tool_mixtral")

# --- every fixture through `polymoe run` (tolerances from the fixtures README)
foreach(case mixtral qwen3_moe deepseek_v3 gpt_oss)
  run_case(${case} ${case} 1e-5)
  run_case(${case}_reference ${case} 1e-5 --kernel reference)
  run_case(${case}_router ${case} 1e-5 --ignore-input-logits)
  run_case(${case}_bf16 ${case} 1e-2 --quant bf16)
endforeach()
run_case(mixtral_tiled mixtral 1e-5 --kernel tiled --threads 2)
run_case(gpt_oss_mxfp4 gpt_oss_mxfp4 1e-5)
run_case(gpt_oss_mxfp4_reference gpt_oss_mxfp4 1e-5 --kernel reference)
run_case(deepseek_v3_fp8 deepseek_v3_fp8 1e-5)
run_case(deepseek_v3_fp8_reference deepseek_v3_fp8 1e-5 --kernel reference)
run_case(gpt_oss_mxfp4_tiled gpt_oss_mxfp4 1e-5 --kernel tiled)
run_case(deepseek_v3_fp8_tiled deepseek_v3_fp8 1e-5 --kernel tiled)
# activations quantized too: the format's own error is above the README's 3e-2 guide here (see test_fp8_block)
run_case(deepseek_v3_fp8_w8a8 deepseek_v3_fp8 5e-2 --quant fp8_block)
# stored weights of another scheme: dequantized, then quantized to the one asked for
run_case(deepseek_v3_fp8_as_bf16 deepseek_v3_fp8 1e-2 --quant bf16)
run_case(gpt_oss_mxfp4_as_fp32 gpt_oss_mxfp4 1e-5 --quant fp32 --kernel tiled)
# W4A16: the stored blocks as they are, bf16 activations (bf16's tolerance)
run_case(gpt_oss_mxfp4_w4a16 gpt_oss_mxfp4 1e-2 --quant mxfp4_w4a16 --kernel tiled_amx)
# the tiled kernels' tuning: every row block on the AMX tiles (where the machine has them) and y
# streamed, within bf16's tolerance; a key it does not know, and a kernel without a tuning, refused
run_case(mixtral_tiled_amx_tuned mixtral 1e-2 --quant bf16 --kernel tiled_amx --tuning amx-min-rows=1,y-stream=on)
tool_expect_error(cli.unknown_tuning "tuning: unknown key 'warp'" ${tool} run --checkpoint ${hf}/mixtral --layer 0
                  --input ${hf}/mixtral/io.safetensors --output ${work}/never.safetensors --kernel tiled
                  --tuning warp=9)
tool_expect_error(cli.tuning_without_tiled "--kernel reference has none" ${tool} run --checkpoint ${hf}/mixtral
                  --layer 0 --input ${hf}/mixtral/io.safetensors --output ${work}/never.safetensors --kernel reference
                  --tuning sum-span=16)

# --- quantize, then run the quantized checkpoint: the stored weights must give exactly what
# quantizing on load gives, and stay close to the transformers output.
# quantize_case(fixture, quantize's --scheme, the run's --quant, tolerance against transformers)
function(quantize_case case scheme quant tol)
  set(id ${case}_${quant})
  set(q ${work}/quantized_${id})
  # --force: a second run of the suite finds the first's output there
  tool_test(quantize.${id}.write SETUP tool_q_${id} COMMAND ${tool} quantize --checkpoint ${hf}/${case} --layer all
            --scheme ${scheme} --out ${q} --force)
  tool_test(quantize.${id}.run_stored SETUP tool_qs_${id} REQUIRES tool_q_${id} COMMAND ${tool} run --checkpoint ${q}
            --layer 0 --input ${hf}/${case}/io.safetensors --output ${work}/q_stored_${id}.safetensors --kernel reference)
  tool_test(quantize.${id}.run_on_load SETUP tool_ql_${id} COMMAND ${tool} run --checkpoint ${hf}/${case} --layer 0
            --input ${hf}/${case}/io.safetensors --output ${work}/q_load_${id}.safetensors --quant ${quant}
            --kernel reference)
  tool_test(quantize.${id}.same REQUIRES "tool_qs_${id};tool_ql_${id}" COMMAND ${tool} compare
            ${work}/q_stored_${id}.safetensors ${work}/q_load_${id}.safetensors --exact)
  tool_test(quantize.${id}.accuracy REQUIRES tool_qs_${id} COMMAND ${tool} compare ${work}/q_stored_${id}.safetensors
            ${hf}/${case}/io.safetensors --tol ${tol})
  tool_test(quantize.${id}.inspect REQUIRES tool_q_${id} COMMAND ${tool} inspect ${q})
endfunction()
quantize_case(mixtral fp8-block fp8_block_weight_only 8e-2)
quantize_case(mixtral int8 int8_w8a8 5e-2)
quantize_case(mixtral mxfp4 mxfp4 0.25)
quantize_case(mixtral nvfp4 nvfp4 0.25)
quantize_case(deepseek_v3 fp8-block fp8_block_weight_only 8e-2)
quantize_case(deepseek_v3 nvfp4 nvfp4 0.25)
quantize_case(qwen3_moe int8 int8_w8a8 5e-2)
quantize_case(gpt_oss mxfp4 mxfp4 0.25)
quantize_case(mixtral int4 int4_w4a8 0.25)
quantize_case(qwen3_moe int4_w4a8 int4_w4a8 0.25)
set_tests_properties(tool.quantize.mixtral_int4_w4a8.inspect PROPERTIES PASS_REGULAR_EXPRESSION "layer 0:.*experts int4")
# a scheme named by its own name whose weights a layout stores: --scheme mxfp4_w4a16 writes the
# MXFP4 layout, byte for byte what --scheme mxfp4 writes, and says so by the layout's one name
tool_test(quantize.w4a16_spelling.write SETUP tool_qw4 COMMAND ${tool} quantize --checkpoint ${hf}/mixtral
          --layer all --scheme mxfp4_w4a16 --out ${work}/quantized_w4a16 --force)
set_tests_properties(tool.quantize.w4a16_spelling.write PROPERTIES PASS_REGULAR_EXPRESSION "\\(mxfp4, 1 layer")
tool_test(quantize.w4a16_spelling.same REQUIRES "tool_qw4;tool_q_mixtral_mxfp4" COMMAND ${tool} compare
          ${work}/quantized_w4a16/model.safetensors ${work}/quantized_mixtral_mxfp4/model.safetensors --exact)
# one layer only: layer 0 becomes mxfp4, layer 1 stays float and runs exactly as before
tool_test(quantize.one_layer.write SETUP tool_q1 COMMAND ${tool} quantize --checkpoint ${hf}/gpt_oss --layer 0
          --scheme mxfp4 --out ${work}/quantized_one_layer --force)
tool_test(quantize.one_layer.inspect REQUIRES tool_q1 COMMAND ${tool} inspect ${work}/quantized_one_layer)
set_tests_properties(tool.quantize.one_layer.inspect PROPERTIES
                     PASS_REGULAR_EXPRESSION "layer 0:.*experts mxfp4.*layer 1:.*experts float")
foreach(src orig:${hf}/gpt_oss q:${work}/quantized_one_layer)
  string(REPLACE ":" ";" src "${src}")
  list(GET src 0 tag)
  list(GET src 1 dir)
  tool_test(quantize.one_layer.run_layer1_${tag} SETUP tool_q1_${tag} REQUIRES tool_q1 COMMAND ${tool} run
            --checkpoint ${dir} --layer 1 --input ${hf}/gpt_oss/io.safetensors
            --output ${work}/q1_layer1_${tag}.safetensors)
endforeach()
tool_test(quantize.one_layer.layer1_unchanged REQUIRES "tool_q1_orig;tool_q1_q" COMMAND ${tool} compare
          ${work}/q1_layer1_q.safetensors ${work}/q1_layer1_orig.safetensors --exact)
tool_expect_error(quantize.gpt_oss_fp8_refused "gpt_oss checkpoints store experts stacked" ${tool} quantize
                  --checkpoint ${hf}/gpt_oss --layer 0 --scheme fp8-block --out ${work}/never_q)
tool_expect_error(quantize.unknown_scheme "quantize: --scheme: unknown 'fp3'; valid: .*fp8-block" ${tool} quantize --checkpoint ${hf}/mixtral
                  --layer 0 --scheme fp3 --out ${work}/never_q)

# --- make-checkpoint, inspect, run (every preset family; sharded and unsharded must agree)
foreach(preset tiny tiny-mixtral tiny-qwen2-moe tiny-deepseek-v3 tiny-gpt-oss)
  set(d ${work}/ckpt_${preset})
  tool_test(checkpoint.${preset}.make SETUP tool_mk_${preset} COMMAND ${tool} make-checkpoint --preset ${preset}
            --out ${d} --seed 7)
  tool_test(checkpoint.${preset}.inspect REQUIRES tool_mk_${preset} COMMAND ${tool} inspect ${d} --tensors)
  tool_test(checkpoint.${preset}.run SETUP tool_mkr_${preset} REQUIRES tool_mk_${preset} COMMAND ${tool} run
            --checkpoint ${d} --layer 1 --input ${d}/input.safetensors --output ${work}/mk_${preset}.safetensors)
  tool_test(checkpoint.${preset}.run_reference SETUP tool_mkrr_${preset} REQUIRES tool_mk_${preset} COMMAND ${tool}
            run --checkpoint ${d} --layer 1 --input ${d}/input.safetensors
            --output ${work}/mk_${preset}_ref.safetensors --kernel reference)
  # both runs take the defaults: the BF16 presets run bf16, whose kernels agree to 1e-4 (summation
  # order, as in the unit tests), the others their stored scheme or fp32 (1e-5)
  set(agree 1e-5)
  if(preset STREQUAL "tiny" OR preset STREQUAL "tiny-mixtral")
    set(agree 1e-4)
  endif()
  tool_test(checkpoint.${preset}.kernels_agree REQUIRES "tool_mkr_${preset};tool_mkrr_${preset}" COMMAND ${tool}
            compare ${work}/mk_${preset}.safetensors ${work}/mk_${preset}_ref.safetensors --tol ${agree})
endforeach()
set_tests_properties(tool.checkpoint.tiny.inspect PROPERTIES PASS_REGULAR_EXPRESSION "family +qwen3_moe.*E=16 k=4 H=256 I=128")
# examples/load_checkpoint: a float layer runs bf16, a pre-quantized one its layout's scheme on its codes
if(TARGET load_checkpoint)
  tool_test(example.load_checkpoint.bf16 REQUIRES tool_mk_tiny COMMAND $<TARGET_FILE:load_checkpoint> ${work}/ckpt_tiny)
  set_tests_properties(tool.example.load_checkpoint.bf16 PROPERTIES PASS_REGULAR_EXPRESSION
                       "layer [0-9]+: local / bf16 / tiled \\([^)]+\\), [|]out[|] max [0-9]")
  tool_test(example.load_checkpoint.fp8_block REQUIRES tool_mk_tiny-deepseek-v3 COMMAND
            $<TARGET_FILE:load_checkpoint> ${work}/ckpt_tiny-deepseek-v3)
  set_tests_properties(tool.example.load_checkpoint.fp8_block PROPERTIES PASS_REGULAR_EXPRESSION
                       "layer [0-9]+: local / fp8_block_weight_only / tiled \\([^)]+\\) \\(stored fp8_block\\)")
endif()
# polymoe_bench --checkpoint: the shape of a checkpoint's config.json (the tiny preset's), not a preset's
if(TARGET polymoe_bench)
  tool_test(bench.checkpoint_shape REQUIRES tool_mk_tiny COMMAND $<TARGET_FILE:polymoe_bench> --checkpoint
            ${work}/ckpt_tiny --tokens 1 --reps 1 --quant fp32 --kernel reference --no-baseline --format text)
  set_tests_properties(tool.bench.checkpoint_shape PROPERTIES PASS_REGULAR_EXPRESSION
                       "preset ckpt_tiny-layer[0-9]+: H=256 I=128 E=16 k=4, [^\n]*shape from [^\n]*ckpt_tiny/config.json")
  # --checkpoint-weights: a GPT-OSS layer's own weights and config (swiglu_oai with biases) are timed
  tool_test(bench.checkpoint_weights COMMAND $<TARGET_FILE:polymoe_bench> --checkpoint ${hf}/gpt_oss
            --checkpoint-weights --tokens 1,3 --reps 1 --quant fp32,bf16 --kernel reference --no-baseline --format text)
  set_tests_properties(tool.bench.checkpoint_weights PROPERTIES PASS_REGULAR_EXPRESSION
                       "preset gpt_oss-layer0: [^\n]*swiglu_oai, the checkpoint's weights[^\n]*\n")
  tool_test(bench.checkpoint_weights_alone COMMAND $<TARGET_FILE:polymoe_bench> --checkpoint-weights --tokens 1)
  set_tests_properties(tool.bench.checkpoint_weights_alone PROPERTIES PASS_REGULAR_EXPRESSION
                       "polymoe_bench: [^\n]*--checkpoint-weights requires --checkpoint")
  # the bench's command line is the tool's (CLI11): choices listed from the table, --version
  tool_test(bench.invalid_choice COMMAND $<TARGET_FILE:polymoe_bench> --tokens 1 --kernel=nope)
  set_tests_properties(tool.bench.invalid_choice PROPERTIES PASS_REGULAR_EXPRESSION
                       "polymoe_bench: --kernel: unknown 'nope'; valid: [^\n]*reference")
endif()
# every program answers --version with the commit of this build and the ISA paths compiled in
foreach(program polymoe_bench bench_tiled bench_amx bench_ratio bench_mpi_dispatch polymoe_cuda_bench
                polymoe_nccl_bench)
  if(TARGET ${program})
    tool_test(version.${program} COMMAND $<TARGET_FILE:${program}> --version)
    set_tests_properties(tool.version.${program} PROPERTIES PASS_REGULAR_EXPRESSION
                         "${program} ${PROJECT_VERSION} \\(commit ${POLYMOE_GIT_COMMIT}\\)\n  tiled kernels: ")
  endif()
endforeach()
# `run` with no --quant / --kernel: the checkpoint's own scheme and the fastest kernel that pairs
# with it here (tiled_amx where the CPU runs AMX tiles; it does not run fp32), said in the summary
set_tests_properties(tool.checkpoint.tiny.run PROPERTIES PASS_REGULAR_EXPRESSION
                     "chosen +--quant bf16 \\(the checkpoint's BF16 weights\\), --kernel tiled(_amx)? \\(auto")
set_tests_properties(tool.checkpoint.tiny-qwen2-moe.run PROPERTIES PASS_REGULAR_EXPRESSION
                     "runs +local / fp32 / tiled \\([^)]+\\)\n.*chosen +--quant fp32 \\(the checkpoint's F32 weights\\), --kernel tiled \\(auto")
set_tests_properties(tool.checkpoint.tiny-deepseek-v3.run PROPERTIES PASS_REGULAR_EXPRESSION
                     "chosen +--quant fp8_block_weight_only \\(the checkpoint's fp8_block weights\\), --kernel tiled")
set_tests_properties(tool.checkpoint.tiny-deepseek-v3.inspect PROPERTIES PASS_REGULAR_EXPRESSION "experts fp8_block")
set_tests_properties(tool.checkpoint.tiny-gpt-oss.inspect PROPERTIES PASS_REGULAR_EXPRESSION "experts mxfp4")
# progress of the long steps on stderr: plain lines into a file or pipe, a bar redrawn on a
# terminal (a pseudo-terminal made by util-linux `script`), nothing with --quiet
tool_test(progress.plain COMMAND ${tool} make-checkpoint --preset tiny --out ${work}/ckpt_progress --seed 7 --progress)
set_tests_properties(tool.progress.plain PROPERTIES PASS_REGULAR_EXPRESSION
                     "polymoe: make-checkpoint: writing [^\n]*100 %, [0-9.]+ MB of [0-9.]+ MB, done in")
tool_test(progress.quiet COMMAND ${tool} make-checkpoint --preset tiny --out ${work}/ckpt_progress_quiet --seed 7
          --progress --quiet)
set_tests_properties(tool.progress.quiet PROPERTIES FAIL_REGULAR_EXPRESSION "writing|preset tiny|wrote")
find_program(POLYMOE_SCRIPT script)
if(POLYMOE_SCRIPT)
  tool_test(progress.terminal COMMAND ${POLYMOE_SCRIPT} -qec
            "${tool} make-checkpoint --preset tiny --out ${work}/ckpt_progress_tty --seed 7 --progress" /dev/null)
  set_tests_properties(tool.progress.terminal PROPERTIES PASS_REGULAR_EXPRESSION "\r[^\n]*\\[#+\\] 100 %")
else()
  message(STATUS "polymoe: the progress bar on a terminal is not tested: util-linux `script` was not found")
endif()
tool_test(checkpoint.sharded.make SETUP tool_mk_sharded COMMAND ${tool} make-checkpoint --preset tiny
          --out ${work}/ckpt_sharded --seed 7 --shard-mb 1)
tool_test(checkpoint.sharded.inspect REQUIRES tool_mk_sharded COMMAND ${tool} inspect ${work}/ckpt_sharded)
set_tests_properties(tool.checkpoint.sharded.inspect PROPERTIES PASS_REGULAR_EXPRESSION "model-00001-of-0000[0-9].*sharded")
tool_test(checkpoint.sharded.run SETUP tool_mkr_sharded REQUIRES tool_mk_sharded COMMAND ${tool} run
          --checkpoint ${work}/ckpt_sharded --layer 1 --input ${work}/ckpt_sharded/input.safetensors
          --output ${work}/mk_sharded.safetensors)
tool_test(checkpoint.sharded.same REQUIRES "tool_mkr_sharded;tool_mkr_tiny" COMMAND ${tool} compare
          ${work}/mk_sharded.safetensors ${work}/mk_tiny.safetensors --exact)
tool_expect_error(checkpoint.unknown_preset "make-checkpoint: --preset: unknown 'huge'; valid: .*gpt-oss-20b" ${tool} make-checkpoint
                  --preset huge --out ${work}/never_mk)

# --- malformed files: a clear polymoe: error and a non-zero exit, never a crash
add_executable(tool_make_malformed ${CMAKE_CURRENT_SOURCE_DIR}/tools/make_malformed.cpp)
target_link_libraries(tool_make_malformed PRIVATE polymoe::polymoe polymoe_project_options)
set(bad ${work}/malformed)
tool_test(malformed.generate SETUP tool_malformed COMMAND tool_make_malformed ${bad} ${hf})
foreach(spec "truncated:truncated.*too small for the 8-byte header length"
             "header_past_end:header length 1000000 runs past the end of the file"
             "bad_offsets:outside the data region" "overlapping:overlap in the data region"
             "size_mismatch:size mismatch" "unknown_dtype:unknown dtype .F7." "bad_json:header is not valid JSON"
             "bad_shape:negative dimension" "bad_config:config.json: invalid JSON"
             "unknown_family:model_type .llama. is not supported" "missing_field:missing the field 'num_experts_per_tok'"
             "missing_shard:model-00001-of-00002.safetensors.*cannot open"
             "missing_tensor:missing tensor 'model.layers.0.block_sparse_moe.experts.3.w2.weight'"
             "wrong_shape:experts.1.w1.weight' has shape \\[64, 96\\], expected \\[96, 64\\]"
             "nul_shard_name:weight_map.*u0000.bak. holds a NUL byte")
  split_case_regex("${spec}" case regex)
  tool_expect_error(malformed.run.${case} "${regex}" ${tool} run --checkpoint ${bad}/${case} --layer 0
                    --input ${hf}/mixtral/io.safetensors --output ${work}/never.safetensors REQUIRES tool_malformed)
endforeach()
foreach(case truncated header_past_end bad_offsets overlapping size_mismatch unknown_dtype bad_json bad_shape)
  tool_expect_error(malformed.input.${case} "safetensors file" ${tool} run --checkpoint ${hf}/mixtral --layer 0
                    --input ${bad}/${case}/model.safetensors --output ${work}/never.safetensors REQUIRES tool_malformed)
  tool_expect_error(malformed.inspect.${case} "safetensors file" ${tool} inspect ${bad}/${case} REQUIRES tool_malformed)
endforeach()
tool_expect_error(malformed.input.wrong_width "hidden_states is \\[3, 5\\], expected \\[T, hidden=64\\]" ${tool} run
                  --checkpoint ${hf}/mixtral --layer 0 --input ${bad}/inputs/wrong_width.safetensors
                  --output ${work}/never.safetensors REQUIRES tool_malformed)
tool_expect_error(malformed.input.no_hidden "no tensor named 'hidden_states'" ${tool} run --checkpoint ${hf}/mixtral
                  --layer 0 --input ${bad}/inputs/no_hidden.safetensors --output ${work}/never.safetensors
                  REQUIRES tool_malformed)
# non-finite values: in a weight (named with its index), in the input, in the output (an overflow), in
# a compare's reference; config.json sizes the tensors contradict; a layer count of 2^40
tool_expect_error(malformed.run.nan_weight
                  "tensor 'model.layers.0.block_sparse_moe.experts.2.w3.weight' \\[1, 7\\] = nan is not finite"
                  ${tool} run --checkpoint ${bad}/nan_weight --layer 0 --input ${hf}/mixtral/io.safetensors
                  --output ${work}/never.safetensors REQUIRES tool_malformed)
tool_expect_error(malformed.input.nan_hidden "hidden_states\\[1, 2\\] = nan is not finite" ${tool} run
                  --checkpoint ${hf}/mixtral --layer 0 --input ${bad}/inputs/nan_hidden.safetensors
                  --output ${work}/never.safetensors REQUIRES tool_malformed)
tool_expect_error(malformed.output_not_finite "the output holds [0-9]+ non-finite values" ${tool} run
                  --checkpoint ${hf}/mixtral --layer 0 --input ${bad}/inputs/huge_hidden.safetensors
                  --output ${work}/overflow.safetensors REQUIRES tool_malformed)
tool_expect_error(compare.reference_not_finite "compare: 'output' in .*nan_reference.safetensors has non-finite values"
                  ${tool} compare ${work}/mixtral.safetensors ${bad}/inputs/nan_reference.safetensors --tensor output
                  --tol 1 REQUIRES "tool_malformed;tool_mixtral")
foreach(spec "huge_experts:num_local_experts=1099511627776 and hidden_size=64 disagree with tensor"
             "huge_hidden:num_local_experts=8 and hidden_size=2147483648 disagree"
             "wrong_intermediate:intermediate_size=1073741824 disagrees with tensor 'model.layers.0.block_sparse_moe.experts.0.w1.weight' of shape \\[96, 64\\]")
  split_case_regex("${spec}" case regex)
  tool_expect_error(malformed.config.${case} "${regex}" ${tool} run --checkpoint ${bad}/${case} --layer 0
                    --input ${hf}/mixtral/io.safetensors --output ${work}/never.safetensors REQUIRES tool_malformed)
endforeach()
tool_test(malformed.huge_layers.inspect REQUIRES tool_malformed COMMAND ${tool} inspect ${bad}/huge_layers)
set_tests_properties(tool.malformed.huge_layers.inspect PROPERTIES TIMEOUT 30
                     PASS_REGULAR_EXPRESSION "layers      1099511627776 \\(1 in these files\\)")
tool_test(malformed.huge_layers.quantize REQUIRES tool_malformed COMMAND ${tool} quantize --checkpoint
          ${bad}/huge_layers --layer all --scheme int8 --out ${work}/huge_layers_q --force)
set_tests_properties(tool.malformed.huge_layers.quantize PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION "1 layer")
tool_expect_error(cli.make_checkpoint_layers "--layers: Value 1099511627776 not in range 1 to 4096" ${tool}
                  make-checkpoint --preset tiny --out ${work}/never_ckpt --layers 1099511627776)

# conveniences: experts in numeric order, integer tensors compared exactly, --repeat's mean after a
# warm-up call, quantize takes the checkpoint's sample input along
tool_test(cli.inspect_natural_order COMMAND ${tool} inspect ${hf}/qwen3_moe --tensors)
set_tests_properties(tool.cli.inspect_natural_order PROPERTIES PASS_REGULAR_EXPRESSION
                     "experts\\.9\\.up_proj\\.weight[^\n]*\n[^\n]*experts\\.10\\.down_proj\\.weight")
tool_test(compare.topk_ids_identical REQUIRES "tool_mixtral;tool_mixtral_reference" COMMAND ${tool} compare
          ${work}/mixtral.safetensors ${work}/mixtral_reference.safetensors --tensor topk_ids)
set_tests_properties(tool.compare.topk_ids_identical PROPERTIES PASS_REGULAR_EXPRESSION
                     "compare topk_ids: [0-9]+ integer values identical")
tool_expect_error(compare.topk_ids_differ "compare: 'topk_ids': 2 of 4 values differ \\(the first at flat index 2: 2 vs 3\\)"
                  ${tool} compare ${bad}/inputs/ids_a.safetensors ${bad}/inputs/ids_b.safetensors --tensor topk_ids
                  REQUIRES tool_malformed)
tool_test(run.repeat_after_warmup COMMAND ${tool} run --checkpoint ${hf}/mixtral --layer 0 --input
          ${hf}/mixtral/io.safetensors --output ${work}/repeat.safetensors --repeat 3)
set_tests_properties(tool.run.repeat_after_warmup PROPERTIES PASS_REGULAR_EXPRESSION "mean of 3 after a warm-up call")
tool_test(quantize.copies_input.write SETUP tool_q_input REQUIRES tool_mk_tiny COMMAND ${tool} quantize --checkpoint
          ${work}/ckpt_tiny --layer all --scheme int8 --out ${work}/ckpt_tiny_int8 --force)
set_tests_properties(tool.quantize.copies_input.write PROPERTIES PASS_REGULAR_EXPRESSION "input.safetensors copied")
tool_test(quantize.copies_input.same REQUIRES tool_q_input COMMAND ${CMAKE_COMMAND} -E compare_files
          ${work}/ckpt_tiny/input.safetensors ${work}/ckpt_tiny_int8/input.safetensors)

# the transformers fixtures kept in tests/data/hf: DeepSeek-V3 with a correction bias that makes
# choice scores negative (the discarded groups must stay out), FP8 blocks over partial 128x128 tiles
set(data_hf ${PROJECT_SOURCE_DIR}/tests/data/hf)
foreach(case deepseek_v3_negbias deepseek_v3_negbias_g2)
  foreach(kernel ${POLYMOE_TABLE_KERNELS_OF_fp32})  # the float fixtures at their own precision
    run_case_at(${data_hf} ${case}_${kernel} ${case} 1e-5 --kernel ${kernel})
  endforeach()
  run_case_at(${data_hf} ${case}_router ${case} 1e-5 --ignore-input-logits)
  run_case_at(${data_hf} ${case}_bf16 ${case} 2e-2 --quant bf16 --kernel tiled)
endforeach()
foreach(kernel reference tiled)
  run_case_at(${data_hf} deepseek_v3_fp8_partial_${kernel} deepseek_v3_fp8_partial 1e-5 --kernel ${kernel})
endforeach()
run_case_at(${data_hf} deepseek_v3_fp8_partial_w8a8 deepseek_v3_fp8_partial 5e-2 --quant fp8_block --kernel tiled)

tool_expect_error(malformed.no_checkpoint "checkpoint directory '.*' does not exist|has no config.json" ${tool} inspect
                  ${work}/does_not_exist)

# --- files: JSON read only from regular files and bounded, outputs never a file that is
# read, never through an existing OUT.tmp, never replacing what is not a regular file, no temporary
# left by a failure, quantize into a non-empty --out only with --force (tools/file_safety.cmake;
# FIFOs and device nodes made in each case's own folder)
foreach(case json_fifo json_device json_too_big output_not_regular tmp_not_followed failed_quantize
             output_is_checkpoint quantize_nonempty)
  add_test(NAME tool.files.${case}
           COMMAND ${CMAKE_COMMAND} -DTOOL=${tool} -DHF=${hf} -DBAD=${bad} -DWORK=${work}/files_${case}
                   -DCASE=${case} -P ${CMAKE_CURRENT_SOURCE_DIR}/tools/file_safety.cmake)
  set_tests_properties(tool.files.${case} PROPERTIES LABELS tool TIMEOUT 300
                       SKIP_REGULAR_EXPRESSION "polymoe-test: skipped")
endforeach()
set_tests_properties(tool.files.failed_quantize PROPERTIES FIXTURES_REQUIRED tool_malformed)

# --- MPI: two ranks write the same file as one process
if(TARGET polymoe::mpi)
  set(mpi_env "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  foreach(spec "deepseek_v3:mpi_ragged:reference" "mixtral:mpi_masked:reference" "deepseek_v3_fp8:mpi_masked:reference"
               "gpt_oss_mxfp4:mpi_ragged:reference" "deepseek_v3:mpi_ragged:tbb_grouped" "qwen3_moe:mpi_masked:tbb_grouped")
    string(REPLACE ":" ";" spec "${spec}")
    list(GET spec 0 case)
    list(GET spec 1 a2a)
    list(GET spec 2 kernel)
    set(id ${case}_${a2a}_${kernel})
    tool_test(mpi.${id}.single SETUP tool_mpi1_${id} COMMAND ${tool} run --checkpoint ${hf}/${case} --layer 0
              --input ${hf}/${case}/io.safetensors --output ${work}/mpi_single_${id}.safetensors --kernel ${kernel})
    tool_test(mpi.${id}.np2 SETUP tool_mpi2_${id} COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
              --oversubscribe ${tool} run --checkpoint ${hf}/${case} --layer 0 --input ${hf}/${case}/io.safetensors
              --output ${work}/mpi_np2_${id}.safetensors --kernel ${kernel} --a2a ${a2a})
    set_tests_properties(tool.mpi.${id}.np2 PROPERTIES ENVIRONMENT "${mpi_env}" PROCESSORS 2)
    tool_test(mpi.${id}.same REQUIRES "tool_mpi1_${id};tool_mpi2_${id}" COMMAND ${CMAKE_COMMAND} -E compare_files
              ${work}/mpi_single_${id}.safetensors ${work}/mpi_np2_${id}.safetensors)
  endforeach()
  # four ranks (16 experts, 4 per rank; 9 tokens split 2/2/2/3)
  tool_test(mpi.np4.run SETUP tool_mpi4 COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 4 --oversubscribe ${tool}
            run --checkpoint ${hf}/deepseek_v3 --layer 0 --input ${hf}/deepseek_v3/io.safetensors
            --output ${work}/mpi_np4.safetensors --kernel reference --a2a mpi_ragged)
  set_tests_properties(tool.mpi.np4.run PROPERTIES ENVIRONMENT "${mpi_env}" PROCESSORS 4)
  tool_test(mpi.np4.same REQUIRES "tool_mpi4;tool_mpi1_deepseek_v3_mpi_ragged_reference" COMMAND ${CMAKE_COMMAND} -E
            compare_files ${work}/mpi_single_deepseek_v3_mpi_ragged_reference.safetensors ${work}/mpi_np4.safetensors)
  # router computed by the checkpoint (no router_logits in the input), generated checkpoint
  tool_test(mpi.tiny.np2 SETUP tool_mpi2_tiny REQUIRES tool_mk_tiny COMMAND ${MPIEXEC_EXECUTABLE}
            ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe ${tool} run --checkpoint ${work}/ckpt_tiny --layer 0
            --input ${work}/ckpt_tiny/input.safetensors --output ${work}/mpi_np2_tiny.safetensors --kernel reference
            --a2a mpi_ragged)
  set_tests_properties(tool.mpi.tiny.np2 PROPERTIES ENVIRONMENT "${mpi_env}" PROCESSORS 2)
  tool_test(mpi.tiny.single SETUP tool_mpi1_tiny REQUIRES tool_mk_tiny COMMAND ${tool} run --checkpoint
            ${work}/ckpt_tiny --layer 0 --input ${work}/ckpt_tiny/input.safetensors
            --output ${work}/mpi_single_tiny.safetensors --kernel reference)
  tool_test(mpi.tiny.same REQUIRES "tool_mpi1_tiny;tool_mpi2_tiny" COMMAND ${CMAKE_COMMAND} -E compare_files
            ${work}/mpi_single_tiny.safetensors ${work}/mpi_np2_tiny.safetensors)
  # mpi_allgather against the transformers result (its bitwise equality with one process: tests/mpi)
  tool_test(mpi.allgather.np2 SETUP tool_mpi_ag COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
            --oversubscribe ${tool} run --checkpoint ${hf}/qwen3_moe --layer 0 --input ${hf}/qwen3_moe/io.safetensors
            --output ${work}/mpi_ag.safetensors --a2a mpi_allgather)
  set_tests_properties(tool.mpi.allgather.np2 PROPERTIES ENVIRONMENT "${mpi_env}" PROCESSORS 2)
  tool_test(mpi.allgather.compare REQUIRES tool_mpi_ag COMMAND ${tool} compare ${work}/mpi_ag.safetensors
            ${hf}/qwen3_moe/io.safetensors --tol 1e-5)
endif()

# --- libFuzzer on the safetensors reader and the checkpoint loader, in a separate clang build made by a test step
find_program(POLYMOE_CLANGXX NAMES clang++ clang++-14)
if(POLYMOE_CLANGXX)
  set(fuzz_build ${CMAKE_CURRENT_BINARY_DIR}/fuzz_build)
  add_test(NAME tool.fuzz.build
           COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_CURRENT_SOURCE_DIR}/fuzz -DBUILD=${fuzz_build}
                   -DCXX=${POLYMOE_CLANGXX} -DPROJECT_ROOT=${PROJECT_SOURCE_DIR}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/build_fuzzer.cmake)
  # COST: the clang build takes about 100 s and the fuzzers wait for it; started first (a clean
  # clone has no CTestCostData), it overlaps the other tests instead of ending the run alone.
  set_tests_properties(tool.fuzz.build PROPERTIES LABELS fuzz TIMEOUT 600 FIXTURES_SETUP tool_fuzz SKIP_RETURN_CODE 77
                       SKIP_REGULAR_EXPRESSION "polymoe-fuzz: skipped" COST 1000)
  foreach(spec "safetensors:fuzz_safetensors:corpus_safetensors" "hf_layer:fuzz_hf_layer:corpus_hf_layer"
               "layer_input:fuzz_layer_input:corpus_layer_input")
    string(REPLACE ":" ";" spec "${spec}")
    list(GET spec 0 name)
    list(GET spec 1 target)
    list(GET spec 2 corpus)
    add_test(NAME tool.fuzz.${name}
             COMMAND ${CMAKE_COMMAND} -DBUILD=${fuzz_build} -DTARGET=${target}
                     -DCORPUS=${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${corpus} -DSECONDS=20
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run_fuzzer.cmake)
    set_tests_properties(tool.fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT 300 FIXTURES_REQUIRED tool_fuzz
                         SKIP_REGULAR_EXPRESSION "polymoe-fuzz: skipped" COST 500)
  endforeach()
endif()

# --- the checkpoint loader itself (gtest; suite names start with "checkpoint")
polymoe_add_test(test_hf_checkpoint ${CMAKE_CURRENT_SOURCE_DIR}/unit/io/test_hf_checkpoint.cpp)

# --- kernel::cuda through the tool (CUDA component built): transformers fixtures at bf16's tolerance,
# reported as skipped where no GPU runs the kernel
if(TARGET polymoe::cuda)
  foreach(case mixtral qwen3_moe deepseek_v3 gpt_oss)
    add_test(NAME tool.fixture.${case}_cuda
             COMMAND ${CMAKE_COMMAND} -DTOOL=${tool} -DCASE_DIR=${hf}/${case} -DOUT=${work}/${case}_cuda.safetensors
                     -DTOL=1e-2 -P ${CMAKE_CURRENT_SOURCE_DIR}/tools/cuda_fixture.cmake)
    set_tests_properties(tool.fixture.${case}_cuda PROPERTIES LABELS "tool;cuda" TIMEOUT 300
                         SKIP_REGULAR_EXPRESSION "no usable GPU")
  endforeach()
  # GPT-OSS's stored MXFP4 blocks, 4-bit on the device, bf16 activations (W4A16)
  add_test(NAME tool.fixture.gpt_oss_mxfp4_w4a16_cuda
           COMMAND ${CMAKE_COMMAND} -DTOOL=${tool} -DCASE_DIR=${hf}/gpt_oss_mxfp4 -DQUANT=mxfp4_w4a16
                   -DOUT=${work}/gpt_oss_mxfp4_w4a16_cuda.safetensors -DTOL=1e-2
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/tools/cuda_fixture.cmake)
  set_tests_properties(tool.fixture.gpt_oss_mxfp4_w4a16_cuda PROPERTIES LABELS "tool;cuda" TIMEOUT 300
                       SKIP_REGULAR_EXPRESSION "no usable GPU")
  # DeepSeek-V3's FP8 blocks with activations quantized on the device (W8A8, fp8 tensor cores), at
  # the CPU kernels' W8A8 tolerance; the partial fixture's 128x128 blocks are partial
  foreach(case_dir ${hf}/deepseek_v3_fp8 ${data_hf}/deepseek_v3_fp8_partial)
    get_filename_component(case ${case_dir} NAME)
    add_test(NAME tool.fixture.${case}_fp8_block_cuda
             COMMAND ${CMAKE_COMMAND} -DTOOL=${tool} -DCASE_DIR=${case_dir} -DQUANT=fp8_block
                     -DOUT=${work}/${case}_fp8_block_cuda.safetensors -DTOL=5e-2
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/tools/cuda_fixture.cmake)
    set_tests_properties(tool.fixture.${case}_fp8_block_cuda PROPERTIES LABELS "tool;cuda" TIMEOUT 300
                         SKIP_REGULAR_EXPRESSION "no usable GPU")
  endforeach()
endif()
