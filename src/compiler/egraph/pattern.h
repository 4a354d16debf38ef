// Rewrite patterns: a small s-expression syntax over the primitive ops, matched in an e-graph and
// instantiated into it.
//
//   (Add ?a (Mul ?b 1))   ops by their IR name, ?x a variable (one class), numbers a constant class
//   (Reshape:r ?a)        a label: on the left it names the matched node, on the right a node is built with
//                         that node's attributes (shape, axes, args, dtype of a cast)
//
// A number on the right takes the dtype and shape of its first sibling that is not a number.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/egraph/egraph.h"

namespace prism {

struct Pattern {
  enum class Kind : uint8_t { Var, Number, Node };
  Kind kind = Kind::Var;
  std::string var;  // Var: the name without '?'
  double number = 0;
  Op op = Op::Add;
  std::string label;  // Node: "" or the label after ':'
  std::vector<Pattern> kids;

  // Throws prism::Error naming the text and the position of a syntax error.
  static Pattern Parse(const std::string& text);
  std::string str() const;
  // The variables and labels it uses.
  void Names(std::vector<std::string>* vars, std::vector<std::string>* labels) const;
};

struct Match {
  ClassId root;
  std::map<std::string, ClassId> vars;
  std::map<std::string, ENode> labels;
};

// Every match of p rooted at class c (in the e-graph's current, rebuilt state), in a fixed order.
void MatchIn(const EGraph& eg, const Pattern& p, ClassId c, std::vector<Match>* out);
// Builds p's right side for a match; nullopt where a node cannot be built (the builder's shape and dtype
// checks reject it) or the result's dtype or shape differ from the matched class's.
std::optional<ClassId> Instantiate(EGraph& eg, const Pattern& p, const Match& m);

}  // namespace prism
