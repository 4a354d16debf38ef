// `prism report`: the receipts of an artifact as a table by share of step time, and the HTML page.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/commands.h"
#include "cli/report_page.h"
#include "ir/error.h"

namespace prism::cli {

Runner AddReportCommand(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("report", "Print an artifact's receipts by share of step time; write report.html");
  struct Opts {
    std::string artifact, html;
    int top = 20;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("artifact", o->artifact, "artifact folder written by `prism compile`")->required();
  cmd->add_option("--html", o->html, "HTML page to write (default: ARTIFACT/report.html)");
  cmd->add_option("--top", o->top, "rows per bucket")->capture_default_str();
  return [o]() {
    std::ifstream f(std::filesystem::path(o->artifact) / "receipts.json");
    if (!f) throw Error(o->artifact + ": no receipts.json (not an artifact written by `prism compile`)");
    nlohmann::json receipts = nlohmann::json::parse(f, nullptr, false);
    if (!receipts.is_array()) throw Error(o->artifact + "/receipts.json: not a receipts list");
    std::ifstream mf(std::filesystem::path(o->artifact) / "manifest.json");
    nlohmann::json manifest = nlohmann::json::parse(mf, nullptr, false);
    if (manifest.is_object() && manifest.contains("memory"))
      for (const char* step : {"prefill", "decode"}) {
        const nlohmann::json m = manifest["memory"].value(step, nlohmann::json::object());
        if (!m.contains("arena_bytes")) continue;
        std::string line = fmt::format(
            "{} scratch memory at {}: {:.1f} MiB in one arena for {} buffers, {} written in place over an "
            "input ({:.1f} MiB as separate buffers)",
            step, m["sizes"].dump(), m["arena_bytes"].get<double>() / (1 << 20),
            m["scratch_buffers"].get<int64_t>(), m.value("written_in_place", 0),
            m["scratch_bytes_separate"].get<double>() / (1 << 20));
        std::printf("%s\n", line.c_str());
      }
    for (const auto& r : receipts) {  // the program search: which rewritten program runs, what it timed
      if (r.value("scope", "") != "program") continue;
      std::printf("program: %s (%s)\n", r.value("chosen", "").c_str(), r.value("reason", "").c_str());
      for (const auto& w : r.value("rewrites", nlohmann::json::array()))
        std::printf("  rewrite: %s\n", w.get<std::string>().c_str());
      for (const auto& t : r.value("timed", nlohmann::json::array())) {
        std::string times;
        const nlohmann::json medians = t.value("median_us", nlohmann::json::object());
        for (const auto& [bucket, us] : medians.items())
          times += fmt::format("{}{} {:.1f} us", times.empty() ? "" : ", ", bucket, us.get<double>());
        std::printf("  timed '%s': %s%s\n", t.value("candidate", "").c_str(),
                    t.value("passed", false) ? times.c_str() : "failed the check: ",
                    t.value("passed", false) ? "" : t.value("error", "").c_str());
      }
      if (r.contains("saturation")) std::printf("  saturation: %s\n", r["saturation"].dump().c_str());
    }
    for (const char* bucket : kReportBuckets) {
      const BucketReceipts b = ReceiptsOf(receipts, bucket);
      const std::vector<nlohmann::json>& rows = b.rows;
      if (rows.empty()) continue;
      double total = 0;
      for (const auto& r : rows) total += r.value("median_us", 0.0);
      const nlohmann::json& search = b.search;
      if (search.value("others_cpu_fraction", 0.0) > 0 && search.value("decisions", 0) > 0)
        std::printf("%s search: other processes used %.0f%% of the CPU time%s\n", bucket,
                    100 * search.value("others_cpu_fraction", 0.0),
                    search.value("saved", true) ? "" : " (its decisions were not saved)");
      if (!b.step.empty())  // the whole-step decision (team or one thread), not a kernel
        std::printf("%s step runs on: %s (%s)\n", bucket, b.step.value("chosen", "").c_str(),
                    b.step.value("reason", "").c_str());
      std::printf("%s step: %zu kernels, %.1f us summed (%zu of the unfused attention form not run)\n",
                  bucket, rows.size(), total, b.not_run);
      std::printf("  %6s %10s %10s %7s  %-22s %-24s %s\n", "share", "median_us", "floor_us", "roof%",
                  "chosen", "model op", "kernel");
      for (size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        double us = r.value("median_us", 0.0), floor = r.value("floor_us", 0.0);
        double share = total > 0 ? 100 * us / total : 0, frac = us > 0 ? 100 * floor / us : 0;
        if ((int)i < o->top)
          std::printf("  %5.1f%% %10.2f %10.2f %6.1f%%  %-22s %-24s %s\n", share, us, floor, frac,
                      r.value("chosen", "").c_str(), r.value("op", "").c_str(),
                      r.value("kernel", "").c_str());
      }
    }
    std::string out =
        o->html.empty() ? (std::filesystem::path(o->artifact) / "report.html").string() : o->html;
    std::ofstream(out) << ReportPage(o->artifact, manifest, receipts);
    std::printf("wrote %s\n", out.c_str());
    return 0;
  };
}

}  // namespace prism::cli
