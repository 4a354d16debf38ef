// The receipts page of `prism report` (HTML): summary, roofline and every kernel's receipt per bucket.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace prism::cli {

std::string ReportPage(const std::string& title, const nlohmann::json& manifest,
                       const nlohmann::json& receipts);

}  // namespace prism::cli
