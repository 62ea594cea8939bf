// CUDA sampler: host side. How a batch is spread over the GPU:
//
// Large batches run one 512-thread block per row (sample_rows_kernel<false>): the rows alone fill
// the SMs. A small batch would then leave most SMs idle while one block makes ~6 passes over a
// 150k-token row, so up to SamplerWorkspace::max_rows() rows each get P blocks
// (sample_rows_kernel<true>), P = resident blocks / rows (at most 512, and at least
// min_tokens_per_block tokens each); block p owns token ids [p * S, (p + 1) * S), S a multiple of 4
// so its slice is read with 16-byte loads. Every pass of the algorithm is a reduction over the row,
// done per block and combined through the workspace:
//   max/argmax/NaN     each block writes {max, argmax} or "bad"; after the row's barrier every block
//                      reduces the P partials itself (the order of an exact max is irrelevant).
//   radix levels       each block builds its shared histogram, adds the nonzero bins into the row's
//                      global histogram for that level (integer atomics: exact, order-free), meets
//                      the others at the barrier, and reads the row totals back; every block then
//                      picks the same digit from the same totals.
//   kept mass, draw    each block writes its slice's kept mass (and exp sum); the last block of the
//                      row to arrive takes over: an exclusive scan of the P kept masses gives the
//                      total (hence the target) and the one slice whose range holds the target, and
//                      that slice alone is scanned in token-id order.
// So every float operation is the same one sampling_math.hpp defines on the same values, and every
// sum of mass is an integer sum: the split cannot change a token. (The logprob's float exp sum is
// summed in a fixed order, so it is deterministic, and equal to the CPU's to rounding.)
//
// The row's barrier is a counter per row in the workspace (cooperative_groups' grid barrier, per
// row: blocks of different rows never wait for each other, and rows may take different numbers of
// passes). It needs all of a row's blocks resident at once, which the cooperative launch
// guarantees (the grid never exceeds resident_blocks()). Histograms are zeroed by each launch's
// first phase and the counters return to zero after every barrier, so nothing is reset from the
// host: a launch is one cudaLaunchKernelEx, capturable in a graph. The workspace is allocated once.
#include "runtime/serving/sampler.hpp"

#include "runtime/serving/sample_batch_cuda.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "runtime/core/error.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/serving/sampler.cuh"

namespace kiln {
namespace {

namespace sk = sampler_kernels;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr size_t kAlignment = 256;
size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// The workspace's arrays, in one allocation; with base == nullptr it only measures.
struct ScratchLayout {
  sk::Scratch scratch{};
  size_t bytes = 0;

  ScratchLayout(char* base, int64_t rows, int64_t blocks) {
    auto take = [&](auto*& ptr, int64_t count) {
      using T = std::remove_reference_t<decltype(*ptr)>;
      ptr = base ? reinterpret_cast<T*>(base + bytes) : nullptr;
      bytes += aligned(sizeof(T) * static_cast<size_t>(count));
    };
    take(scratch.block_top, blocks);
    take(scratch.block_kept, blocks);
    take(scratch.block_exp_sum, blocks);
    take(scratch.count_hist, rows * sk::kRadixLevels * sk::kBins);
    take(scratch.mass_hist, rows * sk::kRadixLevels * sk::kBins);
    take(scratch.row_sync, rows);
  }
};

void check_launch_arguments(int64_t row_stride, int32_t num_rows, int32_t vocab_size) {
  if (vocab_size <= 0 || vocab_size > kMaxSamplerVocab) {
    fail("CUDA sampler: vocabulary size ", vocab_size, " is outside [1, ", kMaxSamplerVocab, "]");
  }
  if (row_stride < vocab_size) fail("CUDA sampler: row stride ", row_stride, " < vocabulary size ", vocab_size);
  if (num_rows < 0) fail("CUDA sampler: num_rows = ", num_rows, ": expected >= 0");
}

void launch_one_block_per_row(const float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                              const SamplerRow* rows, SampleOutput* out, cudaStream_t stream) {
  const sk::Params params{logits, row_stride, vocab_size, 1, vocab_size, rows, out, sk::Scratch{}};
  sk::sample_rows_kernel<false><<<num_rows, sk::kThreads, 0, stream>>>(params);
  check_cuda(cudaGetLastError(), "launching sample_rows_kernel (one block per row)");
}

}  // namespace

SamplerWorkspace::SamplerWorkspace(int32_t max_rows, int32_t min_tokens_per_block)
    : min_tokens_per_block_(min_tokens_per_block) {
  if (max_rows <= 0) fail("CUDA sampler workspace: max_rows = ", max_rows, ": expected > 0");
  if (min_tokens_per_block <= 0) {
    fail("CUDA sampler workspace: min_tokens_per_block = ", min_tokens_per_block, ": expected > 0");
  }
  int device = 0, cooperative = 0, sms = 0, per_sm = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device),
             "querying cooperative launch support");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "querying the SM count");
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sk::sample_rows_kernel<true>, sk::kThreads, 0),
             "querying the occupancy of sample_rows_kernel");
  // Without cooperative launch nothing guarantees a row's blocks are resident together, and the
  // row barrier could wait forever: such a device gets the one-block-per-row kernel only.
  if (!cooperative) return;
  resident_blocks_ = per_sm * sms;
  max_rows_ = std::min(max_rows, resident_blocks_ / 2);  // a row needs 2 blocks to be split
  if (max_rows_ <= 0) return;
  const ScratchLayout measure(nullptr, max_rows_, resident_blocks_);
  check_cuda(cudaMalloc(&device_memory_, measure.bytes), "cudaMalloc(workspace)");
  // The barrier counters must start at zero; the histograms are zeroed by every launch.
  check_cuda(cudaMemset(device_memory_, 0, measure.bytes), "zeroing the workspace");
  check_cuda(cudaDeviceSynchronize(), "zeroing the workspace");
}

SamplerWorkspace::~SamplerWorkspace() { cudaFree(device_memory_); }

SamplerWorkspace::Split SamplerWorkspace::split(int32_t num_rows, int32_t vocab_size) const {
  const Split whole_rows{1, vocab_size};
  if (num_rows <= 0 || num_rows > max_rows_ || vocab_size <= 0) return whole_rows;
  int64_t parts = std::min<int64_t>({resident_blocks_ / num_rows, sk::kMaxParts,
                                     ceil_div(vocab_size, min_tokens_per_block_)});
  if (parts < 2) return whole_rows;
  const int64_t slice = ceil_div(ceil_div(vocab_size, parts), sk::kChunk) * sk::kChunk;
  parts = ceil_div(vocab_size, slice);  // no empty slice at the end
  if (parts < 2) return whole_rows;
  return Split{static_cast<int32_t>(parts), static_cast<int32_t>(slice)};
}

void launch_sampler(const float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                    const SamplerRow* rows, SampleOutput* out, SamplerWorkspace& workspace, cudaStream_t stream) {
  check_launch_arguments(row_stride, num_rows, vocab_size);
  if (num_rows == 0) return;
  const SamplerWorkspace::Split split = workspace.split(num_rows, vocab_size);
  if (split.blocks_per_row == 1) {
    launch_one_block_per_row(logits, row_stride, num_rows, vocab_size, rows, out, stream);
    return;
  }
  const ScratchLayout layout(static_cast<char*>(workspace.device_memory_), workspace.max_rows_,
                             workspace.resident_blocks_);
  const sk::Params params{logits, row_stride, vocab_size, split.blocks_per_row, split.tokens_per_block,
                          rows,   out,        layout.scratch};
  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(num_rows * split.blocks_per_row));
  config.blockDim = dim3(sk::kThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  check_cuda(cudaLaunchKernelEx(&config, sk::sample_rows_kernel<true>, params),
             "launching sample_rows_kernel (several blocks per row)");
}

void launch_sampler(const float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab_size,
                    const SamplerRow* rows, SampleOutput* out, cudaStream_t stream) {
  check_launch_arguments(row_stride, num_rows, vocab_size);
  if (num_rows == 0) return;
  launch_one_block_per_row(logits, row_stride, num_rows, vocab_size, rows, out, stream);
}

CudaSampler::CudaSampler(int32_t max_rows) : max_rows_(max_rows), workspace_(max_rows) {
  check_cuda(cudaMallocHost(&host_rows_, sizeof(SamplerRow) * max_rows), "cudaMallocHost(rows)");
  check_cuda(cudaMallocHost(&host_out_, sizeof(SampleOutput) * max_rows), "cudaMallocHost(outputs)");
  check_cuda(cudaMalloc(&device_rows_, sizeof(SamplerRow) * max_rows), "cudaMalloc(rows)");
  check_cuda(cudaMalloc(&device_out_, sizeof(SampleOutput) * max_rows), "cudaMalloc(outputs)");
  check_cuda(cudaMalloc(&device_raw_rows_, sizeof(SamplerRow) * max_rows), "cudaMalloc(raw rows)");
  check_cuda(cudaMalloc(&device_top_, sizeof(TokenLogprob) * kMaxTopLogprobs * max_rows), "cudaMalloc(top logprobs)");
  // A row's slots past its top_n are copied back with it and never read; zeroed once, so that copy
  // never reads uninitialized memory (compute-sanitizer initcheck flagged it).
  check_cuda(cudaMemset(device_top_, 0, sizeof(TokenLogprob) * kMaxTopLogprobs * max_rows), "zeroing top logprobs");
  const size_t slices = static_cast<size_t>(max_rows) * kLogprobMaxParts;
  check_cuda(cudaMalloc(&logprob_scratch_.part_max, sizeof(float) * slices), "cudaMalloc(logprob maxima)");
  check_cuda(cudaMalloc(&logprob_scratch_.part_sum, sizeof(double) * slices), "cudaMalloc(logprob sums)");
  check_cuda(cudaMalloc(&logprob_scratch_.candidates, sizeof(TokenLogprob) * kMaxTopLogprobs * slices),
             "cudaMalloc(logprob candidates)");
  check_cuda(cudaMalloc(&device_edit_offsets_, sizeof(int32_t) * (max_rows + 1)), "cudaMalloc(edit offsets)");
  check_cuda(cudaMalloc(&device_mask_rows_, sizeof(int32_t) * max_rows), "cudaMalloc(mask rows)");
}

CudaSampler::~CudaSampler() {
  cudaFree(device_mask_saved_);
  cudaFree(device_mask_rows_);
  cudaFree(device_masks_);
  cudaFree(device_saved_);
  cudaFree(device_edits_);
  cudaFree(device_edit_offsets_);
  cudaFree(logprob_scratch_.candidates);
  cudaFree(logprob_scratch_.part_sum);
  cudaFree(logprob_scratch_.part_max);
  cudaFree(device_top_);
  cudaFree(device_raw_rows_);
  cudaFree(device_out_);
  cudaFree(device_rows_);
  cudaFreeHost(host_out_);
  cudaFreeHost(host_rows_);
}

std::vector<SampleOutput> CudaSampler::sample(const float* logits, int64_t row_stride, int32_t vocab_size,
                                              std::span<const SamplerRow> rows, cudaStream_t stream) {
  const auto n = static_cast<int32_t>(rows.size());
  if (n > max_rows_) fail("CUDA sampler: ", n, " rows exceed the ", max_rows_, " it was created for");
  if (n == 0) return {};
  std::copy(rows.begin(), rows.end(), host_rows_);
  check_cuda(cudaMemcpyAsync(device_rows_, host_rows_, sizeof(SamplerRow) * n, cudaMemcpyHostToDevice, stream),
             "copying sampler rows");
  launch_sampler(logits, row_stride, n, vocab_size, device_rows_, device_out_, workspace_, stream);
  check_cuda(cudaMemcpyAsync(host_out_, device_out_, sizeof(SampleOutput) * n, cudaMemcpyDeviceToHost, stream),
             "copying sampler outputs");
  check_cuda(cudaStreamSynchronize(stream), "sampling");
  return std::vector<SampleOutput>(host_out_, host_out_ + n);
}

SampleResult CudaSampler::sample(float* logits, int64_t row_stride, int32_t vocab_size, const SampleBatch& batch,
                                 cudaStream_t stream) {
  const auto n = static_cast<int32_t>(batch.rows.size());
  if (n > max_rows_) fail("CUDA sampler: ", n, " rows exceed the ", max_rows_, " it was created for");
  SampleResult result;
  if (n == 0) return result;
  batch.check(vocab_size, "CUDA sampler");
  bool logprobs = false;
  for (int32_t r = 0; r < n; ++r) {
    host_rows_[r] = batch.rows[r];
    host_rows_[r].want_logprob = 0;  // from the raw rows, by launch_logprobs
    logprobs = logprobs || batch.rows[r].want_logprob || batch.rows[r].top_logprobs > 0;
  }
  check_cuda(cudaMemcpyAsync(device_rows_, host_rows_, sizeof(SamplerRow) * n, cudaMemcpyHostToDevice, stream),
             "copying sampler rows");
  const bool edits = !batch.edits.empty();
  if (edits) {
    if (batch.edits.size() > edit_capacity_) {
      check_cuda(cudaStreamSynchronize(stream), "sampling");  // the old buffers may still be read
      cudaFree(device_edits_);
      cudaFree(device_saved_);
      edit_capacity_ = std::max(batch.edits.size(), 2 * edit_capacity_);
      check_cuda(cudaMalloc(&device_edits_, sizeof(LogitEdit) * edit_capacity_), "cudaMalloc(edits)");
      check_cuda(cudaMalloc(&device_saved_, sizeof(float) * edit_capacity_), "cudaMalloc(saved logits)");
    }
    // Pageable copies: the runtime stages them before returning, so the vectors may go away after.
    check_cuda(cudaMemcpyAsync(device_edits_, batch.edits.data(), sizeof(LogitEdit) * batch.edits.size(),
                               cudaMemcpyHostToDevice, stream), "copying logit edits");
    check_cuda(cudaMemcpyAsync(device_edit_offsets_, batch.edit_offsets.data(), sizeof(int32_t) * (n + 1),
                               cudaMemcpyHostToDevice, stream), "copying logit edit offsets");
    launch_apply_logit_edits(logits, row_stride, n, device_edits_, device_edit_offsets_, device_saved_, stream);
  }
  const bool masks = !batch.masks.empty();
  if (masks) {
    const size_t saved = static_cast<size_t>(batch.num_masks(vocab_size)) * static_cast<size_t>(vocab_size);
    if (batch.masks.size() > mask_word_capacity_ || saved > mask_saved_capacity_) {
      check_cuda(cudaStreamSynchronize(stream), "sampling");  // the old buffers may still be read
      cudaFree(device_masks_);
      cudaFree(device_mask_saved_);
      mask_word_capacity_ = std::max(batch.masks.size(), 2 * mask_word_capacity_);
      mask_saved_capacity_ = std::max(saved, 2 * mask_saved_capacity_);
      check_cuda(cudaMalloc(&device_masks_, sizeof(TokenMaskWord) * mask_word_capacity_), "cudaMalloc(token masks)");
      check_cuda(cudaMalloc(&device_mask_saved_, sizeof(float) * mask_saved_capacity_), "cudaMalloc(masked logits)");
    }
    check_cuda(cudaMemcpyAsync(device_masks_, batch.masks.data(), sizeof(TokenMaskWord) * batch.masks.size(),
                               cudaMemcpyHostToDevice, stream), "copying token masks");
    check_cuda(cudaMemcpyAsync(device_mask_rows_, batch.mask_rows.data(), sizeof(int32_t) * n, cudaMemcpyHostToDevice,
                               stream), "copying mask rows");
    launch_apply_token_masks(logits, row_stride, n, vocab_size, device_masks_, device_mask_rows_, device_mask_saved_,
                             stream);
  }
  launch_sampler(logits, row_stride, n, vocab_size, device_rows_, device_out_, workspace_, stream);
  // Undone in the reverse order: a masked row's saved logits are the edited ones.
  if (masks) launch_restore_token_masks(logits, row_stride, n, vocab_size, device_mask_rows_, device_mask_saved_, stream);
  if (edits) launch_restore_logit_edits(logits, row_stride, n, device_edits_, device_edit_offsets_, device_saved_, stream);
  result.top.assign(static_cast<size_t>(n) * kMaxTopLogprobs, TokenLogprob{});
  if (logprobs) {
    check_cuda(cudaMemcpyAsync(device_raw_rows_, batch.rows.data(), sizeof(SamplerRow) * n, cudaMemcpyHostToDevice, stream),
               "copying sampler rows");
    launch_logprobs(logits, row_stride, n, vocab_size, device_raw_rows_, device_out_, device_top_, logprob_scratch_,
                    stream);
    check_cuda(cudaMemcpyAsync(result.top.data(), device_top_, sizeof(TokenLogprob) * kMaxTopLogprobs * n,
                               cudaMemcpyDeviceToHost, stream), "copying top logprobs");
  }
  check_cuda(cudaMemcpyAsync(host_out_, device_out_, sizeof(SampleOutput) * n, cudaMemcpyDeviceToHost, stream),
             "copying sampler outputs");
  check_cuda(cudaStreamSynchronize(stream), "sampling");
  result.outputs.assign(host_out_, host_out_ + n);
  return result;
}

SampleResult CudaSampler::logprobs(const float* logits, int64_t row_stride, int32_t vocab_size,
                                   std::span<const int32_t> tokens, int32_t top_n, cudaStream_t stream) {
  SampleResult result;
  const auto n = static_cast<int32_t>(tokens.size());
  result.top.assign(static_cast<size_t>(n) * kMaxTopLogprobs, TokenLogprob{});
  result.outputs.resize(n);
  // launch_logprobs reads the token from out[r] and writes the logprob there; rows go in slices of
  // the staging buffers' size.
  for (int32_t first = 0; first < n; first += max_rows_) {
    const int32_t count = std::min(max_rows_, n - first);
    for (int32_t r = 0; r < count; ++r) {
      host_rows_[r] = SamplerRow{};
      host_rows_[r].want_logprob = 1;
      host_rows_[r].top_logprobs = std::clamp(top_n, 0, kMaxTopLogprobs);
      host_out_[r] = SampleOutput{tokens[first + r], 0.0f, kSampleOk};
    }
    check_cuda(cudaMemcpyAsync(device_raw_rows_, host_rows_, sizeof(SamplerRow) * count, cudaMemcpyHostToDevice, stream),
               "copying logprob rows");
    check_cuda(cudaMemcpyAsync(device_out_, host_out_, sizeof(SampleOutput) * count, cudaMemcpyHostToDevice, stream),
               "copying logprob tokens");
    launch_logprobs(logits + first * row_stride, row_stride, count, vocab_size, device_raw_rows_, device_out_, device_top_,
                    logprob_scratch_, stream);
    check_cuda(cudaMemcpyAsync(result.top.data() + static_cast<size_t>(first) * kMaxTopLogprobs, device_top_,
                               sizeof(TokenLogprob) * kMaxTopLogprobs * count, cudaMemcpyDeviceToHost, stream),
               "copying top logprobs");
    check_cuda(cudaMemcpyAsync(host_out_, device_out_, sizeof(SampleOutput) * count, cudaMemcpyDeviceToHost, stream),
               "copying logprobs");
    check_cuda(cudaStreamSynchronize(stream), "logprobs");
    std::copy(host_out_, host_out_ + count, result.outputs.begin() + first);
  }
  return result;
}

}  // namespace kiln
