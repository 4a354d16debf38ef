// KvBlockPool: allocation, refcounts, prefix sharing, LRU eviction and collision safety.
#include "runtime/kv_pool.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "ir/error.h"

namespace prism {
namespace {

std::vector<int32_t> Range(int32_t n, int32_t first) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Computes tokens[0, n) for s from scratch (no prefix lookup) and registers its full blocks.
void Compute(KvBlockPool& pool, KvSeqBlocks* s, const std::vector<int32_t>& tokens, int64_t n) {
  ASSERT_TRUE(pool.Reserve(s, n));
  pool.Commit(s, tokens, n);
}

TEST(KvBlockPool, RejectsBadSizes) {
  EXPECT_THROW(KvBlockPool(0, 4), Error);
  EXPECT_THROW(KvBlockPool(4, 0), Error);
  KvBlockPool pool(4, 4);
  EXPECT_EQ(pool.num_blocks(), 4);
  EXPECT_EQ(pool.block_size(), 4);
  EXPECT_EQ(pool.free_blocks(), 4);
  KvSeqBlocks s;
  EXPECT_THROW(pool.Reserve(&s, -1), Error);
  ASSERT_TRUE(pool.Reserve(&s, 4));
  EXPECT_THROW(pool.Commit(&s, Range(8, 0), 8), Error);     // beyond its blocks
  EXPECT_THROW(pool.AttachPrefix(&s, Range(8, 0)), Error);  // already holds blocks
}

TEST(KvBlockPool, ReserveIsAllOrNothing) {
  KvBlockPool pool(4, 4);
  KvSeqBlocks a, b;
  ASSERT_TRUE(pool.Reserve(&a, 9));  // 3 blocks
  EXPECT_EQ(a.blocks, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_TRUE(pool.Reserve(&a, 12));  // still 3
  EXPECT_EQ(pool.used_blocks(), 3);
  EXPECT_FALSE(pool.Reserve(&b, 8));
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(pool.used_blocks(), 3);
  EXPECT_TRUE(pool.Reserve(&b, 4));
  EXPECT_EQ(pool.free_blocks(), 0);
  pool.Release(&a);
  pool.Release(&b);
  EXPECT_TRUE(a.blocks.empty());
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.cached_blocks(), 0);  // nothing committed: plainly free
}

TEST(KvBlockPool, SharesPrefixBlocksWithRefcounts) {
  KvBlockPool pool(16, 4);
  const auto ta = Range(14, 0);                        // 3 full blocks + 2 tokens
  const auto tb = Concat(Range(8, 0), Range(4, 100));  // same first 2 blocks
  KvSeqBlocks a, b;
  EXPECT_EQ(pool.AttachPrefix(&a, ta), 0);
  Compute(pool, &a, ta, 14);
  EXPECT_EQ(a.hashes.size(), 3u);
  EXPECT_EQ(pool.AttachPrefix(&b, tb), 8);
  ASSERT_EQ(b.blocks.size(), 2u);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_EQ(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(pool.refcount(a.blocks[0]), 2);
  EXPECT_EQ(pool.refcount(a.blocks[2]), 1);
  Compute(pool, &b, tb, 12);
  EXPECT_EQ(pool.used_blocks(), 5);
  EXPECT_EQ(pool.prefix_hit_tokens(), 8);
  EXPECT_EQ(pool.prefix_query_tokens(), 14 + 12);

  pool.Release(&a);
  EXPECT_EQ(pool.used_blocks(), 3);    // 2 shared + b's own
  EXPECT_EQ(pool.cached_blocks(), 1);  // a's third block; its partial fourth is free
  pool.Release(&b);
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.cached_blocks(), 4);
  EXPECT_EQ(pool.free_blocks(), 16);

  // A cached block is reused by a later match and leaves the LRU.
  KvSeqBlocks c;
  EXPECT_EQ(pool.AttachPrefix(&c, ta), 12);
  EXPECT_EQ(pool.cached_blocks(), 1);
  EXPECT_EQ(pool.used_blocks(), 3);
  pool.Release(&c);
  EXPECT_EQ(pool.used_blocks(), 0);
}

// Copy on write of a partial match: the longest registered block under the same prefix whose first
// tokens match, copied into a fresh block of the new sequence; a cached source is pinned (out of the LRU)
// until FinishCopy; no copy when the source would be the only block left to take; never the whole rest
// of the prompt (one token is left to compute).
TEST(KvBlockPool, CopiesAPartialMatchOnWrite) {
  KvBlockPool pool(4, 4);
  const auto ta = Range(8, 0);                        // two full blocks
  const auto tb = Concat(Range(6, 0), Range(3, 50));  // block 0, then 4 5 of block 1
  KvSeqBlocks a, b;
  Compute(pool, &a, ta, 8);
  KvBlockCopy copy;
  EXPECT_EQ(pool.AttachPrefix(&b, tb, &copy), 6);
  EXPECT_EQ(copy.from, a.blocks[1]);
  EXPECT_EQ(copy.rows, 2);
  ASSERT_EQ(b.blocks.size(), 2u);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_EQ(copy.to, b.blocks[1]);
  EXPECT_NE(copy.to, a.blocks[1]);
  EXPECT_EQ(pool.refcount(a.blocks[1]), 2);
  pool.FinishCopy(copy);
  EXPECT_EQ(pool.refcount(a.blocks[1]), 1);
  EXPECT_EQ(pool.prefix_hit_tokens(), 6);
  pool.Release(&b);

  // Cached source: pinned while copying, cached again after.
  pool.Release(&a);
  EXPECT_EQ(pool.cached_blocks(), 2);
  KvSeqBlocks c;
  EXPECT_EQ(pool.AttachPrefix(&c, tb, &copy), 6);
  EXPECT_EQ(copy.rows, 2);
  EXPECT_EQ(pool.cached_blocks(), 0);  // block 0 matched, block 1 pinned
  EXPECT_EQ(pool.refcount(copy.from), 1);
  pool.FinishCopy(copy);
  EXPECT_EQ(pool.cached_blocks(), 1);
  pool.Release(&c);

  // The same prompt as a's: at most 7 of its 8 tokens are covered (one left to compute).
  KvSeqBlocks d;
  EXPECT_EQ(pool.AttachPrefix(&d, ta, &copy), 7);
  EXPECT_EQ(copy.rows, 3);
  pool.FinishCopy(copy);
  pool.Release(&d);

  // No block to copy into but the source itself: no copy, only the full blocks.
  KvSeqBlocks hold;
  ASSERT_TRUE(pool.Reserve(&hold, 8));  // two of the four blocks (the free ones)
  EXPECT_EQ(pool.free_blocks(), 2);     // a's two, cached
  KvSeqBlocks e;
  EXPECT_EQ(pool.AttachPrefix(&e, tb, &copy), 4);
  EXPECT_EQ(copy.rows, 0);
  pool.Release(&e);
  pool.Release(&hold);
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST(KvBlockPool, LeavesAtLeastOneTokenToCompute) {
  KvBlockPool pool(8, 4);
  const auto t = Range(8, 0);
  KvSeqBlocks a, b, c, d;
  Compute(pool, &a, t, 8);
  EXPECT_EQ(pool.AttachPrefix(&b, t), 4);  // all 8 cached, but the step needs a token for logits
  EXPECT_EQ(pool.AttachPrefix(&c, Concat(t, {9})), 8);
  EXPECT_EQ(pool.AttachPrefix(&d, {}), 0);
  for (KvSeqBlocks* s : {&a, &b, &c, &d}) pool.Release(s);
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST(KvBlockPool, TakesFreeBlocksBeforeEvicting) {
  KvBlockPool pool(4, 2);
  KvSeqBlocks a, b;
  Compute(pool, &a, {1, 2}, 2);
  pool.Release(&a);
  EXPECT_EQ(pool.cached_blocks(), 1);
  ASSERT_TRUE(pool.Reserve(&b, 6));  // 3 never-used blocks
  EXPECT_EQ(b.blocks, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(pool.cached_blocks(), 1);
  KvSeqBlocks probe;
  EXPECT_EQ(pool.AttachPrefix(&probe, {1, 2, 3}), 2);
  pool.Release(&probe);
  pool.Release(&b);
}

TEST(KvBlockPool, EvictsLeastRecentlyReleasedFirst) {
  KvBlockPool pool(4, 2);
  std::vector<KvSeqBlocks> s(4);
  for (int i = 0; i < 4; ++i) Compute(pool, &s[i], {10 * i, 10 * i + 1}, 2);
  for (int i = 0; i < 4; ++i) pool.Release(&s[i]);  // LRU: 0, 1, 2, 3
  EXPECT_EQ(pool.cached_blocks(), 4);
  EXPECT_EQ(pool.free_blocks(), 4);
  auto hits = [&](int i) {
    KvSeqBlocks probe;
    const int64_t n = pool.AttachPrefix(&probe, {10 * i, 10 * i + 1, 99});
    pool.Release(&probe);  // back at the most recent end
    return n;
  };

  KvSeqBlocks x, y;
  ASSERT_TRUE(pool.Reserve(&x, 2));
  EXPECT_EQ(x.blocks, (std::vector<int32_t>{0}));  // sequence 0's block, evicted
  EXPECT_EQ(hits(0), 0);
  EXPECT_EQ(hits(1), 2);  // LRU now: 2, 3, 1
  ASSERT_TRUE(pool.Reserve(&y, 2));
  EXPECT_EQ(y.blocks, (std::vector<int32_t>{2}));
  EXPECT_EQ(hits(2), 0);
  EXPECT_EQ(hits(3), 2);
  EXPECT_EQ(hits(1), 2);
  EXPECT_EQ(pool.cached_blocks(), 2);
  pool.Release(&x);
  pool.Release(&y);
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.cached_blocks(), 2);  // x and y committed nothing
}

TEST(KvBlockPool, ReleasesLastBlockFirstSoPrefixesOutliveTails) {
  KvBlockPool pool(3, 2);
  KvSeqBlocks a, b, probe;
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6};
  Compute(pool, &a, t, 6);
  pool.Release(&a);
  ASSERT_TRUE(pool.Reserve(&b, 2));  // evicts the third block, not the first
  EXPECT_EQ(pool.AttachPrefix(&probe, {1, 2, 3, 4, 5, 6, 7}), 4);
  pool.Release(&probe);
  pool.Release(&b);
}

TEST(KvBlockPool, DuplicateContentKeepsTheFirstEntryAndStillChains) {
  KvBlockPool pool(16, 4);
  const auto t = Range(8, 0);
  const auto tb = Concat(t, Range(5, 50));
  KvSeqBlocks a, b;
  ASSERT_TRUE(pool.Reserve(&a, 8));
  ASSERT_TRUE(pool.Reserve(&b, 13));  // computed at the same time, before a registered
  pool.Commit(&a, t, 8);
  pool.Commit(&b, tb, 12);
  EXPECT_EQ(b.hashes, (std::vector<uint64_t>{a.hashes[0], a.hashes[1], b.hashes[2]}));
  EXPECT_EQ(b.ids[0], a.ids[0]);  // same content, same id
  // b's third block hangs off the table's (a's) first two.
  KvSeqBlocks c;
  EXPECT_EQ(pool.AttachPrefix(&c, tb), 12);
  EXPECT_EQ(c.blocks, (std::vector<int32_t>{a.blocks[0], a.blocks[1], b.blocks[2]}));
  pool.Release(&c);
  pool.Release(&b);
  EXPECT_EQ(pool.cached_blocks(), 1);  // b's two duplicates went free
  pool.Release(&a);
  EXPECT_EQ(pool.cached_blocks(), 3);
  EXPECT_EQ(pool.used_blocks(), 0);
}

uint64_t ConstantHash(uint64_t, const int32_t*, int32_t) { return 42; }

TEST(KvBlockPool, HashCollisionNeverSharesOtherTokens) {
  KvBlockPool pool(8, 2, ConstantHash);
  KvSeqBlocks a, b, c;
  Compute(pool, &a, {1, 2, 3}, 3);
  EXPECT_EQ(pool.AttachPrefix(&b, {5, 6, 7}), 0);  // same hash, other tokens
  Compute(pool, &b, {5, 6, 7}, 3);                 // stays unregistered
  pool.Release(&a);
  pool.Release(&b);
  EXPECT_EQ(pool.cached_blocks(), 1);
  EXPECT_EQ(pool.AttachPrefix(&c, {1, 2, 9}), 2);
  pool.Release(&c);
  EXPECT_EQ(pool.used_blocks(), 0);
}

// Hashes only the block's second token: blocks collide whenever those agree, whatever their parents.
uint64_t SecondTokenHash(uint64_t, const int32_t* t, int32_t) { return static_cast<uint64_t>(t[1]); }

TEST(KvBlockPool, MatchChecksTheWholePrefixNotJustTheBlock) {
  KvBlockPool pool(6, 2, SecondTokenHash);
  const std::vector<int32_t> ta = {1, 5, 2, 6, 0}, tb = {1, 5, 2, 8, 0};
  KvSeqBlocks a, b, x, d, c;
  Compute(pool, &a, ta, 5);  // registers a0 (key 5), a1 (key 6)
  Compute(pool, &b, tb, 5);  // b0 duplicates a0; b1 (key 8) registered under a0's content
  pool.Release(&a);
  ASSERT_TRUE(pool.Reserve(&x, 6));  // evicts a1 and a0
  EXPECT_EQ(pool.cached_blocks(), 0);
  pool.Release(&x);
  Compute(pool, &d, {9, 5, 0}, 2);  // d0: key 5 again, other tokens
  pool.Release(&d);
  // {9, 5} matches d0 and {2, 8} matches b1's tokens and key, but b1's K/V follow {1, 5}, not {9, 5}.
  EXPECT_EQ(pool.AttachPrefix(&c, {9, 5, 2, 8, 0}), 2);
  pool.Release(&c);
  pool.Release(&b);
  EXPECT_EQ(pool.used_blocks(), 0);
}

}  // namespace
}  // namespace prism
