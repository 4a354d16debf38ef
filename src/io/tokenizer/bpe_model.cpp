// BpeModel: symbol setup (bytes / characters / byte fallback / unk) and the merge loop, with a piece cache.
#include "io/tokenizer/bpe_model.h"

#include <algorithm>
#include <climits>
#include <cstdio>

#include "io/tokenizer/unicode.h"

namespace prism {

void BpeModel::PairMap::Grow() {
  std::vector<uint64_t> old_keys = std::move(keys_);
  std::vector<Merge> old_values = std::move(values_);
  size_t cap = old_keys.empty() ? 1024 : old_keys.size() * 2;
  shift_ = 64 - __builtin_ctzll(cap);
  keys_.assign(cap, ~0ull);  // ~0 is (-1, -1), never a real pair
  values_.assign(cap, Merge{});
  size_ = 0;
  for (size_t i = 0; i < old_keys.size(); ++i) {
    if (old_keys[i] != ~0ull)
      Insert((int32_t)(old_keys[i] >> 32), (int32_t)(uint32_t)old_keys[i], old_values[i]);
  }
}

void BpeModel::PairMap::Insert(int32_t left, int32_t right, Merge m) {
  if ((size_ + 1) * 2 > keys_.size()) Grow();
  uint64_t key = Key(left, right);
  size_t mask = keys_.size() - 1;
  for (size_t i = Slot(key);; i = (i + 1) & mask) {
    if (keys_[i] == key) {  // a repeated merge overwrites, as a hash map built from the list would
      values_[i] = m;
      return;
    }
    if (keys_[i] == ~0ull) {
      keys_[i] = key;
      values_[i] = m;
      ++size_;
      return;
    }
  }
}

const BpeModel::Merge* BpeModel::PairMap::Find(int32_t left, int32_t right) const {
  if (keys_.empty()) return nullptr;
  uint64_t key = Key(left, right);
  size_t mask = keys_.size() - 1;
  for (size_t i = Slot(key);; i = (i + 1) & mask) {
    if (keys_[i] == key) return &values_[i];
    if (keys_[i] == ~0ull) return nullptr;
  }
}

BpeModel::BpeModel(const std::vector<std::string>& pieces, BpeOptions options) : options_(options) {
  byte_ids_.fill(-1);
  piece_to_id_.reserve(pieces.size());
  for (size_t id = 0; id < pieces.size(); ++id) {
    const std::string& p = pieces[id];
    if (p.empty()) continue;
    piece_to_id_[p] = (int32_t)id;  // a duplicate piece maps to its last id
    if (options_.byte_symbols) {
      if (p.size() == 1) byte_ids_[(uint8_t)p[0]] = (int32_t)id;
    } else if (p.size() == unicode::CharLength((uint8_t)p[0])) {
      char_to_id_[unicode::DecodeChar(p, 0)] = (int32_t)id;
    }
  }
  if (!options_.byte_symbols && options_.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      auto it = piece_to_id_.find(std::string_view(name));
      if (it != piece_to_id_.end()) byte_ids_[b] = it->second;
    }
  }
}

void BpeModel::AddMerge(int32_t left, int32_t right, int32_t result, int32_t rank) {
  merges_.Insert(left, right, Merge{rank, result});
}

void BpeModel::AddMergesFromScores(const std::vector<float>& scores) {
  struct Candidate {
    int32_t left, right, result;
    float score;
  };
  std::vector<Candidate> found;
  for (const auto& [text, id] : piece_to_id_) {
    if (id < 0 || (size_t)id >= scores.size()) continue;
    // Every split at a character boundary into two tokens makes a merge producing this token.
    for (size_t k = unicode::CharLength((uint8_t)text[0]); k < text.size();
         k += unicode::CharLength((uint8_t)text[k])) {
      auto l = piece_to_id_.find(std::string_view(text).substr(0, k));
      if (l == piece_to_id_.end()) continue;
      auto r = piece_to_id_.find(std::string_view(text).substr(k));
      if (r == piece_to_id_.end()) continue;
      found.push_back({l->second, r->second, id, scores[id]});
    }
  }
  // Rank = position of the score among the distinct scores, highest first, so equal scores tie (and the
  // leftmost pair wins, as in llama.cpp and llama2.c).
  std::vector<float> distinct;
  for (const auto& c : found) distinct.push_back(c.score);
  std::sort(distinct.begin(), distinct.end(), std::greater<float>());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (const auto& c : found) {
    auto rank =
        std::lower_bound(distinct.begin(), distinct.end(), c.score, std::greater<float>()) - distinct.begin();
    merges_.Insert(c.left, c.right, Merge{(int32_t)rank, c.result});
  }
}

void BpeModel::InitialSymbols(std::string_view piece, std::vector<int32_t>* syms) const {
  syms->clear();
  int32_t pending_unk = -1;  // an unk not yet emitted, kept open so fuse_unk can extend it
  auto unknown = [&] {
    if (options_.unk_id < 0) return;  // no unk token: the character is dropped
    if (pending_unk >= 0 && !options_.fuse_unk) syms->push_back(pending_unk);
    pending_unk = options_.unk_id;
  };
  auto known = [&](int32_t id) {
    if (pending_unk >= 0) syms->push_back(pending_unk);
    pending_unk = -1;
    syms->push_back(id);
  };
  if (options_.byte_symbols) {
    for (unsigned char b : piece) {
      if (byte_ids_[b] >= 0) {
        known(byte_ids_[b]);
      } else {
        unknown();
      }
    }
  } else {
    for (size_t i = 0; i < piece.size();) {
      size_t n = unicode::CharLength((uint8_t)piece[i]);
      auto it = char_to_id_.find(unicode::DecodeChar(piece, i));
      if (it != char_to_id_.end()) {
        known(it->second);
      } else {
        bool all_bytes = options_.byte_fallback;
        for (size_t k = i; k < i + n && all_bytes; ++k) all_bytes = byte_ids_[(uint8_t)piece[k]] >= 0;
        if (all_bytes) {
          // Like tokenizers, byte tokens do not flush a pending unk first.
          for (size_t k = i; k < i + n; ++k) syms->push_back(byte_ids_[(uint8_t)piece[k]]);
        } else {
          unknown();
        }
      }
      i += n;
    }
  }
  if (pending_unk >= 0) syms->push_back(pending_unk);
}

void BpeModel::MergeSmall(std::vector<int32_t>* syms) const {
  std::vector<int32_t>& s = *syms;
  thread_local std::vector<Merge> pair;  // pair[i]: merge of s[i], s[i+1]
  pair.resize(s.size());
  auto lookup = [&](size_t i) {
    const Merge* m = merges_.Find(s[i], s[i + 1]);
    pair[i] = m ? *m : Merge{INT_MAX, -1};
  };
  for (size_t i = 0; i + 1 < s.size(); ++i) lookup(i);
  while (s.size() > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < s.size(); ++i)
      if (pair[i].rank < pair[best].rank) best = i;
    if (pair[best].rank == INT_MAX) break;
    s[best] = pair[best].result;
    s.erase(s.begin() + best + 1);
    pair.erase(pair.begin() + best + 1);
    if (best > 0) lookup(best - 1);
    if (best + 1 < s.size()) lookup(best);
  }
}

void BpeModel::MergeLarge(std::vector<int32_t>* syms) const {
  struct Sym {
    int32_t id, prev, next;
  };
  struct Cand {
    int32_t rank, pos, result;
  };
  // Heap order: lowest rank first, then leftmost position.
  auto later = [](const Cand& a, const Cand& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  thread_local std::vector<Sym> sym;
  thread_local std::vector<Cand> heap;
  const int32_t n = (int32_t)syms->size();
  sym.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) sym[i] = {(*syms)[i], i - 1, i + 1 < n ? i + 1 : -1};
  auto push = [&](int32_t pos) {
    const Merge* m = merges_.Find(sym[pos].id, sym[sym[pos].next].id);
    if (!m) return;
    heap.push_back({m->rank, pos, m->result});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    Cand top = heap.back();
    heap.pop_back();
    Sym& left = sym[top.pos];
    if (left.id < 0 || left.next < 0) continue;  // stale: merged away, or now the last symbol
    Sym& right = sym[left.next];
    const Merge* m = merges_.Find(left.id, right.id);
    if (!m || m->result != top.result) continue;  // stale: a neighbour changed
    left.id = top.result;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    if (left.next >= 0) push(top.pos);
  }
  syms->clear();
  for (int32_t i = 0; i >= 0; i = sym[i].next) syms->push_back(sym[i].id);
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    auto it = piece_to_id_.find(piece);
    if (it != piece_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  bool cacheable = piece.size() <= kMaxCachedPiece;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<int32_t> syms;
  InitialSymbols(piece, &syms);
  if (syms.size() > 1) {
    if (syms.size() <= 32) {
      MergeSmall(&syms);
    } else {
      MergeLarge(&syms);
    }
  }
  out->insert(out->end(), syms.begin(), syms.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(piece), syms);
  }
}

}  // namespace prism
