// The receipts page of `prism report`: a summary per size bucket (step time, shares by kind of work and
// by layer), a roofline plot per bucket (labelled log axes, one ceiling per instruction kind, points
// named on hover), then every kernel's receipt.
#include "cli/report_page.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace prism::cli {
namespace {

using json = nlohmann::json;

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '\'')
      out += "&#39;";
    else
      out += c;
  }
  return out;
}

std::string Us(double us) {
  return us >= 1000 ? fmt::format("{:.2f} ms", us / 1000) : fmt::format("{:.1f} µs", us);
}

// Bars of shares, largest first: label, share of the total, and the time it stands for.
std::string Bars(const std::map<std::string, double>& parts, double total, size_t max_rows) {
  std::vector<std::pair<std::string, double>> v(parts.begin(), parts.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string s = "<table class='bars'>";
  for (size_t i = 0; i < v.size() && i < max_rows; ++i) {
    const double share = total > 0 ? 100 * v[i].second / total : 0;
    s += fmt::format(
        "<tr><td>{}</td><td><div class='bar' "
        "style='width:{:.1f}%'></div></td><td>{:.1f}%</td><td>{}</td></tr>",
        Escape(v[i].first), share, share, Us(v[i].second));
  }
  return s + "</table>";
}

// The layer an op name belongs to ("layer 3 q_proj" -> "layer 3"), else "outside the layers".
std::string LayerOf(const std::string& op) {
  if (op.rfind("layer ", 0) != 0) return "outside the layers";
  const size_t sp = op.find(' ', 6);
  return op.substr(0, sp);
}

// Log-log roofline for one bucket's rows: x = flop per byte, y = GFLOP/s reached.
std::string Roofline(const std::vector<json>& rows, int* above_roof) {
  double bw = 0;
  std::map<std::string, double> ceilings;  // instruction kind -> GFLOP/s
  for (const json& r : rows) {
    bw = std::max(bw, r.value("read_gbps", 0.0));
    if (r.value("peak_gflops", 0.0) > 0)
      ceilings[r.value("peak_basis", "peak")] = r.value("peak_gflops", 0.0);
  }
  if (bw <= 0 || ceilings.empty()) return "";
  double top = 0;
  for (const auto& [kind, g] : ceilings) top = std::max(top, g);
  const double W = 760, H = 440, L = 70, R = 150, T = 20, B = 50;
  const double x0 = 1e-2, x1 = 1e4, y0 = 1e-1, y1 = std::pow(10, std::ceil(std::log10(top * 1.5)));
  auto X = [&](double v) {
    return L + (std::log10(std::clamp(v, x0, x1)) - std::log10(x0)) / std::log10(x1 / x0) * (W - L - R);
  };
  auto Y = [&](double v) {
    return H - B - (std::log10(std::clamp(v, y0, y1)) - std::log10(y0)) / std::log10(y1 / y0) * (H - T - B);
  };
  std::string s =
      fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' class='roofline'>", W, H);
  // Axes with a labelled tick per decade.
  for (double v = x0; v <= x1 * 1.001; v *= 10)
    s += fmt::format(
        "<line x1='{0:.1f}' y1='{1}' x2='{0:.1f}' y2='{2}' class='grid'/><text x='{0:.1f}' y='{3}' "
        "class='tick' text-anchor='middle'>{4:g}</text>",
        X(v), T, H - B, H - B + 16, v);
  for (double v = y0; v <= y1 * 1.001; v *= 10)
    s += fmt::format(
        "<line x1='{0}' y1='{1:.1f}' x2='{2}' y2='{1:.1f}' class='grid'/><text x='{3}' y='{4:.1f}' "
        "class='tick' text-anchor='end'>{5:g}</text>",
        L, Y(v), W - R, L - 6, Y(v) + 4, v);
  s += fmt::format(
      "<text x='{:.0f}' y='{}' class='axis' text-anchor='middle'>arithmetic intensity (flop per byte "
      "moved)</text>",
      (L + W - R) / 2, H - 12);
  s += fmt::format(
      "<text x='16' y='{:.0f}' class='axis' text-anchor='middle' transform='rotate(-90 16 {:.0f})'>GFLOP/s "
      "reached</text>",
      (T + H - B) / 2, (T + H - B) / 2);
  // The memory roof, then one compute ceiling per instruction kind, each labelled.
  s += fmt::format("<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' class='roof'/>", X(x0), Y(x0 * bw),
                   X(top / bw), Y(top));
  s += fmt::format("<text x='{:.1f}' y='{:.1f}' class='rooflabel'>{:.1f} GB/s</text>", X(x0) + 4,
                   Y(x0 * bw * 3) - 4, bw);
  for (const auto& [kind, g] : ceilings) {
    s += fmt::format("<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' class='roof'/>", X(g / bw), Y(g),
                     W - R, Y(g));
    s += fmt::format("<text x='{:.1f}' y='{:.1f}' class='rooflabel'>{} {:.0f}</text>", W - R + 4, Y(g) + 4,
                     Escape(kind), g);
  }
  for (const json& r : rows) {
    const double flops = r.value("flops", 0.0), bytes = r.value("bytes", 0.0), us = r.value("median_us", 0.0);
    if (us <= 0 || flops <= 0 || bytes <= 0) continue;
    const double ai = flops / bytes, gflops = flops / us / 1e3;
    const double roof = std::min(r.value("peak_gflops", top), ai * bw);
    const bool above = gflops > roof * 1.02;
    *above_roof += above;
    s += fmt::format(
        "<circle cx='{:.1f}' cy='{:.1f}' r='5' class='pt {}{}'><title>{} ({}, {}): {:.1f} GFLOP/s, "
        "{:.0f}% of its roof</title></circle>",
        X(ai), Y(gflops), r.value("kind", "kernel"), above ? " above" : "", Escape(r.value("op", "")),
        Escape(r.value("kernel", "")), Escape(r.value("chosen", "")), gflops, 100 * gflops / roof);
  }
  return s + "</svg>";
}

constexpr const char* kStyle = R"(<style>
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1120px;margin:24px auto;padding:0 16px;color:#1d2330}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #d8dce4;padding-bottom:4px}
.meta{color:#5b6372;font-size:13px}.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{background:#f4f6fa;border-radius:8px;padding:10px 14px;min-width:150px}.card b{display:block;font-size:20px}
.cols{display:flex;gap:32px;flex-wrap:wrap}.cols>div{flex:1;min-width:320px}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;text-align:left;vertical-align:top}
table.bars td:nth-child(2){width:220px}.bar{background:#4a78c2;height:10px;border-radius:3px}
table.receipts tr:nth-child(even){background:#f7f8fb}table.receipts th{background:#e9edf4;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}.cand{color:#5b6372;font-size:12px}.failed{color:#b3261e}
svg.roofline{background:#fff;border:1px solid #d8dce4;border-radius:6px;margin-top:8px}
.grid{stroke:#eceff4}.tick{font-size:11px;fill:#5b6372}.axis{font-size:12px;fill:#1d2330}
.roof{stroke:#1d2330;stroke-width:1.5}.rooflabel{font-size:11px;fill:#1d2330}
.pt{fill-opacity:.75;stroke:#fff}.pt.gemm{fill:#4a78c2}.pt.attention{fill:#d9822b}.pt.reduction{fill:#4f9d69}
.pt.elementwise{fill:#8a6fb3}.pt.above{stroke:#b3261e;stroke-width:2}.legend span{margin-right:14px;font-size:12px}
.dot{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:4px;vertical-align:middle}
</style>)";

}  // namespace

BucketReceipts ReceiptsOf(const json& receipts, const std::string& bucket) {
  BucketReceipts b;
  std::set<std::string> not_run;
  for (const json& r : receipts)
    if (r.value("bucket", "") == bucket &&
        (r.value("chosen", "").rfind("template-attention", 0) == 0 || r.value("always_fused", false)))
      for (const json& k : r.value("unfused_kernels", json::array())) not_run.insert(k.get<std::string>());
  b.not_run = not_run.size();
  for (const json& r : receipts) {
    if (r.value("bucket", "") != bucket) continue;
    const std::string scope = r.value("scope", "kernel");
    if (scope == "step") b.step = r;
    if (scope == "search") b.search = r;
    if (scope == "kernel" && !not_run.count(r.value("kernel", ""))) b.rows.push_back(r);
  }
  std::sort(b.rows.begin(), b.rows.end(), [](const json& x, const json& y) {
    return x.value("median_us", 0.0) > y.value("median_us", 0.0);
  });
  return b;
}

std::string ReportPage(const std::string& title, const json& manifest, const json& receipts) {
  std::string h = std::string("<!doctype html><html><head><meta charset='utf-8'><title>Prism report: ") +
                  Escape(title) + "</title>" + kStyle + "</head><body>";
  h += "<h1>Prism report: " + Escape(title) + "</h1><div class='meta'>";
  if (manifest.is_object())
    h += fmt::format("model {} · {} · device {} · context {} · {} kernels",
                     Escape(manifest.value("model", "?")), Escape(manifest.value("architecture", "?")),
                     Escape(manifest.value("device", "cpu")), manifest.value("max_context", 0),
                     manifest.value("kernels", json::array()).size());
  h += "</div>";
  for (const char* bucket : kReportBuckets) {
    const BucketReceipts bucket_receipts = ReceiptsOf(receipts, bucket);
    const std::vector<json>& rows = bucket_receipts.rows;
    if (rows.empty()) continue;
    const std::string step_choice = bucket_receipts.step.value("chosen", "");
    const double step_us = bucket_receipts.step.value("median_us", 0.0);
    double total = 0, floor = 0;
    std::map<std::string, double> by_kind, by_layer, by_op;
    for (const json& r : rows) {
      const double us = r.value("median_us", 0.0);
      total += us;
      floor += r.value("floor_us", 0.0);
      by_kind[r.value("kind", "kernel")] += us;
      by_layer[LayerOf(r.value("op", ""))] += us;
      const std::string op = r.value("op", "");
      by_op[op.rfind("layer ", 0) == 0 ? op.substr(op.find(' ', 6) + 1) : op] +=
          us;  // q_proj over all layers
    }
    h += fmt::format("<h2>{}</h2><div class='cards'><div class='card'>kernels summed<b>{}</b></div>", bucket,
                     Us(total));
    if (step_us > 0)
      h += fmt::format("<div class='card'>whole step ({})<b>{}</b></div>", Escape(step_choice), Us(step_us));
    h += fmt::format(
        "<div class='card'>roofline floor<b>{}</b></div><div class='card'>of roofline<b>{:.0f}%</b></div>"
        "<div class='card'>kernels<b>{}</b></div></div>",
        Us(floor), total > 0 ? 100 * floor / total : 0, rows.size());
    h += "<div class='cols'><div><h3>By kind of work</h3>" + Bars(by_kind, total, 8) +
         "<h3>By op, over all layers</h3>" + Bars(by_op, total, 10) + "</div><div><h3>By layer</h3>" +
         Bars(by_layer, total, 40) + "</div></div>";
    int above = 0;
    const std::string svg = Roofline(rows, &above);
    if (!svg.empty()) {
      h += "<h3>Roofline</h3><div class='legend'><span><i class='dot' "
           "style='background:#4a78c2'></i>gemm</span>"
           "<span><i class='dot' style='background:#d9822b'></i>attention</span><span><i class='dot' "
           "style='background:#4f9d69'></i>reduction</span><span><i class='dot' "
           "style='background:#8a6fb3'></i>"
           "elementwise</span><span>hover a point for its kernel</span></div>" +
           svg;
      if (above > 0)
        h += fmt::format(
            "<p class='failed'>{} kernel(s) above their roof (outlined): timed alone, their data stayed in "
            "cache between repetitions, or the probe under-measured this machine.</p>",
            above);
    }
    h += "<h3>Every kernel</h3><table class='receipts'><tr><th>share</th><th>median</th><th>floor</th><th>of "
         "roof</th>"
         "<th>model op</th><th>kind</th><th>chosen</th><th>kernel</th><th>candidates (median, max relative "
         "error)</th></tr>";
    for (const json& r : rows) {
      const double us = r.value("median_us", 0.0), fl = r.value("floor_us", 0.0);
      std::string cands;
      for (const json& c : r.value("candidates", json::array()))
        cands += fmt::format("<div class='cand{}'>{}: {}, {:.1e}{}</div>",
                             c.value("passed", false) ? "" : " failed", Escape(c.value("candidate", "")),
                             Us(c.value("median_us", 0.0)), c.value("max_rel_error", 0.0),
                             c.value("passed", false) ? "" : " (failed its check)");
      if (cands.empty()) cands = "<div class='cand'>" + Escape(r.value("reason", "")) + "</div>";
      h += fmt::format(
          "<tr><td class='num'>{:.1f}%</td><td class='num'>{}</td><td class='num'>{}</td><td "
          "class='num'>{:.0f}%</td>"
          "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
          total > 0 ? 100 * us / total : 0, Us(us), Us(fl), us > 0 ? 100 * fl / us : 0,
          Escape(r.value("op", "")), Escape(r.value("kind", "")), Escape(r.value("chosen", "")),
          Escape(r.value("kernel", "")), cands);
    }
    h += "</table>";
  }
  return h + "</body></html>";
}

}  // namespace prism::cli
