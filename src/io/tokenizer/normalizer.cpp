// Normalizer: runs its steps in order, as tokenizers' Sequence normalizer does.
#include "io/tokenizer/normalizer.h"

namespace prism {

std::string Normalizer::Apply(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kUnicode: s = unicode::Normalize(s, step.form); break;
      case Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.text);
        break;
      case Kind::kReplace: s = step.pattern.ReplaceAll(s, step.text); break;
    }
  }
  return s;
}

}  // namespace prism
