// Memory for repacked weights: zeroed, page aligned, and backed by 2 MiB pages where the kernel gives
// them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace prism {

using WeightMemory = std::unique_ptr<uint8_t, void (*)(void*)>;

// Throws prism::Error naming `what` when the memory cannot be had.
WeightMemory AllocateWeightMemory(size_t bytes, const char* what);

// What a Program derives from a weight it binds (its huge-page copy, a form's packed copy), made once for
// every Program in the process that binds the same weight: the program search holds a model's candidate
// programs at once, and each made its own (the 1B shape's f16 search on an AMX host went past 24 GB).
// `what` names the derivation (its parameters too). An entry is used only while `src_owner`, which keeps
// `src` alive, lives: an address freed and reused by another weight misses. The bytes must not change while
// their owner lives (a WeightStore's tensors, owned by its Lifetime(), and the copies made of them never
// do); memory that nothing owns (borrowed, as Python's bind_weight passes arrays) is never shared. The
// result lives as long as someone holds it.
std::shared_ptr<const void> SharedDerived(const void* src, const std::shared_ptr<void>& src_owner,
                                          const std::string& what,
                                          const std::function<std::shared_ptr<const void>()>& make);

}  // namespace prism
