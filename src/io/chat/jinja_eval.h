// Rendering of a parsed Jinja template, and the built-in filters, tests, methods and globals.
#pragma once

#include <string>

#include "io/chat/jinja_ast.h"
#include "io/chat/jinja_value.h"

namespace prism::jinja {

// Renders `body` with `context` as the global variables (built-in globals are added underneath).
std::string Render(const Body& body, const Dict& context);

// Built-ins (jinja_builtins.cpp). The parser checks names so that an unsupported filter or test
// is reported with its position when the template is loaded, not when a branch first runs.
bool IsKnownFilter(const std::string& name);
bool IsKnownTest(const std::string& name);
// Each throws prism::Error (without position; the evaluator adds it) on bad arguments.
Value ApplyFilter(const std::string& name, const Value& operand, Args& args);
bool ApplyTest(const std::string& name, const Value& operand, Args& args);
// `obj.name` for methods of str and dict (e.g. "a b".split()); Undefined if there is none.
Value BoundMethod(const Value& obj, const std::string& name);
// raise_exception, namespace, range, dict, strftime_now.
void AddGlobals(Dict& globals);

// Exception thrown by raise_exception(): carries the template's own message unchanged.
struct TemplateRaised {
  std::string message;
};

}  // namespace prism::jinja
