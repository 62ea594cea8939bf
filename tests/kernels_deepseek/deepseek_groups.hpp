// The groups of DeepSeek GPU op tests; main.cpp runs them (all, or those named on the command line).
#pragma once

namespace kiln::kernel_test {

void run_mla_tests();            // test_mla.cu: rmsnorm_inplace, mla_kv_write, mla_q_absorb, mla_v_up
void run_mla_attention_tests();  // test_mla_attention.cu: mla_attention_prefill, mla_attention_decode
void run_moe_tests();            // test_moe.cu: moe_route, moe_gate_up, moe_down

}  // namespace kiln::kernel_test
