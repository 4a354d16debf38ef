// Template-tier CPU micro-kernel for quantized weights (Q8_0, Q4_0, the K-quants Q2_K to Q6_K, IQ4_NL,
// IQ4_XS) as integer dot products: the activation is quantized to 8 bits per 32-element block (as llama.cpp
// does) and multiplied with AVX512-VNNI, against weights repacked once at load so that each vector lane holds
// one block of 32 values.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpu/weight_memory.h"
#include "ir/dtype.h"

namespace prism {

// Q8_0, Q4_0, Q2_K to Q6_K, IQ4_NL or IQ4_XS weights (N x K, GGUF block layout) repacked for GemmRowsInt8.
// Blocks of 32 values (a K-quant's: an eighth of its 256-value block) are taken 16 at a time (one group;
// a row's last group zero-padded, or, holding at most 8 blocks, shared with its neighbour row: lanes 0-7 the
// even row's, 8-15 the odd one's): lane l of every 64-byte chunk holds 4 values of block l, so a VNNI
// instruction advances 16 block sums at once, followed by the 16 block scales (f16; K-quants: their scales
// and mins as bytes, then the two blocks' f16 d and dmin; Q5_K's and Q6_K's top bits in planes after the low
// nibbles, Q2_K's and Q3_K's 2-bit crumbs four to a byte, Q3_K's third bits in a plane; IQ4_NL's and IQ4_XS's
// table indices as Q4_0's nibbles, IQ4_XS's scales as signed bytes); rows are interleaved group by group in
// tiles of 4. The packed rows are exactly as many bytes as the GGUF rows when K is a multiple of 512 (Q6_K's
// too); Q4_K's take 296 bytes per 512 values against 288, Q5_K's 360 against 352, Q3_K's 228 against 220,
// IQ4_XS's 276 against 272 (Q2_K's and IQ4_NL's as GGUF's).
struct Int8PackedWeight {
  DType type = DType::Q8_0;
  int64_t n = 0, k = 0, groups = 0, tile_bytes = 0;  // a tile: 4 rows
  bool paired_tail = false;                          // the last group shared by pairs of rows
  size_t bytes = 0;                                  // all of data
  WeightMemory data{nullptr, nullptr};
};

// True when this CPU has AVX512-F/BW/VL and AVX512-VNNI, which every int8 form needs.
bool HasAvx512Vnni();

// True when this CPU has the instructions GemmRowsInt8 needs (AVX512-BW and AVX512-VNNI) and the
// weight type and reduction size suit it.
bool Int8DotSupported(DType wt, int64_t k);

Int8PackedWeight PackForInt8Dot(const void* w, DType wt, int64_t n, int64_t k);

// Y[m, n] = sum_k A[m, k] * W[n, k] for n in [n_begin, n_end), with A quantized to Q8_0 blocks on
// the way in. Each row's error is bounded by the activation rounding: |dy| <= sum_k |W[n,k]| d_k / 2,
// d_k = max|A| / 127 over the block holding k. `prefetch` is how far ahead of its loads the kernel
// prefetches the weights, in bytes, into L1; with kInt8PrefetchToL2 added, also into L2 4 times as far: 0 for
// the default (on AMD 6 KiB into L1; on Intel 512 bytes into L1 and 2 KiB into L2, two streams),
// kInt8NoPrefetch for none (the hardware prefetcher alone); with kInt8TwoStreams added, one activation row
// reads the rows in two halves at once. It changes the speed, never the sums.
void GemmRowsInt8(const float* a, int64_t m, const Int8PackedWeight& w, float* y, int64_t n_total,
                  int64_t n_begin, int64_t n_end, int64_t prefetch = 0);
constexpr int64_t kInt8NoPrefetch = 1;
constexpr int64_t kInt8PrefetchToL2 = int64_t{1} << 32;
constexpr int64_t kInt8TwoStreams = int64_t{1} << 33;
// A prefetch parameter as the search's receipts name it: the distance, "+l2" where it also fills L2,
// "+2streams" where one row reads two streams; and back (nullopt for a name it does not write).
std::string Int8PrefetchName(int64_t prefetch);
std::optional<int64_t> Int8PrefetchFromName(std::string_view name);

// The prefetch distances the search times besides the default (none where GemmRowsInt8 does not take
// weights of type wt over k values).
std::vector<int64_t> Int8PrefetchChoices(DType wt, int64_t k);

// One 32-value activation block as every int8 form quantizes it (CPUs with AVX512-VNNI only):
// q = round(x / d), d = max|x| / 127 (returned; 0 for a block of zeros); `sum`, where given, gets the
// sum of q.
float QuantizeActivationBlock(const float* x, int8_t* q, int32_t* sum = nullptr);

// Its two halves, for a scale shared by more values (the q8k panels round 256 at a time): the scale d of n
// values (a multiple of 16; NaN where one is NaN), with 127 / max|x| (0 for zeros) in *id; then one 32-value
// block rounded by it, q = round(x * id), its sum in *sum where given.
float ActivationScale(const float* x, int64_t n, float* id);
void RoundActivationBlock(const float* x, float id, int8_t* q, int32_t* sum = nullptr);

// That bound for one output: activation row a (K values) against weight row n of w (GGUF layout),
// for activations rounded per `block` values (32 here; 256 for the q8k form of gemm_blocks.h).
double Int8DotErrorBound(const float* a, const void* w, DType wt, int64_t k, int64_t n,
                         int64_t block = kQuantBlock);

}  // namespace prism
