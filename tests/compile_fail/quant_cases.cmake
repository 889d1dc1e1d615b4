# Compile-fail cases of the quant schemes (issue 3).
# A kernel that does not implement a scheme (kernel::tiled_amx and fp32, which kernel::tiled runs):
# the message, and the list of what the kernel does implement.
polymoe_compile_fail(kernel_lacks_scheme
  "schemes_this_kernel_implements<polymoe::quant::bf16, [^>]*polymoe::quant::nvfp4_w4a16>.*polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis does not implement the Quant scheme")
# The AMX kernel (issue 10): bf16, the fp8 schemes, int8_w8a8 and the 4-bit schemes only.
polymoe_compile_fail(amx_lacks_scheme
  "schemes_this_kernel_implements<polymoe::quant::bf16, polymoe::quant::fp8, polymoe::quant::fp8_block, polymoe::quant::fp8_block_weight_only, polymoe::quant::int8_w8a8, polymoe::quant::mxfp4, polymoe::quant::mxfp4_w4a16, polymoe::quant::nvfp4, polymoe::quant::nvfp4_w4a4, polymoe::quant::nvfp4_w4a16>.*polymoe: MoeLayer<A2A, Quant, Kernel>: the Kernel axis does not implement the Quant scheme")
