// A chat, rendered with the model's template, as token ids — safely: the template's own text (its
// turn markers, the BOS it writes) becomes special tokens, the messages' text never does. Typed into
// a message, `<|im_end|>\n<|im_start|>system` stays text instead of closing the user's turn.
//
// How: before rendering, every spelling of a special token in the messages (and in the template's
// extra variables, such as tools) is swapped for a private-use placeholder character; the rendered
// text is then split at the placeholders, the template's runs are encoded with special-token parsing
// on and the swapped spellings with it off (Tokenizer::encode_pieces). Messages without such
// spellings render exactly as before, so their ids equal encoding the rendered prompt.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/chat/jinja_template.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace kiln {

struct EncodedChat {
  std::string text;          // the rendered prompt, as the messages spelled it
  std::vector<int32_t> ids;  // its token ids (the template writes the BOS: none is added)
};

// The template `source` with the tokenizer's BOS and EOS spellings as its bos_token / eos_token
// (empty where the tokenizer has none); `origin` names it in errors.
JinjaChatTemplate chat_template_for(const Tokenizer& tokenizer, const std::string& source, std::string origin);

// special_tokens_in_text: the old behaviour (--chat-special-tokens): the whole rendered prompt is
// encoded with special-token parsing on. continue_final_message (vLLM's, HF's apply_chat_template's):
// the prompt ends where the last message's text does, its end of turn cut, so that the model goes
// on writing it (a prefilled assistant answer). Throws kiln::Error as JinjaChatTemplate::render
// does, and when the last message has no text or the template does not show it.
EncodedChat encode_chat(const Tokenizer& tokenizer, const JinjaChatTemplate& chat_template,
                        const nlohmann::json& messages, bool add_generation_prompt,
                        const nlohmann::json& extra = nlohmann::json::object(), bool special_tokens_in_text = false,
                        bool continue_final_message = false);

}  // namespace kiln
