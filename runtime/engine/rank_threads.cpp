#include "runtime/engine/rank_threads.hpp"

#include "runtime/core/error.hpp"

namespace kiln {

RankThreads::RankThreads(int32_t ranks, std::function<void(const std::string&)> on_error)
    : on_error_(std::move(on_error)) {
  for (int32_t r = 1; r < ranks; ++r) workers_.emplace_back([this, r] { work(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void RankThreads::failed(int32_t rank, std::exception_ptr error) {
  std::string message;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    message = "tensor-parallel rank " + std::to_string(rank) + ": " + e.what();
  } catch (...) {
    message = "tensor-parallel rank " + std::to_string(rank) + ": unknown error";
  }
  bool first = false;
  {
    std::lock_guard lock(mu_);
    if (first_error_.empty()) {
      first_error_ = message;
      first = true;
    }
  }
  if (first && on_error_) on_error_(message);
}

void RankThreads::run_all(const std::function<void(int32_t)>& task) {
  {
    std::lock_guard lock(mu_);
    task_ = &task;
    pending_ = static_cast<int32_t>(workers_.size());
    first_error_.clear();
    ++generation_;
  }
  wake_.notify_all();
  try {
    task(0);
  } catch (...) {
    failed(0, std::current_exception());
  }
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  task_ = nullptr;
  if (!first_error_.empty()) fail(first_error_);
}

void RankThreads::work(int32_t rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int32_t)>* task;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      task = task_;
    }
    try {
      (*task)(rank);
    } catch (...) {
      failed(rank, std::current_exception());
    }
    std::lock_guard lock(mu_);
    if (--pending_ == 0) done_.notify_all();
  }
}

}  // namespace kiln
