// The receipts page of `prism report` (HTML): summary, roofline and every kernel's receipt per bucket.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace prism::cli {

// The size buckets a search decides, in the order reports list them.
inline constexpr const char* kReportBuckets[] = {"decode", "batch", "batch-wide", "prefill", "prefill-long"};

// One bucket's receipts as its step runs: the kernels' (longest median first, without those a chosen
// attention template leaves unrun), the whole-step decision and how busy the machine was while timing.
struct BucketReceipts {
  std::vector<nlohmann::json> rows;
  size_t not_run = 0;  // kernels of the unfused attention form that do not run
  nlohmann::json step = nlohmann::json::object(), search = nlohmann::json::object();
};
BucketReceipts ReceiptsOf(const nlohmann::json& receipts, const std::string& bucket);

std::string ReportPage(const std::string& title, const nlohmann::json& manifest,
                       const nlohmann::json& receipts);

}  // namespace prism::cli
