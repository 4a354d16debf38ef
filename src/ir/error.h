// The one exception type Prism throws for bad input: a one-line message naming what and where.
#pragma once

#include <stdexcept>
#include <string>

namespace prism {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

}  // namespace prism
