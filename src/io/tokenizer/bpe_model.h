// The BPE model: turns one pre-tokenized piece into token ids by repeatedly merging the best adjacent pair.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/tokenizer/subword_model.h"

namespace prism {

struct BpeOptions {
  bool byte_symbols = false;   // start from single bytes (byte-level BPE) instead of UTF-8 characters
  bool byte_fallback = false;  // a character missing from the vocab becomes its <0xNN> byte tokens
  bool fuse_unk = false;       // consecutive unknown characters share one unk token
  bool ignore_merges = false;  // a piece that is itself in the vocab is taken whole
  int32_t unk_id = -1;         // for unknown characters; -1 drops them (as tokenizers does without unk)
};

class BpeModel final : public SubwordModel {
 public:
  // pieces[id] is what token id stands for in the model's alphabet: raw bytes for byte-level BPE, the vocab
  // text otherwise; "" for ids BPE never produces (e.g. added tokens outside the model vocab).
  BpeModel(const std::vector<std::string>& pieces, BpeOptions options);

  // Ranked merges (tokenizer.json, merges.txt): left+right -> result, lower rank applied first.
  void AddMerge(int32_t left, int32_t right, int32_t result, int32_t rank);
  // Scored merges (SentencePiece, llama2.c, GGUF "llama"): any two tokens whose concatenation is a token
  // merge into it, the result with the higher score first; ties go to the leftmost pair.
  void AddMergesFromScores(const std::vector<float>& scores);

  // Appends the ids of one piece (model alphabet, valid UTF-8 unless byte_symbols) to *out.
  void Encode(std::string_view piece, std::vector<int32_t>* out) const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  // Open-addressing hash map from a (left, right) id pair to its merge.
  class PairMap {
   public:
    void Insert(int32_t left, int32_t right, Merge m);
    const Merge* Find(int32_t left, int32_t right) const;
    size_t size() const { return size_; }

   private:
    static uint64_t Key(int32_t l, int32_t r) { return ((uint64_t)(uint32_t)l << 32) | (uint32_t)r; }
    size_t Slot(uint64_t key) const { return (size_t)((key * 0x9E3779B97F4A7C15ull) >> shift_); }
    void Grow();
    std::vector<uint64_t> keys_;
    std::vector<Merge> values_;
    size_t size_ = 0;
    int shift_ = 64;
  };

  void InitialSymbols(std::string_view piece, std::vector<int32_t>* syms) const;
  void MergeSmall(std::vector<int32_t>* syms) const;  // O(n^2) scan, fastest for short pieces
  void MergeLarge(std::vector<int32_t>* syms) const;  // priority queue, O(n log n)

  BpeOptions options_;
  StringIdMap piece_to_id_;
  std::unordered_map<uint32_t, int32_t> char_to_id_;  // single-character pieces by code point
  std::array<int32_t, 256> byte_ids_;                 // byte symbols, or <0xNN> fallback tokens
  PairMap merges_;

  // Results for recently seen pieces; words repeat a lot in real text.
  static constexpr size_t kMaxCachedPiece = 256, kMaxCacheEntries = 1 << 16;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace prism
