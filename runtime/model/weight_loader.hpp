// Loads a model's weights following its manifest (generated weights.inc): for every kiln tensor,
// the first HF layout whose tensors are all present is read, shape-checked, fused (rows stacked)
// and converted to the backend's element type, then written where the backend wants it (host
// memory for the CPU reference, device memory for CUDA). Missing, mis-shaped and unexpected
// tensors are errors that name them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/model/model_def.hpp"
#include "runtime/model/tensor_source.hpp"

namespace kiln {

// gpu: bf16, except the matrices (WeightSpec::matrix: the projections and the embedding table) a
// GGUF file stores in blocks: those in a format the GPU reads as stored (Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: templates/weight_matrix.hpp, every block type the loader
// dequantizes) keep their blocks; those fused from pieces of three types or more are requantized
// to Q8_0 (closer to the file than bf16, and half its bytes), but where pieces of two formats
// follow each other (a Q4_K_M file's qkv_proj: q and k Q4_K, v Q6_K): those keep both, in two
// parts (GpuMatrix::split).
// Tensor-parallel slices and F32 / F16 / BF16 tensors are bf16.
// cpu (the fast CPU backend): fp32, except the matrices: those a GGUF file stores in blocks keep
// ggml's values in the CPU layout (templates/weight_matrix.hpp), every block type as on the GPU,
// two of those in one matrix as there (CpuMatrix::split; three or more: Q8_0), and matrices not
// in blocks are bf16 rows
// (a decode step's projections packed in 12 bits a value where the CPU's kernel unpacks them:
// bf16_pack.hpp).
// A tied LM head shares its embedding's matrix: the GPU and the fast CPU backend hold it once.
// FP8 on the GPU: a matrix an FP8 checkpoint stores in E4M3 keeps its codes and scales where its
// blocks are 128 columns wide and its pieces whole blocks of 128 rows (the published checkpoints'
// 128 × 128 blocks are); else, and under Quantize::fp8, it is quantized to FP8 at load, one scale for
// the whole matrix. Neither
// applies to routed experts or tensor-parallel slices (bf16).
enum class WeightFormat { f32, bf16, gpu, cpu };

// --quantize: fp8 quantizes every matrix (projections, LM head, embedding table) to FP8 at load
// (one scale a matrix, quantize_fp8, kept in the 128 × 128 blocks' layout) on the GPU; the reference backend (f32) then computes with the
// same values (code × scale), to compare with. The fast CPU backend has no FP8 kernels.
enum class Quantize { none, fp8 };

// Where the loaded bytes go. The loader allocates one block for all tensors, then writes into it.
class WeightSink {
 public:
  virtual ~WeightSink() = default;
  virtual std::byte* allocate(int64_t bytes) = 0;
  virtual void write(std::byte* dst, const void* src, int64_t bytes) = 0;
  // Bytes of the block the loader no longer needs (the tail of a matrix packed into fewer bytes):
  // a sink may give their memory back, and then says how many bytes it did (they read as zeros).
  virtual int64_t release(std::byte* /*at*/, int64_t /*bytes*/) { return 0; }
};

// Host memory (the CPU backends), zeroed, 2 MB aligned and marked for transparent huge pages
// (MADV_HUGEPAGE): a decode step streams every weight once, and in 4 KB pages the TLB misses cost
// it bandwidth. Kernels whose transparent huge pages are "madvise" only give none to memory not
// marked so.
class HostSink final : public WeightSink {
 public:
  HostSink() = default;
  HostSink(const HostSink&) = delete;
  HostSink& operator=(const HostSink&) = delete;
  ~HostSink() override;
  std::byte* allocate(int64_t bytes) override;
  void write(std::byte* dst, const void* src, int64_t bytes) override;
  int64_t release(std::byte* at, int64_t bytes) override;  // the whole 4 KB pages inside (MADV_DONTNEED)

 private:
  std::byte* storage_ = nullptr;
};

// One HF tensor a manifest entry reads: a layout's source with {L} (layer) and {E} (expert)
// substituted.
struct LayoutPiece {
  std::string hf_name;
  const WeightSource* source;
};

// The HF tensors one layout of `spec` reads at `layer` (-1: a whole-model weight) on tensor-parallel
// rank `rank`; a layout naming {E} repeats for experts 0..spec.experts-1, stacked in that order
// (with expert parallelism, a source's rank_experts: rank × rank_experts onwards).
std::vector<LayoutPiece> expand_layout(const WeightSpec& spec, const std::vector<WeightSource>& layout, int64_t layer,
                                       int32_t rank = 0);

// The shape of the whole HF tensor a source reads, viewed as [rows, cols] (a tensor [d0, ..., dn]
// as [d0·…·d(n-1), dn]): [hf_rows, hf_cols] when given (a rank's slice), else the rows the source
// spans (groups × group_stride, or row_begin + rows) of the kiln tensor's last dim.
std::pair<int64_t, int64_t> whole_hf_rows(const WeightSpec& spec, const WeightSource& source);

struct LoadedWeights {
  WeightTable table;
  int64_t bytes = 0;    // in the backend's format (less what the sink gave back: HostSink::release)
  int64_t tensors = 0;  // kiln tensors (fused), counting each layer's
  // WeightFormat::gpu and cpu: the projections loaded (every layer's), those kept quantized, their
  // bytes and what they would take in bf16.
  int64_t matrices = 0, quantized = 0;
  int64_t quantized_as[kMatrixFormats] = {};  // of them, per MatrixFormat (indexed by its value)
  int64_t requantized = 0;       // of them, with Q8_0 requantized from other block types
  int64_t two_formats = 0;       // of them, in two formats (GpuMatrix::split; counted in the first's quantized_as)
  int64_t fp8_at_load = 0;       // of them, FP8 quantized at load (Quantize::fp8, or a checkpoint's other blocks)
  int64_t quantized_bytes = 0, quantized_bf16_bytes = 0;
  // WeightFormat::cpu: the bf16 projections packed in 12 bits a value (bf16_pack.hpp), and the bytes
  // a decode step reads less for it.
  int64_t packed_bf16 = 0, packed_bf16_saved_bytes = 0;
  // Of them, the values of the largest the prefill expands to bf16 rows (its scratch), and the
  // longest row of those it multiplies in FP8 (fp8_gemm_shape: its FP8 inputs' scratch); 0: none.
  int64_t largest_quantized_values = 0;
  int64_t longest_fp8_row = 0;
  // The embedding table's block format, when it keeps blocks and no tied LM head reads it whole
  // (then it is none of the above: a decode step reads one row a token).
  std::optional<MatrixFormat> lookup_blocks;
};

// "bf16", or "GGUF blocks: Q4_0 for 128, Q8_0 for 1 (1 requantized from other block types) of 129
// projections, the embedding table Q4_0; the rest bf16" (`rest`: the format of everything else).
std::string weight_formats_text(const LoadedWeights& w, const char* rest);

// `rank`: with a tensor-parallel rank's definition (ModelInfo::tensor_parallel > 1), the slices
// that rank holds (WeightSource's rank fields); 0 otherwise.
LoadedWeights load_weights(const ModelDef& model, const TensorSource& source, WeightFormat format, WeightSink& sink,
                           int32_t rank = 0, Quantize quantize = Quantize::none);

// Deterministic pseudo-random weights (benchmarks without a checkpoint): norms near 1, matrices
// uniform with standard deviation 0.02 (HF's initializer_range). Same seed, same weights.
// The values are a function of (seed, HF tensor name, position in that tensor), so a rank's slices
// are exactly the slices of the whole model's random weights: load_weights from open_random_source
// (runtime/model/random_source.hpp); tied weights stay tied.
LoadedWeights random_weights(const ModelDef& model, uint64_t seed, WeightFormat format, WeightSink& sink,
                             int32_t rank = 0, Quantize quantize = Quantize::none);

}  // namespace kiln
