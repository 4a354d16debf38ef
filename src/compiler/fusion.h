// Fusion: decides which graph nodes get their own buffer; everything else is fused into consumers.
#pragma once

#include <set>
#include <vector>

#include "compiler/kernel_ir.h"

namespace prism {

// realized[i] is true when node i is stored in a buffer (leaves, state writes, outputs, and
// computed nodes that are too costly to recompute in every consumer). `forced` nodes are
// realized regardless (lowering forces reductions it finds would be recomputed per element).
std::vector<bool> ChooseRealized(const Graph& g, const FusionOptions& opts, const std::set<NodeId>& forced);

}  // namespace prism
