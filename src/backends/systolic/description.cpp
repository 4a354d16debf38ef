// Reading systolic-system descriptions: the built-in ones (compiled in from descriptions/) and files.
#include "backends/systolic/description.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "ir/error.h"

namespace prism {

namespace {

double Positive(const nlohmann::json& j, const char* section, const char* field, const std::string& origin) {
  const nlohmann::json* v = &j;
  std::string where = field;
  if (section) {
    if (!j.contains(section) || !j[section].is_object())
      throw Error(origin + ": missing object '" + section + "'");
    v = &j[section];
    where = std::string(section) + "." + field;
  }
  if (!v->contains(field) || !(*v)[field].is_number())
    throw Error(origin + ": missing number '" + where + "'");
  const double x = (*v)[field].get<double>();
  if (!(x > 0) || x > 1e15)
    throw Error(origin + ": '" + where + "' must be positive, got " + (*v)[field].dump());
  return x;
}

}  // namespace

SystolicDescription ParseSystolicDescription(const nlohmann::json& given, const std::string& origin) {
  if (!given.is_object()) throw Error(origin + ": a systolic description is a JSON object");
  // "extends": a built-in description whose fields this one's replace (a JSON merge patch).
  nlohmann::json j = given;
  if (given.contains("extends")) {
    const std::string base = given["extends"].is_string() ? given["extends"].get<std::string>() : "";
    auto texts = SystolicDescriptionTexts();
    auto it = std::find_if(texts.begin(), texts.end(), [&](const auto& t) { return t.first == base; });
    if (it == texts.end()) throw Error(origin + ": extends '" + base + "', which is no built-in description");
    j = nlohmann::json::parse(it->second);
    if (j.contains("extends")) throw Error(origin + ": extends '" + base + "', which itself extends another");
    nlohmann::json patch = given;
    patch.erase("extends");
    j.merge_patch(patch);
  }
  SystolicDescription d;
  d.name = j.value("name", origin);
  d.about = j.value("about", "");
  d.devices = (int)Positive(j, nullptr, "devices", origin);
  d.rows = (int64_t)Positive(j, "array", "rows", origin);
  d.cols = (int64_t)Positive(j, "array", "cols", origin);
  d.arrays = j["array"].contains("count") ? (int64_t)Positive(j, "array", "count", origin) : 1;
  d.clock_ghz = Positive(j, "array", "clock_ghz", origin);
  const std::string flow = j["array"].value("dataflow", "weight_stationary");
  if (flow == "weight_stationary")
    d.dataflow = Dataflow::WeightStationary;
  else if (flow == "output_stationary")
    d.dataflow = Dataflow::OutputStationary;
  else
    throw Error(origin + ": array.dataflow '" + flow + "' (expected weight_stationary or output_stationary)");
  d.weight_double_buffer = j["array"].value("weight_double_buffer", true);
  d.vector_lanes = (int64_t)Positive(j, "vector", "lanes", origin);
  if (j["vector"].contains("start_cycles"))
    d.vector_start_cycles = Positive(j, "vector", "start_cycles", origin);
  d.sram_inputs = (int64_t)(Positive(j, "sram_kib", "inputs", origin) * 1024);
  d.sram_weights = (int64_t)(Positive(j, "sram_kib", "weights", origin) * 1024);
  d.sram_outputs = (int64_t)(Positive(j, "sram_kib", "outputs", origin) * 1024);
  if (j["sram_kib"].contains("weight_staging"))
    d.weight_staging = (int64_t)(Positive(j, "sram_kib", "weight_staging", origin) * 1024);
  d.hbm_bytes = Positive(j, "hbm", "gib", origin) * (1 << 30);
  d.hbm_gbps = Positive(j, "hbm", "gbps", origin);
  d.link_gbps = Positive(j, "link", "gbps", origin);
  d.link_latency_us = Positive(j, "link", "latency_us", origin);
  d.launch_us = Positive(j, "link", "launch_us", origin);
  const std::string products = j.contains("numerics") ? j["numerics"].value("products", "bf16") : "bf16";
  if (products != "bf16" && products != "f32")
    throw Error(origin + ": numerics.products '" + products + "' (expected bf16 or f32)");
  d.bf16_products = products == "bf16";
  if (j.contains("numerics") && j["numerics"].value("accumulate", "f32") != "f32")
    throw Error(origin + ": numerics.accumulate must be f32 (the only accumulator simulated)");
  d.sources = j.value("sources", nlohmann::json::object());
  d.text = j.dump();
  return d;
}

std::vector<std::string> BuiltinSystolicDescriptions() {
  std::vector<std::string> names;
  for (const auto& [name, text] : SystolicDescriptionTexts()) names.push_back(name);
  return names;
}

SystolicDescription LoadSystolicDescription(const std::string& name_or_path) {
  const std::string name = name_or_path.empty() ? "quad" : name_or_path;
  for (const auto& [n, text] : SystolicDescriptionTexts())
    if (n == name) return ParseSystolicDescription(nlohmann::json::parse(text), "systolic description " + n);
  std::ifstream in(name);
  if (!in) {
    std::string known;
    for (const std::string& n : BuiltinSystolicDescriptions()) known += (known.empty() ? "" : ", ") + n;
    throw Error(name + ": no such systolic description (built in: " + known + "; or a .json file)");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) throw Error(name + ": not valid JSON");
  return ParseSystolicDescription(j, name);
}

}  // namespace prism
