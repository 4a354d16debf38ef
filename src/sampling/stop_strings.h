// Streams generated text while cutting it at the first stop string, never showing part of one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace prism {

// Text that could still grow into a stop string is held back until it either completes one
// (generation stops; the stop string and everything after it are dropped) or cannot any more
// (the held text is released). Matching is on bytes; stop strings must be non-empty. The stop
// that completes first in the text wins, so the result does not depend on how text is chunked.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;  // text safe to show now
    bool stopped;      // a stop string was found; later pushes emit nothing
  };
  Result Push(std::string_view new_text);
  // End of generation without a stop: returns the held-back text.
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t HeldSuffixLength() const;

  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace prism
