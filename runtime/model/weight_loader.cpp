#include "runtime/model/weight_loader.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "runtime/core/dtype.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/parallel.hpp"
#include "runtime/cpu/bf16_amx.hpp"
#include "runtime/cpu/bf16_avx512.hpp"
#include "runtime/cpu/bf16_pack.hpp"
#include "runtime/model/random_source.hpp"
#include "runtime/model/rank_slice.hpp"
#include "runtime/weights/dequant.hpp"
#include "runtime/weights/float_convert.hpp"
#include "runtime/weights/quant_repack.hpp"
#include "runtime/weights/shape.hpp"

namespace kiln {

std::byte* HostSink::allocate(int64_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t size = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + kHugePage - 1) / kHugePage * kHugePage;
  std::free(storage_);
  storage_ = static_cast<std::byte*>(std::aligned_alloc(kHugePage, size));
  if (storage_ == nullptr) fail("out of host memory: the weights need ", bytes, " bytes");
  (void)madvise(storage_, size, MADV_HUGEPAGE);  // a hint: without THP the pages stay 4 KB
  std::memset(storage_, 0, size);                // the first touch, after the hint
  return storage_;
}

HostSink::~HostSink() { std::free(storage_); }

void HostSink::write(std::byte* dst, const void* src, int64_t bytes) { std::memcpy(dst, src, static_cast<size_t>(bytes)); }

int64_t HostSink::release(std::byte* at, int64_t bytes) {
  constexpr uintptr_t kPage = 4096;
  if (bytes <= 0) return 0;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(at) + kPage - 1) / kPage * kPage;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(at) + static_cast<uintptr_t>(bytes)) / kPage * kPage;
  if (end <= begin) return 0;
  if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0) return 0;  // a hint: kept if refused
  return static_cast<int64_t>(end - begin);
}

namespace {

std::string substitute(std::string text, const std::string& pattern, int64_t value) {
  for (size_t at; (at = text.find(pattern)) != std::string::npos;) text.replace(at, pattern.size(), std::to_string(value));
  return text;
}

// Rows × cols view of a shape: [d0, ..., dn] -> [d0·…·d(n-1), dn].
std::pair<int64_t, int64_t> as_rows(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {1, 1};
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return {rows, shape.back()};
}

bool names_expert(const WeightSource& s) { return std::string(s.hf_name).find("{E}") != std::string::npos; }

}  // namespace

std::vector<LayoutPiece> expand_layout(const WeightSpec& spec, const std::vector<WeightSource>& layout, int64_t layer,
                                       int32_t rank) {
  bool per_expert = false;
  for (const auto& s : layout) per_expert |= names_expert(s);
  std::vector<LayoutPiece> pieces;
  const int64_t experts = per_expert ? spec.experts : 1;
  for (int64_t e = 0; e < experts; ++e) {
    for (const auto& s : layout) {
      const int64_t expert = e + rank * s.rank_experts;
      pieces.push_back({substitute(substitute(s.hf_name, "{L}", layer), "{E}", expert), &s});
    }
  }
  return pieces;
}

std::pair<int64_t, int64_t> whole_hf_rows(const WeightSpec& spec, const WeightSource& s) {
  if (s.hf_rows > 0) return {s.hf_rows, s.hf_cols};
  return {s.groups > 1 ? s.groups * s.group_stride : s.row_begin + s.rows, as_rows(spec.shape).second};
}

namespace {

// One kiln tensor: a manifest entry at one layer (layer -1 for whole-model weights).
struct Instance {
  const WeightSpec* spec;
  int64_t layer;
  int64_t offset = 0;  // bytes into the block
  MatrixFormat format = MatrixFormat::bf16;  // f32 / bf16 values, or a projection's blocks (kept_format)
  // A projection kept in two block formats (GpuMatrix::split): rows from `split` on are a matrix of
  // their own in tail_format (Loader::tail_offset). split 0: one format.
  int64_t split = 0;
  MatrixFormat tail_format = MatrixFormat::bf16;
  bool own_copy = false;     // a tied projection with its own copy of its target, in its own format
  bool requantized = false;  // some of its pieces kept as Q8_0 requantized from other block types (kept_format)
  bool fp8 = false;          // FP8 values: kept as format fp8 (GPU), or their f32 values (Quantize::fp8 on f32)
  bool fp8_at_load = false;  // of those, quantized at load rather than kept as the checkpoint stores them
  std::string key() const { return layer < 0 ? spec->name : std::string(spec->name) + " of layer " + std::to_string(layer); }
};

class Loader {
 public:
  Loader(const ModelDef& model, WeightFormat format, WeightSink& sink, int32_t rank, Quantize quantize)
      : model_(model), format_(format), sink_(sink), rank_(rank), quantize_(quantize) {
    if (quantize == Quantize::fp8 && format != WeightFormat::gpu && format != WeightFormat::f32) {
      fail("--quantize fp8 runs on one GPU or on the reference backend (--backend ref): the fast CPU backend has no FP8 ",
           "kernels, and tensor-parallel ranks hold bf16 slices");
    }
    // The format of every tensor that is not a projection kept in another one (kept_format).
    plain_ = format == WeightFormat::f32 || format == WeightFormat::cpu ? MatrixFormat::f32 : MatrixFormat::bf16;
    const int32_t ranks = model.info.tensor_parallel;
    if (rank < 0 || rank >= ranks) {
      fail("rank ", rank, " is outside the tensor-parallel ranks of model ", model.info.name,
           ": its tensor_parallel is ", ranks, " (ranks 0..", ranks - 1, ")");
    }
    for (const WeightSpec& spec : *model.weights) {
      for (const auto& layout : spec.layouts) {
        for (const WeightSource& s : layout) check_rank_fields(spec, s);
      }
      if (spec.per_layer) {
        for (int64_t l = spec.layer_first; l < spec.layer_last; ++l) instances_.push_back({&spec, l});
      } else {
        instances_.push_back({&spec, -1});
      }
    }
  }

  // Allocates the block (tied weights take no bytes) and records every instance's offset.
  void allocate() {
    int64_t total = 0;
    for (Instance& inst : instances_) {
      if (is_tied(inst)) continue;
      inst.offset = total;
      const int64_t bytes = is_block_format(inst.format) ? blocks_bytes(inst)
                                                          : inst.spec->numel() * (inst.format == MatrixFormat::f32 ? 4 : 2);
      total += (bytes + 255) / 256 * 256;
    }
    block_ = sink_.allocate(total);
    result_.bytes = total;
  }

  LoadedWeights load(const TensorSource& source) {
    source_ = &source;
    // Resolve every layout first, so all missing / mis-shaped tensors surface before any work.
    std::vector<std::vector<LayoutPiece>> chosen(instances_.size());
    for (size_t i = 0; i < instances_.size(); ++i) {
      chosen[i] = resolve(instances_[i]);
      instances_[i].format = kept_format(instances_[i], chosen[i]);
    }
    // A tied LM head shares the embedding's matrix, which the whole vocabulary's logits then read
    // every step, and whose lookups read one row per token in any format (the embed op decodes
    // blocks too). Only where the head would keep another format than its target (a target that
    // is not a matrix, kept plain) does it take its own copy.
    for (size_t i = 0; i < instances_.size(); ++i) {
      Instance& inst = instances_[i];
      if (!chosen[i].empty() || !inst.spec->matrix || !is_tied(inst)) continue;
      for (size_t t = 0; t < instances_.size(); ++t) {
        const Instance& target = instances_[t];
        if (target.spec->name != std::string(inst.spec->tied_to) || target.layer != inst.layer ||
            target.spec->shape != inst.spec->shape) {
          continue;
        }
        inst.format = kept_format(inst, chosen[t]);
        if (inst.format != target.format) {
          chosen[i] = chosen[t];
          inst.own_copy = true;
        }
      }
    }
    check_unused();
    allocate();
    for (size_t i = 0; i < instances_.size(); ++i) {
      if (!chosen[i].empty()) fill(instances_[i], chosen[i]);
    }
    finish();
    return std::move(result_);
  }

 private:
  // A source's rank fields against the model's rank count: the manifest is generated, so any
  // inconsistency is ours, not the checkpoint's. The slice of the last rank group must lie inside
  // the whole HF tensor (then every rank's does).
  void check_rank_fields(const WeightSpec& spec, const WeightSource& s) const {
    const int32_t ranks = model_.info.tensor_parallel;
    if (!is_rank_slice(s)) return;
    const auto bad = [&](const auto&... why) {
      fail("internal: manifest of ", model_.info.name, ": source ", s.hf_name, " of ", spec.name, " ", why...);
    };
    if (ranks == 1) bad("has rank fields, but the model's tensor_parallel is 1");
    if (s.rank_group < 1) bad("has rank_group ", s.rank_group, "; expected 1 or more");
    if (s.rank_experts != 0 && (s.rank_experts != spec.experts || !names_expert(s))) {
      bad("has rank_experts ", s.rank_experts, "; expected the entry's experts (", spec.experts, ") and {E} in its name");
    }
    const int64_t kiln_cols = as_rows(spec.shape).second;
    if (s.hf_rows <= 0 || s.hf_cols <= 0) {
      if (s.rank_rows != 0 || s.rank_cols != 0 || s.cols != 0 || s.hf_rows != 0 || s.hf_cols != 0) {
        bad("takes a rank's slice (rank_rows ", s.rank_rows, ", rank_cols ", s.rank_cols, ", cols ", s.cols,
            ") without the whole HF shape (hf_rows ", s.hf_rows, ", hf_cols ", s.hf_cols, ")");
      }
      return;
    }
    const int64_t last_q = (ranks - 1) / s.rank_group;
    const int64_t row_end = s.row_begin + last_q * s.rank_rows + (s.groups - 1) * s.group_stride + s.rows;
    if (row_end > s.hf_rows) bad("reaches row ", row_end, " at rank ", ranks - 1, "; the HF tensor has ", s.hf_rows);
    if (s.cols > 0) {
      if (s.cols != kiln_cols) bad("takes ", s.cols, " columns into a tensor of shape ", shape_text(spec.shape));
      const int64_t col_end = last_q * s.rank_cols + s.cols;
      if (col_end > s.hf_cols) {
        bad("reaches column ", col_end, " at rank ", ranks - 1, "; the HF tensor has ", s.hf_cols);
      }
    } else if (s.hf_cols != kiln_cols) {
      bad("takes whole rows of ", s.hf_cols, " values into a tensor of shape ", shape_text(spec.shape));
    }
  }

  bool is_tied(const Instance& inst) const {
    if (inst.spec->tied_to[0] == '\0' || inst.own_copy) return false;
    for (const auto& layout : inst.spec->layouts) {
      bool complete = true;
      for (const LayoutPiece& p : expand_layout(*inst.spec, layout, inst.layer, rank_)) {
        complete &= source_->shape(p.hf_name).has_value();
      }
      if (complete) return false;
    }
    return true;
  }

  std::vector<LayoutPiece> resolve(const Instance& inst) {
    const WeightSpec& spec = *inst.spec;
    std::string missing;
    for (const auto& layout : spec.layouts) {
      std::vector<LayoutPiece> pieces = expand_layout(spec, layout, inst.layer, rank_);
      std::string absent;
      for (const LayoutPiece& p : pieces) {
        if (!source_->shape(p.hf_name)) absent += (absent.empty() ? "" : ", ") + p.hf_name;
      }
      if (absent.empty()) {
        check_shapes(inst, pieces);
        // The other ranks' experts belong to the model too (check_unused), though this rank reads none.
        for (int32_t r = 0; r < model_.info.tensor_parallel; ++r) {
          for (const LayoutPiece& p : expand_layout(spec, layout, inst.layer, r)) used_.insert(p.hf_name);
        }
        return pieces;
      }
      missing += (missing.empty() ? "" : "; or ") + absent;
    }
    if (spec.tied_to[0] != '\0') return {};
    fail(source_->describe(), ": missing tensor(s) ", missing, " (needed for ", inst.key(), ")");
  }

  void check_shapes(const Instance& inst, const std::vector<LayoutPiece>& pieces) const {
    const int64_t kiln_rows = as_rows(inst.spec->shape).first;
    int64_t rows = 0;
    for (const LayoutPiece& p : pieces) {
      const std::vector<int64_t> shape = *source_->shape(p.hf_name);
      const auto [src_rows, src_cols] = as_rows(shape);
      const WeightSource& s = *p.source;
      const auto [want_rows, want_cols] = whole_hf_rows(*inst.spec, s);
      if (src_cols != want_cols || src_rows != want_rows) {
        if (s.hf_rows > 0) {
          fail(source_->describe(), ": tensor ", p.hf_name, " has shape ", shape_text(shape), "; expected ", want_rows,
               " rows of ", want_cols, " values (the whole tensor, of which rank ", rank_, " of ",
               model_.info.tensor_parallel, " takes a slice for ", inst.key(), ", shape ", shape_text(inst.spec->shape),
               ")");
        }
        fail(source_->describe(), ": tensor ", p.hf_name, " has shape ", shape_text(shape), "; expected ", want_rows,
             " rows of ", want_cols, " values (for ", inst.key(), ", shape ", shape_text(inst.spec->shape), ")");
      }
      rows += s.rows * s.groups;
    }
    if (rows != kiln_rows) fail("internal: manifest of ", inst.key(), " stacks ", rows, " rows, expected ", kiln_rows);
  }

  // Every tensor in the checkpoint must be used: an unused one means a different model.
  void check_unused() const {
    std::vector<std::string> unused;
    for (const std::string& name : source_->names()) {
      if (used_.count(name) || name.ends_with("rotary_emb.inv_freq")) continue;
      if (name == "lm_head.weight" && tied_lm_head()) continue;  // some exporters write the tied copy
      unused.push_back(name);
    }
    if (unused.empty()) return;
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? ", " : "") + unused[i];
    if (unused.size() > 8) list += ", … (" + std::to_string(unused.size()) + " in all)";
    fail(source_->describe(), ": tensor(s) the model ", model_.info.name, " does not use: ", list,
         " — is this checkpoint for another model?");
  }

  bool tied_lm_head() const {
    for (const WeightSpec& spec : *model_.weights) {
      if (std::string(spec.name) == "lm_head") return spec.tied_to[0] != '\0';
    }
    return false;
  }

  // The columns of a source's rows a rank takes: [begin, begin + count) of rows of `width` values.
  struct Columns {
    int64_t begin, count, width;
  };

  // The format a tensor keeps (weight_loader.hpp): plain_ for all but the projections (gpu, cpu);
  // a projection keeps its GGUF blocks when every piece is stored in the same block type the
  // device reads; Q8_0 requantized from the file's blocks when they are other block types or
  // mixed; bf16 rows when any piece is not in blocks (F32, F16, BF16, random weights). But pieces
  // in two formats one after the other (a Q4_K_M file's q and k in Q4_K, v in Q6_K) keep both, the
  // matrix in two parts (GpuMatrix::split, CpuMatrix's alike; a piece in a block type the device
  // does not read counts as Q8_0, requantized); three runs or more are Q8_0 throughout.
  MatrixFormat kept_format(Instance& inst, const std::vector<LayoutPiece>& pieces) const {
    const WeightSpec& spec = *inst.spec;
    inst.requantized = false;
    inst.split = 0;
    inst.fp8 = fp8_values(inst, pieces);
    inst.fp8_at_load = inst.fp8 && !fp8_as_stored(pieces);
    if (inst.fp8) return format_ == WeightFormat::gpu ? MatrixFormat::fp8 : plain_;
    const bool keeps = format_ == WeightFormat::gpu || format_ == WeightFormat::cpu;
    if (!keeps || !whole_matrix(spec, pieces)) return plain_;
    if (spec.shape[1] % kQuantBlockValues != 0) return MatrixFormat::bf16;
    // Runs of pieces of one format: (format, rows).
    std::vector<std::pair<MatrixFormat, int64_t>> runs;
    for (const LayoutPiece& p : pieces) {
      if (is_rank_slice(*p.source)) return MatrixFormat::bf16;
      const std::optional<GgmlType> type = source_->block_type(p.hf_name);
      if (!type || ggml_block_size(*type) == 1 || !can_dequantize(*type)) return MatrixFormat::bf16;
      const std::optional<MatrixFormat> f = matrix_format_of(*type);
      inst.requantized |= !f;
      const MatrixFormat kept = f.value_or(MatrixFormat::q8_0);
      const int64_t rows = p.source->rows * p.source->groups;
      if (runs.empty() || runs.back().first != kept) {
        runs.emplace_back(kept, rows);
      } else {
        runs.back().second += rows;
      }
    }
    if (runs.size() == 1) return runs[0].first;
    if (runs.size() == 2) {
      inst.split = runs[0].second;
      inst.tail_format = runs[1].first;
      return runs[0].first;
    }
    inst.requantized = true;
    return MatrixFormat::q8_0;
  }

  // A matrix that may keep blocks: one 2-D matrix (not a stack of experts) read from the checkpoint.
  static bool whole_matrix(const WeightSpec& spec, const std::vector<LayoutPiece>& pieces) {
    return spec.matrix && spec.experts == 0 && spec.shape.size() == 2 && !pieces.empty();
  }

  // Whether a matrix takes FP8 values (WeightFormat's comment): on the GPU or, with Quantize::fp8,
  // the reference backend; a whole 2-D matrix (no expert stack, no rank's slice) of rows of whole
  // 32-value blocks, with Quantize::fp8 or stored in FP8.
  bool fp8_values(const Instance& inst, const std::vector<LayoutPiece>& pieces) const {
    const WeightSpec& spec = *inst.spec;
    const bool quantize = quantize_ == Quantize::fp8;
    if (format_ != WeightFormat::gpu && !(format_ == WeightFormat::f32 && quantize)) return false;
    if (!whole_matrix(spec, pieces) || spec.shape[1] % kQuantBlockValues != 0) return false;
    bool stored = false;
    for (const LayoutPiece& p : pieces) {
      if (is_rank_slice(*p.source)) return false;
      stored |= source_->fp8_blocks(p.hf_name).has_value();
    }
    return quantize || stored;
  }

  // Whether every piece is FP8 the GPU's 128 × 128 blocks take as stored: blocks 128 columns wide
  // and a multiple of 128 rows high, and the piece's rows whole blocks of the stacked matrix. (The
  // reference backend decides the same, so that it computes with the GPU's values.)
  bool fp8_as_stored(const std::vector<LayoutPiece>& pieces) const {
    for (const LayoutPiece& p : pieces) {
      const std::optional<TensorSource::Fp8Blocks> b = source_->fp8_blocks(p.hf_name);
      const WeightSource& s = *p.source;
      if (!b || b->cols != kFp8BlockCols || b->rows % kFp8BlockRows != 0 || s.row_begin % kFp8BlockRows != 0 ||
          s.rows % kFp8BlockRows != 0 || (s.groups > 1 && s.group_stride % kFp8BlockRows != 0)) {
        return false;
      }
    }
    return true;
  }

  // The device whose block layout the projections keep (gpu or cpu formats), and the bytes of a
  // projection kept in blocks in it.
  Device device() const { return format_ == WeightFormat::gpu ? Device::gpu : Device::cpu; }
  int64_t part_bytes(MatrixFormat format, int64_t rows, int64_t k) const {
    return device() == Device::gpu ? matrix_bytes(format, rows, k) : cpu_matrix_bytes(format, rows, k);
  }
  // Bytes from a matrix in two formats' start to its second part's: the first part's, 256-byte
  // aligned as every matrix is.
  int64_t tail_offset(const Instance& inst) const {
    return (part_bytes(inst.format, inst.split, inst.spec->shape[1]) + 255) / 256 * 256;
  }
  int64_t blocks_bytes(const Instance& inst) const {
    const int64_t n = inst.spec->shape[0], k = inst.spec->shape[1];
    if (inst.split > 0) return tail_offset(inst) + part_bytes(inst.tail_format, n - inst.split, k);
    return part_bytes(inst.format, n, k);
  }

  // A projection in its GGUF blocks: each HF row's stored bytes repacked for the device
  // (quant_repack.hpp), the pieces' rows stacked as fill() stacks them (rows from inst.split on into
  // the second part); a piece of another block type is dequantized and requantized to its part's
  // format (Q8_0). Rows are independent, so they go
  // over the cores (an 8B model's requantization is minutes on one); the first bad row found is
  // reported.
  void fill_quantized(const Instance& inst, const std::vector<LayoutPiece>& pieces) {
    const int64_t n = inst.spec->shape[0], k = inst.spec->shape[1];
    const bool gpu = device() == Device::gpu;
    const int64_t bytes = blocks_bytes(inst);
    staging_blocks_.assign(static_cast<size_t>(bytes), std::byte{0});
    std::vector<GgmlType> types;  // each piece's
    for (const LayoutPiece& p : pieces) types.push_back(*source_->block_type(p.hf_name));
    const std::vector<StackedRow> rows = stacked_rows(pieces);
    FirstBadRow bad;
    // The first part's rows (all of them for one format), and where the second part starts.
    const int64_t head_rows = inst.split > 0 ? inst.split : n;
    std::byte* const tail_at = staging_blocks_.data() + (inst.split > 0 ? tail_offset(inst) : 0);
    parallel_for(static_cast<int64_t>(rows.size()), 16, [&](int64_t begin, int64_t end) {
      std::vector<float> values;
      std::vector<std::byte> requantized;
      for (int64_t i = begin; i < end; ++i) {
        const StackedRow& row = rows[static_cast<size_t>(i)];
        const GgmlType type = types[static_cast<size_t>(row.piece - pieces.data())];
        const std::span<const std::byte> stored = source_->stored_row(row.piece->hf_name, row.hf_row);
        const bool tail = i >= head_rows;
        const MatrixFormat format = tail ? inst.tail_format : inst.format;
        const bool as_stored = matrix_format_of(type) == format;
        const std::string why = as_stored ? bad_scale(type, stored) : requantize(type, stored, values, requantized);
        if (!why.empty()) return bad.note(row, why);
        const std::span<const std::byte> blocks = as_stored ? stored : std::span<const std::byte>(requantized);
        // Row i of its part, in the part's layout.
        const int64_t r = tail ? i - head_rows : i;
        std::byte* const part = tail ? tail_at : staging_blocks_.data();
        if (gpu) {
          repack_row(format, blocks, tail ? n - head_rows : head_rows, k, r, part);
        } else {
          repack_cpu_row(format, blocks, k, r, part);
        }
      }
    });
    bad.fail_if_any(*source_);
    write_staged(inst, bytes);
    record_blocks(inst, bytes);
  }

  // A matrix's rows in its row order, each the HF row of the piece it comes from (as fill() stacks
  // them).
  struct StackedRow {
    const LayoutPiece* piece;
    int64_t hf_row;
  };
  static std::vector<StackedRow> stacked_rows(const std::vector<LayoutPiece>& pieces) {
    std::vector<StackedRow> rows;
    for (const LayoutPiece& p : pieces) {
      const WeightSource& s = *p.source;
      for (int64_t g = 0; g < s.groups; ++g) {
        for (int64_t r = 0; r < s.rows; ++r) rows.push_back({&p, s.row_begin + g * s.group_stride + r});
      }
    }
    return rows;
  }

  // The first bad row the threads of a fill find (the one reported when they are done).
  class FirstBadRow {
   public:
    void note(const StackedRow& row, const std::string& why) {
      const std::lock_guard<std::mutex> hold(lock_);
      if (error_.empty()) error_ = "tensor " + row.piece->hf_name + " " + why + " at row " + std::to_string(row.hf_row);
    }
    void fail_if_any(const TensorSource& source) const {
      if (!error_.empty()) fail(source.describe(), ": ", error_, "; the checkpoint is corrupt");
    }

   private:
    std::mutex lock_;
    std::string error_;
  };

  // The staged bytes of a matrix filled in staging_blocks_ to its place, and the table's entry
  // (fp8_scale: WeightTable::set's).
  void write_staged(const Instance& inst, int64_t bytes, float fp8_scale = 0.0f) {
    sink_.write(block_ + inst.offset, staging_blocks_.data(), bytes);
    result_.table.set(inst.spec->name, inst.layer, block_ + inst.offset, inst.format, fp8_scale);
    if (inst.split > 0) {
      result_.table.set_tail(inst.spec->name, inst.layer, inst.split, block_ + inst.offset + tail_offset(inst),
                             inst.tail_format);
    }
    ++result_.tensors;
  }

  // A bf16 projection the fast CPU backend reads every step, where its kernel takes them packed
  // (bf16_avx512.hpp; AMX's reads plain rows): the same values in 12 bits each (bf16_pack.hpp).
  bool packs_bf16(const Instance& inst) const {
    const WeightSpec& spec = *inst.spec;
    return format_ == WeightFormat::cpu && inst.format == MatrixFormat::bf16 && spec.matrix && spec.experts == 0 &&
           spec.shape.size() == 2 && packable_bf16(spec.shape[0], spec.shape[1]) && streamed(inst) &&
           cpu::packed_bf16_available() && !cpu::amx_bf16_available();
  }

  // The filled bf16 rows packed in their place, where that takes fewer bytes (pack_bf16: not where
  // too many blocks span more binades than 12 bits keep); fill then enters them in the table.
  void pack_bf16_rows(Instance& inst) {
    const int64_t n = inst.spec->shape[0], k = inst.spec->shape[1];
    std::byte* const rows = block_ + inst.offset;
    const int64_t bytes = pack_bf16(reinterpret_cast<const uint16_t*>(rows), n, k, staging_blocks_);
    if (bytes == 0) return;
    inst.format = MatrixFormat::bf16_packed;
    sink_.write(rows, staging_blocks_.data(), bytes);
    // The rest of the rows' allocation back to the system, past the 16 bytes the kernel's last
    // slot load reads (bf16_avx512.cpp).
    result_.bytes -= sink_.release(rows + bytes + 64, 2 * n * k - bytes - 64);
    ++result_.packed_bf16;
    result_.packed_bf16_saved_bytes += 2 * n * k - bytes;
  }

  // A matrix a decode step reads whole: a projection, or a lookup table that a tied LM head reads
  // (the head then counts as this projection).
  bool streamed(const Instance& inst) const {
    if (!inst.spec->matrix) return false;
    if (!inst.spec->lookup) return true;
    for (const Instance& other : instances_) {
      if (other.spec->tied_to == std::string(inst.spec->name) && other.layer == inst.layer && is_tied(other)) return true;
    }
    return false;
  }

  // Each block of a type kept as stored starts with its fp16 scale (Q4_1, Q5_1, Q4_K, Q5_K: then its
  // fp16 min; Q3_K's and Q6_K's d ends it, Q2_K's d and dmin): a NaN or Inf one poisons every
  // logit. Says which block, or "" when all are finite.
  static std::string bad_scale(GgmlType type, std::span<const std::byte> stored) {
    const size_t block_bytes = ggml_block_bytes(type);
    const size_t halves =  // d (and min)
        type == GgmlType::Q4_1 || type == GgmlType::Q5_1 || type == GgmlType::Q4_K || type == GgmlType::Q5_K ||
                type == GgmlType::Q2_K
            ? 2
            : 1;
    const bool at_end = type == GgmlType::Q2_K || type == GgmlType::Q3_K || type == GgmlType::Q6_K;
    const size_t first = at_end ? block_bytes - 2 * halves : 0;
    for (size_t b = 0; b * block_bytes < stored.size(); ++b) {
      for (size_t h = 0; h < halves; ++h) {
        const std::byte* at = stored.data() + b * block_bytes + first + 2 * h;
        const auto lo = static_cast<uint16_t>(at[0]), hi = static_cast<uint16_t>(at[1]);
        if (((lo | hi << 8) & 0x7C00) == 0x7C00) {
          return std::string("has a NaN or infinite ") + (h == 0 ? "scale" : "min") + " in block " + std::to_string(b);
        }
      }
    }
    return "";
  }

  // One stored row of `type` as Q8_0 blocks in `out` (`values`: scratch); "" or what is wrong.
  static std::string requantize(GgmlType type, std::span<const std::byte> stored, std::vector<float>& values,
                                std::vector<std::byte>& out) {
    const size_t k = stored.size() / ggml_block_bytes(type) * ggml_block_size(type);
    values.resize(k);
    dequantize(type, stored, values);
    for (size_t c = 0; c < k; ++c) {
      if (!std::isfinite(values[c])) return std::string("holds ") + (std::isnan(values[c]) ? "NaN" : "Inf") + " in column " + std::to_string(c);
    }
    out.resize(k / kQuantBlockValues * 34);
    quantize_q8_0(values, out);
    return "";
  }

  // A matrix of FP8 values, 128-row block by block (blocks over the cores): each block's codes and
  // scales as the checkpoint stores them (fp8_as_stored), or quantized from its values with one
  // scale for the whole matrix (fp8_tensor_scale; the prefill then multiplies per token:
  // templates/fp8_rows.hpp), the values read once and held meanwhile (staging_values_: the largest
  // matrix's fp32 values, 2.5 GB for Qwen3-8B's LM head), so that a checkpoint is read from disk
  // once; then kept in the GPU's layout, or (the reference backend) as their f32 values. Each
  // block's largest value is kept in a local until the block's end: stored at every value into the
  // shared vector (neighbouring blocks' slots share a cache line), Qwen3-8B's random weights took
  // 12.5 s to load instead of 9.3 on an H200 host (bench/RESULTS.md, eighteenth session).
  void fill_fp8(const Instance& inst, const std::vector<LayoutPiece>& pieces) {
    const int64_t n = inst.spec->shape[0], k = inst.spec->shape[1], scale_cols = fp8_scale_cols(k);
    const bool gpu = format_ == WeightFormat::gpu;
    const int64_t bytes = gpu ? matrix_bytes(MatrixFormat::fp8, n, k) : n * k * 4;
    staging_blocks_.assign(static_cast<size_t>(bytes), std::byte{0});
    const std::vector<StackedRow> rows = stacked_rows(pieces);
    FirstBadRow bad;
    const int64_t blocks = (n + kFp8BlockRows - 1) / kFp8BlockRows;
    float tensor_scale = 0.0f;
    if (inst.fp8_at_load) {
      staging_values_.resize(static_cast<size_t>(n * k));
      std::vector<float> block_amax(static_cast<size_t>(blocks), 0.0f);
      parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          float amax = 0.0f;
          for (int64_t r = t * kFp8BlockRows; r < std::min(n, (t + 1) * kFp8BlockRows); ++r) {
            const StackedRow& row = rows[static_cast<size_t>(r)];
            float* v = staging_values_.data() + r * k;
            source_->read_rows(row.piece->hf_name, row.hf_row, 1, v);
            for (int64_t c = 0; c < k; ++c) {
              if (!std::isfinite(v[c])) return bad.note(row, std::string("holds ") + (std::isnan(v[c]) ? "NaN" : "Inf") + " in column " + std::to_string(c));
              amax = std::max(amax, std::fabs(v[c]));
            }
          }
          block_amax[static_cast<size_t>(t)] = amax;
        }
      });
      bad.fail_if_any(*source_);
      tensor_scale = fp8_tensor_scale(*std::max_element(block_amax.begin(), block_amax.end()));
    }
    parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scales(static_cast<size_t>(scale_cols));
      std::vector<uint8_t> codes;
      for (int64_t t = begin; t < end; ++t) {
        const int64_t r0 = t * kFp8BlockRows, count = std::min<int64_t>(kFp8BlockRows, n - r0);
        codes.resize(static_cast<size_t>(count * k));
        if (inst.fp8_at_load) {
          quantize_fp8(std::span<const float>(staging_values_.data() + r0 * k, static_cast<size_t>(count * k)), tensor_scale,
                       codes);
          std::fill(scales.begin(), scales.end(), tensor_scale);
        } else {  // as stored: the block lies in one piece and one of its blocks of rows
          const StackedRow& first = rows[static_cast<size_t>(r0)];
          const int64_t block_rows = source_->fp8_blocks(first.piece->hf_name)->rows;
          source_->fp8_scales(first.piece->hf_name, first.hf_row / block_rows, scales);
          for (int64_t j = 0; j < scale_cols; ++j) {
            if (!std::isfinite(scales[j])) return bad.note(first, "has a NaN or infinite scale in block column " + std::to_string(j));
          }
          for (int64_t i = 0; i < count; ++i) {
            const StackedRow& row = rows[static_cast<size_t>(r0 + i)];
            const std::span<const uint8_t> stored = source_->fp8_codes(row.piece->hf_name, row.hf_row);
            for (int64_t c = 0; c < k; ++c) {
              if ((stored[c] & 0x7F) == 0x7F) return bad.note(row, "holds an E4M3 NaN in column " + std::to_string(c));
            }
            std::copy(stored.begin(), stored.end(), codes.begin() + i * k);
          }
        }
        for (int64_t i = 0; i < count; ++i) {
          const std::span<const uint8_t> row_codes(codes.data() + i * k, static_cast<size_t>(k));
          if (gpu) {
            repack_fp8_row(row_codes, n, k, r0 + i, staging_blocks_.data());
            continue;
          }
          float* out = reinterpret_cast<float*>(staging_blocks_.data()) + (r0 + i) * k;
          for (int64_t c = 0; c < k; ++c) out[c] = f8e4m3_to_f32(row_codes[c]) * scales[c / kFp8BlockCols];
        }
        if (gpu) {
          for (int64_t j = 0; j < scale_cols; ++j) set_fp8_scale(staging_blocks_.data(), n, k, r0, j, scales[j]);
        }
      }
    });
    bad.fail_if_any(*source_);
    write_staged(inst, bytes, gpu ? tensor_scale : 0.0f);
    if (!gpu) return;
    result_.fp8_at_load += inst.fp8_at_load && streamed(inst);
    record_blocks(inst, bytes);
  }

  // The counts of a matrix kept in blocks (LoadedWeights).
  void record_blocks(const Instance& inst, int64_t bytes) {
    const int64_t n = inst.spec->shape[0], k = inst.spec->shape[1];
    if (!streamed(inst)) {
      result_.lookup_blocks = inst.format;
      return;
    }
    ++result_.quantized;
    ++result_.quantized_as[static_cast<int>(inst.format)];
    result_.requantized += inst.requantized;
    result_.two_formats += inst.split > 0;
    result_.quantized_bytes += bytes;
    result_.quantized_bf16_bytes += n * k * 2;
    if (inst.format == MatrixFormat::fp8 && fp8_gemm_shape(n, k)) {
      result_.longest_fp8_row = std::max(result_.longest_fp8_row, k);
    } else {
      result_.largest_quantized_values = std::max(result_.largest_quantized_values, n * k);
    }
  }

  void fill(Instance& inst, const std::vector<LayoutPiece>& pieces) {
    if (streamed(inst)) ++result_.matrices;
    if (inst.fp8) return fill_fp8(inst, pieces);
    if (is_block_format(inst.format)) return fill_quantized(inst, pieces);
    const bool as_f32 = inst.format == MatrixFormat::f32;
    const int64_t elem = as_f32 ? 4 : 2;
    const int64_t cols = as_rows(inst.spec->shape).second;
    std::byte* dst = block_ + inst.offset;
    constexpr int64_t kChunkValues = 1 << 22;
    for (const LayoutPiece& p : pieces) {
      const WeightSource& s = *p.source;
      const int64_t q = rank_ / s.rank_group;  // this rank's slice (0 without tensor parallelism)
      const Columns columns{s.cols > 0 ? q * s.rank_cols : 0, cols, as_rows(*source_->shape(p.hf_name)).second};
      const int64_t chunk_rows = std::max<int64_t>(1, kChunkValues / columns.width);
      for (int64_t g = 0; g < s.groups; ++g) {
        const int64_t first = s.row_begin + q * s.rank_rows + g * s.group_stride;
        for (int64_t r = 0; r < s.rows; r += chunk_rows) {
          const int64_t n = std::min(chunk_rows, s.rows - r);
          write_rows(p.hf_name, first + r, n, columns, as_f32, dst);
          dst += n * cols * elem;
        }
      }
    }
    if (packs_bf16(inst)) pack_bf16_rows(inst);
    result_.table.set(inst.spec->name, inst.layer, block_ + inst.offset, inst.format);
    ++result_.tensors;
  }

  // A NaN or infinite weight makes every logit NaN, and every request end with no token: name the
  // tensor and the place instead. Checked on the values as read (bf16 bits or fp32), first with a
  // branch-free pass over the exponent bits (vectorized: loading stays memory-bound).
  void check_finite(const std::string& name, int64_t first_row, const Columns& columns, const uint16_t* bf16,
                    const float* f32, int64_t values) const {
    bool bad = false;
    if (bf16 != nullptr) {
      for (int64_t i = 0; i < values; ++i) bad |= (bf16[i] & 0x7F80) == 0x7F80;
    } else {
      const uint32_t* bits = reinterpret_cast<const uint32_t*>(f32);
      for (int64_t i = 0; i < values; ++i) bad |= (bits[i] & 0x7F800000u) == 0x7F800000u;
    }
    if (!bad) return;
    for (int64_t i = 0; i < values; ++i) {
      float v = f32 != nullptr ? f32[i] : 0.0f;
      if (bf16 != nullptr) bf16_elements_to_f32(reinterpret_cast<const std::byte*>(bf16 + i), std::span<float>(&v, 1));
      if (std::isfinite(v)) continue;
      fail(source_->describe(), ": tensor ", name, " holds ", std::isnan(v) ? "NaN" : "Inf", " at row ",
           first_row + i / columns.count, ", column ", columns.begin + i % columns.count,
           "; the checkpoint is corrupt");
    }
  }

  // Rows [first, first + rows) of a source, the given columns of each, to `dst` in one sink write,
  // as fp32 or bf16.
  void write_rows(const std::string& name, int64_t first, int64_t rows, const Columns& columns, bool as_f32,
                  std::byte* dst) {
    const int64_t values = rows * columns.count;
    const bool sliced = columns.count != columns.width;
    if (!as_f32 || sliced) {
      if (const uint16_t* raw = source_->bf16_rows(name, first)) {
        // Stored as bf16: straight from the mapping, touching only this rank's columns.
        const uint16_t* bits = raw;
        if (sliced) {
          staging_bf16_.resize(static_cast<size_t>(values));
          for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(staging_bf16_.data() + r * columns.count, raw + r * columns.width + columns.begin,
                        static_cast<size_t>(columns.count) * 2);
          }
          bits = staging_bf16_.data();
        }
        check_finite(name, first, columns, bits, nullptr, values);
        if (!as_f32) {
          sink_.write(dst, bits, values * 2);
          return;
        }
        staging_f32_.resize(static_cast<size_t>(values));
        bf16_elements_to_f32(reinterpret_cast<const std::byte*>(bits), staging_f32_);
        sink_.write(dst, staging_f32_.data(), values * 4);
        return;
      }
    }
    staging_f32_.resize(static_cast<size_t>(rows * columns.width));
    source_->read_rows(name, first, rows, staging_f32_.data());
    if (sliced) {  // keep this rank's columns, packed (moving left: never overwrites what is still to move)
      for (int64_t r = 0; r < rows; ++r) {
        std::memmove(staging_f32_.data() + r * columns.count, staging_f32_.data() + r * columns.width + columns.begin,
                     static_cast<size_t>(columns.count) * 4);
      }
    }
    const std::span<const float> f32(staging_f32_.data(), static_cast<size_t>(values));
    check_finite(name, first, columns, nullptr, f32.data(), values);
    if (as_f32) {
      sink_.write(dst, f32.data(), values * 4);
      return;
    }
    staging_bf16_.resize(static_cast<size_t>(values));
    f32_elements_to_bf16(f32, staging_bf16_);
    sink_.write(dst, staging_bf16_.data(), values * 2);
  }

  // Tied weights point at their target (loaded above).
  void finish() {
    for (const Instance& inst : instances_) {
      if (!is_tied(inst)) continue;
      result_.table.set(inst.spec->name, inst.layer, result_.table.get(inst.spec->tied_to, inst.layer),
                        result_.table.format(inst.spec->tied_to, inst.layer));
    }
  }

  const ModelDef& model_;
  WeightFormat format_;
  WeightSink& sink_;
  int32_t rank_;
  Quantize quantize_;
  MatrixFormat plain_ = MatrixFormat::f32;
  const TensorSource* source_ = nullptr;
  std::vector<Instance> instances_;
  std::set<std::string> used_;
  std::byte* block_ = nullptr;
  std::vector<float> staging_f32_;
  std::vector<uint16_t> staging_bf16_;
  std::vector<std::byte> staging_blocks_;
  std::vector<float> staging_values_;  // a matrix quantized to FP8 at load, as read (fill_fp8)
  LoadedWeights result_;
};

}  // namespace

std::string weight_formats_text(const LoadedWeights& w, const char* rest) {
  // The fast CPU backend's packed bf16 rows first: "113 bf16 projections packed in 12 bits a value; ..."
  const std::string packed =
      w.packed_bf16 > 0 ? std::to_string(w.packed_bf16) + " bf16 projections packed in 12 bits a value (lossless); " : "";
  if (w.quantized == 0 && !w.lookup_blocks) return packed + rest;
  const bool fp8 = w.quantized_as[static_cast<int>(MatrixFormat::fp8)] > 0 || w.lookup_blocks == MatrixFormat::fp8;
  std::string text = fp8 && w.quantized == w.quantized_as[static_cast<int>(MatrixFormat::fp8)] ? "blocks:" : "GGUF blocks:";
  for (MatrixFormat f : {MatrixFormat::q2_k, MatrixFormat::q3_k, MatrixFormat::q4_0, MatrixFormat::q4_1, MatrixFormat::q5_0,
                         MatrixFormat::q5_1, MatrixFormat::q4_k, MatrixFormat::q5_k, MatrixFormat::q6_k, MatrixFormat::q8_0,
                         MatrixFormat::fp8}) {
    const int64_t n = w.quantized_as[static_cast<int>(f)];
    if (n > 0) text += std::string(text.back() == ':' ? " " : ", ") + matrix_format_name(f) + " for " + std::to_string(n);
  }
  if (w.two_formats > 0) text += " (" + std::to_string(w.two_formats) + " of them with rows in a second format)";
  if (w.requantized > 0) text += " (" + std::to_string(w.requantized) + " requantized from other block types)";
  if (w.fp8_at_load > 0) text += " (" + std::to_string(w.fp8_at_load) + " quantized to FP8 at load)";
  text += std::string(w.quantized > 0 ? " of " : " none of ") + std::to_string(w.matrices) + " projections";
  if (w.lookup_blocks) text += std::string(", the embedding table ") + matrix_format_name(*w.lookup_blocks);
  return packed + text + "; the rest " + rest;
}

LoadedWeights load_weights(const ModelDef& model, const TensorSource& source, WeightFormat format, WeightSink& sink,
                           int32_t rank, Quantize quantize) {
  return Loader(model, format, sink, rank, quantize).load(source);
}

LoadedWeights random_weights(const ModelDef& model, uint64_t seed, WeightFormat format, WeightSink& sink,
                             int32_t rank, Quantize quantize) {
  Loader loader(model, format, sink, rank, quantize);  // checks the rank and the manifest before the source lists it
  return loader.load(*open_random_source(model, seed));
}

}  // namespace kiln
