// PreTokenizer::for_gguf_name: llama.cpp's `tokenizer.ggml.pre` names (src/llama-vocab.cpp) and
// the splits each stands for. One table lists every name kiln runs, one more every name llama.cpp
// knows that kiln refuses, with the reason.
//
// Where llama.cpp quotes the model's tokenizer.json pattern (it rewrites `(?i:...)` and
// possessive quantifiers for its own regex engine), the pattern here is that original: PCRE2 runs
// it as HF's Oniguruma does. Elsewhere it is llama.cpp's list. Non-ASCII code points are written
// as escapes so that no editor or NFC pass can change them.
#include <algorithm>
#include <string_view>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/pre_tokenizer.hpp"

namespace kiln {
namespace {

// Digits pre-tokenizers and the digit splits that come first in several pipelines.
const std::string kEachDigit = R"(\p{N})";  // Digits(individual_digits=true)
const std::string kDigitRuns = R"(\p{N}+)";
const std::string kUpToThreeDigits = R"(\p{N}{1,3})";

const std::string kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5: Qwen2's pattern with combining marks (\p{M}) kept inside words.
const std::string kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// MiniCPM5: digit runs whole (they were cut to three by the split before).
const std::string kMiniCpm5 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Jais 2: Llama 3's pattern, with whitespace runs cut into powers of two.
const std::string kJais2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)"
    R"(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S))"
    R"(|\s{1,2}(?!\S)|\s{1})";
// Seed-Coder: single digits, and punctuation runs that never take a newline.
const std::string kSeedCoder =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Ling (BailingMoE): possessive quantifiers, which PCRE2 has.
const std::string kBailingMoe =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
// K-EXAONE: letters with their marks, and words joined by single spaces, stay one piece.
const std::string kExaoneMoe =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?)"
    R"(|\s*[\r\n]|\s+(?!\S)|\s+)";
// GPT-4o (o200k): words split before an upper-case letter that follows lower-case ones.
const std::string kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Tekken (Mistral NeMo): GPT-4o's word rule without contractions, single digits.
const std::string kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Tiny Aya: digit runs cut into groups of three from the right, `\d{1,3}(?=(?:\d{3})*\b)` in its
// tokenizer.json. The \b (always after a digit here) is written out as Oniguruma's word
// characters: alphabetic, marks, decimal digits, connector punctuation, and the Latin-1 ¹ ² ³ ¼ ½ ¾
// (checked over every code point against HF tokenizers). PCRE2's \w is letters, numbers and "_":
// with it, "1234" before a combining mark would be cut where HF does not cut it.
const std::string kDigitsInThousands =
    R"(\d{1,3}(?=(?:\d{3})*(?![\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE}])))";

// DeepSeek LLM (and DeepSeek-V2, which shares its vocabulary): six splits in sequence. The second
// class is the cased letters (Lu, Ll, Lt) as DeepSeek listed them; several of its code points are
// canonical singletons (U+2126 OHM SIGN, U+212A KELVIN SIGN, U+1FBE, ...).
const std::string kDeepSeekNewline = R"([\r\n])";
const std::string kDeepSeekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
    R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
    R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
const std::string kDeepSeekPunctuation = R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
const std::string kDeepSeekTrailingSpace = R"(\s+$)";
const std::string kDeepSeekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
// DeepSeek Coder: the same shape with the general letter and punctuation classes.
const std::string kLetterWords = R"(\s?\p{L}+)";
const std::string kPunctuationWords = R"(\s?\p{P}+)";
// DeepSeek-V3: CJK ideographs and kana (hiragana, katakana) runs, then the main pattern, where an
// ASCII punctuation mark joins the ASCII letters after it.
const std::string kCjkKana = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
const std::string kDeepSeekV3 =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*)re"
    R"re(|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Youtu: Hangul (syllables, jamo), CJK punctuation, bopomofo and CJK/kana runs first, then
// Tekken's word rule with contractions and single digits (llama.cpp's list; it quotes no original).
const std::string kYoutuScripts =
    R"([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+)"
    R"(|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+)"
    R"(|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
const std::string kYoutuWords =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Falcon: Punctuation(Contiguous), which counts ASCII symbols such as $ + < = > ^ ` | ~ as
// punctuation, then GPT-2's pattern, then three ASCII digits at a time. HF also runs
// Digits(individual_digits=false) after the byte-level mapping; llama.cpp leaves it out, and so
// does kiln. Run on raw text it would cut where HF does not (HF sees " ²" as "ĠÂ²" and cuts only
// before "²"); left out, it only joins pieces across cuts that no merge spans, since the
// vocabulary was trained with them.
const std::string kPunctuationRuns = R"([\p{P}\$\+<=>\^~\|`]+)";
const std::string kThreeAsciiDigits = R"([0-9][0-9][0-9])";
// BLOOM and its descendants: a piece is an optional space and everything up to the next
// whitespace or sentence punctuation. HF's pattern nests a class, `[^(\s|[.,!?…。，、।۔،])]`,
// which Oniguruma reads as a union and PCRE2 cannot; this is the same set, flattened.
const std::string kBloom = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";
// Chameleon: sentinel and image-token text, tab/newline and two- or four-space runs, single
// digits, single punctuation marks (HF's Punctuation(Isolated)), then GPT-2's pattern.
const std::string kChameleonSentinel = R"(<sentinel:[0-9]+>)";
const std::string kChameleonImage = R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)";
const std::string kChameleonSpacing = R"(([\t\n]|    |  ))";
const std::string kPunctuationMark = R"([\p{P}!-/:-@\[-`{-~])";
// Laguna: lines and newline runs apart first.
const std::string kLines = R"([^\n]+|[\n]+)";

// One row per llama.cpp pre type (or several with the same splits and settings): the names that
// select it, its splits in order (each Isolated), and the settings llama.cpp gives it.
struct PreType {
  std::vector<std::string_view> names;
  std::vector<const std::string*> splits;
  bool ignore_merges = false;
  bool nfc = false;
  bool add_bos = false;
};

const std::vector<PreType>& pre_types() {
  static const std::string* const gpt2 = &PreTokenizer::gpt2_pattern();
  static const std::vector<PreType> table = {
      // GPT-2's ByteLevel split. jina-v1-en, jina-v2-code and roberta-bpe are encoders to which
      // llama.cpp also appends SEP; kiln's encode() adds no end token for any model.
      {.names = {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
                 "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4", "jina-v1-en",
                 "jina-v2-code", "roberta-bpe"},
       .splits = {gpt2}},
      // Llama 3's tokenizer.json asks to look whole words up first; llama.cpp adds BOS for these.
      {.names = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                 "jina-v5-nano"},
       .splits = {&kLlama3},
       .ignore_merges = true,
       .add_bos = true},
      {.names = {"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}, .splits = {&kLlama3}},
      {.names = {"jais-2"}, .splits = {&kJais2}},
      {.names = {"deepseek-llm"},
       .splits = {&kDeepSeekNewline, &kDeepSeekLetters, &kDeepSeekPunctuation, &kDeepSeekTrailingSpace, &kDeepSeekCjk,
                  &kDigitRuns}},
      {.names = {"deepseek-coder"},
       .splits = {&kDeepSeekNewline, &kLetterWords, &kPunctuationWords, &kDeepSeekCjk, &kEachDigit}},
      {.names = {"deepseek-v3", "hunyuan-dense", "joyai-llm"}, .splits = {&kUpToThreeDigits, &kCjkKana, &kDeepSeekV3}},
      {.names = {"youtu"}, .splits = {&kYoutuScripts, &kYoutuWords}, .ignore_merges = true},
      {.names = {"falcon"}, .splits = {&kPunctuationRuns, gpt2, &kThreeAsciiDigits}},
      // Digits(individual_digits=true), then ByteLevel's GPT-2 split.
      {.names = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2"},
       .splits = {&kEachDigit, gpt2}},
      // Qwen's tokenizer.json files normalize to NFC; the GGUF conversion drops the normalizer,
      // so restore it to tokenize as HF does (llama.cpp skips it). F2LLM-v2 is built on Qwen3.
      {.names = {"qwen2", "deepseek-r1-qwen", "f2llmv2"}, .splits = {&kQwen2}, .nfc = true},
      {.names = {"stablelm2", "megrez", "hunyuan", "kormo", "solar-open", "grok-2"}, .splits = {&kQwen2}},
      {.names = {"qwen35"}, .splits = {&kQwen35}, .nfc = true},
      {.names = {"laguna"}, .splits = {&kLines, &kQwen2}},
      {.names = {"bloom", "gpt3-finnish", "poro-chat"}, .splits = {&kBloom}},
      {.names = {"viking"}, .splits = {&kBloom, &kEachDigit}},
      {.names = {"tekken"}, .splits = {&kTekken}, .ignore_merges = true},
      {.names = {"chameleon"},
       .splits = {&kChameleonSentinel, &kChameleonImage, &kChameleonSpacing, &kEachDigit, &kPunctuationMark, gpt2},
       .add_bos = true},
      {.names = {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, .splits = {&kGpt4o}},
      // llama.cpp runs a rewrite of GPT-4o's pattern for this one ("with \p{M} added"); GPT-4o's
      // own pattern already keeps marks in words.
      {.names = {"granite-embed-multi-97m"}, .splits = {&kGpt4o}, .ignore_merges = true},
      {.names = {"tiny_aya", "cohere2moe"}, .splits = {&kDigitsInThousands, &kGpt4o}},
      {.names = {"bailingmoe", "bailingmoe2", "llada-moe"}, .splits = {&kBailingMoe}},
      {.names = {"seed-coder"}, .splits = {&kSeedCoder}},
      {.names = {"exaone-moe"}, .splits = {&kExaoneMoe}},
      {.names = {"minicpm5"}, .splits = {&kUpToThreeDigits, &kMiniCpm5}, .ignore_merges = true},
  };
  return table;
}

// Names llama.cpp accepts for a 'gpt2' vocabulary that kiln does not run, and why.
struct RefusedPreType {
  std::vector<std::string_view> names;
  const char* why;
};

const std::vector<RefusedPreType>& refused_pre_types() {
  static const std::vector<RefusedPreType> table = {
      {{"default"},
       "it is llama.cpp's fallback for a tokenizer its converter did not recognize, so the model's own "
       "pre-tokenizer is unknown and the ids would differ from the model's (llama.cpp warns that generation "
       "quality will be degraded); re-convert the model with a recent llama.cpp or load its tokenizer.json"},
      {{"gemma4", "granite-embed-multi-311m", "sarvam-moe"},
       "it is SentencePiece-style BPE on raw UTF-8 with spaces written as U+2581, not byte-level BPE, "
       "which is all kiln reads from a 'gpt2' GGUF vocabulary; load the model's tokenizer.json instead"},
      {{"whitespace"},
       "it splits at whitespace and looks pieces up as raw UTF-8, not byte-level BPE, which is all kiln reads "
       "from a 'gpt2' GGUF vocabulary"},
      {{"kimi-k2"},
       "llama.cpp splits its text with custom code (a Han-aware variant of GPT-4o's pattern) and encodes it "
       "without merges, as tiktoken does; kiln's byte-level BPE needs merges and a known pattern"},
      {{"afmoe"},
       "llama.cpp groups its digits with custom code rather than a regex, and the pattern of the model's "
       "tokenizer.json is not known to kiln"},
      {{"superbpe"},
       "its digit split is a lookahead that matches empty strings, and kiln's splitter cuts only at non-empty "
       "matches"},
  };
  return table;
}

bool lists(const std::vector<std::string_view>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

PreTokenizer PreTokenizer::for_gguf_name(const std::string& name, const std::string& origin, GgufSettings& settings) {
  const std::string where = origin + ": tokenizer.ggml.pre '" + name + "'";
  for (const PreType& type : pre_types()) {
    if (!lists(type.names, name)) continue;
    PreTokenizer pre;
    for (const std::string* pattern : type.splits) pre.add_split(*pattern, SplitBehavior::isolated, false, where);
    settings = {.ignore_merges = type.ignore_merges, .nfc = type.nfc, .add_bos = type.add_bos};
    return pre;
  }
  for (const RefusedPreType& refused : refused_pre_types()) {
    if (lists(refused.names, name)) fail(where, " is not supported: ", refused.why);
  }
  std::string supported;
  for (const PreType& type : pre_types()) {
    for (const std::string_view known : type.names) supported.append(supported.empty() ? "" : ", ").append(known);
  }
  fail(where, " is not supported; supported byte-level pre-tokenizers: ", supported);
}

}  // namespace kiln
