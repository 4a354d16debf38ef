// Mixture-of-experts checkpoints store each expert's weight on its own; Prism's graphs gather from one
// tensor per kind holding every expert, as GGUF files already store them.
#pragma once

#include <memory>

#include "io/formats/weights.h"

namespace prism {

// The store's tensors plus, for every family "<p>.experts.<e>.<rest>" (e = 0 .. E-1), one tensor
// "<p>.experts.<rest>" of shape [E, ...] holding them in order (copied once, owned by the returned store).
// Throws "<source>: ..." naming the tensors when the experts' dtypes or shapes differ or a number is
// missing. A store without expert tensors comes back as it was.
std::unique_ptr<WeightStore> StackExperts(std::unique_ptr<WeightStore> base);

}  // namespace prism
