// One message of a chat conversation as requests carry it to the chat template.
#pragma once

#include <cstddef>
#include <string>

namespace offgen {

struct ChatMessage {
  std::string role;     // a name: system, user, assistant, tool, ...
  std::string content;  // text; never parsed for control tokens
  bool has_content = true;  // false: the message has no content (an assistant's tool calls)
  // The message's other fields (tool_calls, tool_call_id, name, reasoning_content, ...) as a JSON
  // object text, in the order the template should see them; empty when there are none.
  std::string fields_json = {};
  // The first context_bytes bytes of content are a shared context (scheduler/context_prompt.h):
  // the rendered prompt marks them so that the context's end is known without a marker string.
  size_t context_bytes = 0;
};

}  // namespace offgen
