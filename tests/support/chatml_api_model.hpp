// The server's view of a model (ApiModel) over the test ChatML tokenizer (chatml_tokenizer.hpp):
// <|im_end|> and <|endoftext|> as the chat's stop tokens, 300 vocabulary rows (past the
// tokenizer's, as a padded embedding has). Header-only.
#pragma once

#include <cstdint>

#include "runtime/server/openai_api.hpp"

namespace kiln::test {

inline ApiModel chatml_api_model(const Tokenizer& tokenizer, const JinjaChatTemplate& chat_template,
                                 StructuredOutputs* structured, int32_t max_model_len) {
  ApiModel m;
  m.name = "test";
  m.tokenizer = &tokenizer;
  m.chat_template = &chat_template;
  m.chat_stop_ids = {257, 258};
  m.max_model_len = max_model_len;
  m.vocab_size = 300;
  m.structured = structured;
  return m;
}

}  // namespace kiln::test
