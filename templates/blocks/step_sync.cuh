// Stage counters of the whole-step decode kernel (decode_step.cuh): its blocks run the step's stages
// in order and a stage's work waits only on the counter of the stage it reads, never on a grid-wide
// barrier, so a block that is done requests its next weights while the others finish.
//
// Counter words (the context's step_sync, zeroed once at start, never reset):
//   [0] epoch: launches completed;  [1] blocks that have finished this launch;  [2 + s] stage s.
// Every block adds 1 to every stage's counter in every launch (whether or not it had work there),
// so stage s of launch `epoch` is complete when its counter reaches (epoch + 1) · blocks. The last
// block to finish advances the epoch; the next launch starts after this one ends (stream order), so
// it reads the new value. Counters wrap at 2^32 and are compared modulo it.
#pragma once

#include "templates/common.cuh"

namespace kiln::detail {

constexpr int kStepSyncHeader = 2;  // epoch, blocks finished

__device__ __forceinline__ unsigned load_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;\n" : "=l"(t));
  return t;
}

// A named barrier of `threads` threads (whole warps); id 0 is __syncthreads'.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" : : "r"(id), "r"(threads) : "memory");
}

// A named barrier of a group of warps that counts the phases it has passed. bar.sync with another id
// is another barrier on the hardware, whatever the counts; compute-sanitizer's racecheck, though,
// reports races across the block's next __syncthreads between warps whose groups passed different
// numbers of named-barrier phases before it (seen with a two-group kernel; equal counts report none).
// So groups that share a block work in rounds, and each passes the same number of phases per round
// whether or not it had work (pad_to).
struct GroupBarrier {
  int id, threads, passed = 0;
  __device__ void operator()() {
    named_barrier(id, threads);
    ++passed;
  }
  // Passes the barrier until `phases` have been passed since the last call, for the next round.
  __device__ void pad_to(int phases) {
    if (passed > phases) {
      printf("kiln decode_step: %d barrier phases in a round of at most %d (barrier %d); trapping\n", passed,
             phases, id);
      asm volatile("trap;");
    }
    for (; passed < phases; ++passed) named_barrier(id, threads);
    passed = 0;
  }
};

struct StepSync {
  unsigned* words;
  unsigned target;  // (epoch + 1) · blocks: a complete stage's count in this launch
  // Null, or [stage][block] (start, end) in ns of the GPU's global timer (--profile): when the
  // block began the stage's work (its wait over) and when it had written it.
  unsigned long long* timeline;

  // Every thread of the block calls it first; reads the epoch (one thread, broadcast). Stage 0
  // starts here.
  __device__ static StepSync begin(unsigned* words, unsigned long long* timeline, unsigned* shared_word) {
    if (threadIdx.x == 0) {
      *shared_word = *reinterpret_cast<volatile unsigned*>(words);
      if (timeline != nullptr) timeline[2 * blockIdx.x] = global_timer_ns();
    }
    __syncthreads();
    return StepSync{words, (*shared_word + 1u) * gridDim.x, timeline};
  }

  // The block's work of stage s is written: counts the block in (every thread calls it).
  __device__ void done(int stage) const {
    __syncthreads();
    if (threadIdx.x == 0) {
      if (timeline != nullptr) timeline[2 * (static_cast<long long>(stage) * gridDim.x + blockIdx.x) + 1] = global_timer_ns();
      __threadfence();
      atomicAdd(words + kStepSyncHeader + stage, 1u);
    }
  }

  // Returns when every block has finished stage s (every thread calls it), and stage s + 1 starts.
  // A wait of 10 s means a block never arrived (a fault elsewhere): trap rather than hang.
  __device__ void wait(int stage) const {
    if (threadIdx.x == 0) {
      const unsigned* counter = words + kStepSyncHeader + stage;
      if (static_cast<int>(load_acquire_gpu(counter) - target) < 0) {
        const unsigned long long start = global_timer_ns();
        while (static_cast<int>(load_acquire_gpu(counter) - target) < 0) {
          if (global_timer_ns() - start > 10'000'000'000ull) {
            printf("kiln decode_step: block %d waited 10 s for stage %d; trapping\n", blockIdx.x, stage);
            asm volatile("trap;");
          }
        }
      }
      __threadfence();
      if (timeline != nullptr) {
        timeline[2 * (static_cast<long long>(stage + 1) * gridDim.x + blockIdx.x)] = global_timer_ns();
      }
    }
    __syncthreads();
  }

  // The block leaves the launch (every thread calls it last); the last one advances the epoch.
  __device__ void end() const {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      if (atomicAdd(words + 1, 1u) == gridDim.x - 1) {
        words[1] = 0;
        __threadfence();
        atomicAdd(words, 1u);
      }
    }
  }
};

}  // namespace kiln::detail
