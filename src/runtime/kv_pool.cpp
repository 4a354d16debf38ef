// Paged KV cache bookkeeping: block allocation, prefix table, LRU of cached blocks.
#include "runtime/kv_pool.h"

#include <algorithm>
#include <string>

#include "ir/error.h"

namespace prism {
namespace {

constexpr uint64_t kRootHash = 0x6a09e667f3bcc908ull;  // the chain hash of the empty prefix

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t KvChainHash(uint64_t parent, const int32_t* tokens, int32_t n) {
  uint64_t h = Mix(parent ^ static_cast<uint64_t>(n));
  for (int32_t i = 0; i < n; ++i) h = Mix(h ^ static_cast<uint32_t>(tokens[i]));
  return h;
}

KvBlockPool::KvBlockPool(int32_t num_blocks, int32_t block_size, KvHashFn hash)
    : block_size_(block_size), hash_(hash ? hash : KvChainHash) {
  if (num_blocks < 1 || block_size < 1)
    throw Error("KV pool: num_blocks and block_size must be >= 1, got " + std::to_string(num_blocks) +
                " and " + std::to_string(block_size));
  meta_.resize(num_blocks);
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 is taken first
}

bool KvBlockPool::Matches(const Block& b, uint64_t parent_id, const int32_t* tokens) const {
  return b.registered && b.parent_id == parent_id && std::equal(b.tokens.begin(), b.tokens.end(), tokens);
}

int32_t KvBlockPool::LongestChild(uint64_t parent_id, const int32_t* tokens, int64_t limit,
                                  int64_t* run) const {
  int32_t best = -1;
  *run = 0;
  auto [first, last] = children_.equal_range(parent_id);
  for (auto it = first; it != last; ++it) {
    const Block& b = meta_[it->second];
    int64_t n = 0;
    while (n < limit && b.tokens[n] == tokens[n]) ++n;
    if (n > *run || (n == *run && n > 0 && it->second < best))
      best = it->second, *run = n;  // ties: lowest id
  }
  return best;
}

int64_t KvBlockPool::AttachPrefix(KvSeqBlocks* s, const std::vector<int32_t>& tokens, KvBlockCopy* copy) {
  if (!s->blocks.empty()) throw Error("KV pool: AttachPrefix on a sequence that already holds blocks");
  const int64_t max_blocks = tokens.empty() ? 0 : (static_cast<int64_t>(tokens.size()) - 1) / block_size_;
  uint64_t parent_hash = kRootHash, parent_id = 0;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const int32_t* t = tokens.data() + i * block_size_;
    const uint64_t h = hash_(parent_hash, t, block_size_);
    auto it = table_.find(h);
    if (it == table_.end()) break;
    Block& b = meta_[it->second];
    if (!Matches(b, parent_id, t)) break;  // a collision: no sharing
    if (b.ref++ == 0) {                    // cached: leaves the LRU
      lru_.erase(b.lru);
      ++used_;
    }
    s->blocks.push_back(it->second);
    s->hashes.push_back(h);
    s->ids.push_back(b.id);
    parent_hash = h;
    parent_id = b.id;
  }
  int64_t covered = static_cast<int64_t>(s->blocks.size()) * block_size_;
  if (copy) *copy = KvBlockCopy{};
  const int64_t limit = std::min<int64_t>(block_size_, static_cast<int64_t>(tokens.size()) - 1 - covered);
  int64_t run = 0;
  const int32_t from = copy && limit > 0 ? LongestChild(parent_id, tokens.data() + covered, limit, &run) : -1;
  if (from >= 0 && run > 0 && free_.size() + lru_.size() > (meta_[from].ref == 0 ? 1u : 0u)) {
    Block& src = meta_[from];
    if (src.ref++ == 0) {  // pinned: Take below never evicts it
      lru_.erase(src.lru);
      ++used_;
    }
    s->blocks.push_back(Take());
    *copy = KvBlockCopy{from, s->blocks.back(), static_cast<int32_t>(run)};
    covered += run;
  }
  hit_tokens_ += covered;
  query_tokens_ += static_cast<int64_t>(tokens.size());
  return covered;
}

int32_t KvBlockPool::Take() {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {  // evict the least recently released cached block
    id = lru_.front();
    lru_.pop_front();
    Block& b = meta_[id];
    table_.erase(b.hash);
    auto [first, last] = children_.equal_range(b.parent_id);
    for (auto it = first; it != last; ++it)
      if (it->second == id) {
        children_.erase(it);
        break;
      }
    b.registered = false;
    b.tokens.clear();
  }
  meta_[id].ref = 1;
  ++used_;
  return id;
}

bool KvBlockPool::Reserve(KvSeqBlocks* s, int64_t length) {
  if (length < 0) throw Error("KV pool: negative length " + std::to_string(length));
  const int64_t need = (length + block_size_ - 1) / block_size_ - static_cast<int64_t>(s->blocks.size());
  if (need <= 0) return true;
  if (need > static_cast<int64_t>(free_.size() + lru_.size())) return false;
  for (int64_t i = 0; i < need; ++i) s->blocks.push_back(Take());
  return true;
}

void KvBlockPool::Commit(KvSeqBlocks* s, const std::vector<int32_t>& tokens, int64_t computed) {
  if (computed < 0 || computed > static_cast<int64_t>(tokens.size()) ||
      computed > static_cast<int64_t>(s->blocks.size()) * block_size_)
    throw Error("KV pool: Commit of " + std::to_string(computed) + " tokens beyond the sequence's " +
                std::to_string(tokens.size()) + " tokens or its blocks");
  const size_t full = static_cast<size_t>(computed / block_size_);
  for (size_t i = s->hashes.size(); i < full; ++i) {
    const int32_t* t = tokens.data() + i * block_size_;
    const uint64_t parent_hash = i ? s->hashes[i - 1] : kRootHash;
    const uint64_t parent_id = i ? s->ids[i - 1] : 0;
    const uint64_t h = hash_(parent_hash, t, block_size_);
    uint64_t id;
    auto it = table_.find(h);
    if (it == table_.end()) {
      Block& b = meta_[s->blocks[i]];
      b.registered = true;
      b.hash = h;
      b.id = id = ++next_id_;
      b.parent_id = parent_id;
      b.tokens.assign(t, t + block_size_);
      table_.emplace(h, s->blocks[i]);
      children_.emplace(parent_id, s->blocks[i]);
    } else {
      // Same content computed twice: this block stays unshared but names the same prefix. A hash
      // collision: a fresh id that no registered block's parent can match.
      const Block& other = meta_[it->second];
      id = Matches(other, parent_id, t) ? other.id : ++next_id_;
    }
    s->hashes.push_back(h);
    s->ids.push_back(id);
  }
}

void KvBlockPool::Unref(int32_t block) {
  Block& b = meta_[block];
  if (b.ref <= 0) throw Error("KV pool: release of block " + std::to_string(block) + " with no reference");
  if (--b.ref > 0) return;
  --used_;
  if (b.registered) {
    b.lru = lru_.insert(lru_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void KvBlockPool::FinishCopy(const KvBlockCopy& copy) {
  if (copy.rows > 0) Unref(copy.from);
}

void KvBlockPool::Release(KvSeqBlocks* s) {
  for (auto it = s->blocks.rbegin(); it != s->blocks.rend(); ++it) Unref(*it);
  s->blocks.clear();
  s->hashes.clear();
  s->ids.clear();
}

}  // namespace prism
