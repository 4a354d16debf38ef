// Memory for repacked weights: zeroed, page aligned, and backed by 2 MiB pages where the kernel gives
// them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace prism {

using WeightMemory = std::unique_ptr<uint8_t, void (*)(void*)>;

// Throws prism::Error naming `what` when the memory cannot be had.
WeightMemory AllocateWeightMemory(size_t bytes, const char* what);

}  // namespace prism
