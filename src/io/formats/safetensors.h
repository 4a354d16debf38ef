// Loader for Hugging Face safetensors files (single file, folder, or sharded set with an index).
#pragma once

#include <memory>
#include <string>

#include "io/formats/weights.h"

namespace prism {

// `path` is a .safetensors file, or a folder holding model.safetensors or a sharded set
// listed by model.safetensors.index.json. Files are memory-mapped; no tensor is copied.
// Dtypes F32, F16, BF16, I32, I8, U8, BOOL load; any other dtype (F64, I64, ...) is
// recorded in Unsupported() and throws when that tensor is looked up. Everything else that
// is wrong with a file (truncation, bad header, offsets out of range, size not matching the
// shape, duplicate names) throws prism::Error at load, naming the file.
// Shapes are reported as stored: HF GPT-2 Conv1D weights stay [in, out].
std::unique_ptr<WeightStore> LoadSafetensors(const std::string& path);

}  // namespace prism
