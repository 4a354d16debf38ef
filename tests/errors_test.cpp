// Bad graphs and bad run-time arguments give one-line errors naming the op and the shapes.
#include <gtest/gtest.h>

#include "backends/cpu/program.h"
#include "frontend/nn.h"
#include "ir/error.h"
#include "ir/interpreter.h"

namespace prism {
namespace {

// Runs f, expects a prism::Error whose one-line message contains every fragment.
template <typename F>
void ExpectError(F f, std::vector<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no error thrown; expected one mentioning " << fragments[0];
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
    for (const auto& frag : fragments)
      EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' not in: " << msg;
  }
}

}  // namespace

TEST(Errors, ShapeMismatchNamesOpAndShapes) {
  Graph g;
  NodeId a = g.Input("a", DType::F32, {Expr(2), Expr(3)});
  NodeId b = g.Input("b", DType::F32, {Expr(3), Expr(2)});
  ExpectError([&] { g.Binary(Op::Add, a, b); }, {"Add", "[2, 3]", "[3, 2]"});
  Tensor ta{&g, a}, tb{&g, g.Input("c", DType::F32, {Expr(4), Expr(5)})};
  ExpectError([&] { (void)(ta + tb); }, {"add", "cannot broadcast", "[2, 3]", "[4, 5]"});
  ExpectError([&] { Matmul(ta, tb); }, {"matmul", "inner sizes"});
  ExpectError([&] { g.Reshape(a, {Expr(7)}); }, {"Reshape", "6 elements", "[7]"});
  ExpectError([&] { g.Permute(a, {0, 0}); }, {"Permute", "not a permutation"});
  ExpectError([&] { g.Expand(a, {Expr(2), Expr(4)}); }, {"Expand", "axis 1"});
  ExpectError([&] { g.Reduce(Op::SumReduce, a, {2}); }, {"SumReduce", "bad axis 2"});
}

TEST(Errors, OutOfRangeViewsAndBadIndices) {
  Graph g;
  NodeId a = g.Input("a", DType::F32, {Expr(4), Expr(3)});
  ExpectError([&] { g.Slice(a, {0, 2}, {Expr(4), Expr(2)}, {}); }, {"Slice", "axis 1", "out of bounds"});
  ExpectError([&] { g.Slice(a, {0, 0}, {Expr(2), Expr(2)}, {1, 0}); }, {"Slice", "positive constant"});
  ExpectError([&] { g.Pad(a, {-1, 0}, {0, 0}); }, {"Pad", "negative padding"});
  ExpectError([&] { g.Gather(a, a, 0); }, {"Gather", "integer dtype"});
  ExpectError([&] { g.Iota({Expr(3)}, 1); }, {"Iota", "axis 1"});
  ExpectError([&] { g.Weight("w", DType::Q8_0, {Expr(4), Expr(30)}); }, {"Weight 'w'", "multiple of 32"});
  // A symbolic slice that runs past its axis is caught when the sizes are known, at run time.
  Graph h;
  NodeId x = h.Input("x", DType::F32, {Expr::Sym("n")});
  h.MarkOutput(h.Slice(x, {Expr(2)}, {Expr::Sym("m")}, {}), "y");
  Interpreter it(h);
  ExpectError(
      [&] {
        it.Run({{"x", HostTensor::Zeros(DType::F32, {4})}}, {{"m", 3}});
      },
      {"Slice", "size-4 axis"});
}

TEST(Errors, RunTimeBindingErrors) {
  Graph g;
  Expr n = Expr::Sym("n");
  NodeId x = g.Input("x", DType::F32, {n, Expr(2)});
  NodeId w = g.Weight("w", DType::F32, {Expr(2)});
  NodeId y = g.Input("y", DType::F32, {Expr::Sym("m")});
  g.MarkOutput(g.Binary(Op::Mul, x, g.Expand(g.Reshape(w, {Expr(1), Expr(2)}), {n, Expr(2)})), "out");
  g.MarkOutput(g.Reduce(Op::SumReduce, y, {0}), "s");
  auto prog = Program::Compile(g);
  auto good_x = HostTensor::Zeros(DType::F32, {3, 2});
  auto good_y = HostTensor::Zeros(DType::F32, {5});
  ExpectError([&] { prog->Run({{"x", good_x}}); }, {"missing input 'y'"});
  ExpectError(
      [&] {
        prog->Run({{"x", HostTensor::Zeros(DType::F32, {3, 4})}, {"y", good_y}});
      },
      {"input 'x' axis 1", "size 4", "expects 2"});
  ExpectError(
      [&] {
        prog->Run({{"x", HostTensor::Zeros(DType::F16, {3, 2})}, {"y", good_y}});
      },
      {"input 'x'", "dtype f16", "f32"});
  ExpectError([&] { prog->Run({{"x", good_x}, {"y", good_y}}); }, {"weight 'w' was not bound"});
  ExpectError([&] { prog->BindWeight("w", HostTensor::Zeros(DType::BF16, {2})); }, {"weight 'w'", "bf16"});
  ExpectError([&] { prog->BindWeight("nope", HostTensor::Zeros(DType::F32, {2})); }, {"'nope'", "not used"});
  prog->BindWeight("w", HostTensor::Zeros(DType::F32, {3}));
  ExpectError([&] { prog->Run({{"x", good_x}, {"y", good_y}}); }, {"weight 'w'", "[3]", "[2]"});
  Graph u;
  u.MarkOutput(u.Iota({Expr::Sym("k")}, 0), "i");
  Interpreter it(u);
  ExpectError([&] { it.Run({}); }, {"unbound symbol 'k'"});
  ExpectError([&] { Program::Compile(Graph()); }, {"no outputs"});
}

}  // namespace prism
