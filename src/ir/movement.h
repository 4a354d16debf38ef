// Index arithmetic of movement ops: maps an output index to the source index and its validity.
#pragma once

#include <vector>

#include "ir/expr.h"
#include "ir/graph.h"

namespace prism {

struct SourceIndex {
  std::vector<Expr> index;  // index into the movement op's input
  Expr valid;               // 1 where the element exists (0 inside padding)
};

// For a movement node n whose input has shape in_shape, the input position read at output
// position idx. Reshape goes through the row-major linear offset, so any reshape is a view.
SourceIndex MapThroughMovement(const Node& n, const std::vector<Expr>& in_shape, const std::vector<Expr>& idx);

// Row-major linear offset of idx within shape, and its inverse.
Expr LinearIndex(const std::vector<Expr>& shape, const std::vector<Expr>& idx);
std::vector<Expr> UnravelIndex(const std::vector<Expr>& shape, const Expr& linear);

}  // namespace prism
