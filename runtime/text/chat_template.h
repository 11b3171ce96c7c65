// Chat templates without a Jinja engine: recognises the ChatML family (SmolLM2, Qwen2) and the
// Llama-3 header format from the template source and renders messages the way HF does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace offgen {

struct ChatMessage {
  std::string role, content;
};

enum class ChatTemplateKind { kChatMl, kLlama3 };

// Which family a Jinja template belongs to. Throws offgen::Error(kConfig) when the template is
// empty or not one this runtime can render (the message says which families are supported).
ChatTemplateKind detect_chat_template(const std::string& jinja_template);

// The default system prompt a ChatML template inserts when the first message is not a system
// message (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
// read from the template text; empty when it has none.
std::string chatml_default_system(const std::string& jinja_template);

// Renders `messages` as HF's tokenizer.apply_chat_template(..., tokenize=False,
// add_generation_prompt=...) does for the recognised families. `bos_token` stands for Jinja's
// bos_token (only Llama-3 templates use it); leave it empty when encode() adds BOS itself, or the
// prompt gets two. Throws offgen::Error(kConfig) for an unsupported template. Pure function.
std::string apply_chat_template(const std::string& jinja_template,
                                const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, std::string_view bos_token = {});

}  // namespace offgen
