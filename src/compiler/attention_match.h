// Pattern match of causal grouped-query attention (scores, mask, softmax, P·V) in the primitive graph.
#pragma once

#include <optional>
#include <set>

#include "compiler/kernel_ir.h"
#include "ir/graph.h"

namespace prism {

// out[h, g, s, d] = sum_t softmax_t(mask(scale * q[s, h*G + g, :] · k[t, h, :])) v[t, h, d], where
// key t is visible to query s when t < s + offset, and the softmax is exp2((x - max) * exp_scale)
// normalized. q is an f32 node (any view of it) and k and v f32 state writes read over their first `total`
// rows ([cap, H, D], or a single sequence's head-major [H, cap, D] in its layout), or (unpaged) any f32
// nodes, each in a layout with contiguous rows (below).
//
// Paged (table >= 0): K and V are state scatters [rows, H, D] read through a gather: query s's key t is
// row table[s, t / block] * block + t % block, visible when t < positions[s] + 1 (table [S, blocks] and
// positions [S] integer nodes); `total` is the keys' extent, blocks * block, and offset is unused.
struct AttentionMatch {
  NodeId q, k, v;  // the nodes holding q, K and V
  int64_t heads_kv, group, head_dim;
  Expr seq, total, offset;
  double scale, exp_scale;
  NodeId table = -1, positions = -1;
  int64_t block = 0;
  // The layouts in elements: q[s, h*G+g, d] at row s, head h*G+g; k[t, h, d] and v at row t, head h.
  // Unpaged, q, k and v may be any f32 nodes in such layouts, and an f32 node `mask` may bias the scores:
  // + mask[s, t] (no causal Where: offset = total).
  OperandLayout q_layout, k_layout, v_layout;
  NodeId mask = -1;
  OperandLayout mask_layout;
  std::set<NodeId> interior;  // nodes strictly inside the pattern (neither operands nor the output)
};

// Matches the pattern whose output is `pv`: the SumReduce of P·V, shaped [H, G, S, D, 1].
std::optional<AttentionMatch> MatchCausalAttention(const Graph& g, NodeId pv);

}  // namespace prism
