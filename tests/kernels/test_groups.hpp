// The groups of GPU op tests; test_kernels_main.cu runs them (all, or those named on the command line).
#pragma once

namespace kiln::kernel_test {

void run_elementwise_tests();  // test_elementwise.cu
void run_gemv_tests();         // test_gemv.cu
void run_attention_tests();    // test_attention.cu
void run_gemm_tests();         // test_gemm.cpp
void run_invariance_tests();   // test_invariance.cu
void run_fusion_tests();       // test_fusion.cu

}  // namespace kiln::kernel_test
