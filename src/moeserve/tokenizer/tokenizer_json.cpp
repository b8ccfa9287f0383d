// SAX handler for tokenizer.json: forwards events to nlohmann's DOM builder except inside
// model.vocab / model.merges, which it captures itself.
#include "moeserve/tokenizer/tokenizer_json.h"

#include "moeserve/core/error.h"

namespace moeserve::tokenizer {
namespace {

using Json = nlohmann::json;
using DomBuilder = nlohmann::detail::json_sax_dom_parser<Json>;

class TokenizerJsonSax {
public:
    TokenizerJsonSax(TokenizerJson* out) : out_(out), dom_(out->doc, true) {}

    bool null() { return capture_ == Capture::kNone ? dom_.null() : fail("null"); }
    bool boolean(bool v) { return capture_ == Capture::kNone ? dom_.boolean(v) : fail("a boolean"); }
    bool number_integer(Json::number_integer_t v) {
        if (capture_ == Capture::kNone) return dom_.number_integer(v);
        return vocab_value(v);
    }
    bool number_unsigned(Json::number_unsigned_t v) {
        if (capture_ == Capture::kNone) return dom_.number_unsigned(v);
        if (v > static_cast<Json::number_unsigned_t>(INT64_MAX)) return fail("a huge number");
        return vocab_value(static_cast<int64_t>(v));
    }
    bool number_float(Json::number_float_t v, const Json::string_t& s) {
        return capture_ == Capture::kNone ? dom_.number_float(v, s) : fail("a float");
    }
    bool string(Json::string_t& s) {
        if (capture_ == Capture::kNone) return dom_.string(s);
        if (capture_ != Capture::kMerges) return fail("a string");
        if (level_ == 1) {
            std::pair<std::string, std::string> merge;
            if (!split_merge_string(s, &merge)) return fail("a merge string without one space");
            out_->merges.push_back(std::move(merge));
            return true;
        }
        if (level_ == 2 && parts_ < 2) {
            (parts_ == 0 ? pair_.first : pair_.second) = std::move(s);
            ++parts_;
            return true;
        }
        return fail("a string");
    }
    bool binary(Json::binary_t& b) { return capture_ == Capture::kNone ? dom_.binary(b) : false; }

    bool start_object(size_t n) {
        if (capture_ == Capture::kNone) {
            path_.emplace_back();
            return dom_.start_object(n);
        }
        if (capture_ == Capture::kVocab && level_ == 0) {
            level_ = 1;
            out_->has_vocab = true;
            return true;
        }
        return fail("an object");
    }
    bool key(Json::string_t& k) {
        if (capture_ == Capture::kVocab) {
            key_ = std::move(k);
            return true;
        }
        if (capture_ != Capture::kNone) return fail("a key");
        if (path_.size() == 2 && path_[0] == "model" && (k == "vocab" || k == "merges")) {
            capture_ = k == "vocab" ? Capture::kVocab : Capture::kMerges;
            level_ = 0;
            return true;  // the DOM never sees this member
        }
        path_.back() = k;
        return dom_.key(k);
    }
    bool end_object() {
        if (capture_ == Capture::kVocab && level_ == 1) {
            capture_ = Capture::kNone;
            return true;
        }
        if (capture_ != Capture::kNone) return fail("the end of an object");
        path_.pop_back();
        return dom_.end_object();
    }
    bool start_array(size_t n) {
        if (capture_ == Capture::kNone) {
            path_.emplace_back("[]");
            return dom_.start_array(n);
        }
        if (capture_ == Capture::kMerges && level_ < 2) {
            if (level_ == 0) {
                out_->has_merges = true;
                if (n != static_cast<size_t>(-1)) out_->merges.reserve(n);
            }
            ++level_;
            parts_ = 0;
            return true;
        }
        return fail("an array");
    }
    bool end_array() {
        if (capture_ == Capture::kNone) {
            path_.pop_back();
            return dom_.end_array();
        }
        if (capture_ == Capture::kMerges && level_ == 2) {
            if (parts_ != 2) return fail("a merge pair without two strings");
            out_->merges.push_back(std::move(pair_));
            level_ = 1;
            return true;
        }
        if (capture_ == Capture::kMerges && level_ == 1) {
            capture_ = Capture::kNone;
            return true;
        }
        return fail("the end of an array");
    }
    template <class Exception>
    bool parse_error(size_t position, const std::string& token, const Exception& e) {
        return dom_.parse_error(position, token, e);  // throws the parse error
    }

    const std::string& problem() const { return problem_; }

private:
    enum class Capture { kNone, kVocab, kMerges };

    bool vocab_value(int64_t v) {
        if (capture_ != Capture::kVocab || level_ != 1) return fail("a number");
        out_->vocab.emplace_back(std::move(key_), v);
        return true;
    }
    bool fail(const char* what) {
        problem_ = fmt::format("model.{} must be {}; found {}", capture_ == Capture::kVocab ? "vocab" : "merges",
                               capture_ == Capture::kVocab ? "an object of token -> integer id"
                                                           : "a list of \"left right\" strings or [left, right] pairs",
                               what);
        return false;
    }

    TokenizerJson* out_;
    DomBuilder dom_;
    std::vector<std::string> path_;  // member key (or "[]") at each open container of the DOM
    Capture capture_ = Capture::kNone;
    int level_ = 0;  // container depth inside the captured member
    int parts_ = 0;
    std::string key_;
    std::pair<std::string, std::string> pair_;
    std::string problem_;
};

}  // namespace

std::string tokenizer_json_text(const TokenizerJson& t) {
    nlohmann::json doc = t.doc;
    nlohmann::json vocab = nlohmann::json::object();
    for (const auto& [token, id] : t.vocab) vocab[token] = id;
    nlohmann::json merges = nlohmann::json::array();
    for (const auto& [left, right] : t.merges) merges.push_back({left, right});
    doc["model"]["vocab"] = std::move(vocab);
    doc["model"]["merges"] = std::move(merges);
    return doc.dump();
}

bool split_merge_string(std::string_view merge, std::pair<std::string, std::string>* out) {
    size_t space = merge.find(' ');
    if (space == std::string_view::npos || merge.find(' ', space + 1) != std::string_view::npos) {
        return false;
    }
    out->first.assign(merge.substr(0, space));
    out->second.assign(merge.substr(space + 1));
    return true;
}

TokenizerJson parse_tokenizer_json(std::string_view text, std::string_view where) {
    TokenizerJson out;
    TokenizerJsonSax sax(&out);
    bool ok = false;
    try {
        ok = Json::sax_parse(text.begin(), text.end(), &sax);
    } catch (const Json::exception& e) {
        raise(ErrorCode::kInvalidModel, "{}: not valid JSON: {}", where, e.what());
    }
    if (!ok) raise(ErrorCode::kInvalidModel, "{}: {}", where, sax.problem());
    return out;
}

}  // namespace moeserve::tokenizer
