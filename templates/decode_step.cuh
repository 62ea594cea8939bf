// The whole-step decode kernel of a dense decoder (Llama, SmolLM2, Qwen3): one launch runs a decode
// step of up to S.max_batch sequences, from the token ids to the logits. It replaces the per-op
// decode (embed, and per layer RMSNorm, qkv_proj, attention_prep, attention, o_proj, RMSNorm,
// gate_up_proj, silu_mul, down_proj; then the final norm and the LM head) for small batches, where
// the step's time went to the gaps between ~10 kernels per layer rather than to reading weights.
//
// Stages, in order (stage index in parentheses; each waits for the one before it):
//   embed (0)              x = embed_tokens[token ids], one block per token
//   per layer l, from 1 + 6l:
//     qkv          (+0)    every block normalizes x into shared memory, then multiplies its row
//                          tiles of qkv_proj (the norm folded in: no h buffer, no extra stage)
//     attention    (+1)    per (partition, sequence, KV head): RoPE (and Qwen3's q/k norms) of the
//                          group's q heads into shared memory, k and v of the new token into the
//                          cache (by the partition that holds it), then attention over the partition
//     merge        (+2)    the split-KV merge of sequences longer than one partition
//     o_proj       (+3)    x += attn · o_projᵀ
//     gate_up      (+4)    x normalized again; gate tile i and up tile i together, so silu(gate)·up
//                          is written straight to act (no gate_up buffer, no silu stage)
//     down_proj    (+5)    x += act · down_projᵀ
//   lm_head (1 + 6·layers) the final norm of the logit rows, then logits = h · lm_headᵀ
//
// A stage's tasks are laid out on the blocks ahead of time: projections as contiguous ranges of
// 16-row tiles per block, attention and merges round robin. Weights stream into a shared-memory
// ring by asynchronous copies; before a block waits for the stage it reads, it requests the first
// chunks of its next weights, so HBM keeps streaming across the stage boundaries
// (blocks/step_sync.cuh: counters, no grid barrier).
//
// Bits: every value is computed with the per-op kernels' float operations in their order — the same
// GEMV column split (linear.cuh's GemvShape, which depends on the shape only), the rmsnorm kernel's
// reduction tree, attention_prep's and attention_decode's device functions — so a sequence's tokens
// are identical whether its step ran here or on the per-op path (tests/golden/test_golden_gpu.cpp).
#pragma once

#include "templates/attention_decode.cuh"
#include "templates/attention_prep.cuh"
#include "templates/blocks/mma.cuh"
#include "templates/blocks/row_norm.cuh"
#include "templates/blocks/split_kv.cuh"
#include "templates/blocks/step_sync.cuh"
#include "templates/blocks/stream_rows.cuh"
#include "templates/common.cuh"
#include "templates/decode_step_io.cuh"
#include "templates/linear.cuh"
#include "templates/silu_mul.cuh"

namespace kiln {

namespace detail {

constexpr int kRingSlotBytes = 32 * 1024;  // one chunk of weights (decode_step's weight ring, below)

// Step: a type whose `value` is the model's shape::decode_step (a generated constant). Kernels take
// the type, not the constant: nvcc's host stubs cannot spell a nested class-type template argument.
template <typename Step>
struct StepPlan {
  static constexpr shape::decode_step S = Step::value;
  static constexpr int kWarps = 16;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kLayers = S.layers;
  static constexpr int kMaxBatch = S.max_batch;
  static constexpr int kHidden = S.qkv_proj.k;
  static constexpr int kHeads = S.attn.heads, kKvHeads = S.attn.kv_heads, kHeadDim = S.attn.head_dim;
  static constexpr int kGroup = kHeads / kKvHeads;
  static constexpr int kIntermediate = S.act.dim;
  static_assert(kMaxBatch >= 1 && kMaxBatch <= 8, "decode_step: one token tile (at most 8 sequences)");
  static_assert(S.o_proj.k == kHeads * kHeadDim && S.gate_up_proj.n == 2 * kIntermediate &&
                    S.down_proj.k == kIntermediate && S.lm_head.k == kHidden && S.gate_up_proj.k == kHidden,
                "decode_step: the projections must chain");

  // Stage numbers (step_sync counters).
  static constexpr int kStagesPerLayer = 6;
  static constexpr int kEmbed = 0;
  __host__ __device__ static constexpr int qkv(int l) { return 1 + kStagesPerLayer * l; }
  static constexpr int kLmHead = 1 + kStagesPerLayer * kLayers;
  static constexpr int kStages = kLmHead + 1;
  static constexpr int kSyncWords = kStepSyncHeader + kStages;

  // GEMV column splits: the per-op GEMV's, so each output element sums its terms in the same order.
  template <shape::linear L>
  static constexpr int kWK = GemvShape<L.n, L.k, L.sms, 1>::kWarpsK;

  // Attention: two (partition, sequence, KV head) tasks per block, each on half the warps.
  using Attn = DecodeShape<kHeads, kKvHeads, kHeadDim, S.attn.page_size, S.attn.partition, S.attn.max_partitions>;
  using Prep = HeadNormShape<kHeadDim, S.prep.row>;
  static constexpr int kAttnThreads = Attn::kThreads;
  static_assert(2 * kAttnThreads == kThreads, "decode_step: two attention tasks per block");
  static constexpr int kPrepGroups = kAttnThreads / Prep::kLanes;  // head vectors prepared at once
  static constexpr int kAttnBytes = round_up(Attn::kSmemBytes, 16);
  static constexpr int kQBytes = round_up(kGroup * kHeadDim * 2, 16);
  static constexpr int kStagedBytes = round_up(kPrepGroups * kHeadDim * 2, 16);
  static constexpr int kAttnHalfBytes = kAttnBytes + kQBytes + kStagedBytes;
  // Merges: four per block, 128 threads each.
  static constexpr int kMergeThreads = 128;
  static constexpr int kMergeFloats = round_up(S.attn.max_partitions + 1, 4);
  // Named-barrier phases a group passes per round (GroupBarrier::pad_to traps on more): an attention
  // task passes one after its q heads are ready, attention_decode_partition's five and one after; a
  // merged row split_kv_merge_row's one and one after.
  static constexpr int kAttnRoundBarriers = 7;
  static constexpr int kMergeRoundBarriers = 2;

  // GEMV stages: partial sums [16 warps][128], gate_up's tile sums [jobs][16 rows][8 tokens],
  // the normalized inputs [kMaxBatch][kHidden] bf16 and the norm's warp sums [kMaxBatch][32].
  static constexpr int kPartialBytes = kWarps * 128 * 4;
  static constexpr int kResultBytes = 18 * 16 * 8 * 4;  // gate_up's tile sums: GateUp::kResultJobs ≤ 18 tiles
  static constexpr int kNormedBytes = round_up(kMaxBatch * kHidden * 2, 16);
  static constexpr int kNormSumBytes = kMaxBatch * 32 * 4;
  static constexpr int kGemvBytes = kPartialBytes + kResultBytes + kNormedBytes + kNormSumBytes;

  // The stages' own memory (one at a time), then the weight ring (every stage): as many 32 KB slots
  // as fit beside it, at most 4 (128 KB in flight per SM covers HBM's latency several times).
  static constexpr int kUnionBytes =
      round_up(max_int(kGemvBytes, max_int(2 * kAttnHalfBytes, 4 * kMergeFloats * 4)), 128);
  static constexpr int kSmemLimit = 226 * 1024;  // Hopper's opt-in maximum per block (227 KB), less static memory
  static constexpr int kRingSlots = min_int(4, (kSmemLimit - kUnionBytes) / kRingSlotBytes);
  static_assert(kRingSlots >= 2,
                "decode_step: no room for a double-buffered weight ring; lower build.megakernel_max_batch");
  static constexpr int kSmemBytes = kUnionBytes + kRingSlots * kRingSlotBytes;
};

// ---- weights through shared memory ----
// A projection's weights reach the warps through a ring of shared-memory slots that asynchronous
// copies (cp.async, 16 bytes per thread per copy, no registers held) fill ahead of the math: the
// bytes in flight are the ring's, not the registers', and a stage's first chunks are requested
// before the block waits for the stage it reads, so HBM keeps streaming across the stage boundary.
// (Hopper's bulk copies were tried first: row pieces of 128 bytes to 2 KB each streamed slower,
// bench/RESULTS.md.)
//
// A block's tiles of one projection go in passes of 16 / kWK tiles (kWK warps per tile, the GEMV's
// column split, so that every warp has a dependent chain of mmas of its own); a pass goes in chunks
// of kCols columns of its tiles' 16 rows (32 KB), and warp (tile j, split wk) multiplies the column
// steps of the chunk that are ≡ wk mod kWK, in order: the GEMV's order, chunk after chunk.
template <int kK, int kWK>
struct ChunkShape {
  static constexpr int kTiles = 16 / kWK;  // tiles of a pass
  static constexpr int kCols = min_int(round_up(kK, 32), max_int(32, kRingSlotBytes / (kTiles * 32) / 32 * 32));
  static constexpr int kChunks = ceil_div(kK, kCols);  // chunks of a pass
  static constexpr int kRowBytes = kCols * 2;          // a tile row's part of a chunk, in the slot
  static constexpr int kStepsPerWarp = ceil_div(kCols / 32, kWK);
  static_assert(kK % 8 == 0, "decode_step: weight rows must be whole 16-byte vectors (async copies)");
  static_assert(kTiles * 16 * kRowBytes <= kRingSlotBytes, "decode_step: a chunk must fit a ring slot");
};

// The ring of kSlots slots. Every thread commits one copy group per chunk it requests (empty when
// the stream has no more), kSlots groups ahead of the chunk it multiplies, so that waiting for all
// but the newest kSlots - 1 groups waits for exactly that chunk. `issued` and `consumed` count
// chunks over the whole launch; every thread keeps the same counts (they follow one control flow).
template <int kSlots>
struct Ring {
  char* slots;
  unsigned issued = 0, consumed = 0;

  // The next chunk to multiply, landed and visible to the block (every thread calls it).
  __device__ const char* wait() const {
    asm volatile("cp.async.wait_group %0;\n" : : "n"(kSlots - 1) : "memory");
    __syncthreads();
    return slots + (consumed % kSlots) * kRingSlotBytes;
  }

  // Every thread is done with the chunk it waited for: its slot may be refilled.
  __device__ void release() {
    __syncthreads();
    ++consumed;
  }

  // Commits the copy group of the next request (every thread, once per request).
  __device__ static void commit() { asm volatile("cp.async.commit_group;\n" : : : "memory"); }

  // Requests chunk q of a block's stream over tiles first .. first + count - 1 of a projection.
  // The loop's bounds and divisors are constants (a few copies per thread): issuing must cost
  // little next to the 32 KB it moves.
  template <int kK, int kWK, typename TileOf>
  __device__ void issue(int first, int count, int q, TileOf&& tile_of) {
    using C = ChunkShape<kK, kWK>;
    constexpr int kVectors = C::kCols / 8;  // 16-byte copies per row piece
    constexpr int kCopies = C::kTiles * 16 * kVectors;
    const int pass = q / C::kChunks, c = q % C::kChunks;
    const int col0 = c * C::kCols;
    const int tiles = min_int(C::kTiles, count - pass * C::kTiles);
    char* dst = slots + (issued % kSlots) * kRingSlotBytes;
    // Warp 0 copies nothing: its thread 0 polls the stage counters, and a poll queued behind a
    // ring's worth of copies came 2-4 µs late (bench/RESULTS.md).
#pragma unroll 1
    for (int i = static_cast<int>(threadIdx.x) - 32; i < kCopies; i += 512 - 32) {
      if (i < 0) break;
      const int j = i / (16 * kVectors), r = (i / kVectors) % 16, v = i % kVectors;
      if (j < tiles && col0 + v * 8 < kK) {
        const bf16* w;
        int rows;
        tile_of(first + pass * C::kTiles + j, w, rows);
        if (r < rows) {
          asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n"
                       :
                       : "r"(smem_address(dst + (j * 16 + r) * C::kRowBytes + v * 16)),
                         "l"(w + static_cast<long long>(r) * kK + col0 + v * 8)
                       : "memory");
        }
      }
    }
    commit();
    ++issued;
  }
};

// A block's stream over tiles first .. first + count - 1 of one projection.
template <int kK, int kWK>
struct TileStream {
  using C = ChunkShape<kK, kWK>;
  int first = 0, count = 0;
  int issued = 0;  // chunks of this stream requested so far
  int groups = 0;  // copy groups committed before its first chunk was multiplied (begin_stream)
  __device__ int chunks() const { return ceil_div(count, C::kTiles) * C::kChunks; }
};

// Requests the stream's first `ahead` chunks (before a wait): half the ring, so that the block's
// arrival at the stage's start is not held up behind a whole ring of copies (run_stream requests
// the rest). Each request commits a copy group, empty past the stream's end.
template <int kK, int kWK, int kSlots, typename TileOf>
__device__ __forceinline__ void begin_stream(Ring<kSlots>& ring, TileStream<kK, kWK>& stream, TileOf&& tile_of,
                                             int ahead = kSlots / 2) {
  for (; stream.groups < ahead; ++stream.groups) {
    if (stream.issued < stream.chunks()) {
      ring.template issue<kK, kWK>(stream.first, stream.count, stream.issued++, tile_of);
    } else {
      Ring<kSlots>::commit();
    }
  }
}

// Multiplies the stream's tiles with the token rows x[token · kK] (shared or global memory):
// per pass, the warps' partial sums are added like the GEMV's blocks add theirs
// (sum_column_splits) and handed to store(tile, row in tile, token, value); after_pass(pass) runs
// after each pass's stores (every thread calls everything). The ring is kSlots groups ahead of the
// chunk being multiplied from here on.
template <int kK, int kWK, int kSlots, typename TileOf, typename Store, typename AfterPass>
__device__ __forceinline__ void run_stream(Ring<kSlots>& ring, TileStream<kK, kWK>& stream, const bf16* x, int tokens,
                                           float (*partial)[128], TileOf&& tile_of, Store&& store,
                                           AfterPass&& after_pass) {
  using C = ChunkShape<kK, kWK>;
  constexpr int kVec = vec_width(kK, 2), kSteps = ceil_div(kK, 32), S = C::kStepsPerWarp;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int j = warp / kWK, wk = warp % kWK;
  const bf16* xr = x + static_cast<long long>(min(g, tokens - 1)) * kK;
  const bool x_ok = g < tokens;
  // This warp's column steps of chunk c: c · kCols / 32 + wk + i · kWK, i < S (those < the chunk's end).
  auto step_of = [&](int c, int i) { return c * (C::kCols / 32) + wk + i * kWK; };
  auto step_in = [&](int c, int step) { return step < kSteps && step < (c + 1) * (C::kCols / 32); };
  // The next chunk's inputs are loaded while this one is multiplied.
  auto load_inputs = [&](int c, uint4 (&b)[S]) {
#pragma unroll
    for (int i = 0; i < S; ++i) {
      const int step = step_of(c, i);
      b[i] = load_row_chunk<kK, kVec, RowLoad::plain>(xr, step * 32 + q * 8, x_ok && step_in(c, step));
    }
  };
  begin_stream(ring, stream, tile_of, kSlots);
  const int total = stream.chunks();
  uint4 b_next[S];
  if (total > 0) load_inputs(0, b_next);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int qc = 0; qc < total; ++qc) {
    const int pass = qc / C::kChunks, c = qc % C::kChunks;
    uint4 b[S];
#pragma unroll
    for (int i = 0; i < S; ++i) b[i] = b_next[i];
    if (qc + 1 < total) load_inputs((qc + 1) % C::kChunks, b_next);
    const int job = pass * C::kTiles + j;
    int rows = 0;
    if (j < C::kTiles && job < stream.count) {
      const bf16* w;
      tile_of(stream.first + job, w, rows);
    }
    const char* slot = ring.wait();
    if (rows > 0) {
      const char* row0 = slot + (j * 16 + g) * C::kRowBytes;
      const char* row1 = row0 + 8 * C::kRowBytes;
#pragma unroll
      for (int i = 0; i < S; ++i) {
        const int step = step_of(c, i);
        if (step_in(c, step)) {
          const int at = (step * 32 + q * 8 - c * C::kCols) * 2;
          const bool in_row = step * 32 + q * 8 < kK;  // a last partial step: zeros past the row
          const uint4 a0 = g < rows && in_row ? *reinterpret_cast<const uint4*>(row0 + at) : make_uint4(0, 0, 0, 0);
          const uint4 a1 = g + 8 < rows && in_row ? *reinterpret_cast<const uint4*>(row1 + at) : make_uint4(0, 0, 0, 0);
          mma_row_chunk(acc, a0, a1, b[i]);
        }
      }
    }
    ring.release();
    if (stream.issued < total) {
      ring.template issue<kK, kWK>(stream.first, stream.count, stream.issued++, tile_of);
    } else {
      Ring<kSlots>::commit();
    }
    if (c == C::kChunks - 1) {
      sum_column_splits<C::kTiles, kWK, 512>(partial, acc, [&](int block_row, int token, float v) {
        const int jj = pass * C::kTiles + block_row / 16;
        if (jj < stream.count && token < tokens) store(stream.first + jj, block_row % 16, token, v);
      });
      after_pass(pass);
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[k] = 0.0f;
    }
  }
}

// RMSNorm of rows x[rows[r]] (or x[r] when rows is null), r < n, into shared memory as bf16, with the
// rmsnorm kernel's operations: its RmsnormShape threads are played by this block's warps (each
// takes whole virtual warps), their sums added in warp order (block_sum).
template <int kDim>
__device__ __forceinline__ void norm_rows(const float* x, const int* rows, int n, const bf16* weight, float eps,
                                          bf16* out, float* sums) {
  using Shape = RmsnormShape<kDim>;
  constexpr int VT = Shape::kThreads, V = Shape::kVec, VW = VT / 32, kSteps = ceil_div(kDim, VT * V);
  static_assert(VW <= 32, "decode_step: norm sums sized for 32 warps");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int p = warp; p < n * VW; p += 16) {
    const int r = p / VW, vw = p % VW;
    const float* row = x + static_cast<long long>(rows != nullptr ? rows[r] : r) * kDim;
    float v[kSteps][V];
    const float s = warp_sum(rmsnorm_partial_sum_sq<kDim, V, VT>(row, vw * 32 + lane, v));
    if (lane == 0) sums[r * 32 + vw] = s;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < n * (kDim / V); c += 512) {
    const int r = c / (kDim / V), i = (c % (kDim / V)) * V;
    float total = sums[r * 32];
    if constexpr (VW > 1) {
      total = 0.0f;
      for (int w = 0; w < VW; ++w) total += sums[r * 32 + w];
    }
    const float scale = rms_scale(total, kDim, eps);
    const float* row = x + static_cast<long long>(rows != nullptr ? rows[r] : r) * kDim;
    float xv[V], wv[V], y[V];
    load_f32<V>(row + i, xv);
    load_bf16<V>(weight + i, wv);
    rms_apply<V>(xv, scale, wv, y);
    store_bf16<V>(out + r * kDim + i, y);
  }
  __syncthreads();
}

// This block's contiguous share [first, first + count) of `total` items.
__device__ __forceinline__ void block_range(int total, int& first, int& count) {
  first = static_cast<int>(static_cast<long long>(blockIdx.x) * total / gridDim.x);
  count = static_cast<int>(static_cast<long long>(blockIdx.x + 1) * total / gridDim.x) - first;
}

// A plain projection out = x · Wᵀ: the block's stream (its contiguous tiles) and where a tile is.
template <shape::linear L, int kWK>
struct Projection {
  const bf16* weight;
  TileStream<L.k, kWK> stream;
  __device__ explicit Projection(const bf16* w) : weight(w) {
    block_range(ceil_div(L.n, 16), stream.first, stream.count);
  }
  __device__ void tile(int t, const bf16*& w, int& rows) const {
    w = weight + static_cast<long long>(t) * 16 * L.k;
    rows = min_int(16, L.n - t * 16);
  }
  template <int kSlots>
  __device__ void begin(Ring<kSlots>& ring) {
    begin_stream(ring, stream, [this](int t, const bf16*& w, int& rows) { tile(t, w, rows); });
  }
  // store(n, token, value) for every output of the block's tiles.
  template <int kSlots, typename Store>
  __device__ void run(Ring<kSlots>& ring, const bf16* x, int tokens, float (*partial)[128], Store&& store) {
    run_stream(
        ring, stream, x, tokens, partial, [this](int t, const bf16*& w, int& rows) { tile(t, w, rows); },
        [&](int t, int r, int token, float v) { store(t * 16 + r, token, v); }, [](int) {});
  }
};

// gate_up_proj with silu(gate) ⊙ up: pair i is gate tile i (rows 16i..) and up tile i (rows
// I + 16i..), jobs 2i and 2i + 1 of the block's stream; a pair's act values are written once both
// of its tiles are summed.
template <shape::linear L, int kIntermediate, int kWK>
struct GateUp {
  const bf16* weight;
  TileStream<L.k, kWK> stream;
  int first_pair = 0;
  __device__ explicit GateUp(const bf16* w) : weight(w) {
    int pairs;
    block_range(ceil_div(kIntermediate, 16), first_pair, pairs);
    stream.first = 0;
    stream.count = 2 * pairs;
  }
  __device__ void tile(int job, const bf16*& w, int& rows) const {
    const int pair = first_pair + job / 2;
    w = weight + (static_cast<long long>(job % 2) * kIntermediate + pair * 16) * L.k;
    rows = min_int(16, kIntermediate - pair * 16);
  }
  template <int kSlots>
  __device__ void begin(Ring<kSlots>& ring) {
    begin_stream(ring, stream, [this](int j, const bf16*& w, int& rows) { tile(j, w, rows); });
  }
  // results: [kResultJobs][16][8] floats. A pass covers kTiles jobs; a pair may straddle two passes,
  // so results keep kTiles + 2 jobs (a job's slot is reused only after its pair was written).
  static constexpr int kResultJobs = ChunkShape<L.k, kWK>::kTiles + 2;
  template <int kSlots>
  __device__ void run(Ring<kSlots>& ring, const bf16* x, int tokens, float (*partial)[128], float* results,
                      bf16* act) {
    constexpr int kTiles = ChunkShape<L.k, kWK>::kTiles;
    int written = 0;  // pairs of the block written to act
    run_stream(
        ring, stream, x, tokens, partial, [this](int j, const bf16*& w, int& rows) { tile(j, w, rows); },
        [&](int job, int r, int t, float v) { results[((job % kResultJobs) * 16 + r) * 8 + t] = v; },
        [&](int pass) {
          const int complete = min_int(stream.count, (pass + 1) * kTiles) / 2;  // pairs with both tiles summed
          for (int e = threadIdx.x; e < (complete - written) * 16 * tokens; e += blockDim.x) {
            const int p = written + e / (16 * tokens), r = (e / tokens) % 16, t = e % tokens;
            const int i = (first_pair + p) * 16 + r;
            if (i < kIntermediate) {
              // gate and up as the GEMV stores them (bf16), then silu_mul's float operations.
              auto sum = [&](int job) { return results[((job % kResultJobs) * 16 + r) * 8 + t]; };
              const float gate = __bfloat162float(__float2bfloat16_rn(sum(2 * p)));
              const float up = __bfloat162float(__float2bfloat16_rn(sum(2 * p + 1)));
              act[static_cast<long long>(t) * kIntermediate + i] = __float2bfloat16_rn(silu_mul_value(gate, up));
            }
          }
          written = complete;
          __syncthreads();
        });
  }
};

template <typename Step>
__global__ void __launch_bounds__(StepPlan<Step>::kThreads, 1)
    decode_step_kernel(const __grid_constant__ DecodeStepWeights<Step::value.layers> w,
                       const __grid_constant__ DecodeStepArgs a) {
  pdl_release_and_wait();
  using Plan = StepPlan<Step>;
  constexpr shape::decode_step S = Plan::S;
  constexpr int H = Plan::kHidden, I = Plan::kIntermediate, D = Plan::kHeadDim, G = Plan::kGroup;
  constexpr int kHeads = Plan::kHeads, kKvHeads = Plan::kKvHeads;
  constexpr int kPartition = S.attn.partition, kMaxPartitions = S.attn.max_partitions;
  constexpr int kWKQkv = Plan::template kWK<S.qkv_proj>, kWKO = Plan::template kWK<S.o_proj>;
  constexpr int kWKGateUp = Plan::template kWK<S.gate_up_proj>, kWKDown = Plan::template kWK<S.down_proj>;
  constexpr int kWKLmHead = Plan::template kWK<S.lm_head>;

  extern __shared__ float4 smem_f4[];
  char* smem = reinterpret_cast<char*>(smem_f4);
  float(*partial)[128] = reinterpret_cast<float(*)[128]>(smem);
  float* results = reinterpret_cast<float*>(smem + Plan::kPartialBytes);  // gate_up's tile sums
  bf16* normed = reinterpret_cast<bf16*>(smem + Plan::kPartialBytes + Plan::kResultBytes);
  float* norm_sums = reinterpret_cast<float*>(smem + Plan::kPartialBytes + Plan::kResultBytes + Plan::kNormedBytes);
  Ring<Plan::kRingSlots> ring{smem + Plan::kUnionBytes};

  __shared__ unsigned epoch;
  const StepSync sync = StepSync::begin(a.sync, a.timeline, &epoch);
  const int T = a.tokens;
  const int warp = threadIdx.x / 32;

  // ---- embed: x = embed_tokens[token_ids] (fp32) ----
  Projection<S.qkv_proj, kWKQkv> qkv(w.layers[0].qkv_proj);
  qkv.begin(ring);
  for (int t = blockIdx.x; t < T; t += gridDim.x) {
    const bf16* row = w.embed_tokens + static_cast<long long>(a.token_ids[t]) * H;
    for (int i = threadIdx.x; i < H; i += Plan::kThreads) {
      a.x[static_cast<long long>(t) * H + i] = __bfloat162float(row[i]);
    }
  }
  sync.done(Plan::kEmbed);

  for (int l = 0; l < Plan::kLayers; ++l) {
    const DecodeStepLayer& lw = w.layers[l];
    const int s0 = Plan::qkv(l);
    bf16* cache = a.kv_cache + static_cast<long long>(l) * a.kv_layer_elems;

    // ---- qkv = RMSNorm(x) · input_layernorm · qkv_projᵀ ----
    if (l > 0) {
      qkv = Projection<S.qkv_proj, kWKQkv>(lw.qkv_proj);
      qkv.begin(ring);
    }
    sync.wait(s0 - 1);
    norm_rows<H>(a.x, nullptr, T, lw.input_norm, S.input_norm.eps, normed, norm_sums);
    qkv.run(ring, normed, T, partial, [&](int n, int t, float v) {
      a.qkv[static_cast<long long>(t) * S.qkv_proj.n + n] = __float2bfloat16_rn(v);
    });
    sync.done(s0);

    // ---- attention: q, k = RoPE(...); cache[slot] = k, v; attn = softmax(q·kᵀ · scale) · v ----
    Projection<S.o_proj, kWKO> o_proj(lw.o_proj);
    o_proj.begin(ring);  // o_proj's first weights stream in while attention runs
    sync.wait(s0);
    {
      const int half = warp / 8, tid = threadIdx.x % Plan::kAttnThreads;
      char* base = smem + half * Plan::kAttnHalfBytes;
      float* attn_smem = reinterpret_cast<float*>(base);
      bf16* q_group = reinterpret_cast<bf16*>(base + Plan::kAttnBytes);
      bf16* staged = reinterpret_cast<bf16*>(base + Plan::kAttnBytes + Plan::kQBytes);
      GroupBarrier half_sync{1 + half, Plan::kAttnThreads};
      // A round gives each half a task (partition-major: the real ones come first); a half passes
      // kAttnRoundBarriers barrier phases per round, with a task or not (GroupBarrier says why).
      // (Only a context's real partitions: past kSplitKvSpread they grow instead of adding rounds.)
      const int tasks = split_kv_most_parts<kMaxPartitions>() * T * kKvHeads;
      // (pad_to is in the loop's increment, so it follows a `continue` too.)
      for (int first = blockIdx.x; first < tasks;
           first += 2 * gridDim.x, half_sync.pad_to(Plan::kAttnRoundBarriers)) {
        const int task = first + half * gridDim.x;
        if (task >= tasks) continue;  // uniform over the half
        const int part = task / (T * kKvHeads), seq = (task / kKvHeads) % T, kv_head = task % kKvHeads;
        const int parts = split_kv_parts<kPartition, kMaxPartitions>(a.context_len[seq]);
        if (part >= parts) continue;
        // The group's q heads (into shared memory), and k and v of the new token for the
        // partition that holds it.
        const int vectors = G + (part == parts - 1 ? 2 : 0);
        const int group = tid / Plan::Prep::kLanes, lane = tid % Plan::Prep::kLanes;
        for (int v0 = 0; v0 < vectors; v0 += Plan::kPrepGroups) {
          const int i = v0 + group;
          const int vector = i < G ? kv_head * G + i : i == G ? kHeads + kv_head : kHeads + kKvHeads + kv_head;
          prep_head_vector<kHeads, kKvHeads, D, S.prep.row, S.prep.page_size, S.prep.qk_norm, Plan::Prep::kVec,
                           Plan::Prep::kLanes>(a.qkv, q_group + (i < G ? i : 0) * D, lw.q_norm, lw.k_norm,
                                               S.prep.eps, rope_row<D>(a.rope, a.positions[seq]), a.slot_mapping,
                                               cache, seq, vector, i < vectors, lane, staged + group * D);
          __syncwarp();
        }
        half_sync();
        attention_decode_partition<kHeads, kKvHeads, D, S.attn.page_size, kPartition, kMaxPartitions>(
            q_group, cache, a.attn, a.context_len, a.block_tables, a.max_pages_per_seq, S.attn.scale * kLog2e,
            a.scratch, seq, kv_head, part, attn_smem, tid, half_sync);
        half_sync();
      }
    }
    sync.done(s0 + 1);

    // ---- merge the partitions of long contexts ----
    sync.wait(s0 + 1);
    {
      const int quarter = warp / 4, tid = threadIdx.x % Plan::kMergeThreads;
      float* factor = reinterpret_cast<float*>(smem) + quarter * Plan::kMergeFloats;
      GroupBarrier quarter_sync{3 + quarter, Plan::kMergeThreads};
      // Rounds of a row per quarter, kMergeRoundBarriers phases each, as in the attention stage.
      for (int first = blockIdx.x; first < T * kHeads;
           first += 4 * gridDim.x, quarter_sync.pad_to(Plan::kMergeRoundBarriers)) {
        const int row = first + quarter * gridDim.x;
        if (row >= T * kHeads) continue;
        const int parts = split_kv_parts<kPartition, kMaxPartitions>(a.context_len[row / kHeads]);
        if (parts <= 1) continue;
        split_kv_merge_row<D, kMaxPartitions, Plan::kMergeThreads>(a.scratch, row, parts, a.attn, factor, tid,
                                                                     quarter_sync);
        quarter_sync();
      }
    }
    sync.done(s0 + 2);

    // ---- x += attn · o_projᵀ ----
    sync.wait(s0 + 2);
    o_proj.run(ring, a.attn, T, partial, [&](int n, int t, float v) { a.x[static_cast<long long>(t) * H + n] += v; });
    sync.done(s0 + 3);

    // ---- act = silu(gate) ⊙ up, gate | up = RMSNorm(x) · post_attention_layernorm · gate_up_projᵀ ----
    using GateUpStage = GateUp<S.gate_up_proj, I, kWKGateUp>;
    static_assert(GateUpStage::kResultJobs * 16 * 8 * 4 <= Plan::kResultBytes, "decode_step: gate_up results");
    GateUpStage gate_up(lw.gate_up_proj);
    gate_up.begin(ring);
    sync.wait(s0 + 3);
    norm_rows<H>(a.x, nullptr, T, lw.post_norm, S.post_norm.eps, normed, norm_sums);
    gate_up.run(ring, normed, T, partial, results, a.act);
    sync.done(s0 + 4);

    // ---- x += act · down_projᵀ ----
    Projection<S.down_proj, kWKDown> down(lw.down_proj);
    down.begin(ring);
    sync.wait(s0 + 4);
    down.run(ring, a.act, T, partial, [&](int n, int t, float v) { a.x[static_cast<long long>(t) * H + n] += v; });
    sync.done(s0 + 5);
  }

  // ---- logits = RMSNorm(x[logit rows]) · norm · lm_headᵀ (fp32) ----
  Projection<S.lm_head, kWKLmHead> lm_head(w.lm_head);
  lm_head.begin(ring);
  sync.wait(Plan::kLmHead - 1);
  norm_rows<H>(a.x, a.logit_rows, a.num_logits, w.norm, S.norm.eps, normed, norm_sums);
  lm_head.run(ring, normed, a.num_logits, partial, [&](int n, int r, float v) {
    a.logits[static_cast<long long>(r) * S.lm_head.n + n] = v;
  });
  sync.done(Plan::kLmHead);
  sync.end();
}

}  // namespace detail

// step_sync words the kernel needs (the backend's zeroed counter buffer must hold at least these).
template <typename Step>
constexpr int decode_step_sync_words() {
  return detail::StepPlan<Step>::kSyncWords;
}

// One decode step of a.tokens ≤ S.max_batch sequences. The grid is one block per SM of the current
// device, the same in every launch (the counters count blocks), launched cooperatively so that every
// block is resident at once (the blocks wait on each other). Returns the launch's status.
template <typename Step>
cudaError_t decode_step(const DecodeStepWeights<Step::value.layers>& w, const DecodeStepArgs& a, cudaStream_t stream) {
  using Plan = detail::StepPlan<Step>;
  constexpr auto kernel = detail::decode_step_kernel<Step>;
#ifdef __CUDACC_RTC__
  (void)kernel, (void)w, (void)a, (void)stream;
  return cudaSuccess;
#else
  detail::allow_dynamic_smem_once<kernel, Plan::kSmemBytes>();
  int device = 0, sms = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return status;
  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(sms);
  config.blockDim = dim3(Plan::kThreads);
  config.dynamicSmemBytes = Plan::kSmemBytes;
  config.stream = stream;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, w, a);
#endif
}

}  // namespace kiln
