// What a kernel is, in a reader's words: the model op it comes from and its kind of work.
#include "compiler/kernel_names.h"

#include <set>
#include <vector>

namespace prism {
namespace {

bool StartsWith(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::string Strip(std::string s, const std::string& suffix) {
  if (s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0)
    s.resize(s.size() - suffix.size());
  return s;
}

// "model.layers.3.self_attn.q_proj.weight" -> "layer 3 q_proj"; "transformer.h.2.attn.c_attn.weight" ->
// "layer 2 attn.c_attn"; "k_cache.3" -> "layer 3 attention"; "model.embed_tokens.weight" -> "embed_tokens";
// "cat(model.layers.0.mlp.gate_proj.weight,model.layers.0.mlp.up_proj.weight)" -> "layer 0
// gate_proj+up_proj".
std::string Shorten(const std::string& name) {
  // A merged weight (ConcatWeightName): "layer 0 q_proj+k_proj+v_proj".
  if (const std::vector<std::string> parts = ConcatParts(name); !parts.empty()) {
    std::string first = Shorten(parts[0]), out = first;
    const size_t space = first.rfind(' ');
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::string part = Shorten(parts[i]);
      out += "+" + (space != std::string::npos && part.compare(0, space + 1, first, 0, space + 1) == 0
                        ? part.substr(space + 1)
                        : part);
    }
    return out;
  }
  if (StartsWith(name, "k_cache.") || StartsWith(name, "v_cache."))
    return "layer " + name.substr(name.find('.') + 1) + " attention";
  std::string s = Strip(Strip(name, ".weight"), ".bias");
  for (const char* prefix : {"model.layers.", "transformer.h.", "h.", "layers."})
    if (StartsWith(s, prefix)) {
      std::string rest = s.substr(std::string(prefix).size());
      const size_t dot = rest.find('.');
      if (dot == std::string::npos) break;
      std::string op = rest.substr(dot + 1);
      for (const char* group : {"self_attn.", "mlp."})
        if (StartsWith(op, group)) op = op.substr(std::string(group).size());
      return "layer " + rest.substr(0, dot) + " " + op;
    }
  for (const char* prefix : {"model.", "transformer."})
    if (StartsWith(s, prefix)) return s.substr(std::string(prefix).size());
  return s;
}

}  // namespace

std::string ModelOpName(const KernelProgram& p, const Kernel& k) {
  if (k.gemm) {
    const std::string op = Shorten(p.buffers[k.gemm->w_buffer].name);
    return op == "embed_tokens" || op == "wte" ? "lm_head" : op;  // a product by the embedding: tied logits
  }
  if (k.attention) return Shorten(p.buffers[k.attention->k_buffer].name);
  std::vector<int> named;
  std::set<int> touched = KernelReads(k);
  touched.insert(k.out_buffer);  // a KV cache written in place names its layer too
  for (int b : touched)
    if (p.buffers[b].kind == BufferKind::Weight || p.buffers[b].kind == BufferKind::State) named.push_back(b);
  for (BufferKind want : {BufferKind::Weight, BufferKind::State})  // a norm's weight names it before a cache
    for (int b : named)
      if (p.buffers[b].kind == want) return Shorten(p.buffers[b].name);
  const std::string& n = k.name;  // "k12_Add": its root op
  const size_t us = n.find('_');
  return us == std::string::npos ? n : n.substr(us + 1);
}

std::string KernelKind(const Kernel& k) {
  if (k.gemm) return "gemm";
  if (k.attention || k.covered_by >= 0) return "attention";
  return HasReduce(k.value) ? "reduction" : "elementwise";
}

}  // namespace prism
