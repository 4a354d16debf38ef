// `prism report`: the receipts of an artifact as a table by share of step time, and an HTML roofline.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/commands.h"
#include "ir/error.h"

namespace prism::cli {

namespace {

std::string Svg(const std::vector<nlohmann::json>& rows, double peak_gflops, double bw_gbps) {
  // Log-log roofline: x = arithmetic intensity (flop/byte), y = GFLOP/s reached.
  const double w = 640, h = 400, x0 = 1e-2, x1 = 1e3, y0 = 1e-2, y1 = std::max(1e3, peak_gflops * 2);
  auto X = [&](double v) {
    return 50 + (std::log10(std::max(v, x0)) - std::log10(x0)) / (std::log10(x1) - std::log10(x0)) * (w - 60);
  };
  auto Y = [&](double v) {
    return h - 30 -
           (std::log10(std::max(v, y0)) - std::log10(y0)) / (std::log10(y1) - std::log10(y0)) * (h - 40);
  };
  std::string s = "<svg xmlns='http://www.w3.org/2000/svg' width='" + std::to_string((int)w) + "' height='" +
                  std::to_string((int)h) + "'><rect width='100%' height='100%' fill='white'/>";
  // The roof: bandwidth slope up to the ridge, then the compute ceiling.
  double ridge = peak_gflops / std::max(bw_gbps, 1e-9);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<polyline fill='none' stroke='black' points='%.1f,%.1f %.1f,%.1f %.1f,%.1f'/>", X(x0),
                Y(x0 * bw_gbps), X(ridge), Y(peak_gflops), X(x1), Y(peak_gflops));
  s += buf;
  for (const auto& r : rows) {
    double flops = r.value("flops", 0.0), bytes = r.value("bytes", 1.0), us = r.value("median_us", 0.0);
    if (us <= 0 || flops <= 0) continue;
    std::snprintf(
        buf, sizeof buf, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'><title>%s %s: %.1f us</title></circle>",
        X(flops / bytes), Y(flops / us / 1e3), r.value("bucket", "") == "decode" ? "steelblue" : "darkorange",
        r.value("kernel", "").c_str(), r.value("chosen", "").c_str(), us);
    s += buf;
  }
  s += "<text x='50' y='" + std::to_string((int)h - 8) +
       "' font-size='12'>arithmetic intensity (flop/byte, log)</text>";
  s += "<text x='5' y='15' font-size='12'>GFLOP/s (log); blue: decode, orange: prefill</text></svg>";
  return s;
}

}  // namespace

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
    std::string html =
        "<html><head><meta charset='utf-8'><title>Prism report</title></head><body "
        "style='font-family:sans-serif'>";
    html += "<h1>Prism report: " + o->artifact + "</h1>";
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
        html += "<p>" + line + "</p>";
      }
    for (const char* bucket : {"decode", "prefill", "prefill-long"}) {
      std::vector<nlohmann::json> rows;
      double total = 0;
      // Kernels a chosen fused attention template makes unnecessary: they do not run in the step.
      std::set<std::string> not_run;
      for (const auto& r : receipts)
        if (r.value("bucket", "") == bucket && r.value("chosen", "").rfind("template-attention", 0) == 0)
          for (const auto& k : r.value("unfused_kernels", nlohmann::json::array()))
            not_run.insert(k.get<std::string>());
      std::string step_line;    // the whole-step decision (team or one thread), not a kernel
      std::string search_line;  // how busy the machine was while the search timed candidates
      for (const auto& r : receipts) {
        if (r.value("bucket", "") != bucket) continue;
        if (r.value("scope", "kernel") == "step") {
          step_line = std::string(bucket) + " step runs on: " + r.value("chosen", "") + " (" +
                      r.value("reason", "") + ")";
          continue;
        }
        if (r.value("scope", "kernel") == "search") {
          if (r.value("others_cpu_fraction", 0.0) > 0 && r.value("decisions", 0) > 0)
            search_line = fmt::format("{} search: other processes used {:.0f}% of the CPU time{}", bucket,
                                      100 * r.value("others_cpu_fraction", 0.0),
                                      r.value("saved", true) ? "" : " (its decisions were not saved)");
          continue;
        }
        if (not_run.count(r.value("kernel", ""))) continue;
        rows.push_back(r);
        total += r.value("median_us", 0.0);
      }
      if (rows.empty()) continue;
      for (const std::string& line : {search_line, step_line})
        if (!line.empty()) {
          std::printf("%s\n", line.c_str());
          html += "<p>" + line + "</p>";
        }
      std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
        return a.value("median_us", 0.0) > b.value("median_us", 0.0);
      });
      std::printf("%s step: %zu kernels, %.1f us summed (%zu of the unfused attention form not run)\n",
                  bucket, rows.size(), total, not_run.size());
      std::printf("  %6s %10s %10s %7s  %-22s %s\n", "share", "median_us", "floor_us", "roof%", "chosen",
                  "kernel");
      html += std::string("<h2>") + bucket +
              "</h2><table border='1' cellpadding='3'><tr><th>share</th><th>median us</th>"
              "<th>floor us</th><th>of "
              "roofline</th><th>chosen</th><th>kernel</th><th>why</th><th>candidates</th></tr>";
      for (size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        double us = r.value("median_us", 0.0), floor = r.value("floor_us", 0.0);
        double share = total > 0 ? 100 * us / total : 0, frac = us > 0 ? 100 * floor / us : 0;
        if ((int)i < o->top)
          std::printf("  %5.1f%% %10.2f %10.2f %6.1f%%  %-22s %s\n", share, us, floor, frac,
                      r.value("chosen", "").c_str(), r.value("kernel", "").c_str());
        std::string cands;
        for (const auto& c : r.value("candidates", nlohmann::json::array()))
          cands += c.value("candidate", "") + " " + std::to_string(c.value("median_us", 0.0)) + "us err " +
                   std::to_string(c.value("max_rel_error", 0.0)) +
                   (c.value("passed", false) ? "" : " FAILED") + "<br>";
        char row[512];
        std::snprintf(
            row, sizeof row,
            "<tr><td>%.1f%%</td><td>%.2f</td><td>%.2f</td><td>%.1f%%</td><td>%s</td><td>%s</td><td>", share,
            us, floor, frac, r.value("chosen", "").c_str(), r.value("kernel", "").c_str());
        html += row + r.value("reason", "") + "</td><td>" + cands + "</td></tr>";
      }
      html += "</table>";
      std::vector<nlohmann::json> all(receipts.begin(), receipts.end());
      double peak = 0, bw = 0;
      for (const auto& r : receipts) {  // the ceilings receipts were measured against, recovered from floors
        double fl = r.value("flops", 0.0), by = r.value("bytes", 0.0), fu = r.value("floor_us", 0.0);
        if (fu > 0) {
          peak = std::max(peak, fl / fu / 1e3);
          bw = std::max(bw, by / fu / 1e3);
        }
      }
      if (std::string(bucket) == "decode") html += Svg(all, peak, bw);
    }
    html += "</body></html>";
    std::string out =
        o->html.empty() ? (std::filesystem::path(o->artifact) / "report.html").string() : o->html;
    std::ofstream(out) << html;
    std::printf("wrote %s\n", out.c_str());
    return 0;
  };
}

}  // namespace prism::cli
