#include "runtime/chat/builtin_templates.hpp"

#include <nlohmann/json.hpp>

#include "runtime/core/error.hpp"

namespace kiln {

std::string builtin_chat_template(std::string_view format, std::string_view default_system) {
  if (format == "none") return "";
  if (format == "chatml") {
    std::string t;
    if (!default_system.empty()) {
      // The default system text goes in as a JSON string literal, which Jinja reads as a string.
      t += "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n' + " +
           nlohmann::json(std::string(default_system)).dump() + " + '<|im_end|>\\n' }}{% endif %}";
    }
    t += "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
         "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    return t;
  }
  if (format == "llama3") {
    // Llama 3.1 / 3.2 Instruct without tools: the system block with the dates, then each turn.
    return "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}{%- endif %}"
           "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
           "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
           "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Cutting Knowledge Date: December 2023\\n' }}"
           "{{- 'Today Date: ' + date_string + '\\n\\n' }}{{- system_message }}{{- '<|eot_id|>' }}"
           "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
           "message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
           "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";
  }
  if (format == "deepseek") {
    return "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\\n\\n' }}"
           "{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}"
           "{% elif message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}{% endif %}{% endfor %}"
           "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";
  }
  fail("chat template format '", format, "' is unknown; expected none, chatml, llama3 or deepseek");
}

}  // namespace kiln
