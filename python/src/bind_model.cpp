// Language models from Python: load anything `prism run` reads, stream generations, logits, the
// tokenizer and chat template, and `prism compile` with its receipts.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "arrays.h"
#include "bindings.h"
#include "ir/error.h"
#include "runtime/generator.h"
#include "runtime/language_model.h"

namespace prism::py {

namespace {

// Python objects as JSON (dicts, lists, strings, numbers, bools, None), for receipts and chat messages.
nlohmann::json ToJson(nb::handle h) {
  if (h.is_none()) return nullptr;
  if (nb::isinstance<nb::bool_>(h)) return nb::cast<bool>(h);
  if (nb::isinstance<nb::int_>(h)) return nb::cast<int64_t>(h);
  if (nb::isinstance<nb::float_>(h)) return nb::cast<double>(h);
  if (nb::isinstance<nb::str>(h)) return nb::cast<std::string>(h);
  if (nb::isinstance<nb::dict>(h)) {
    nlohmann::json o = nlohmann::json::object();
    for (auto [k, v] : nb::borrow<nb::dict>(h)) o[nb::cast<std::string>(nb::str(k))] = ToJson(v);
    return o;
  }
  if (nb::isinstance<nb::list>(h) || nb::isinstance<nb::tuple>(h)) {
    nlohmann::json a = nlohmann::json::array();
    for (nb::handle v : h) a.push_back(ToJson(v));
    return a;
  }
  throw Error("cannot pass a " + nb::cast<std::string>(nb::str(h.type())) + " where JSON is expected");
}

nb::object FromJson(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return nb::none();
    case nlohmann::json::value_t::boolean: return nb::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return nb::int_(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return nb::int_(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float: return nb::float_(j.get<double>());
    case nlohmann::json::value_t::string: return nb::str(j.get<std::string>().c_str());
    case nlohmann::json::value_t::array: {
      nb::list l;
      for (const auto& v : j) l.append(FromJson(v));
      return l;
    }
    case nlohmann::json::value_t::object: {
      nb::dict d;
      for (const auto& [k, v] : j.items()) d[k.c_str()] = FromJson(v);
      return d;
    }
    default: return nb::none();
  }
}

// A loaded model; one generation at a time owns its KV cache (a new one ends the previous).
struct Model {
  std::unique_ptr<LanguageModel> lm;
  std::mutex mu;       // the model's state (KV cache) is used by one call at a time
  uint64_t owner = 0;  // the generation that owns the KV cache now
};

struct Tokenizer {
  std::shared_ptr<Model> m;
  const prism::Tokenizer& tok() const { return m->lm->tokenizer(); }
};

// A streamed generation: each next() runs model steps until a piece of text is complete.
class Generation {
 public:
  Generation(std::shared_ptr<Model> m, std::vector<int32_t> input, GenerateOptions opts)
      : m_(std::move(m)), input_(std::move(input)), opts_(std::move(opts)) {
    decoder_ = std::make_unique<SequenceDecoder>(*m_->lm, input_, opts_,
                                                 [this](const std::string& s) { pieces_.push_back(s); });
    std::lock_guard<std::mutex> lock(m_->mu);
    id_ = ++m_->owner;
  }

  std::string Next() {
    while (pieces_.empty() && !decoder_->done()) Step();
    if (pieces_.empty()) throw nb::stop_iteration();
    std::string s = std::move(pieces_.front());
    pieces_.pop_front();
    return s;
  }

  const GenerateResult& result() const { return decoder_->result(); }

 private:
  void Step() {
    nb::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(m_->mu);
    if (m_->owner != id_)
      throw Error("this generation was superseded by a later generate() or logits() on the same model");
    LanguageModel& lm = *m_->lm;
    std::vector<float> logits;
    if (!started_) {
      started_ = true;
      lm.Reset();
      logits = lm.Forward(input_);
    } else {
      if (lm.position() + 1 > lm.max_context()) return decoder_->End("context");
      logits = lm.Forward({next_});
    }
    next_ = decoder_->Next(logits.data());
  }

  std::shared_ptr<Model> m_;
  std::vector<int32_t> input_;
  GenerateOptions opts_;  // the decoder reads it by reference: declared before it
  std::unique_ptr<SequenceDecoder> decoder_;
  std::deque<std::string> pieces_;
  uint64_t id_ = 0;
  bool started_ = false;
  int32_t next_ = -1;
};

std::shared_ptr<Model> Load(const std::string& path, const std::string& device, int threads, int64_t ctx,
                            double search_budget, const std::string& tokenizer, bool exact) {
  LoadOptions lo;
  lo.exact = exact;
  lo.tokenizer_path = tokenizer;
  lo.max_context = ctx;
  lo.threads = threads;
  lo.search_budget = search_budget;
  lo.device = device;
  auto m = std::make_shared<Model>();
  nb::gil_scoped_release release;
  m->lm = LanguageModel::Load(path, lo);
  return m;
}

std::string ApplyChatTemplate(const Model& m, nb::handle messages, bool add_generation_prompt) {
  if (!m.lm->chat_template())
    throw Error("this model has no chat template: pass a prompt instead of messages");
  nlohmann::json msgs = ToJson(messages);
  if (!msgs.is_array()) throw Error("messages: expected a list of {'role': ..., 'content': ...} dicts");
  for (const auto& msg : msgs)
    if (!msg.is_object() || !msg.contains("role"))
      throw Error("messages: every message is a dict with a 'role' (and usually 'content')");
  return m.lm->chat_template()->RenderJson(msgs, add_generation_prompt, m.lm->chat_variables());
}

}  // namespace

void BindModel(nb::module_& mod) {
  nb::class_<Tokenizer>(mod, "Tokenizer")
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, bool add_special) {
            return t.tok().Encode(text, add_special);
          },
          nb::arg("text"), nb::arg("add_special") = true)
      .def(
          "decode",
          [](const Tokenizer& t, nb::handle ids, bool skip_special) {
            return t.tok().Decode(TokenIds(ids, "decode"), skip_special);
          },
          nb::arg("ids"), nb::arg("skip_special") = true)
      .def("token_text", [](const Tokenizer& t, int32_t id) { return t.tok().TokenText(id); })
      .def("token_id", [](const Tokenizer& t, const std::string& piece) { return t.tok().TokenId(piece); })
      .def_prop_ro("vocab_size", [](const Tokenizer& t) { return t.tok().VocabSize(); })
      .def_prop_ro("bos_id",
                   [](const Tokenizer& t) -> std::optional<int32_t> {
                     int32_t id = t.tok().BosId();
                     return id < 0 ? std::nullopt : std::optional<int32_t>(id);
                   })
      .def_prop_ro("eos_id",
                   [](const Tokenizer& t) -> std::optional<int32_t> {
                     int32_t id = t.tok().EosId();
                     return id < 0 ? std::nullopt : std::optional<int32_t>(id);
                   })
      .def_prop_ro("has_chat_template",
                   [](const Tokenizer& t) { return t.m->lm->chat_template() != nullptr; })
      .def(
          "apply_chat_template",
          [](const Tokenizer& t, nb::handle messages, bool add_generation_prompt) {
            return ApplyChatTemplate(*t.m, messages, add_generation_prompt);
          },
          nb::arg("messages"), nb::arg("add_generation_prompt") = true);

  nb::class_<Generation>(mod, "Generation")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", &Generation::Next)
      .def_prop_ro("text", [](const Generation& g) { return g.result().text; })
      .def_prop_ro("tokens", [](const Generation& g) { return g.result().tokens; })
      .def_prop_ro("prompt_tokens", [](const Generation& g) { return g.result().prompt_tokens; })
      .def_prop_ro("finish_reason", [](const Generation& g) -> std::optional<std::string> {
        return g.result().finish_reason;
      });

  nb::class_<Model>(mod, "Model")
      .def_prop_ro("device", [](const Model& m) { return m.lm->device(); })
      .def_prop_ro("max_context", [](const Model& m) { return m.lm->max_context(); })
      .def_prop_ro("vocab_size", [](const Model& m) { return m.lm->config().vocab_size; })
      .def_prop_ro("kernel_count", [](const Model& m) { return m.lm->step().kernel_count(); })
      .def_prop_ro("compile_seconds", [](const Model& m) { return m.lm->compile_seconds(); });

  mod.def("_tokenizer", [](std::shared_ptr<Model> m) { return Tokenizer{std::move(m)}; });
  mod.def("_load", &Load, nb::arg("path"), nb::arg("device"), nb::arg("threads"), nb::arg("ctx"),
          nb::arg("search_budget"), nb::arg("tokenizer"), nb::arg("exact"));
  mod.def(
      "_encode_prompt",
      [](std::shared_ptr<Model> m, nb::handle prompt, nb::handle messages) {
        // A chat template writes its own BOS; a plain prompt gets what the tokenizer adds.
        if (!messages.is_none())
          return m->lm->tokenizer().Encode(ApplyChatTemplate(*m, messages, true), false);
        if (nb::isinstance<nb::str>(prompt))
          return m->lm->tokenizer().Encode(nb::cast<std::string>(prompt), true);
        return TokenIds(prompt, "prompt");
      },
      nb::arg("model"), nb::arg("prompt").none(), nb::arg("messages").none());
  mod.def("_generate", [](std::shared_ptr<Model> m, std::vector<int32_t> ids, int max_tokens,
                          float temperature, int top_k, float top_p, float min_p, float repeat_penalty,
                          float presence_penalty, float frequency_penalty, uint64_t seed,
                          std::vector<std::string> stop, bool stop_at_eos) {
    if (ids.empty()) throw Error("generate: the prompt encodes to no tokens");
    if ((int64_t)ids.size() >= m->lm->max_context())
      throw Error("generate: the prompt is " + std::to_string(ids.size()) + " tokens; the context holds " +
                  std::to_string(m->lm->max_context()));
    if (max_tokens < 0) throw Error("generate: max_tokens must be >= 0");
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampler = SamplerConfig{temperature,       top_k, top_p, min_p, repeat_penalty, 64, presence_penalty,
                              frequency_penalty, seed};
    o.stop = std::move(stop);
    o.stop_at_eos = stop_at_eos;
    return std::make_unique<Generation>(std::move(m), std::move(ids), std::move(o));
  });
  mod.def("_logits", [](std::shared_ptr<Model> m, nb::handle ids_in) {
    std::vector<int32_t> ids = TokenIds(ids_in, "logits");
    if (ids.empty()) throw Error("logits: no token ids given");
    std::vector<float> out;
    {
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(m->mu);
      ++m->owner;  // a generation in progress is superseded: its KV cache is gone
      out = m->lm->ForwardAll(ids);
    }
    const size_t vocab = (size_t)m->lm->config().vocab_size;
    return ToNumpy(std::move(out), {ids.size(), vocab});
  });
  mod.def("_compile", [](const std::string& path, const std::string& out, double search_budget, int threads,
                         int64_t ctx, const std::string& device, const std::string& tokenizer) {
    nlohmann::json receipts;
    size_t kernels = 0;
    {
      nb::gil_scoped_release release;
      LoadOptions lo;
      lo.tokenizer_path = tokenizer;
      lo.max_context = ctx;
      lo.threads = threads;
      lo.device = device;
      lo.search_budget = search_budget;  // the program search times the rewritten candidates, as prism compile
      auto lm = LanguageModel::Load(path, lo);
      receipts = lm->TuneRest();  // what the program search left of the budget; every schedule's receipt
      receipts.push_back(lm->program_receipt());
      lm->SaveArtifact(out, receipts);
      kernels = lm->step().kernel_count();
    }
    return nb::make_tuple(FromJson(receipts), kernels);
  });
}

}  // namespace prism::py
