// PipelineTokenizer: added tokens -> normalizer -> pre-tokenizer -> model -> post-processor, and the decoder
// back.
#include "io/tokenizer/pipeline_tokenizer.h"

#include "io/tokenizer/unicode.h"
#include "ir/error.h"

namespace prism {

PipelineTokenizer::PipelineTokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {
  if (!spec_.model) throw Error("tokenizer spec has no model");
  special_.assign(spec_.vocab.size(), false);
  text_to_id_.reserve(spec_.vocab.size());
  for (size_t id = 0; id < spec_.vocab.size(); ++id)
    if (!spec_.vocab[id].empty()) text_to_id_.emplace(spec_.vocab[id], (int32_t)id);
  for (const AddedToken& t : spec_.added) {
    if (t.id < 0 || t.id >= VocabSize())
      throw Error("added token '" + t.content + "' has an id outside the vocab");
    text_to_id_[t.content] = t.id;
    if (t.special) special_[t.id] = true;
    if (t.normalized && !spec_.normalizer.empty()) {
      // tokenizers searches for the normalized form of a normalized token.
      normalized_matcher_.Add(spec_.normalizer.Apply(t.content), t);
    } else if (t.normalized) {
      normalized_matcher_.Add(t.content, t);
    } else {
      raw_matcher_.Add(t.content, t);
    }
  }
  for (int32_t id : spec_.special_ids)
    if (id >= 0 && id < VocabSize()) special_[id] = true;
}

std::vector<int32_t> PipelineTokenizer::Encode(std::string_view input, bool add_special) const {
  std::string repaired;
  std::string_view text = input;
  if (!unicode::IsValidUtf8(text)) {  // everything below relies on valid UTF-8
    repaired = unicode::ToValidUtf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (add_special) ids = spec_.prefix_ids;
  std::vector<Segment> segments;
  raw_matcher_.Split(text, &segments);
  for (const Segment& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      EncodeText(text.substr(s.begin, s.end - s.begin), s.begin == 0, &ids);
    }
  }
  if (add_special) ids.insert(ids.end(), spec_.suffix_ids.begin(), spec_.suffix_ids.end());
  return ids;
}

std::vector<int32_t> PipelineTokenizer::WithSpecial(std::span<const int32_t> ids) const {
  std::vector<int32_t> out = spec_.prefix_ids;
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), spec_.suffix_ids.begin(), spec_.suffix_ids.end());
  return out;
}

void PipelineTokenizer::EncodeText(std::string_view text, bool at_text_start,
                                   std::vector<int32_t>* ids) const {
  std::string normalized_text;
  std::string_view normalized = text;
  if (!spec_.normalizer.empty()) {
    normalized_text = spec_.normalizer.Apply(text);
    normalized = normalized_text;
  }
  std::vector<Segment> segments;
  normalized_matcher_.Split(normalized, &segments);
  std::vector<std::string> pieces;
  for (const Segment& s : segments) {
    if (s.id >= 0) {
      ids->push_back(s.id);
      continue;
    }
    std::string_view part = normalized.substr(s.begin, s.end - s.begin);
    if (spec_.pre_tokenizer.empty()) {
      spec_.model->Encode(part, ids);
      continue;
    }
    spec_.pre_tokenizer.Run(part, at_text_start && s.begin == 0, &pieces);
    for (const std::string& p : pieces) spec_.model->Encode(p, ids);
  }
}

std::string PipelineTokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  int32_t prev = -1;
  for (int32_t id : ids) {
    if (id < 0 || id >= VocabSize() || spec_.vocab[id].empty()) continue;
    bool after_bos = prev >= 0 && prev == spec_.bos_id;
    prev = id;
    if (skip_special && special_[id]) continue;
    const std::string& t = spec_.vocab[id];
    if (spec_.strip_space_after_bos && after_bos && t[0] == ' ') {
      tokens.push_back(t.substr(1));
    } else {
      tokens.push_back(t);
    }
  }
  return spec_.decoder.Decode(std::move(tokens));
}

std::string PipelineTokenizer::TokenText(int32_t id) const {
  return id >= 0 && id < VocabSize() ? spec_.vocab[id] : std::string();
}

std::optional<int32_t> PipelineTokenizer::TokenId(std::string_view piece) const {
  auto it = text_to_id_.find(piece);
  if (it == text_to_id_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> ModelPieces(const std::vector<std::string>& vocab, bool byte_level) {
  if (!byte_level) return vocab;
  std::vector<std::string> pieces(vocab.size());
  std::string bytes;
  for (size_t i = 0; i < vocab.size(); ++i)
    if (unicode::ByteLevelToBytes(vocab[i], &bytes)) pieces[i] = bytes;
  return pieces;
}

std::pair<std::string, std::string> SplitMergeLine(const std::string& line, const std::string& where,
                                                   size_t index) {
  size_t space = line.find(' ');
  if (space == std::string::npos || space == 0 || space + 1 >= line.size())
    throw Error(where + ": merge " + std::to_string(index) + " '" + line + "' is not two tokens");
  return {line.substr(0, space), line.substr(space + 1)};
}

void AddRankedMerges(const std::vector<std::pair<std::string, std::string>>& merges, const StringIdMap& ids,
                     const std::string& where, BpeModel* model) {
  auto id_of = [&](const std::string& text, size_t rank) {
    auto it = ids.find(text);
    if (it == ids.end())
      throw Error(where + ": merge " + std::to_string(rank) + " uses '" + text +
                  "', which is not in the vocab");
    return it->second;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    int32_t l = id_of(left, rank),
            r = id_of(right, rank);  // in order, so the message names the first bad one
    model->AddMerge(l, r, id_of(left + right, rank), (int32_t)rank);
  }
}

}  // namespace prism
