// TextStream: an ostringstream in the classic "C" locale, for generated source, keys and printouts.
#pragma once

#include <locale>
#include <sstream>

namespace prism {

// A program that embeds Prism may set the global C++ locale (a decimal comma, digit grouping); text
// that a compiler or a key reads back must not change with it: `1,5e+00f` in a kernel would be C's
// comma operator. Every stream that writes such text is this one.
class TextStream : public std::ostringstream {
 public:
  TextStream() { imbue(std::locale::classic()); }
};

}  // namespace prism
