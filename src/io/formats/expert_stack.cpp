// Per-expert tensors ("<p>.experts.<e>.<rest>") stacked into one [experts, ...] tensor per kind.
#include "io/formats/expert_stack.h"

#include <cstring>
#include <map>
#include <regex>

#include "ir/error.h"

namespace prism {
namespace {

class StackedStore : public WeightStore {
 public:
  explicit StackedStore(std::shared_ptr<const WeightStore> base)
      : WeightStore(base->Source(), base->Format()) {
    for (const TensorData& t : base->Tensors()) AddTensor(t);
    for (const auto& [name, reason] : base->Unsupported()) AddUnsupported(name, reason);
    KeepAlive(base);
  }
  void Stack(const std::string& name, const std::vector<const TensorData*>& experts) {
    const TensorData& first = *experts[0];
    auto bytes = std::make_shared<std::vector<uint8_t>>(experts.size() * (size_t)first.nbytes);
    for (size_t e = 0; e < experts.size(); ++e)
      std::memcpy(bytes->data() + e * (size_t)first.nbytes, experts[e]->data, (size_t)first.nbytes);
    std::vector<int64_t> shape = first.shape;
    shape.insert(shape.begin(), (int64_t)experts.size());
    AddTensor({name, first.dtype, shape, bytes->data(), (int64_t)bytes->size()});
    KeepAlive(bytes);
  }
};

}  // namespace

std::unique_ptr<WeightStore> StackExperts(std::unique_ptr<WeightStore> base) {
  static const std::regex expert_name(R"((.*\.experts)\.(\d+)\.(.*))");
  // stacked name -> expert number -> tensor
  std::map<std::string, std::map<int64_t, const TensorData*>> families;
  for (const TensorData& t : base->Tensors()) {
    std::smatch m;
    if (std::regex_match(t.name, m, expert_name))
      families[m[1].str() + "." + m[3].str()][std::stoll(m[2].str())] = &t;
  }
  if (families.empty()) return base;
  const std::string& source = base->Source();
  std::vector<std::pair<std::string, std::vector<const TensorData*>>> stacks;
  for (const auto& [name, experts] : families) {
    std::vector<const TensorData*> in_order;
    for (const auto& [e, t] : experts) {
      if (e != (int64_t)in_order.size())
        throw Error(source + ": expert tensor '" + t->name + "' has no expert " +
                    std::to_string(in_order.size()) + " before it");
      if (t->dtype != experts.begin()->second->dtype || t->shape != experts.begin()->second->shape)
        throw Error(source + ": expert tensor '" + t->name + "' " + ShapeString(t->shape) + " " +
                    std::string(DTypeName(t->dtype)) + " differs from '" + experts.begin()->second->name +
                    "' " + ShapeString(experts.begin()->second->shape) + " " +
                    std::string(DTypeName(experts.begin()->second->dtype)));
      in_order.push_back(t);
    }
    stacks.emplace_back(name, std::move(in_order));
  }
  std::shared_ptr<const WeightStore> shared = std::move(base);
  auto out = std::make_unique<StackedStore>(shared);
  for (const auto& [name, experts] : stacks) out->Stack(name, experts);
  return out;
}

}  // namespace prism
