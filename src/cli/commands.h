// The `prism` subcommands: each registers its options on the app and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "backends/device.h"

namespace prism::cli {

// A registered subcommand: run() is called when it was chosen on the command line.
using Runner = std::function<int()>;

Runner AddRunCommand(CLI::App& app);
Runner AddChatCommand(CLI::App& app);
Runner AddPerplexityCommand(CLI::App& app);
Runner AddGraphCommand(CLI::App& app);
Runner AddLogitsCommand(CLI::App& app);
Runner AddBenchCommand(CLI::App& app);
Runner AddCompileCommand(CLI::App& app);
Runner AddReportCommand(CLI::App& app);
Runner AddServeCommand(CLI::App& app);
Runner AddEmbedCommand(CLI::App& app);

// A registry device's name, with ":ARG" where the device takes one (systolic:edge).
inline CLI::Validator DeviceName() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const std::string name = value.substr(0, value.find(':'));
        for (const std::string& n : DeviceNames())
          if (n == name) return "";
        return "unknown device '" + value + "'";
      },
      "DEVICE");
}

// --device NAME: where the model's step runs (default cpu), one of the registry's devices.
inline void AddDeviceOption(CLI::App* cmd, std::string& device) {
  std::string names;
  for (const std::string& n : DeviceNames()) names += (names.empty() ? "" : ", ") + n;
  cmd->add_option("--device", device, "where the model runs: " + names + " (systolic:NAME: a description)")
      ->capture_default_str()
      ->check(DeviceName());
}

// --program NAME: which of the step graph's rewritten programs runs (`prism graph --rewrites` lists them);
// unset: the program search's choice (timed with a search budget, else the tuning database's).
inline void AddProgramOption(CLI::App* cmd, std::string& program) {
  cmd->add_option(
      "--program", program,
      "which rewritten program runs: 'as written', 'rewritten', ... (default: the program search's "
      "choice, remembered in the tuning database)");
}

// --exact: no product rounds its activation (quantized weights' products in f32, slower).
inline void AddExactOption(CLI::App* cmd, bool& exact) {
  cmd->add_flag("--exact", exact,
                "quantized weights' products in f32 against the activation as given (default: int8 dot "
                "products against it rounded per 32 values, as llama.cpp computes them; faster)");
}

// --prefill-device NAME and --decode-device NAME: prompts on one device, generation on another (the KV
// cache handed over after each prompt); --decode-device is --device by another name.
inline void AddSplitDeviceOptions(CLI::App* cmd, std::string& device, std::string& prefill_device) {
  cmd->add_option("--prefill-device", prefill_device,
                  "where prompts run (default: --device); the KV cache then "
                  "moves to the decoding device")
      ->check(DeviceName());
  cmd->add_option("--decode-device", device, "where generation runs: --device by another name")
      ->check(DeviceName());
}

// The model `prism run` uses when none is named: the stories260K checkpoint shipped in models/.
std::string DefaultModelPath();

}  // namespace prism::cli
