// Continuous batching: running sequences first, then admissions; preemption by recompute.
#include "runtime/batch_scheduler.h"

#include <algorithm>
#include <string>

#include "ir/error.h"

namespace prism {

BatchScheduler::BatchScheduler(KvBlockPool* pool, SchedulerOptions o) : pool_(pool), opt_(o) {
  if (!pool_) throw Error("scheduler: no KV pool");
  if (opt_.max_step_tokens < 1 || opt_.max_running < 1)
    throw Error("scheduler: max_step_tokens and max_running must be >= 1");
}

bool BatchScheduler::FitsPool(int64_t length) const {
  const int64_t bs = pool_->block_size();
  return (length + bs - 1) / bs <= pool_->num_blocks();
}

void BatchScheduler::Add(SchedSeq* s) {
  if (s->tokens.empty()) throw Error("scheduler: sequence " + std::to_string(s->id) + " has no tokens");
  if (!FitsPool(static_cast<int64_t>(s->tokens.size())))
    throw Error("prompt of " + std::to_string(s->tokens.size()) + " tokens exceeds the KV cache's " +
                std::to_string(int64_t{pool_->num_blocks()} * pool_->block_size()) + " tokens");
  if (!s->kv.blocks.empty()) throw Error("scheduler: sequence " + std::to_string(s->id) + " holds KV blocks");
  s->computed = 0;
  s->prefix_checked = false;
  size_t pos = waiting_.size();  // after every waiting sequence with an id not larger
  while (pos > 0 && waiting_[pos - 1]->id > s->id) --pos;
  waiting_.insert(waiting_.begin() + static_cast<std::ptrdiff_t>(pos), s);
}

void BatchScheduler::Remove(SchedSeq* s) {
  if (auto it = std::find(running_.begin(), running_.end(), s); it != running_.end()) running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), s); it != waiting_.end()) waiting_.erase(it);
  pool_->Release(&s->kv);
  s->prefix_checked = false;
}

void BatchScheduler::Preempt(SchedSeq* s, StepPlan* plan) {
  running_.erase(std::find(running_.begin(), running_.end(), s));
  pool_->Release(&s->kv);
  s->computed = 0;
  s->prefix_checked = false;
  ++s->preemptions;
  waiting_.push_front(s);
  plan->preempted.push_back(s);
}

void BatchScheduler::Reject(SchedSeq* s, StepPlan* plan) {
  Remove(s);
  s->computed = 0;
  plan->rejected.push_back(s);
}

StepPlan BatchScheduler::Next() {
  StepPlan plan;
  int64_t budget = opt_.max_step_tokens;
  auto add_piece = [&](SchedSeq* s, int64_t count) {
    const int64_t n = static_cast<int64_t>(s->tokens.size());
    plan.pieces.push_back({s, s->computed, count, s->computed + count == n});
    plan.tokens += count;
    budget -= count;
  };

  // Running sequences, earliest first; preemption victims come from the back (largest id).
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    SchedSeq* s = running_[i];
    const int64_t n = static_cast<int64_t>(s->tokens.size());
    if (n <= s->computed) {  // nothing to compute until the caller appends a token
      ++i;
      continue;
    }
    if (!FitsPool(n)) {
      Reject(s, &plan);
      continue;
    }
    const int64_t count = std::min(n - s->computed, budget);
    bool self_preempted = false;
    while (!self_preempted && !pool_->Reserve(&s->kv, s->computed + count)) {
      SchedSeq* victim = running_.back();
      self_preempted = victim == s;
      Preempt(victim, &plan);
    }
    if (self_preempted) break;  // s was the last running sequence
    add_piece(s, count);
    ++i;
  }

  // Admissions, in queue order, while budget, max_running and blocks allow.
  while (plan.preempted.empty() && !waiting_.empty() && budget > 0 &&
         running_.size() < static_cast<size_t>(opt_.max_running)) {
    SchedSeq* s = waiting_.front();
    const int64_t n = static_cast<int64_t>(s->tokens.size());
    if (!FitsPool(n)) {  // grew past the pool before a preemption
      Reject(s, &plan);
      continue;
    }
    if (pool_->free_blocks() == 0) break;  // a new sequence always needs at least one block
    KvBlockCopy copy;
    if (!s->prefix_checked) {
      s->computed = pool_->AttachPrefix(&s->kv, s->tokens, &copy);
      s->prefix_checked = true;
    }
    int64_t count = std::min(n - s->computed, budget);
    bool reserved = pool_->Reserve(&s->kv, s->computed + count);
    if (!reserved && copy.rows > 0) {  // the copy's pinned source may be the block the rest needs: without it
      pool_->FinishCopy(copy);
      pool_->Release(&s->kv);
      copy = KvBlockCopy{};
      s->computed = pool_->AttachPrefix(&s->kv, s->tokens);
      count = std::min(n - s->computed, budget);
      reserved = pool_->Reserve(&s->kv, s->computed + count);
    }
    if (!reserved) {
      pool_->FinishCopy(copy);  // abandoned with the admission
      pool_->Release(&s->kv);   // waiting sequences pin no blocks
      s->computed = 0;
      s->prefix_checked = false;
      break;
    }
    if (copy.rows > 0) plan.copies.push_back(copy);
    waiting_.pop_front();
    auto pos = std::upper_bound(running_.begin(), running_.end(), s,
                                [](const SchedSeq* a, const SchedSeq* b) { return a->id < b->id; });
    running_.insert(pos, s);
    add_piece(s, count);
  }
  return plan;
}

void BatchScheduler::Done(const StepPlan& p) {
  for (const StepPiece& piece : p.pieces) {
    SchedSeq* s = piece.seq;
    const bool live = std::find(running_.begin(), running_.end(), s) != running_.end();
    if (!live || s->computed != piece.start) continue;  // removed (or preempted) since Next
    s->computed = piece.start + piece.count;
    pool_->Commit(&s->kv, s->tokens, s->computed);
  }
}

}  // namespace prism
