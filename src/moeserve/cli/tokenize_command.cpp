// `moeserve tokenize`: encode text to ids, or decode ids to text, with a model's tokenizer.json.
//   moeserve tokenize --model DIR "text"            -> ids separated by spaces
//   moeserve tokenize --model DIR --decode 9707 1879 -> text
#include <fmt/format.h>

#include <charconv>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "moeserve/cli/model_files.h"
#include "moeserve/cli/commands.h"
#include "moeserve/core/error.h"
#include "moeserve/tokenizer/tokenizer.h"

namespace moeserve::cli {
namespace {

struct TokenizeOptions {
    std::string model_dir;
    std::vector<std::string> inputs;  // the text (joined by spaces), or ids when decoding
    bool decode = false;
    bool no_special = false;
};

// Ids from arguments like "9707 1879" or "9707,1879" (one or many arguments).
std::vector<int32_t> parse_ids(const std::vector<std::string>& inputs) {
    std::vector<int32_t> ids;
    for (const auto& input : inputs) {
        size_t pos = 0;
        while (pos < input.size()) {
            if (input[pos] == ' ' || input[pos] == ',' || input[pos] == '\t' || input[pos] == '\n') {
                ++pos;
                continue;
            }
            int32_t id = 0;
            auto [end, ec] = std::from_chars(input.data() + pos, input.data() + input.size(), id);
            if (ec != std::errc() || id < 0) {
                raise(ErrorCode::kInvalidArgument,
                      "--decode expects non-negative token ids separated by spaces or commas; got "
                      "'{}'",
                      input);
            }
            ids.push_back(id);
            pos = static_cast<size_t>(end - input.data());
        }
    }
    return ids;
}

int run_tokenize(const TokenizeOptions& opts) {
    const auto tokenizer = load_model_tokenizer(opts.model_dir);
    std::vector<std::string> inputs = opts.inputs;
    if (inputs.empty()) {  // no positional argument: read stdin
        inputs.emplace_back(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    }
    if (opts.decode) {
        const auto ids = parse_ids(inputs);
        fmt::print("{}\n", tokenizer.decode(ids, /*skip_special_tokens=*/opts.no_special));
        return 0;
    }
    std::string text = inputs.front();
    for (size_t i = 1; i < inputs.size(); ++i) text += " " + inputs[i];
    const auto ids = tokenizer.encode(text, /*add_special_tokens=*/!opts.no_special);
    fmt::print("{}\n", fmt::join(ids, " "));
    return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, Action* action) {
    auto opts = std::make_shared<TokenizeOptions>();
    CLI::App* sub = app.add_subcommand("tokenize", "Encode text to token ids, or decode ids (--decode)");
    sub->add_option("--model", opts->model_dir, "folder with tokenizer.json (+ tokenizer_config.json)")->required();
    sub->add_flag("--decode", opts->decode, "treat the arguments as token ids and print the text");
    sub->add_flag("--no-special", opts->no_special,
                  "encode without BOS/EOS (add_special_tokens=false); with --decode, skip special tokens");
    sub->add_option("input", opts->inputs, "text to encode, or ids to decode (default: stdin)");
    sub->callback([opts, action] { *action = [opts] { return run_tokenize(*opts); }; });
}

}  // namespace moeserve::cli
