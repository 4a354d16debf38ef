// Kernel IR: a graph cut into kernels, each a loop nest over its output computing one value tree.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace prism {

enum class BufferKind : uint8_t { Input, Weight, State, Intermediate, Output };

struct KBuffer {
  std::string name;
  BufferKind kind;
  DType dtype;
  std::vector<Expr> shape;
  NodeId node;  // the graph node whose values it holds
};

struct KValue;
using KValuePtr = std::shared_ptr<const KValue>;

// A symbol in a load index bound to a data value (Gather): sym = clamp(value, 0, limit - 1).
struct GatherBinding {
  std::string sym;
  KValuePtr value;
  Expr limit;
};

// The value computed for one output element. Index expressions use the kernel's loop variables
// (i0, i1, ... over the output, r0, r1, ... over reductions) and the graph's size symbols.
struct KValue {
  enum class Kind : uint8_t { Load, Const, Index, Op, Guard, Reduce };
  Kind kind = Kind::Const;
  DType dtype = DType::F32;
  Op op = Op::Add;  // Kind::Op: the primitive (unary, binary, Where, Cast); Reduce: Sum/Max
  int buffer = -1;  // Load
  Expr index;       // Load: element index; Index: the value; Guard: validity (0/1)
  std::vector<GatherBinding> gathers;  // Load, Index, Guard: gather symbols their index uses
  double constant = 0;                 // Const
  std::vector<KValuePtr> args;         // Op operands; Guard/Reduce: args[0] is the body
  std::vector<std::string> rvars;      // Reduce loop variables and their extents
  std::vector<Expr> rextents;
};

// A kernel the template tier computes with a hand-written micro-kernel instead of its value tree:
// out[m, n] = sum_k a[m, k] * w[n, k] (a: an f32 buffer [M, K]; w: a weight [N, K] in any dtype).
// With an epilogue, the value tree is Add or Mul of that product and another operand (a residual, a
// SiLU gate): the micro-kernel stores the product in the output buffer and the generated function
// `<kernel name>_epi` then finishes each element in place.
//
// Expert-indexed (index_buffer >= 0, ExpertLinear): w is [experts, N, K] and row m uses slab
// clamp(index[m], 0, experts - 1) (index: an i32 buffer [M]), as the value tree's Gather does.
struct GemmTemplate {
  int a_buffer;
  int w_buffer;
  Expr m;
  int64_t n, k;
  bool epilogue = false;
  int index_buffer = -1;
  int64_t experts = 1;
  // The activation's values are bf16 numbers (a cast from bf16): rounding them to bf16 loses nothing, so
  // a form that does so (bf16 dot products) computes the exact products.
  bool a_bf16 = false;
  // 0: the activation is row-major [m, k]; > 0: it is K-major in groups of a_group rows, [m / a_group, k,
  // a_group] (an NCHW image's im2col, its pixels the rows; FusionOptions::kmajor_activations).
  Expr a_group = 0;
};

// Where an attention operand's elements lie in its buffer: row r, head h, element e at
// offset + r * row + h * head + e (the mask's [s, t] at offset + s * row + t).
struct OperandLayout {
  Expr row = 0, head = 0, offset = 0;
  bool Is(int64_t r, int64_t h) const { return row.IsConst(r) && head.IsConst(h) && offset.IsConst(0); }
};

// A kernel computing causal grouped-query attention in one pass (the template tier's fused form of
// scores, mask, softmax and P·V): out[h, g, s, d] over [heads_kv, group, seq, head_dim], from
// q [seq, heads_kv * group * head_dim] and the K/V caches [cap, heads_kv, head_dim] or, as a single
// sequence's are, head-major [heads_kv, cap, head_dim] (all f32; k_layout, v_layout); key t is visible to
// query s when t < s + offset. The kernels it replaces (the pattern's realized interior)
// name it in `covered_by` and are skipped when it runs.
//
// Paged (table_buffer >= 0): K and V are pools [rows, heads_kv, head_dim]; query s's key t is row
// table[s, t / block] * block + t % block, visible when t <= positions[s] (table [seq, total / block] and
// positions [seq], i32); offset is unused.
//
// Unpaged, q, K and V may be any f32 buffers in other layouts (their OperandLayouts; Plain() when dense),
// and an additive mask (mask_buffer >= 0) may bias the scores: + mask[s, t], -inf hiding key t from query
// s (with no causal limit, offset = total).
struct AttentionTemplate {
  int q_buffer, k_buffer, v_buffer;
  int64_t heads_kv, group, head_dim;
  Expr seq, total, offset;
  double scale, exp_scale;
  int table_buffer = -1, positions_buffer = -1;
  int64_t block = 0;
  OperandLayout q_layout, k_layout, v_layout;  // in elements (dense: as above)
  int mask_buffer = -1;
  OperandLayout mask_layout;
  // The dense layouts of the caches and no mask.
  bool Plain() const {
    const int64_t hd = heads_kv * head_dim;
    return mask_buffer < 0 && q_layout.Is(group * hd, head_dim) && k_layout.Is(hd, head_dim) &&
           v_layout.Is(hd, head_dim);
  }
  // q dense, no mask, K's and V's rows from their buffers' starts at any strides (the dense layouts, a single
  // sequence's head-major cache): what the systolic devices' attention runs.
  bool RowsAtStrides() const {
    const int64_t hd = heads_kv * head_dim;
    return mask_buffer < 0 && q_layout.Is(group * hd, head_dim) && k_layout.offset.IsConst(0) &&
           v_layout.offset.IsConst(0);
  }
};

struct Kernel {
  std::string name;
  int out_buffer;
  std::vector<std::string> vars;  // output loop variables, outermost first
  std::vector<Expr> extents;
  Expr out_index;                          // where the value is stored (linear element index)
  std::vector<GatherBinding> out_gathers;  // data-dependent symbols out_index uses (a StateScatter's rows)
  KValuePtr value;
  NodeId root;                // the graph node this kernel realizes
  std::vector<NodeId> fused;  // graph nodes computed inside this kernel (for reports)
  // Arithmetic intensity inputs for the runtime's threading choice and reports.
  Expr reduce_size;  // product of reduction extents per output element
  // Set when the kernel matches a template micro-kernel; the value tree stays valid, so a backend
  // without the template (or a search comparing tiers) can still use the generated form.
  std::optional<GemmTemplate> gemm;
  std::optional<AttentionTemplate> attention;
  int covered_by = -1;  // index of the attention kernel that computes this one's consumers when it runs
};

// True when a value tree contains a reduction (in its operands or gathered indices).
inline bool HasReduce(const KValuePtr& v) {
  if (v->kind == KValue::Kind::Reduce) return true;
  for (const GatherBinding& gb : v->gathers)
    if (HasReduce(gb.value)) return true;
  for (const KValuePtr& a : v->args)
    if (HasReduce(a)) return true;
  return false;
}

// Whether any of the extents involves symbol s.
inline bool AnyMentions(const std::vector<Expr>& extents, const std::string& s) {
  std::vector<std::string> syms;
  for (const Expr& e : extents) e.CollectSymbols(&syms);
  return std::find(syms.begin(), syms.end(), s) != syms.end();
}
// Whether a loop of the kernel (over its output or inside a reduction) has an extent involving symbol s.
inline bool LoopsSpan(const KValuePtr& v, const std::string& s) {
  if (AnyMentions(v->rextents, s)) return true;
  for (const GatherBinding& gb : v->gathers)
    if (LoopsSpan(gb.value, s)) return true;
  for (const KValuePtr& a : v->args)
    if (LoopsSpan(a, s)) return true;
  return false;
}
inline bool LoopsSpan(const Kernel& k, const std::string& s) {
  return AnyMentions(k.extents, s) || LoopsSpan(k.value, s);
}

// Every buffer a kernel reads: the loads of its value tree and its template's operands.
inline void CollectLoads(const KValuePtr& v, std::set<int>* out) {
  if (v->kind == KValue::Kind::Load) out->insert(v->buffer);
  for (const GatherBinding& gb : v->gathers) CollectLoads(gb.value, out);
  for (const KValuePtr& a : v->args) CollectLoads(a, out);
}
inline std::set<int> KernelReads(const Kernel& k) {
  std::set<int> reads;
  CollectLoads(k.value, &reads);
  for (const GatherBinding& gb : k.out_gathers) CollectLoads(gb.value, &reads);
  if (k.gemm) reads.insert({k.gemm->a_buffer, k.gemm->w_buffer});
  if (k.gemm && k.gemm->index_buffer >= 0) reads.insert(k.gemm->index_buffer);
  if (k.attention) reads.insert({k.attention->q_buffer, k.attention->k_buffer, k.attention->v_buffer});
  if (k.attention && k.attention->mask_buffer >= 0) reads.insert(k.attention->mask_buffer);
  if (k.attention && k.attention->table_buffer >= 0)
    reads.insert({k.attention->table_buffer, k.attention->positions_buffer});
  return reads;
}

struct KernelProgram {
  std::vector<KBuffer> buffers;
  std::vector<Kernel> kernels;
  std::vector<std::string> symbols;  // size symbols, in the order kernels receive them
  std::vector<int> output_buffers;   // one per graph output
  std::vector<NodeId> realized;      // nodes with their own buffer
  int graph_nodes = 0;
};

struct FusionOptions {
  bool fuse = true;       // false: every non-view node is its own kernel (a baseline for comparisons)
  bool templates = true;  // match x · Wᵀ with weight W (and causal attention) to the template tier
  // x · Wᵀ read only by an Add or Mul of its own shape is computed in that op's kernel, as the
  // template's epilogue (GemmTemplate::epilogue): the product is never stored on its own.
  bool gemm_epilogues = false;
  // An elementwise value read by two or more kernels is computed again inside each of them while that is
  // cheap (a residual stream's chain of adds, up to a few terms); false: it always gets its own buffer (for
  // a device that holds each buffer where its kernels run, every extra buffer a kernel reads costs a copy).
  bool recompute = true;
  // The device's GEMM template reads an activation stored K-major (GemmTemplate::a_group): a permuted
  // view of a computed value is then read where it lies instead of being transposed into rows first.
  bool kmajor_activations = false;
};

// The kernel's value with its one reduction replaced by a load of the kernel's own output element:
// what a GEMM template's epilogue computes once the product is stored there.
KValuePtr EpilogueValue(const Kernel& k);

// The buffers a kernel's generated functions (its own, its reduce-outer form and its GEMM epilogue) take, in
// the order they receive them: the same kernel over other buffers (each layer of a model) is then the same
// function, generated and compiled once.
std::vector<int> GeneratedOperands(const Kernel& k);

// Decides which nodes get buffers, cuts the graph into kernels and lowers each to the kernel IR.
KernelProgram BuildKernelProgram(const Graph& g, const FusionOptions& opts = {});

// Throws prism::Error if a state write would fall outside its state buffer at these sizes.
void CheckStateWrites(const Graph& g, const KernelProgram& p, const std::map<std::string, int64_t>& sizes);

// Text listing of kernels and their value trees (for `prism graph`).
std::string KernelProgramToText(const Graph& g, const KernelProgram& p);

}  // namespace prism
