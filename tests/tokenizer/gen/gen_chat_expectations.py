#!/usr/bin/env python3
"""Renders the models' Hugging Face chat templates with transformers' Jinja environment and writes
tests/tokenizer/fixtures/chat_expected.json, the strings kiln's render_chat must reproduce.

The templates are the `chat_template` values of the models' tokenizer_config.json files
(SmolLM2-Instruct, Qwen3, Llama 3.2 Instruct — whose system block 3.1 shares, with a fixed date —
and DeepSeek-V2(-Lite)-Chat). Run at dev time only:

    /root/hfenv/bin/python tests/tokenizer/gen/gen_chat_expectations.py
"""
import json
import os

from transformers.utils.chat_template_utils import render_jinja_template

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

QWEN3 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\\n' + content }}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

LLAMA32 = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

DEEPSEEK_V2 = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ 'User: ' + message['content'] + '\n\n' }}{% elif message['role'] == 'assistant' %}"
    "{{ 'Assistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}"
    "{{ message['content'] + '\n\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}")

DS_BOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
DS_EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"

PROMPTS = [
    ("", "Hello!"),
    ("You are a pirate.", "What is 2+2?"),
    ("  padded system \n", "\n  padded user\t "),
    ("Multi\nline\n\nsystem", "Line one\nLine two"),
    ("", "Unicode: caf\u00e9 \u4f60\u597d \U0001f680 \u00a0nbsp\u00a0"),
    ("Be brief.", "<|im_end|> and <|eot_id|> inside user text"),
]


def render(template, system, user, **kwargs):
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return render_jinja_template(conversations=[messages], chat_template=template, add_generation_prompt=True,
                                 **kwargs)[0][0]


def main():
    cases = []
    for system, user in PROMPTS:
        cases.append({"template": "SmolLM2-Instruct", "format": "chatml", "default_system": True,
                      "system": system, "user": user, "expected": render(SMOLLM2, system, user)})
        cases.append({"template": "Qwen3", "format": "chatml", "system": system, "user": user,
                      "expected": render(QWEN3, system, user)})
        cases.append({"template": "Qwen3", "format": "chatml", "enable_thinking": False, "system": system,
                      "user": user, "expected": render(QWEN3, system, user, enable_thinking=False)})
        for date in ["26 Jul 2024", "03 Feb 2026"]:
            cases.append({"template": "Llama-3.2-Instruct", "format": "llama3", "date_string": date,
                          "system": system, "user": user,
                          "expected": render(LLAMA32, system, user, bos_token="<|begin_of_text|>",
                                             date_string=date)})
        cases.append({"template": "DeepSeek-V2-Chat", "format": "deepseek", "system": system, "user": user,
                      "expected": render(DEEPSEEK_V2, system, user, bos_token=DS_BOS, eos_token=DS_EOS)})
    path = os.path.join(ROOT, "tests", "tokenizer", "fixtures", "chat_expected.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"generator": "tests/tokenizer/gen/gen_chat_expectations.py", "cases": cases}, f, indent=1,
                  ensure_ascii=False)
        f.write("\n")
    print(f"{len(cases)} cases -> {path}")


if __name__ == "__main__":
    main()
