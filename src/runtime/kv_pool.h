// Paged KV cache bookkeeping: fixed-size blocks with refcounts, prefix caching of full blocks (a partial
// match copied on write), LRU eviction.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace prism {

// One sequence's block table.
struct KvSeqBlocks {
  std::vector<int32_t> blocks;   // position p lives in blocks[p / block_size], slot p % block_size
  std::vector<uint64_t> hashes;  // chain hash of each full block committed so far (<= blocks.size())
  std::vector<uint64_t> ids;     // content id of each full block (parallel to hashes): names its whole prefix
};

// A partial match copied on write: the first `rows` slots of registered block `from` hold the K/V a new
// sequence's next tokens need; they go to its own block `to` (which it then fills). `from` stays pinned
// until FinishCopy.
struct KvBlockCopy {
  int32_t from = -1, to = -1;
  int32_t rows = 0;  // 0: nothing to copy
};

// hash(parent chain hash, the block's n token ids). Replaceable for tests (forced collisions).
using KvHashFn = uint64_t (*)(uint64_t parent, const int32_t* tokens, int32_t n);
uint64_t KvChainHash(uint64_t parent, const int32_t* tokens, int32_t n);

// A pool of num_blocks blocks of block_size token slots. A block is used (refcount > 0), cached
// (refcount 0, registered in the prefix table, reusable by a prefix match or evictable) or free.
// A registered block stores its tokens and its parent's content id, so a match is exact: hash
// collisions cost a miss, never wrong KV.
class KvBlockPool {
 public:
  KvBlockPool(int32_t num_blocks, int32_t block_size, KvHashFn hash = nullptr);  // both >= 1

  int32_t num_blocks() const { return static_cast<int32_t>(meta_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t used_blocks() const { return used_; }
  int32_t cached_blocks() const { return static_cast<int32_t>(lru_.size()); }
  int32_t free_blocks() const { return num_blocks() - used_; }  // cached ones included
  int32_t refcount(int32_t block) const { return meta_.at(block).ref; }

  // At a sequence's start (s->blocks empty): shares the cached or used full blocks matching the prefix
  // of tokens, at most (tokens.size() - 1) / block_size of them. With `copy`, the next block may then
  // start as a copy of a registered block with the same prefix whose first tokens match (the longest such
  // run, leaving at least one token to compute): s gets a fresh block and *copy says what to copy into it
  // (the caller copies the K/V rows, then calls FinishCopy). Returns the tokens covered, copied ones
  // included.
  int64_t AttachPrefix(KvSeqBlocks* s, const std::vector<int32_t>& tokens, KvBlockCopy* copy = nullptr);
  // The copy is done (or abandoned): its source is no longer pinned.
  void FinishCopy(const KvBlockCopy& copy);
  // Makes s hold blocks for positions [0, length): free blocks first, then the least recently released
  // cached ones. All or nothing: false (s unchanged) when not enough blocks are free.
  bool Reserve(KvSeqBlocks* s, int64_t length);
  // After K/V for positions [0, computed) of tokens were written: registers s's newly full blocks.
  // A block whose hash is already in the table stays unregistered (the existing entry is kept).
  void Commit(KvSeqBlocks* s, const std::vector<int32_t>& tokens, int64_t computed);
  // Drops s's references (s becomes empty), last block first: a block reaching refcount 0 becomes
  // cached (most recently used end of the LRU) if registered, else free.
  void Release(KvSeqBlocks* s);

  int64_t prefix_hit_tokens() const { return hit_tokens_; }      // tokens covered by AttachPrefix
  int64_t prefix_query_tokens() const { return query_tokens_; }  // tokens offered to AttachPrefix

 private:
  struct Block {
    int32_t ref = 0;
    bool registered = false;
    uint64_t hash = 0, id = 0, parent_id = 0;  // registered blocks only
    std::vector<int32_t> tokens;               // registered blocks only
    std::list<int32_t>::iterator lru;          // valid while cached
  };
  bool Matches(const Block& b, uint64_t parent_id, const int32_t* tokens) const;
  int32_t Take();
  void Unref(int32_t block);  // refcount 0: cached if registered, else free
  // The registered block with this parent whose tokens share the longest run (<= limit) with tokens.
  int32_t LongestChild(uint64_t parent_id, const int32_t* tokens, int64_t limit, int64_t* run) const;

  int32_t block_size_;
  KvHashFn hash_;
  std::vector<Block> meta_;
  std::vector<int32_t> free_;  // free blocks (unregistered, refcount 0); taken from the back
  std::list<int32_t> lru_;     // cached blocks, least recently released first
  std::unordered_map<uint64_t, int32_t> table_;          // chain hash -> registered block
  std::unordered_multimap<uint64_t, int32_t> children_;  // parent content id -> registered blocks
  int32_t used_ = 0;
  uint64_t next_id_ = 0;  // content ids: 0 is the empty prefix, each new content gets ++next_id_
  int64_t hit_tokens_ = 0, query_tokens_ = 0;
};

}  // namespace prism
