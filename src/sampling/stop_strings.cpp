// Stop-string matching over streamed text: emit what is safe, hold back possible stop prefixes.
#include "sampling/stop_strings.h"

#include <algorithm>

#include "ir/error.h"

namespace prism {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (size_t i = 0; i < stops_.size(); ++i)
    if (stops_[i].empty()) throw Error("StopStringMatcher: stop string #" + std::to_string(i) + " is empty");
}

size_t StopStringMatcher::HeldSuffixLength() const {
  size_t best = 0;
  for (const std::string& stop : stops_) {
    size_t max_len = std::min(pending_.size(), stop.size() - 1);
    for (size_t len = max_len; len > best; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(stop).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

StopStringMatcher::Result StopStringMatcher::Push(std::string_view new_text) {
  if (stopped_) return {"", true};
  // Byte by byte, so the stop that completes first wins however the text was chunked; held-back
  // text from earlier pushes stays in pending_, so a stop split across pushes is found.
  for (char c : new_text) {
    pending_.push_back(c);
    size_t longest = 0;  // of the stops ending here, the longest starts earliest
    for (const std::string& stop : stops_)
      if (stop.size() > longest && std::string_view(pending_).ends_with(stop)) longest = stop.size();
    if (longest > 0) {
      stopped_ = true;
      std::string emit = pending_.substr(0, pending_.size() - longest);
      pending_.clear();
      return {std::move(emit), true};
    }
  }
  // Everything before the longest possible stop prefix can never be part of a stop string.
  size_t held = HeldSuffixLength();
  std::string emit = pending_.substr(0, pending_.size() - held);
  pending_.erase(0, pending_.size() - held);
  return {std::move(emit), false};
}

std::string StopStringMatcher::Flush() {
  std::string rest = stopped_ ? std::string() : std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace prism
