// SentencePiece-style BPE on hand-built vocabularies (no model needed): score and rank merge
// order with leftmost ties, byte fallback, unk (fused or not, in Hugging Face's order), the space
// prefix modes, literal splits, special tokens, BOS/EOS, decode and round trips; the GGUF
// "llama" keys and their defaults; tokenizer.json pipelines offgen accepts and refuses.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "runtime/core/error.h"
#include "runtime/text/tokenizer.h"

using namespace offgen;
using nlohmann::json;

namespace {

const std::string kSp = "\xe2\x96\x81";  // "▁"

// <unk> <s> </s>, byte tokens 3..258 (minus `without_bytes`), then `pieces` with scores
// -1, -2, ... in order, then the user-defined "<tool>".
VocabData spm_vocab(const std::vector<std::string>& pieces, std::vector<int> without_bytes = {}) {
  VocabData v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {2, 3, 3};
  v.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const bool drop =
        std::find(without_bytes.begin(), without_bytes.end(), b) != without_bytes.end();
    v.tokens.push_back(drop ? std::string("<gone") + name : std::string(name));
    v.token_types.push_back(6);
    v.scores.push_back(0);
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    v.tokens.push_back(pieces[i]);
    v.token_types.push_back(1);
    v.scores.push_back(-1.0f - static_cast<float>(i));
  }
  v.tokens.push_back("<tool>");
  v.token_types.push_back(4);
  v.scores.push_back(0);
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  return v;
}

int32_t id_of(const Tokenizer& t, const std::string& token) {
  for (int32_t id = 0; id < t.vocab_size(); ++id)
    if (t.vocab().tokens[id] == token) return id;
  FAIL("no token " << token);
  return -1;
}

std::vector<int32_t> ids(const Tokenizer& t, std::initializer_list<std::string> tokens) {
  std::vector<int32_t> out;
  for (const auto& s : tokens) out.push_back(id_of(t, s));
  return out;
}

template <class F>
void require_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL("no offgen::Error thrown");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.category() == ErrorCategory::kInput);
    for (const auto& p : parts) CHECK_THAT(e.what(), Catch::Contains(p));
  }
}

}  // namespace

TEST_CASE("SentencePiece merges follow scores, ties go to the leftmost pair", "[spm]") {
  // "ab" outscores "bc": a b c -> ab c.
  Tokenizer t1(spm_vocab({"a", "b", "c", "ab", "bc"}));
  CHECK(t1.encode("abc") == ids(t1, {"ab", "c"}));
  // "bc" first.
  Tokenizer t2(spm_vocab({"a", "b", "c", "bc", "ab"}));
  CHECK(t2.encode("abc") == ids(t2, {"a", "bc"}));
  // Equal scores: leftmost first (llama.cpp's bigram queue, HF's merge heap).
  VocabData tie = spm_vocab({"a", "b", "c", "bc", "ab"});
  tie.scores[id_of(t2, "ab")] = tie.scores[id_of(t2, "bc")];
  Tokenizer t3(std::move(tie));
  CHECK(t3.encode("abc") == ids(t3, {"ab", "c"}));
  // A merge result is merged again; "abc" is reachable from either side.
  Tokenizer t4(spm_vocab({"a", "b", "c", "bc", "ab", "abc"}));
  CHECK(t4.encode("abcabc") == ids(t4, {"abc", "abc"}));
  // Only normal tokens are merge results: the control token "<s>" is not built from pieces.
  Tokenizer t5(spm_vocab({"<", "s", ">", "s>"}));
  CHECK(t5.encode("<s>", false) == ids(t5, {"<", "s>"}));
  CHECK(t5.encode("<s>", true) == std::vector<int32_t>{1});
}

TEST_CASE("SentencePiece merges from a merges list follow its ranks", "[spm]") {
  VocabData v = spm_vocab({"a", "b", "c", "ab", "bc"});
  v.scores.clear();           // no scores: the merges list (tokenizer.json) ranks
  v.merges = {"b c", "a b"};  // "bc" first
  const Tokenizer t(v);
  CHECK(t.encode("abc") == ids(t, {"a", "bc"}));
  v.merges.clear();  // an empty list merges nothing, as in Hugging Face
  const Tokenizer none(v);
  CHECK(none.encode("abc") == ids(none, {"a", "b", "c"}));
  VocabData bad = spm_vocab({"a", "b"});
  bad.scores.clear();
  bad.merges = {"a b"};
  require_error([&] { Tokenizer x(bad); }, {"merge 0", "merged token 'ab'"});
  bad.merges = {"a  b"};
  require_error([&] { Tokenizer x(bad); }, {"two pieces"});
}

TEST_CASE("SentencePiece byte fallback, unk and dropped characters", "[spm]") {
  const std::vector<std::string> pieces = {"a", "b", "\xc3\xa9"};  // a b é
  Tokenizer t(spm_vocab(pieces));
  CHECK(t.missing_bytes().empty());
  // 中 (E4 B8 AD) has no token: its three byte tokens.
  CHECK(t.encode("a\xe4\xb8\xad\xc3\xa9") ==
        std::vector<int32_t>{id_of(t, "a"), 3 + 0xE4, 3 + 0xB8, 3 + 0xAD, id_of(t, "\xc3\xa9")});
  // Invalid UTF-8: byte tokens too, and decode gives the bytes back.
  const std::string bad = "a\xff\xc3(b";
  CHECK(t.decode(t.encode(bad)) == bad);

  // Without <0xE4>, 中 cannot fall back: unk. é falls back to bytes when it has no token, and
  // a waiting unk is not flushed by byte-fallback characters (HF BPE's order).
  VocabData v = spm_vocab({"a", "b"}, {0xE4});
  v.fuse_unk = true;
  Tokenizer fused(v);
  CHECK(fused.missing_bytes() == std::vector<uint8_t>{0xE4});
  const std::string zh = "\xe4\xb8\xad", e = "\xc3\xa9";
  CHECK(fused.encode("a" + zh + e + zh + zh + "b") ==
        std::vector<int32_t>{id_of(fused, "a"), 3 + 0xC3, 3 + 0xA9, 0, id_of(fused, "b")});
  CHECK(fused.encode(zh + zh + "a") == std::vector<int32_t>{0, id_of(fused, "a")});
  v.fuse_unk = false;
  Tokenizer unfused(v);
  CHECK(unfused.encode(zh + zh + "a") == std::vector<int32_t>{0, 0, id_of(unfused, "a")});
  v.unk_id = -1;  // nothing to emit: dropped
  Tokenizer dropping(v);
  CHECK(dropping.encode("a" + zh + "b") == ids(dropping, {"a", "b"}));
  v.byte_fallback = false;
  Tokenizer no_fallback(v);
  CHECK(no_fallback.missing_bytes().size() == 256);
  CHECK(no_fallback.encode("a" + e + "b") == ids(no_fallback, {"a", "b"}));
}

TEST_CASE("SentencePiece space prefix modes and escaping", "[spm]") {
  const std::vector<std::string> pieces = {kSp, "a", "b", kSp + "a", kSp + kSp, "ab"};
  auto make = [&](SpacePrefix p) {
    VocabData v = spm_vocab(pieces);
    v.space_prefix = p;
    v.strip_leading_space = p != SpacePrefix::kNone;
    return Tokenizer(std::move(v));
  };
  const Tokenizer every = make(SpacePrefix::kEverySegment);
  const Tokenizer unless = make(SpacePrefix::kEverySegmentUnlessSpace);
  const Tokenizer first = make(SpacePrefix::kFirstSegmentUnlessSpace);
  const Tokenizer none = make(SpacePrefix::kNone);
  // Every segment (llama.cpp, HF Prepend): also after special tokens and before a space.
  CHECK(every.encode("a</s>a") == ids(every, {kSp + "a", "</s>", kSp + "a"}));
  CHECK(every.encode(" a") == ids(every, {kSp, kSp + "a"}));  // "▁a" outscores "▁▁"
  CHECK(unless.encode(" a") == ids(unless, {kSp + "a"}));
  CHECK(unless.encode("a</s>a") == ids(unless, {kSp + "a", "</s>", kSp + "a"}));
  CHECK(first.encode("a</s>a") == ids(first, {kSp + "a", "</s>", "a"}));
  CHECK(first.encode("</s>a") == ids(first, {"</s>", "a"}));
  CHECK(none.encode("a b") == ids(none, {"a", kSp, "b"}));
  CHECK(every.encode("").empty());
  // Decode: "▁" is a space; one leading space is dropped where the prefix was added.
  CHECK(every.decode(every.encode("a b")) == "a b");
  CHECK(every.decode(every.encode(" a")) == " a");
  CHECK(none.decode(none.encode(" a")) == " a");
  CHECK(every.token_bytes(id_of(every, kSp + "a")) == " a");
  // The prefix is added to every segment but stripped only at the start (as HF decodes).
  CHECK(every.decode(every.encode("a</s>b")) == "a</s> b");
  CHECK(every.decode(every.encode("a</s>b"), true) == "a b");
}

TEST_CASE("SentencePiece literal splits", "[spm]") {
  auto make = [](SplitBehavior b) {
    VocabData v = spm_vocab({"a", "b", "ab", "bb", "ba", "abba", "bba", "abb"});
    v.splits = {{"b", b}};
    return Tokenizer(std::move(v));
  };
  const Tokenizer removed = make(SplitBehavior::kRemoved);
  const Tokenizer isolated = make(SplitBehavior::kIsolated);
  const Tokenizer prev = make(SplitBehavior::kMergedWithPrevious);
  const Tokenizer next = make(SplitBehavior::kMergedWithNext);
  const Tokenizer contiguous = make(SplitBehavior::kContiguous);
  CHECK(removed.encode("abba") == ids(removed, {"a", "a"}));
  CHECK(isolated.encode("abba") == ids(isolated, {"a", "b", "b", "a"}));
  CHECK(prev.encode("abba") == ids(prev, {"ab", "b", "a"}));
  CHECK(next.encode("abba") == ids(next, {"a", "b", "ba"}));
  CHECK(contiguous.encode("abba") == ids(contiguous, {"a", "bb", "a"}));
  VocabData none = spm_vocab({"a", "b", "ab", "bb", "ba", "abba"});
  const Tokenizer whole(std::move(none));
  CHECK(whole.encode("abba") == ids(whole, {"abba"}));
}

TEST_CASE("SentencePiece special tokens, BOS and EOS", "[spm]") {
  VocabData v = spm_vocab({"a", "b", "<", ">"});
  v.add_bos = true;
  v.add_eos = true;
  Tokenizer t(v);
  // Control tokens only with parse_special; user-defined "<tool>" and unknown-type "<unk>"
  // follow llama.cpp (user-defined always, unk like control).
  const int32_t tool = id_of(t, "<tool>");
  CHECK(t.encode("a<tool>b</s>") ==
        std::vector<int32_t>{1, id_of(t, "a"), tool, id_of(t, "b"), 2, 2});
  const auto plain = t.encode("a<tool></s><unk>", false);
  CHECK(plain.front() == 1);
  CHECK(plain.back() == 2);
  CHECK(std::count(plain.begin(), plain.end(), 2) == 1);
  CHECK(std::count(plain.begin(), plain.end(), 0) == 0);
  CHECK(std::count(plain.begin(), plain.end(), tool) == 1);
  CHECK(t.encode("<unk>", true) == std::vector<int32_t>{1, 0, 2});
  CHECK(t.decode(t.encode("ab<tool>")) == "<s>ab<tool></s>");
  CHECK(t.decode(t.encode("ab<tool>"), true) == "ab<tool>");
  v.eos_id = -1;
  require_error([&] { Tokenizer x(v); }, {"EOS"});
}

TEST_CASE("SentencePiece round trip on random text", "[spm]") {
  VocabData v = spm_vocab({kSp, "a", "b", "c", "\xc3\xa9", kSp + "a", "ab", "bc", "\n", kSp + kSp});
  v.space_prefix = SpacePrefix::kEverySegment;
  v.strip_leading_space = true;
  const Tokenizer with_prefix(v);
  v.space_prefix = SpacePrefix::kNone;
  v.strip_leading_space = false;
  const Tokenizer without(v);
  const std::vector<std::string> alphabet = {
      "a",    "b",    "c",    " ", "  ", "\n", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80",
      "\xff", "\xc3", "\x80", "\t"};
  std::mt19937 rng(7);
  for (int n = 0; n < 500; ++n) {
    std::string s;
    const int len = static_cast<int>(rng() % 24);
    for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
    INFO(json(s).dump(-1, ' ', false, json::error_handler_t::replace));
    CHECK(without.decode(without.encode(s, false)) == s);
    CHECK(with_prefix.decode(with_prefix.encode(s, false)) == s);
  }
}
