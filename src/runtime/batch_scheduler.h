// Continuous batching: picks each step's tokens under a token budget and the paged KV pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "runtime/kv_pool.h"

namespace prism {

struct SchedSeq {               // owned by the caller; the scheduler keeps pointers
  int64_t id = 0;               // arrival order (smaller = earlier)
  std::vector<int32_t> tokens;  // prompt + tokens generated so far (the caller appends after each step)
  int64_t computed = 0;         // tokens whose K/V are in the pool
  KvSeqBlocks kv;
  bool prefix_checked = false;  // AttachPrefix done for the current admission
  int preemptions = 0;
};

// tokens[start, start + count) of seq; logits: start + count == tokens.size() (the step samples it).
struct StepPiece {
  SchedSeq* seq;
  int64_t start, count;
  bool logits;
};

struct StepPlan {
  std::vector<StepPiece> pieces;
  std::vector<SchedSeq*> preempted;  // lost their KV (computed = 0): waiting again, recomputed later
  std::vector<SchedSeq*> rejected;   // grew past the whole pool: no longer scheduled; the caller ends them
  // K/V rows to copy before the step (partial prefix matches); the caller then calls the pool's FinishCopy.
  std::vector<KvBlockCopy> copies;
  int64_t tokens = 0;  // sum of the pieces' counts
};

struct SchedulerOptions {
  int64_t max_step_tokens = 256;
  int32_t max_running = 32;
};

class BatchScheduler {
 public:
  BatchScheduler(KvBlockPool* pool, SchedulerOptions o);

  // Joins the waiting queue (FIFO by id). prism::Error for no tokens, or more than the whole pool holds.
  void Add(SchedSeq* s);
  // Finished or cancelled: leaves running or waiting, its blocks released at once.
  void Remove(SchedSeq* s);
  // The next step: running sequences first (earliest id first, decode or a prefill chunk each), then
  // admissions from waiting. When the pool runs dry the running sequence with the largest id is
  // preempted (recompute later); no admissions in a step that preempted. Empty only when nothing runs.
  StepPlan Next();
  // After the step ran: each piece's computed += count, its full blocks committed to the prefix table.
  // Pieces of sequences removed since Next are skipped.
  void Done(const StepPlan& p);

  size_t running() const { return running_.size(); }
  size_t waiting() const { return waiting_.size(); }

 private:
  bool FitsPool(int64_t length) const;
  void Preempt(SchedSeq* s, StepPlan* plan);
  void Reject(SchedSeq* s, StepPlan* plan);

  KvBlockPool* pool_;
  SchedulerOptions opt_;
  std::vector<SchedSeq*> running_;  // by id
  std::deque<SchedSeq*> waiting_;   // admission order
};

}  // namespace prism
