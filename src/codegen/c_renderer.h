// Renders the kernel IR's values, loads, stores, symbols and prelude in any of the C-style dialects.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "codegen/c_spelling.h"
#include "compiler/kernel_ir.h"

namespace prism {

// What differs between the C-style languages; everything else is shared text. Strings may hold the
// placeholders ${dev} (a prelude helper's qualifier), ${global} (a prelude helper's pointer address
// space), ${acc} and ${threads}, which the renderer fills in.
struct CDialect {
  // Prelude, in order: banner, typedefs of the fixed-width integers, defs, PRISM_INF/PRISM_NAN,
  // the index helpers, float_helpers, the rounding and quantized-block helpers.
  const char* banner;         // first line
  const char* int_types[6];   // what int64_t, int32_t, int8_t, uint8_t, uint16_t, uint32_t are
  const char* defs;           // macros and bit casts the helpers rely on
  const char *inf, *nan;      // what PRISM_INF and PRISM_NAN expand to
  const char* dev;            // ${dev}: qualifier of the prelude's helper functions
  const char* global_helper;  // ${global}: address space of the helpers' buffer pointers (with a space)
  const char* float_helpers;  // float math and f16/bf16 conversions (prism_h2f ... prism_f2bf)
  // Kernels.
  const char* kernel_head;  // before the function name (${threads}: the work-group size)
  const char* global;       // address space of buffer pointers (with a space)
  const char* restrict_kw;
  struct {  // work-group words (GPU dialects)
    const char *local_id, *group_id, *num_groups, *barrier;
    const char* shared;  // address space of work-group scratch (with a space)
  } group;
  // Before the innermost loop of a float sum whose body is a plain expression (${acc}: its
  // accumulator); null: none.
  const char* sum_loop_pragma;
  MathNames math;
  const char* f16_storage;  // element type of f16 buffers
  bool vload_half;          // f16 buffers through vload_half / vstore_half_rte
};

// Text with each placeholder (e.g. "${threads}") replaced by its value.
std::string FillPlaceholders(std::string text,
                             const std::vector<std::pair<std::string, std::string>>& values);

// Types and helpers every function of the dialect needs, once per translation unit.
std::string CPrelude(const CDialect& d);

// The shared rendering of a kernel's value tree: the target's renderer derives from it and writes
// the kernel around it (its loop over the output, its signature).
class CKernelRenderer {
 public:
  CKernelRenderer(const KernelProgram& p, const CDialect& d) : p_(p), d_(d) {}
  virtual ~CKernelRenderer() = default;

 protected:
  // How buffer b is named inside the function being rendered.
  virtual std::string BufferName(int b) const = 0;
  // A reduction at the current depth; a plain loop unless the target maps it otherwise.
  virtual std::string Reduce(const KValue& v, std::string* stmts, const std::string& ind) {
    return LoopReduce(v, stmts, ind);
  }

  // Starts a function: accumulators are numbered from 0 again.
  void Reset() { acc_ = depth_ = 0; }
  std::string NewAcc() { return std::to_string(acc_++); }
  int depth() const { return depth_; }  // reductions enclosing the value being rendered

  // Maps a symbol of an index expression to its spelling: a gather's clamped value (its statements
  // into *stmts, indented by ind), a size symbol (s_<name>) or a loop variable.
  std::function<std::string(const std::string&)> SymFn(const std::vector<GatherBinding>* gathers = nullptr,
                                                       std::string* stmts = nullptr,
                                                       const std::string& ind = "");
  // The expression for a value; statements it needs first (reductions) are appended to *stmts.
  std::string Value(const KValuePtr& vp, std::string* stmts, const std::string& ind);
  std::string Body(const KValue& reduce, std::string* stmts, const std::string& ind);  // depth + 1
  // `buffer[idx] = value;` in the buffer's storage type; vt: the value's dtype.
  std::string Store(int buffer, const std::string& idx, const std::string& value, DType vt) const;
  const char* StorageType(DType t) const { return StorageCType(t, d_.f16_storage); }

  // Nested `for` loops over vars; returns the indentation inside them.
  std::string OpenLoops(const std::vector<std::string>& vars, const std::vector<Expr>& extents,
                        std::string ind, std::ostream& os, const std::string& innermost_prefix = "");
  static void CloseLoops(size_t n, std::string ind, std::ostream& os);
  static std::string Init(const KValue& reduce);  // the reduction's identity
  // acc = acc (+ or max) x, as a statement.
  static std::string Combine(const KValue& reduce, const std::string& acc, const std::string& x);
  std::string LoopReduce(const KValue& v, std::string* stmts, const std::string& ind);

  const KernelProgram& p_;
  const CDialect& d_;

 private:
  std::string Load(const KValue& v, std::string* stmts, const std::string& ind);

  int acc_ = 0, depth_ = 0;
};

}  // namespace prism
