// Graphs from Python: symbolic sizes (Expr), the frontend's tensor API over one Graph, and a graph
// compiled for a device (Program) that binds weights once and runs on arrays without copying them.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "arrays.h"
#include "backends/device.h"
#include "backends/schedule_space.h"
#include "bindings.h"
#include "frontend/nn.h"
#include "ir/error.h"
#include "runtime/language_model.h"
#include "search/schedule_search.h"

namespace prism::py {

namespace {

// A node of a graph the tensor shares ownership of, so no Python object outlives its graph.
struct PyTensor {
  std::shared_ptr<Graph> g;
  NodeId id = -1;
  Tensor t() const { return Tensor(g.get(), id); }
};

PyTensor Wrap(const PyTensor& like, const Tensor& t) { return PyTensor{like.g, t.id()}; }

PyTensor Same(const PyTensor& a, const PyTensor& b, const char* op) {
  if (a.g != b.g) throw Error(std::string(op) + ": the tensors belong to different graphs");
  return a;
}

// Expr from a Python int or Expr.
Expr AsExpr(nb::handle h) {
  if (nb::isinstance<Expr>(h)) return nb::cast<Expr>(h);
  if (nb::isinstance<nb::int_>(h)) return Expr(nb::cast<int64_t>(h));
  throw Error("a size must be an int or a prism Expr, not " + nb::cast<std::string>(nb::str(h.type())));
}
std::vector<Expr> AsShape(nb::handle h) {
  std::vector<Expr> out;
  for (nb::handle d : h) out.push_back(AsExpr(d));
  return out;
}

// A binary op's operands: tensors of one graph, or a Python number on one side.
template <class F>
PyTensor BinaryOp(const PyTensor& a, nb::handle b, F f, const char* op) {
  if (nb::isinstance<PyTensor>(b)) {
    const PyTensor& bt = nb::cast<const PyTensor&>(b);
    Same(a, bt, op);
    return Wrap(a, f(a.t(), bt.t()));
  }
  double v = nb::cast<double>(b);
  Tensor c = Full(a.g.get(), v, {}, a.t().dtype());
  return Wrap(a, f(a.t(), c));
}

// A compiled graph with its weights (their arrays kept alive here) on one device.
struct Program {
  std::shared_ptr<Graph> g;
  std::unique_ptr<Executable> exe;
  std::vector<nb::object> kept;  // the arrays bound as weights
  std::vector<const Node*> inputs;
};

}  // namespace

void BindGraph(nb::module_& m) {
  nb::class_<Expr>(m, "Expr")
      .def(nb::init<int64_t>())
      .def_static("sym", &Expr::Sym, nb::arg("name"))
      .def_prop_ro("is_const", [](const Expr& e) { return e.IsConst(); })
      .def_prop_ro("value",
                   [](const Expr& e) {
                     if (!e.IsConst())
                       throw Error("size " + e.str() + " is symbolic: it has no value until run time");
                     return e.value();
                   })
      .def("eval", [](const Expr& e, const std::map<std::string, int64_t>& b) { return e.Eval(b); })
      .def("symbols",
           [](const Expr& e) {
             std::vector<std::string> s;
             e.CollectSymbols(&s);
             return s;
           })
      .def("__add__", [](const Expr& a, nb::handle b) { return a + AsExpr(b); })
      .def("__radd__", [](const Expr& a, nb::handle b) { return AsExpr(b) + a; })
      .def("__sub__", [](const Expr& a, nb::handle b) { return a - AsExpr(b); })
      .def("__rsub__", [](const Expr& a, nb::handle b) { return AsExpr(b) - a; })
      .def("__mul__", [](const Expr& a, nb::handle b) { return a * AsExpr(b); })
      .def("__rmul__", [](const Expr& a, nb::handle b) { return AsExpr(b) * a; })
      .def("__floordiv__", [](const Expr& a, nb::handle b) { return a / AsExpr(b); })
      .def("__rfloordiv__", [](const Expr& a, nb::handle b) { return AsExpr(b) / a; })
      .def("__mod__", [](const Expr& a, nb::handle b) { return a % AsExpr(b); })
      .def("__eq__",
           [](const Expr& a, nb::handle b) {
             return (nb::isinstance<Expr>(b) || nb::isinstance<nb::int_>(b)) && a == AsExpr(b);
           })
      .def("__hash__", [](const Expr& e) { return std::hash<std::string>()(e.str()); })
      .def("__str__", [](const Expr& e) { return e.str(); })
      .def("__repr__", [](const Expr& e) { return "Expr(" + e.str() + ")"; });
  m.def("max", [](nb::handle a, nb::handle b) { return Max(AsExpr(a), AsExpr(b)); });
  m.def("min", [](nb::handle a, nb::handle b) { return Min(AsExpr(a), AsExpr(b)); });

  nb::class_<PyTensor>(m, "Tensor")
      .def_prop_ro("shape", [](const PyTensor& t) { return t.t().shape(); })
      .def_prop_ro("dtype", [](const PyTensor& t) { return std::string(DTypeName(t.t().dtype())); })
      .def_prop_ro("rank", [](const PyTensor& t) { return t.t().rank(); })
      .def_prop_ro("id", [](const PyTensor& t) { return t.id; })
      .def("__repr__", [](const PyTensor& t) { return "Tensor(" + t.g->Describe(t.id) + ")"; })
      .def("reshape", [](const PyTensor& t, nb::handle s) { return Wrap(t, t.t().reshape(AsShape(s))); })
      .def("permute", [](const PyTensor& t, std::vector<int64_t> p) { return Wrap(t, t.t().permute(p)); })
      .def("expand", [](const PyTensor& t, nb::handle s) { return Wrap(t, t.t().expand(AsShape(s))); })
      .def("broadcast_to",
           [](const PyTensor& t, nb::handle s) { return Wrap(t, BroadcastTo(t.t(), AsShape(s))); })
      .def(
          "slice",
          [](const PyTensor& t, int64_t axis, nb::handle start, nb::handle size, int64_t step) {
            return Wrap(t, t.t().slice(axis, AsExpr(start), AsExpr(size), step));
          },
          nb::arg("axis"), nb::arg("start"), nb::arg("size"), nb::arg("step") = 1)
      .def("pad", [](const PyTensor& t, int64_t axis, nb::handle before,
                     nb::handle after) { return Wrap(t, t.t().pad(axis, AsExpr(before), AsExpr(after))); })
      .def("cast",
           [](const PyTensor& t, const std::string& dt) { return Wrap(t, t.t().cast(ParseDType(dt))); })
      .def("exp", [](const PyTensor& t) { return Wrap(t, t.t().exp()); })
      .def("log", [](const PyTensor& t) { return Wrap(t, t.t().log()); })
      .def("sin", [](const PyTensor& t) { return Wrap(t, t.t().sin()); })
      .def("cos", [](const PyTensor& t) { return Wrap(t, t.t().cos()); })
      .def("sqrt", [](const PyTensor& t) { return Wrap(t, t.t().sqrt()); })
      .def("rsqrt", [](const PyTensor& t) { return Wrap(t, t.t().rsqrt()); })
      .def("recip", [](const PyTensor& t) { return Wrap(t, t.t().recip()); })
      .def("tanh", [](const PyTensor& t) { return Wrap(t, t.t().tanh()); })
      .def("sigmoid", [](const PyTensor& t) { return Wrap(t, t.t().sigmoid()); })
      .def("abs", [](const PyTensor& t) { return Wrap(t, t.t().abs()); })
      .def("erf", [](const PyTensor& t) { return Wrap(t, Erf(t.t())); })
      .def("pow", [](const PyTensor& t, double p) { return Wrap(t, t.t().pow(p)); })
      .def("neg", [](const PyTensor& t) { return Wrap(t, -t.t()); })
      .def(
          "sum",
          [](const PyTensor& t, std::vector<int64_t> axes, bool keep) {
            return Wrap(t, t.t().sum(axes, keep));
          },
          nb::arg("axes"), nb::arg("keepdim") = true)
      .def(
          "max",
          [](const PyTensor& t, std::vector<int64_t> axes, bool keep) {
            return Wrap(t, t.t().max(axes, keep));
          },
          nb::arg("axes"), nb::arg("keepdim") = true)
      .def(
          "mean",
          [](const PyTensor& t, std::vector<int64_t> axes, bool keep) {
            return Wrap(t, t.t().mean(axes, keep));
          },
          nb::arg("axes"), nb::arg("keepdim") = true)
      .def(
          "argmax",
          [](const PyTensor& t, int64_t axis, bool keep) { return Wrap(t, Argmax(t.t(), axis, keep)); },
          nb::arg("axis"), nb::arg("keepdim") = false)
      .def("softmax", [](const PyTensor& t, int64_t axis) { return Wrap(t, Softmax(t.t(), axis)); })
      .def("log_softmax", [](const PyTensor& t, int64_t axis) { return Wrap(t, LogSoftmax(t.t(), axis)); })
      .def("add",
           [](const PyTensor& a, nb::handle b) {
             return BinaryOp(
                 a, b, [](auto x, auto y) { return x + y; }, "add");
           })
      .def("sub",
           [](const PyTensor& a, nb::handle b) {
             return BinaryOp(
                 a, b, [](auto x, auto y) { return x - y; }, "sub");
           })
      .def("mul",
           [](const PyTensor& a, nb::handle b) {
             return BinaryOp(
                 a, b, [](auto x, auto y) { return x * y; }, "mul");
           })
      .def("div",
           [](const PyTensor& a, nb::handle b) {
             return BinaryOp(
                 a, b, [](auto x, auto y) { return x / y; }, "div");
           })
      .def("maximum", [](const PyTensor& a, nb::handle b) { return BinaryOp(a, b, Maximum, "maximum"); })
      .def("minimum", [](const PyTensor& a, nb::handle b) { return BinaryOp(a, b, Minimum, "minimum"); })
      .def("less", [](const PyTensor& a, nb::handle b) { return BinaryOp(a, b, Less, "less"); })
      .def("mod", [](const PyTensor& a, nb::handle b) { return BinaryOp(a, b, Mod, "mod"); })
      .def("linear", [](const PyTensor& x,
                        const PyTensor& w) { return Wrap(Same(x, w, "linear"), Linear(x.t(), w.t())); })
      .def("matmul", [](const PyTensor& a,
                        const PyTensor& b) { return Wrap(Same(a, b, "matmul"), Matmul(a.t(), b.t())); })
      .def("gather",
           [](const PyTensor& src, const PyTensor& index, int64_t axis) {
             Same(src, index, "gather");
             return PyTensor{src.g, src.g->Gather(src.id, index.id, src.t().NormAxis(axis))};
           })
      .def("embedding", [](const PyTensor& table, const PyTensor& ids) {
        return Wrap(Same(table, ids, "embedding"), Embedding(table.t(), ids.t()));
      });
  m.def("where", [](const PyTensor& c, const PyTensor& a, const PyTensor& b) {
    Same(c, a, "where");
    Same(c, b, "where");
    return Wrap(c, Where(c.t(), a.t(), b.t()));
  });
  // Attention over tensors (frontend/nn.h): q [S, Hq, D], k and v [T, Hkv, D], an optional additive mask
  // [S, T]; the fused template runs it where the CPU has one.
  m.def(
      "attention",
      [](const PyTensor& q, const PyTensor& k, const PyTensor& v, const std::optional<PyTensor>& mask,
         double scale, bool causal) {
        for (const PyTensor* x : {&k, &v}) Same(q, *x, "attention");
        if (mask) Same(q, *mask, "attention");
        return Wrap(q, Attention(q.t(), k.t(), v.t(), mask ? std::optional<Tensor>(mask->t()) : std::nullopt,
                                 scale, causal));
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("mask").none(), nb::arg("scale"), nb::arg("causal"));
  m.def("concat", [](const std::vector<PyTensor>& xs, int64_t axis) {
    if (xs.empty()) throw Error("concat: no tensors");
    std::vector<Tensor> ts;
    for (const auto& x : xs) {
      Same(xs[0], x, "concat");
      ts.push_back(x.t());
    }
    return Wrap(xs[0], Concat(ts, axis));
  });

  // The graph: leaves and outputs (every op on tensors is a method of Tensor).
  struct PyGraph {
    std::shared_ptr<Graph> g = std::make_shared<Graph>();
  };
  nb::class_<PyGraph>(m, "Graph")
      .def(nb::init<>())
      .def("input",
           [](PyGraph& pg, const std::string& name, const std::string& dt, nb::handle shape) {
             return PyTensor{pg.g, pg.g->Input(name, ParseDType(dt), AsShape(shape))};
           })
      .def("weight",
           [](PyGraph& pg, const std::string& name, const std::string& dt, nb::handle shape) {
             return PyTensor{pg.g, pg.g->Weight(name, ParseDType(dt), AsShape(shape))};
           })
      .def(
          "constant",
          [](PyGraph& pg, double v, const std::string& dt, nb::handle shape) {
            return PyTensor{pg.g, Full(pg.g.get(), v, AsShape(shape), ParseDType(dt)).id()};
          },
          nb::arg("value"), nb::arg("dtype") = "f32", nb::arg("shape") = nb::list())
      .def(
          "iota",
          [](PyGraph& pg, nb::handle shape, int64_t axis, const std::string& dt) {
            return PyTensor{pg.g, pg.g->Iota(AsShape(shape), axis, ParseDType(dt))};
          },
          nb::arg("shape"), nb::arg("axis"), nb::arg("dtype") = "i32")
      .def(
          "value_of",
          [](PyGraph& pg, nb::handle e, const std::string& dt) {
            return PyTensor{pg.g, ExprValue(pg.g.get(), AsExpr(e), ParseDType(dt)).id()};
          },
          nb::arg("expr"), nb::arg("dtype") = "i32")
      .def("output",
           [](PyGraph& pg, const PyTensor& t, const std::string& name) {
             if (t.g != pg.g) throw Error("output '" + name + "': the tensor belongs to another graph");
             pg.g->MarkOutput(t.id, name);
           })
      .def_prop_ro("symbols", [](const PyGraph& pg) { return pg.g->Symbols(); })
      .def("__len__", [](const PyGraph& pg) { return pg.g->size(); })
      .def("to_text", [](const PyGraph& pg) { return pg.g->ToText(); })
      .def(
          "compile",
          [](const PyGraph& pg, const std::string& device, int threads) {
            auto p = std::make_unique<Program>();
            p->g = pg.g;
            auto dev = OpenDevice(device);
            CompileRequest req;
            req.threads = threads;
            {
              nb::gil_scoped_release release;
              p->exe = dev->Compile(*pg.g, req);
            }
            p->inputs = InputNodes(p->exe->graph());
            return p;
          },
          nb::arg("device") = "cpu", nb::arg("threads") = 0);

  nb::class_<Program>(m, "Program")
      .def_prop_ro("device", [](const Program& p) { return p.exe->device(); })
      .def_prop_ro("kernel_count", [](const Program& p) { return p.exe->kernel_count(); })
      // Kernels matched to the fused attention template (0 on a device without a schedule space).
      .def_prop_ro("attention_kernels",
                   [](Program& p) {
                     int n = 0;
                     if (auto space = p.exe->OpenSearch())
                       for (const Kernel& k : space->kernels().kernels) n += k.attention.has_value();
                     return n;
                   })
      .def("bind_weight",
           [](Program& p, const std::string& name, nb::handle array) {
             InArray a = nb::cast<InArray>(array);
             p.exe->BindWeight(name, BorrowArray(a, "weight '" + name + "'"));
             p.kept.push_back(nb::borrow(array));
           })
      .def(
          "run",
          [](Program& p, const std::map<std::string, nb::handle>& inputs,
             const std::map<std::string, int64_t>& symbols) {
            std::map<std::string, HostTensor> in;
            std::vector<InArray> held;  // the arrays stay referenced while the step reads them
            for (const auto& [name, h] : inputs) {
              InArray a;
              if (!nb::try_cast(h, a))
                throw Error("input '" + name + "': expected a C-contiguous CPU array (numpy or torch), got " +
                            nb::cast<std::string>(nb::str(h.type())));
              held.push_back(a);
              in[name] = BorrowArray(a, "input '" + name + "'");
            }
            std::vector<HostTensor> out;
            {
              nb::gil_scoped_release release;
              out = p.exe->Run(in, symbols);
            }
            nb::list l;
            for (auto& t : out) l.append(ToNumpy(std::move(t)));
            return l;
          },
          nb::arg("inputs"), nb::arg("symbols") = std::map<std::string, int64_t>{})
      .def(
          "search",
          [](Program& p, const std::map<std::string, int64_t>& sizes, double budget) {
            SearchOptions so;
            so.buckets = {{"all", sizes}};
            so.budget_seconds = budget;
            so.db_path = TuningDatabasePath();
            nlohmann::json receipts;
            {
              nb::gil_scoped_release release;
              receipts = SearchSchedules(*p.exe, so);
            }
            return receipts.dump();
          },
          nb::arg("sizes"), nb::arg("budget"));
}

}  // namespace prism::py
