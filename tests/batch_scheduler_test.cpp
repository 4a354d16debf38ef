// BatchScheduler: chunked prefill, batched decode, budget, preemption, prefix sharing, no block leaks.
#include "runtime/batch_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "ir/error.h"

namespace prism {
namespace {

std::unique_ptr<SchedSeq> MakeSeq(int64_t id, int32_t n, int32_t first) {
  auto s = std::make_unique<SchedSeq>();
  s->id = id;
  s->tokens.resize(n);
  std::iota(s->tokens.begin(), s->tokens.end(), first);
  return s;
}

// Runs one step: its copies finished, Done, then a sampled token appended to every sequence whose piece
// had logits.
StepPlan Step(BatchScheduler& sched, KvBlockPool& pool) {
  StepPlan p = sched.Next();
  for (const KvBlockCopy& c : p.copies) pool.FinishCopy(c);
  sched.Done(p);
  for (const StepPiece& piece : p.pieces)
    if (piece.logits) piece.seq->tokens.push_back(static_cast<int32_t>(1000 + piece.seq->tokens.size()));
  return p;
}

TEST(BatchScheduler, RejectsBadInput) {
  KvBlockPool pool(4, 4);
  EXPECT_THROW(BatchScheduler(nullptr, {}), Error);
  EXPECT_THROW(BatchScheduler(&pool, {0, 1}), Error);
  BatchScheduler sched(&pool, {});
  auto empty = MakeSeq(0, 0, 0), too_long = MakeSeq(1, 17, 0), fits = MakeSeq(2, 16, 0);
  EXPECT_THROW(sched.Add(empty.get()), Error);
  EXPECT_THROW(sched.Add(too_long.get()), Error);  // can never fit: a 400, not a wedged queue
  sched.Add(fits.get());
  EXPECT_EQ(sched.waiting(), 1u);
}

TEST(BatchScheduler, ChunksALongPrefillOverSteps) {
  KvBlockPool pool(64, 4);
  BatchScheduler sched(&pool, {32, 8});
  auto s = MakeSeq(0, 100, 0);
  sched.Add(s.get());
  for (int64_t start : {0, 32, 64}) {
    StepPlan p = Step(sched, pool);
    ASSERT_EQ(p.pieces.size(), 1u);
    EXPECT_EQ(p.pieces[0].start, start);
    EXPECT_EQ(p.pieces[0].count, 32);
    EXPECT_FALSE(p.pieces[0].logits);
    EXPECT_EQ(s->computed, start + 32);
  }
  StepPlan p = Step(sched, pool);
  ASSERT_EQ(p.pieces.size(), 1u);
  EXPECT_EQ(p.pieces[0].count, 4);
  EXPECT_TRUE(p.pieces[0].logits);
  EXPECT_EQ(s->tokens.size(), 101u);
  p = Step(sched, pool);  // decode
  ASSERT_EQ(p.pieces.size(), 1u);
  EXPECT_EQ(p.pieces[0].start, 100);
  EXPECT_EQ(p.pieces[0].count, 1);
  EXPECT_TRUE(p.pieces[0].logits);
  EXPECT_EQ(pool.used_blocks(), 26);  // 101 positions computed
  sched.Remove(s.get());
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_TRUE(sched.Next().pieces.empty());
}

TEST(BatchScheduler, DecodesManySequencesInOneStep) {
  KvBlockPool pool(64, 4);
  BatchScheduler sched(&pool, {256, 32});
  std::vector<std::unique_ptr<SchedSeq>> seqs;
  for (int i = 0; i < 10; ++i) {
    seqs.push_back(MakeSeq(i, 5, 100 * i));
    sched.Add(seqs.back().get());
  }
  StepPlan p = Step(sched, pool);
  EXPECT_EQ(p.pieces.size(), 10u);
  EXPECT_EQ(p.tokens, 50);
  p = Step(sched, pool);
  ASSERT_EQ(p.pieces.size(), 10u);
  EXPECT_EQ(p.tokens, 10);
  for (size_t i = 0; i < p.pieces.size(); ++i) {
    EXPECT_EQ(p.pieces[i].seq, seqs[i].get());  // earliest id first
    EXPECT_EQ(p.pieces[i].start, 5);
    EXPECT_EQ(p.pieces[i].count, 1);
    EXPECT_TRUE(p.pieces[i].logits);
  }
  for (auto& s : seqs) sched.Remove(s.get());
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST(BatchScheduler, StopsAtTheTokenBudgetAndMaxRunning) {
  KvBlockPool pool(64, 4);
  BatchScheduler sched(&pool, {8, 32});
  auto a = MakeSeq(0, 5, 0), b = MakeSeq(1, 5, 100), c = MakeSeq(2, 5, 200);
  for (SchedSeq* s : {a.get(), b.get(), c.get()}) sched.Add(s);
  StepPlan p = Step(sched, pool);
  ASSERT_EQ(p.pieces.size(), 2u);
  EXPECT_EQ(p.pieces[0].count, 5);
  EXPECT_TRUE(p.pieces[0].logits);
  EXPECT_EQ(p.pieces[1].count, 3);  // a chunk of b's prompt
  EXPECT_FALSE(p.pieces[1].logits);
  EXPECT_EQ(sched.running(), 2u);
  EXPECT_EQ(sched.waiting(), 1u);
  p = Step(sched, pool);
  ASSERT_EQ(p.pieces.size(), 3u);
  EXPECT_EQ(p.pieces[0].count, 1);  // a decodes
  EXPECT_EQ(p.pieces[1].start, 3);  // b finishes its prompt
  EXPECT_EQ(p.pieces[1].count, 2);
  EXPECT_EQ(p.pieces[2].count, 5);  // c admitted
  EXPECT_EQ(p.tokens, 8);

  KvBlockPool pool2(64, 4);
  BatchScheduler capped(&pool2, {256, 2});
  auto d = MakeSeq(0, 5, 0), e = MakeSeq(1, 5, 100), f = MakeSeq(2, 5, 200);
  for (SchedSeq* s : {d.get(), e.get(), f.get()}) capped.Add(s);
  EXPECT_EQ(Step(capped, pool2).pieces.size(), 2u);
  EXPECT_EQ(capped.waiting(), 1u);
  capped.Remove(d.get());
  p = Step(capped, pool2);
  ASSERT_EQ(p.pieces.size(), 2u);
  EXPECT_EQ(p.pieces[1].seq, f.get());
}

TEST(BatchScheduler, PreemptsTheLatestAndResumesItWithItsPrefix) {
  KvBlockPool pool(4, 4);  // 16 slots
  BatchScheduler sched(&pool, {64, 8});
  auto a = MakeSeq(0, 6, 0), b = MakeSeq(1, 6, 100);
  sched.Add(a.get());
  sched.Add(b.get());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Step(sched, pool).pieces.size(), 2u);  // both hold 2 blocks, 9 tokens
  EXPECT_EQ(pool.free_blocks(), 0);

  StepPlan p = Step(sched, pool);  // a needs a third block
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], b.get());
  ASSERT_EQ(p.pieces.size(), 1u);
  EXPECT_EQ(p.pieces[0].seq, a.get());
  EXPECT_EQ(b->computed, 0);
  EXPECT_EQ(b->preemptions, 1);
  EXPECT_TRUE(b->kv.blocks.empty());
  EXPECT_EQ(sched.running(), 1u);
  EXPECT_EQ(sched.waiting(), 1u);

  // b waits (not enough blocks) until a finishes, then recomputes after its cached first block.
  const std::vector<int32_t> b_tokens = b->tokens;
  while (a->tokens.size() < 12) {
    p = Step(sched, pool);
    ASSERT_EQ(p.pieces.size(), 1u);
    EXPECT_EQ(p.pieces[0].seq, a.get());
  }
  sched.Remove(a.get());
  p = Step(sched, pool);
  ASSERT_EQ(p.pieces.size(), 1u);
  EXPECT_EQ(p.pieces[0].seq, b.get());
  EXPECT_EQ(p.pieces[0].start, 4);  // block 0 survived in the cache
  EXPECT_EQ(p.pieces[0].count, 5);
  EXPECT_TRUE(p.pieces[0].logits);
  EXPECT_EQ(std::vector<int32_t>(b->tokens.begin(), b->tokens.end() - 1), b_tokens);
  while (b->tokens.size() < 16) Step(sched, pool);
  sched.Remove(b.get());
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_GT(pool.prefix_hit_tokens(), 0);
}

TEST(BatchScheduler, ASequenceThatWouldPreemptItselfIsPreempted) {
  KvBlockPool pool(3, 4);
  BatchScheduler sched(&pool, {64, 8});
  auto a = MakeSeq(0, 6, 0), b = MakeSeq(1, 4, 100);
  sched.Add(a.get());
  sched.Add(b.get());
  Step(sched, pool);               // a: 2 blocks, b: 1 block; the pool is full
  StepPlan p = Step(sched, pool);  // b needs a second block; it is the latest
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], b.get());
  ASSERT_EQ(p.pieces.size(), 1u);
  EXPECT_EQ(p.pieces[0].seq, a.get());
  EXPECT_EQ(sched.waiting(), 1u);
  sched.Remove(a.get());
  p = Step(sched, pool);
  ASSERT_EQ(p.pieces.size(), 1u);
  EXPECT_EQ(p.pieces[0].seq, b.get());
  EXPECT_EQ(p.pieces[0].start, 4);  // its full first block was cached
  sched.Remove(b.get());
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST(BatchScheduler, SharesPromptPrefixesBetweenSequences) {
  KvBlockPool pool(16, 4);
  BatchScheduler sched(&pool, {64, 8});
  auto a = MakeSeq(0, 12, 0);
  auto b = MakeSeq(1, 13, 0);
  std::iota(b->tokens.begin() + 8, b->tokens.end(), 500);  // same first 2 blocks
  sched.Add(a.get());
  Step(sched, pool);
  sched.Add(b.get());
  StepPlan p = Step(sched, pool);
  ASSERT_EQ(p.pieces.size(), 2u);
  EXPECT_EQ(p.pieces[1].seq, b.get());
  EXPECT_EQ(p.pieces[1].start, 8);
  EXPECT_EQ(p.pieces[1].count, 5);
  EXPECT_EQ(b->kv.blocks[0], a->kv.blocks[0]);
  EXPECT_EQ(b->kv.blocks[1], a->kv.blocks[1]);
  EXPECT_EQ(pool.refcount(a->kv.blocks[0]), 2);
  EXPECT_EQ(pool.refcount(a->kv.blocks[2]), 1);
  EXPECT_EQ(pool.prefix_hit_tokens(), 8);
  sched.Remove(a.get());
  EXPECT_EQ(pool.refcount(b->kv.blocks[0]), 1);
  sched.Remove(b.get());
  EXPECT_EQ(pool.used_blocks(), 0);
}

// A prompt that shares two full blocks and then half of a third with an earlier one: the third starts as a
// copy of the earlier block's first two rows (copy on write), the source pinned until the copy is done.
TEST(BatchScheduler, CopiesAPartialPrefixMatchOnWrite) {
  KvBlockPool pool(16, 4);
  BatchScheduler sched(&pool, {64, 8});
  auto a = MakeSeq(0, 12, 0);
  auto b = MakeSeq(1, 13, 0);
  std::iota(b->tokens.begin() + 10, b->tokens.end(), 600);  // 0..9 shared, then its own
  sched.Add(a.get());
  Step(sched, pool);
  sched.Add(b.get());
  StepPlan p = sched.Next();
  ASSERT_EQ(p.copies.size(), 1u);
  EXPECT_EQ(p.copies[0].from, a->kv.blocks[2]);
  EXPECT_EQ(p.copies[0].to, b->kv.blocks[2]);
  EXPECT_EQ(p.copies[0].rows, 2);
  EXPECT_EQ(pool.refcount(a->kv.blocks[2]), 2);  // a's, and pinned for the copy
  EXPECT_EQ(pool.refcount(b->kv.blocks[2]), 1);  // b's own: b writes its tokens 10.. there
  ASSERT_EQ(p.pieces.size(), 2u);
  EXPECT_EQ(p.pieces[1].start, 10);
  EXPECT_EQ(p.pieces[1].count, 3);
  EXPECT_EQ(pool.prefix_hit_tokens(), 10);
  pool.FinishCopy(p.copies[0]);
  sched.Done(p);
  EXPECT_EQ(pool.refcount(a->kv.blocks[2]), 1);
  sched.Remove(a.get());
  sched.Remove(b.get());
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST(BatchScheduler, RemovesWaitingAndRunningSequences) {
  KvBlockPool pool(16, 4);
  BatchScheduler sched(&pool, {64, 1});
  auto a = MakeSeq(0, 6, 0), b = MakeSeq(1, 6, 100);
  sched.Add(a.get());
  sched.Add(b.get());
  StepPlan p = sched.Next();
  EXPECT_EQ(sched.running(), 1u);
  sched.Remove(b.get());  // waiting
  EXPECT_EQ(sched.waiting(), 0u);
  sched.Remove(a.get());  // running, between Next and Done
  EXPECT_EQ(sched.running(), 0u);
  EXPECT_EQ(pool.used_blocks(), 0);
  sched.Done(p);  // skips the removed sequence
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_TRUE(a->kv.blocks.empty());
  EXPECT_TRUE(sched.Next().pieces.empty());
}

TEST(BatchScheduler, RejectsASequenceThatGrewPastThePool) {
  KvBlockPool pool(2, 4);
  BatchScheduler sched(&pool, {64, 8});
  auto a = MakeSeq(0, 7, 0);
  sched.Add(a.get());
  Step(sched, pool);  // 8 tokens
  Step(sched, pool);  // 9 tokens: more than the pool holds
  StepPlan p = sched.Next();
  EXPECT_TRUE(p.pieces.empty());
  ASSERT_EQ(p.rejected.size(), 1u);
  EXPECT_EQ(p.rejected[0], a.get());
  EXPECT_EQ(sched.running() + sched.waiting(), 0u);
  EXPECT_EQ(pool.used_blocks(), 0);
}

// Weak hash for the randomized test: frequent collisions must never share wrong K/V.
uint64_t WeakHash(uint64_t parent, const int32_t* t, int32_t n) {
  uint64_t h = parent % 5;
  for (int32_t i = 0; i < n; ++i) h += static_cast<uint64_t>(t[i]);
  return h % 7;
}

// Many sequences with random lengths and shared prefixes, random cancellations, a small pool. Each
// block slot holds a stand-in for its K/V (the identity of the prefix it was computed for), checked
// against every running sequence's tokens at every step.
struct RunStats {
  int64_t preemptions = 0, prefix_hits = 0, copied_rows = 0;
};

void RandomRun(uint64_t seed, KvHashFn hash, RunStats* stats) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int32_t block_size = static_cast<int32_t>(uniform(1, 8));
  const int32_t num_blocks = static_cast<int32_t>(uniform(8, 40));
  KvBlockPool pool(num_blocks, block_size, hash);
  const SchedulerOptions opt{uniform(1, 64), static_cast<int32_t>(uniform(1, 8))};
  BatchScheduler sched(&pool, opt);
  const int64_t capacity = int64_t{num_blocks} * block_size;

  std::vector<std::vector<int32_t>> prefixes(3);
  for (auto& p : prefixes) {
    p.resize(uniform(0, 3 * block_size));
    for (auto& t : p) t = static_cast<int32_t>(uniform(0, 3));
  }
  struct Req {
    std::unique_ptr<SchedSeq> seq;
    size_t max_len = 0;
    bool live = false, finished = false;
  };
  std::vector<Req> reqs(60);
  for (size_t i = 0; i < reqs.size(); ++i) {
    Req& r = reqs[i];
    r.seq = std::make_unique<SchedSeq>();
    r.seq->id = static_cast<int64_t>(i);
    r.seq->tokens = prefixes[uniform(0, 2)];
    for (int64_t n = uniform(1, 24); n > 0; --n) r.seq->tokens.push_back(static_cast<int32_t>(uniform(0, 3)));
    r.max_len = static_cast<size_t>(std::min<int64_t>(r.seq->tokens.size() + uniform(1, 24), capacity));
    if (r.seq->tokens.size() > r.max_len) r.seq->tokens.resize(r.max_len - 1);
  }

  auto prefix_key = [](const std::vector<int32_t>& t, int64_t p) {  // identity of t[0..p]
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i <= p; ++i) h = (h ^ static_cast<uint32_t>(t[i])) * 1099511628211ull;
    return h;
  };
  std::vector<uint64_t> slots(static_cast<size_t>(capacity), 0);
  auto finish = [&](Req& r) {
    sched.Remove(r.seq.get());
    EXPECT_TRUE(r.seq->kv.blocks.empty());
    r.live = false;
    r.finished = true;
  };

  size_t added = 0;
  int steps = 0;
  for (; steps < 20000; ++steps) {
    for (int64_t n = uniform(0, 2); n > 0 && added < reqs.size(); --n, ++added) {
      sched.Add(reqs[added].seq.get());
      reqs[added].live = true;
    }
    const size_t before = sched.running() + sched.waiting();
    StepPlan p = sched.Next();
    ASSERT_TRUE(p.rejected.empty());
    ASSERT_TRUE(!p.pieces.empty() || before == 0) << "empty plan with sequences to run";
    stats->preemptions += static_cast<int64_t>(p.preempted.size());
    for (const KvBlockCopy& c : p.copies) {  // copy on write: the stand-ins move as K/V rows would
      ASSERT_GE(pool.refcount(c.from), 1) << "copy source not pinned";
      ASSERT_EQ(pool.refcount(c.to), 1) << "copy into a shared block";
      for (int32_t r = 0; r < c.rows; ++r) slots[c.to * block_size + r] = slots[c.from * block_size + r];
      stats->copied_rows += c.rows;
      pool.FinishCopy(c);
    }
    int64_t total = 0;
    std::set<SchedSeq*> seen;
    for (const StepPiece& piece : p.pieces) {
      SchedSeq* s = piece.seq;
      ASSERT_GE(piece.count, 1);
      ASSERT_TRUE(seen.insert(s).second);
      ASSERT_EQ(piece.start, s->computed);
      ASSERT_EQ(piece.logits, piece.start + piece.count == static_cast<int64_t>(s->tokens.size()));
      ASSERT_GE(static_cast<int64_t>(s->kv.blocks.size()) * block_size, piece.start + piece.count);
      for (int64_t q = piece.start; q < piece.start + piece.count; ++q) {  // "run" the step
        const int32_t b = s->kv.blocks[q / block_size];
        ASSERT_EQ(pool.refcount(b), 1) << "writing into a shared block";
        slots[b * block_size + q % block_size] = prefix_key(s->tokens, q);
      }
      total += piece.count;
    }
    for (SchedSeq* s : p.preempted) ASSERT_EQ(seen.count(s), 0u) << "preempted and run in one step";
    ASSERT_EQ(total, p.tokens);
    ASSERT_LE(p.tokens, opt.max_step_tokens);
    ASSERT_LE(sched.running(), static_cast<size_t>(opt.max_running));
    sched.Done(p);
    for (const StepPiece& piece : p.pieces)
      if (piece.logits) piece.seq->tokens.push_back(static_cast<int32_t>(uniform(0, 3)));
    for (Req& r : reqs)
      if (r.live && (r.seq->tokens.size() >= r.max_len || uniform(0, 99) == 0)) finish(r);

    // Invariants: references match the pool's counts; every computed position holds its own K/V.
    std::map<int32_t, int32_t> refs;
    size_t live = 0;
    for (Req& r : reqs) {
      if (!r.live) continue;
      ++live;
      for (int32_t b : r.seq->kv.blocks) ++refs[b];
      for (int64_t q = 0; q < r.seq->computed; ++q)
        ASSERT_EQ(slots[r.seq->kv.blocks[q / block_size] * block_size + q % block_size],
                  prefix_key(r.seq->tokens, q))
            << "sequence " << r.seq->id << " position " << q;
    }
    ASSERT_EQ(static_cast<int32_t>(refs.size()), pool.used_blocks());
    for (auto [b, n] : refs) ASSERT_EQ(pool.refcount(b), n);
    ASSERT_LE(pool.used_blocks() + pool.cached_blocks(), num_blocks);
    ASSERT_EQ(sched.running() + sched.waiting(), live);
    if (added == reqs.size() && live == 0) break;
  }
  ASSERT_LT(steps, 20000) << "did not finish";
  for (const Req& r : reqs) EXPECT_TRUE(r.finished);
  EXPECT_EQ(pool.used_blocks(), 0);
  stats->prefix_hits += pool.prefix_hit_tokens();
}

// 41 random runs from `first_seed`; they must exercise preemption and prefix sharing.
void RandomRuns(uint64_t first_seed, KvHashFn hash) {
  RunStats stats;
  for (uint64_t seed = first_seed; seed <= first_seed + 40; ++seed) {
    SCOPED_TRACE(seed);
    RandomRun(seed, hash, &stats);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.prefix_hits, 0);
  EXPECT_GT(stats.copied_rows, 0);
  std::printf("%lld preemptions, %lld prefix-hit tokens, %lld rows copied on write\n",
              static_cast<long long>(stats.preemptions), static_cast<long long>(stats.prefix_hits),
              static_cast<long long>(stats.copied_rows));
}

TEST(BatchScheduler, RandomizedRunsLeakNothing) { RandomRuns(1, nullptr); }
TEST(BatchScheduler, RandomizedRunsWithCollidingHashes) { RandomRuns(100, WeakHash); }

}  // namespace
}  // namespace prism
