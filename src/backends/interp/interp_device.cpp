// The reference interpreter as a device: every graph node run in double, one schedule per node.
#include "backends/interp/interp_device.h"

#include "ir/interpreter.h"

namespace prism {
namespace {

class InterpExecutable : public Executable {
 public:
  explicit InterpExecutable(const Graph& g) : graph_(g), interp_(graph_) {}
  const std::string& device() const override { return name_; }
  const Graph& graph() const override { return graph_; }
  void BindWeight(const std::string& name, const HostTensor& t) override {
    for (const Node& n : graph_.nodes())
      if (n.op == Op::Weight && n.name == name) {
        CheckWeightDtype(name, t.dtype, n.dtype);
        interp_.BindWeight(name, t);
        return;
      }
    throw Error("weight '" + name + "': the graph has no such weight");
  }
  std::vector<HostTensor> Run(const std::map<std::string, HostTensor>& inputs,
                              const SymbolBindings& syms) override {
    return interp_.Run(inputs, syms);
  }
  void ResetState() override { interp_.ResetState(); }
  HostTensor ReadStateRows(const std::string& name, int64_t first, int64_t rows) override {
    const Node& n = StateNode(name);
    const std::vector<int64_t> shape = EvalShape(n.shape, {});
    const int64_t axis = StateRowAxis(graph_, name);
    HostTensor out = StateRowsTensor(name, first, rows, shape, n.dtype, axis);
    const std::vector<double>& v = interp_.MutableStateValues(name);
    const StateRowRuns r = RowRuns(shape, axis, first, rows);
    for (int64_t i = 0; i < r.pieces; ++i)
      for (int64_t j = 0; j < r.count; ++j)
        StoreFromDouble(out.data, n.dtype, i * r.count + j, v[r.at + i * r.stride + j]);
    return out;
  }
  void WriteStateRows(const std::string& name, int64_t first, const HostTensor& rows) override {
    const Node& n = StateNode(name);
    const std::vector<int64_t> shape = EvalShape(n.shape, {});
    const int64_t axis = StateRowAxis(graph_, name);
    std::vector<double>& v = interp_.MutableStateValues(name);
    CheckStateRows(name, first, rows, shape, n.dtype, axis);
    const StateRowRuns r = RowRuns(shape, axis, first, rows.shape[axis]);
    for (int64_t i = 0; i < r.pieces; ++i)
      for (int64_t j = 0; j < r.count; ++j)
        v[r.at + i * r.stride + j] = LoadAsDouble(rows.data, rows.dtype, i * r.count + j);
  }
  size_t kernel_count() const override { return graph_.size(); }

 private:
  const Node& StateNode(const std::string& name) const {
    for (const Node& n : graph_.nodes())
      if (n.op == Op::State && n.name == name) return n;
    throw Error("state '" + name + "': the graph has no such state");
  }
  std::string name_ = "interp";
  Graph graph_;
  Interpreter interp_;
};

}  // namespace

std::unique_ptr<Executable> InterpDevice::Compile(const Graph& g, const CompileRequest& req) {
  if (!req.artifact_dir.empty())
    throw Error(req.artifact_dir + ": the interp device loads no compiled artifacts");
  if (g.outputs().empty()) throw Error("compile: the graph has no outputs");
  return std::make_unique<InterpExecutable>(g);
}

}  // namespace prism
