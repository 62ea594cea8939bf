#include "runtime/parallel/cpu_collective.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>

#include "runtime/core/error.hpp"

namespace kiln {

class CpuCollectiveGroup::Rank final : public Collective {
 public:
  Rank(CpuCollectiveGroup& group, int32_t r) : group_(group), r_(r) {}
  int32_t rank() const override { return r_; }
  int32_t size() const override { return group_.size_; }
  void all_reduce(float* partial, float* out, int64_t count, bool add, void* /*stream*/) override {
    group_.all_reduce(r_, partial, out, count, add);
  }
  void all_gather_columns(const float* shard, float* out, int64_t rows, int64_t cols, void* /*stream*/) override {
    group_.all_gather_columns(r_, shard, out, rows, cols);
  }
  void abort(const std::string& why) override { group_.abort(why); }

 private:
  CpuCollectiveGroup& group_;
  const int32_t r_;
};

namespace {

const char* kind_name(int kind) { return kind == 1 ? "all_reduce" : kind == 2 ? "all_gather_columns" : "no call"; }

}  // namespace

CpuCollectiveGroup::CpuCollectiveGroup(int32_t size) : size_(size) {
  if (size < 1) fail("CpuCollectiveGroup: size ", size, ", expected at least 1 rank");
  for (int32_t r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
  arrived_rank_.assign(size, 0);
  calls_.resize(size);
}

CpuCollectiveGroup::~CpuCollectiveGroup() = default;

Collective& CpuCollectiveGroup::rank(int32_t r) {
  if (r < 0 || r >= size_) fail("CpuCollectiveGroup::rank(", r, "): the group has ranks 0..", size_ - 1);
  return *ranks_[r];
}

void CpuCollectiveGroup::abort(const std::string& why) {
  std::lock_guard lock(mu_);
  abort_locked(why);
}

void CpuCollectiveGroup::abort_locked(const std::string& why) {
  if (!aborted_) {
    aborted_ = true;
    why_ = why.empty() ? "(no reason given)" : why;
  }
  cv_.notify_all();
}

void CpuCollectiveGroup::throw_aborted_locked(int32_t r, const char* what) const {
  fail("collective ", what, " on rank ", r, " of ", size_, ": the tensor-parallel group was aborted: ", why_);
}

void CpuCollectiveGroup::advance_locked() {
  arrived_ = 0;
  std::fill(arrived_rank_.begin(), arrived_rank_.end(), 0);
  ++generation_;
  cv_.notify_all();
}

std::string CpuCollectiveGroup::mismatch_locked() const {
  const Call& c0 = calls_[0];
  bool same = true;
  for (const Call& c : calls_) {
    same = same && c.kind == c0.kind && c.count == c0.count && c.rows == c0.rows && c.cols == c0.cols && c.add == c0.add;
  }
  auto describe = [](const Call& c) {
    std::ostringstream s;
    s << kind_name(static_cast<int>(c.kind));
    if (c.kind == Kind::kAllReduce) s << "(count " << c.count << (c.add ? ", add" : ", store") << ")";
    if (c.kind == Kind::kAllGatherColumns) s << "(rows " << c.rows << ", cols " << c.cols << ")";
    return s.str();
  };
  std::ostringstream m;
  if (!same) {
    m << "collective calls differ across ranks (every rank must make the same calls in the same order):";
    for (int32_t r = 0; r < size_; ++r) m << (r ? ", " : " ") << "rank " << r << " " << describe(calls_[r]);
    return m.str();
  }
  // The same call on every rank: check its sizes and buffers once.
  const bool reduce = c0.kind == Kind::kAllReduce;
  if (reduce && c0.count < 0) m << "all_reduce: count " << c0.count << ", expected >= 0";
  if (!reduce && (c0.rows < 0 || c0.cols < 0)) {
    m << "all_gather_columns: rows " << c0.rows << ", cols " << c0.cols << ", expected >= 0";
  }
  if (!reduce && c0.rows > 0 && c0.cols > std::numeric_limits<int64_t>::max() / c0.rows / size_) {
    m << "all_gather_columns: rows " << c0.rows << " x cols " << c0.cols << " x " << size_ << " ranks overflows";
  }
  if (!m.str().empty()) return m.str();
  const bool empty = reduce ? c0.count == 0 : c0.rows * c0.cols == 0;
  for (int32_t r = 0; r < size_ && !empty; ++r) {
    if (calls_[r].in == nullptr || calls_[r].out == nullptr) {
      m << describe(c0) << ": rank " << r << " passed a null buffer";
      return m.str();
    }
  }
  return {};
}

void CpuCollectiveGroup::post(int32_t r, const Call& call) {
  const char* what = kind_name(static_cast<int>(call.kind));
  std::unique_lock lock(mu_);
  if (aborted_) throw_aborted_locked(r, what);
  if (arrived_rank_[r]) {
    abort_locked("rank " + std::to_string(r) + " made a " + what +
                 " call while its previous call was still waiting (two threads calling as one rank?)");
    throw_aborted_locked(r, what);
  }
  calls_[r] = call;
  arrived_rank_[r] = 1;
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    const std::string mismatch = mismatch_locked();
    if (!mismatch.empty()) {
      abort_locked(mismatch);
      throw_aborted_locked(r, what);
    }
    const int64_t need = call.kind == Kind::kAllReduce ? call.count : size_ * call.rows * call.cols;
    try {
      if (static_cast<int64_t>(staging_.size()) < need) staging_.resize(need);
    } catch (const std::exception& e) {
      abort_locked(std::string(what) + ": staging of " + std::to_string(need) + " floats: " + e.what());
      throw_aborted_locked(r, what);
    }
    advance_locked();
    return;
  }
  cv_.wait(lock, [&] { return aborted_ || generation_ != generation; });
  if (aborted_) throw_aborted_locked(r, what);
}

void CpuCollectiveGroup::wait_all(int32_t r, const char* what) {
  std::unique_lock lock(mu_);
  if (aborted_) throw_aborted_locked(r, what);
  arrived_rank_[r] = 1;
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    advance_locked();
    return;
  }
  cv_.wait(lock, [&] { return aborted_ || generation_ != generation; });
  if (aborted_) throw_aborted_locked(r, what);
}

void CpuCollectiveGroup::all_reduce(int32_t r, const float* partial, float* out, int64_t count, bool add) {
  post(r, {Kind::kAllReduce, partial, out, count, 0, 0, add});
  // Rank r sums its slice of [0, count) over the ranks, in rank order, into staging.
  float* sum = staging_.data();
  const int64_t per = (count + size_ - 1) / size_;
  const int64_t begin = std::min(count, r * per), end = std::min(count, begin + per);
  for (int64_t i = begin; i < end; ++i) {
    float s = calls_[0].in[i];
    for (int32_t q = 1; q < size_; ++q) s += calls_[q].in[i];
    sum[i] = s;
  }
  wait_all(r, "all_reduce");
  // Every partial has been read: now each rank writes its own out.
  if (add) {
    for (int64_t i = 0; i < count; ++i) out[i] += sum[i];
  } else if (count > 0) {
    std::memcpy(out, sum, static_cast<size_t>(count) * sizeof(float));
  }
}

void CpuCollectiveGroup::all_gather_columns(int32_t r, const float* shard, float* out, int64_t rows, int64_t cols) {
  post(r, {Kind::kAllGatherColumns, shard, out, 0, rows, cols, false});
  // Staging [size][rows][cols]: rank r copies its own shard in.
  const int64_t block = rows * cols;
  if (block > 0) std::memcpy(staging_.data() + r * block, shard, static_cast<size_t>(block) * sizeof(float));
  wait_all(r, "all_gather_columns");
  // Every shard has been read (shard may be the start of out): now each rank writes its own out.
  if (block == 0) return;
  const size_t row_bytes = static_cast<size_t>(cols) * sizeof(float);
  for (int64_t row = 0; row < rows; ++row) {
    for (int32_t q = 0; q < size_; ++q) {
      std::memcpy(out + (row * size_ + q) * cols, staging_.data() + q * block + row * cols, row_bytes);
    }
  }
}

}  // namespace kiln
