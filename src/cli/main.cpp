// Entry point of the `prism` command line: dispatches to subcommands, turns errors into one line.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "ir/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Prism: a search-based compiler and inference engine for neural networks"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, prism::cli::Runner>> commands;
  auto add = [&](const char* name, prism::cli::Runner r) {
    commands.emplace_back(app.get_subcommand(name), std::move(r));
  };
  add("run", prism::cli::AddRunCommand(app));
  add("chat", prism::cli::AddChatCommand(app));
  add("perplexity", prism::cli::AddPerplexityCommand(app));
  add("graph", prism::cli::AddGraphCommand(app));
  add("logits", prism::cli::AddLogitsCommand(app));
  add("bench", prism::cli::AddBenchCommand(app));
  add("compile", prism::cli::AddCompileCommand(app));
  add("report", prism::cli::AddReportCommand(app));
  add("serve", prism::cli::AddServeCommand(app));
  add("embed", prism::cli::AddEmbedCommand(app));
  // CLI11 answers an unknown first word with "A subcommand is required": name the word instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const auto& [sub, run] : commands) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == argv[1];
    }
    if (!known) {
      std::fprintf(stderr, "prism: error: unknown command '%s' (commands: %s; see prism --help)\n", argv[1],
                   names.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const prism::Error& e) {
    std::fprintf(stderr, "prism: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
