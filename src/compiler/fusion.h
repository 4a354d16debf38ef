// Fusion: decides which graph nodes get their own buffer; everything else is fused into consumers.
#pragma once

#include <optional>
#include <set>
#include <vector>

#include "compiler/kernel_ir.h"

namespace prism {

// realized[i] is true when node i is stored in a buffer (leaves, state writes, outputs, and
// computed nodes that are too costly to recompute in every consumer). `forced` nodes are
// realized regardless (lowering forces reductions it finds would be recomputed per element).
std::vector<bool> ChooseRealized(const Graph& g, const FusionOptions& opts, const std::set<NodeId>& forced);

// A SumReduce node computing x · Wᵀ over the last axis, with W a [N, K] weight: the operands the
// template GEMM needs. x's elements must lie in a buffer (ActivationSource's, realized by
// `ChooseRealized` when templates are on).
// ExpertLinear's form (index >= 0): x [R, K], W [E, N, K] read through a Gather of its slabs by the i32
// rows' experts `index` [R] (realized as well).
struct LinearMatch {
  NodeId x;
  NodeId weight;
  NodeId index = -1;
};
std::optional<LinearMatch> MatchLinear(const Graph& g, NodeId reduce);

// Where a template's activation x [.., K] lies: the node whose buffer holds it, and how.
// group == 0: row-major, in x itself or in the computed value that x only regroups the axes of (a
// Reshape: an im2col's [.., taps, C] read as [.., taps * C]), so that value is stored in its own loop
// order and no kernel copies it into x's.
// group > 0 (only where `kmajor`, the device's GEMM reads such a layout): x is a permuted view of a
// computed value that holds it K-major in groups of `group` rows, [rows / group, K, group] (an im2col of
// an NCHW image, [N, C * taps, OH * OW], read as rows of pixels), so no kernel transposes it.
struct ActivationView {
  NodeId source;
  Expr group = 0;
};
ActivationView ActivationSource(const Graph& g, NodeId x, bool kmajor);

// The node that would run a linear match as its epilogue (FusionOptions::gemm_epilogues): the
// match's only reader (through reshapes, each read only there), an f32 Add or Mul of the same shape;
// -1 if none.
NodeId EpilogueConsumer(const Graph& g, NodeId reduce);

}  // namespace prism
