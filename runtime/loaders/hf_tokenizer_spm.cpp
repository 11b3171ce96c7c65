// tokenizer.json pipeline of SentencePiece-style BPE tokenizers (Llama 2, Mistral, Gemma):
// normalizer (NFC, NFKC, Replace " " -> "▁", Prepend "▁"), pre_tokenizer (Metaspace, literal
// Split), decoder (Replace "▁" -> " ", ByteFallback, Fuse, Strip, Metaspace) -> VocabData.
#include <string>

#include "runtime/core/error.h"
#include "runtime/loaders/hf_json.h"

namespace offgen::hf {
namespace {

constexpr const char* kSpace = "\xe2\x96\x81";  // "▁"
constexpr int kMaxDepth = 8;

struct Normalizer {
  bool nfc = false, nfkc = false, replace = false, prepend = false;
};

// A {"String": s} pattern; Regex patterns are refused.
std::string literal_pattern(const Doc& doc, const json& obj, const std::string& path) {
  const json* p = doc.find(obj, "pattern");
  OFFGEN_CHECK(p && p->is_object() && p->contains("String") && (*p)["String"].is_string(), kInput,
               "{}: {}.pattern: only a literal {{\"String\": ...}} is supported here, got {}",
               doc.file, path, p ? quote(*p) : "nothing");
  return (*p)["String"].get<std::string>();
}

void read_normalizer(const Doc& doc, const json& n, const std::string& path, int depth,
                     Normalizer& out) {
  const std::string type = doc.type(n, path);
  OFFGEN_CHECK(depth < kMaxDepth, kInput, "{}: {}: Sequences nested too deeply", doc.file, path);
  if (type == "Sequence") {
    const json* list = doc.find(n, "normalizers");
    OFFGEN_CHECK(list && list->is_array(), kInput, "{}: {}.normalizers: expected an array",
                 doc.file, path);
    for (size_t i = 0; i < list->size(); ++i)
      read_normalizer(doc, (*list)[i], fmt::format("{}.normalizers[{}]", path, i), depth + 1, out);
  } else if (type == "NFC" || type == "NFKC") {
    // offgen normalises before replacing spaces; NFKC maps some spaces (U+00A0) to " ".
    OFFGEN_CHECK(!out.replace && !out.prepend, kInput,
                 "{}: {}: {} after Replace/Prepend is not supported (offgen normalises first)",
                 doc.file, path, type);
    OFFGEN_CHECK(!(out.nfc || out.nfkc), kInput, "{}: {}: a second Unicode normalisation", doc.file,
                 path);
    (type == "NFC" ? out.nfc : out.nfkc) = true;
  } else if (type == "Replace") {
    const std::string from = literal_pattern(doc, n, path);
    const std::string to = doc.str(n, "content", path);
    OFFGEN_CHECK(from == " " && to == kSpace, kInput,
                 "{}: {}: only Replace(\" \", \"\xe2\x96\x81\") is supported, got {}", doc.file,
                 path, quote(n));
    out.replace = true;
  } else if (type == "Prepend") {
    OFFGEN_CHECK(doc.str(n, "prepend", path) == kSpace, kInput,
                 "{}: {}: only Prepend(\"\xe2\x96\x81\") is supported, got {}", doc.file, path,
                 quote(n));
    out.prepend = true;
  } else {
    OFFGEN_THROW(kInput,
                 "{}: {} {} is not supported for a SentencePiece-style tokenizer (NFC, NFKC, "
                 "Replace(\" \", \"\xe2\x96\x81\"), Prepend(\"\xe2\x96\x81\"), Sequence)",
                 doc.file, path, quote(n));
  }
}

SplitBehavior split_behavior(const Doc& doc, const json& s, const std::string& path) {
  const std::string b = doc.str(s, "behavior", path);
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  OFFGEN_THROW(kInput, "{}: {}.behavior: unknown split behavior '{}'", doc.file, path, b);
}

// Metaspace's prepend_scheme (or the older add_prefix_space flag): "always", "first", "never".
std::string prepend_scheme(const Doc& doc, const json& m, const std::string& path) {
  OFFGEN_CHECK(doc.str(m, "replacement", path) == kSpace, kInput,
               "{}: {}.replacement: only \"\xe2\x96\x81\" is supported, got {}", doc.file, path,
               quote(m));
  if (doc.find(m, "prepend_scheme")) {
    const std::string s = doc.str(m, "prepend_scheme", path);
    OFFGEN_CHECK(s == "always" || s == "first" || s == "never", kInput,
                 "{}: {}.prepend_scheme: expected always, first or never, got '{}'", doc.file, path,
                 s);
    return s;
  }
  return doc.flag(m, "add_prefix_space", true, path) ? "always" : "never";
}

void read_pre(const Doc& doc, const json& p, const std::string& path, int depth, bool& metaspace,
              VocabData& v) {
  OFFGEN_CHECK(depth < kMaxDepth, kInput, "{}: {}: Sequences nested too deeply", doc.file, path);
  const std::string type = doc.type(p, path);
  if (type == "Sequence") {
    const json* list = doc.find(p, "pretokenizers");
    OFFGEN_CHECK(list && list->is_array(), kInput, "{}: {}.pretokenizers: expected an array",
                 doc.file, path);
    for (size_t i = 0; i < list->size(); ++i)
      read_pre(doc, (*list)[i], fmt::format("{}.pretokenizers[{}]", path, i), depth + 1, metaspace,
               v);
  } else if (type == "Metaspace") {
    // offgen replaces spaces and adds the prefix before any split, so Metaspace must come first.
    OFFGEN_CHECK(!metaspace && v.splits.empty(), kInput,
                 "{}: {}: Metaspace is only supported as the first pre-tokenizer", doc.file, path);
    metaspace = true;
    const std::string scheme = prepend_scheme(doc, p, path);
    v.space_prefix = scheme == "always"  ? SpacePrefix::kEverySegmentUnlessSpace
                     : scheme == "first" ? SpacePrefix::kFirstSegmentUnlessSpace
                                         : SpacePrefix::kNone;
    if (doc.flag(p, "split", true, path))
      v.splits.push_back({kSpace, SplitBehavior::kMergedWithNext});
  } else if (type == "Split") {
    OFFGEN_CHECK(!doc.flag(p, "invert", false, path), kInput,
                 "{}: {}.invert = true is not supported", doc.file, path);
    std::string delimiter = literal_pattern(doc, p, path);
    OFFGEN_CHECK(!delimiter.empty(), kInput, "{}: {}.pattern is empty", doc.file, path);
    v.splits.push_back({std::move(delimiter), split_behavior(doc, p, path)});
  } else {
    OFFGEN_THROW(kInput,
                 "{}: {} {} is not supported for a SentencePiece-style tokenizer (Metaspace, "
                 "Split with a literal pattern, Sequence, or null)",
                 doc.file, path, quote(p));
  }
}

struct Decoder {
  bool maps_space = false, byte_fallback = false, fused = false, strip = false;
};

void read_decoder(const Doc& doc, const json& d, const std::string& path, int depth, Decoder& out) {
  OFFGEN_CHECK(depth < kMaxDepth, kInput, "{}: {}: Sequences nested too deeply", doc.file, path);
  const std::string type = doc.type(d, path);
  if (type == "Sequence") {
    const json* list = doc.find(d, "decoders");
    OFFGEN_CHECK(list && list->is_array(), kInput, "{}: {}.decoders: expected an array", doc.file,
                 path);
    for (size_t i = 0; i < list->size(); ++i)
      read_decoder(doc, (*list)[i], fmt::format("{}.decoders[{}]", path, i), depth + 1, out);
  } else if (type == "Replace") {
    OFFGEN_CHECK(literal_pattern(doc, d, path) == kSpace && doc.str(d, "content", path) == " ",
                 kInput, "{}: {}: only Replace(\"\xe2\x96\x81\", \" \") is supported, got {}",
                 doc.file, path, quote(d));
    out.maps_space = true;
  } else if (type == "ByteFallback") {
    out.byte_fallback = true;
  } else if (type == "Fuse") {
    out.fused = true;
  } else if (type == "Strip") {
    const json* start = doc.find(d, "start");
    const json* stop = doc.find(d, "stop");
    OFFGEN_CHECK(doc.str(d, "content", path) == " " && start && (*start == 0 || *start == 1) &&
                     (!stop || *stop == 0),
                 kInput,
                 "{}: {}: only Strip(\" \", start 0 or 1, stop 0) is supported (one leading "
                 "space), got {}",
                 doc.file, path, quote(d));
    // Before Fuse, Strip would act on every token; offgen strips the start of the text only.
    OFFGEN_CHECK(out.fused || *start == 0, kInput,
                 "{}: {}: Strip before Fuse (on every token) is not supported", doc.file, path);
    out.strip = out.strip || *start == 1;
  } else if (type == "Metaspace") {
    out.maps_space = true;
    out.strip = out.strip || prepend_scheme(doc, d, path) != "never";
  } else {
    OFFGEN_THROW(kInput,
                 "{}: {} {} is not supported for a SentencePiece-style tokenizer (Replace, "
                 "ByteFallback, Fuse, Strip, Metaspace, Sequence)",
                 doc.file, path, quote(d));
  }
}

}  // namespace

void read_spm_pipeline(const Doc& doc, const json& root, VocabData& v) {
  Normalizer norm;
  if (const json* n = doc.find(root, "normalizer")) read_normalizer(doc, *n, "normalizer", 0, norm);
  v.normalize_nfc = norm.nfc;
  v.normalize_nfkc = norm.nfkc;
  v.space_prefix = SpacePrefix::kNone;
  bool metaspace = false;
  if (const json* p = doc.find(root, "pre_tokenizer"))
    read_pre(doc, *p, "pre_tokenizer", 0, metaspace, v);
  if (norm.prepend) {
    OFFGEN_CHECK(v.space_prefix == SpacePrefix::kNone, kInput,
                 "{}: both the normalizer (Prepend) and the Metaspace pre_tokenizer add a "
                 "\xe2\x96\x81 prefix",
                 doc.file);
    v.space_prefix = SpacePrefix::kEverySegment;
  }
  v.escape_spaces = norm.replace || metaspace;

  const json* d = doc.find(root, "decoder");
  OFFGEN_CHECK(d, kInput,
               "{}: decoder is null (Hugging Face would join tokens with spaces); a "
               "SentencePiece-style tokenizer needs Replace(\"\xe2\x96\x81\", \" \") or Metaspace",
               doc.file);
  Decoder dec;
  read_decoder(doc, *d, "decoder", 0, dec);
  OFFGEN_CHECK(dec.maps_space, kInput,
               "{}: decoder {} does not turn \"\xe2\x96\x81\" back into spaces (Replace or "
               "Metaspace)",
               doc.file, quote(*d));
  OFFGEN_CHECK(dec.byte_fallback || !v.byte_fallback, kInput,
               "{}: model.byte_fallback is true but the decoder {} has no ByteFallback", doc.file,
               quote(*d));
  v.strip_leading_space = dec.strip;
}

}  // namespace offgen::hf
